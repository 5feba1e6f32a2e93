"""Issue 41 (weak point): an answer far longer than ``max_tokens`` allows (a server that ignores
it: 600,000 words, 3 MB) was kept whole, in the cache (344 MB for 121 rows), samples.jsonl and
the per-sample page. The scheduler cuts such an answer to what ``max_tokens`` could hold
(``engine.serving.scheduler.answer_bound``) before it is scored, cached or shown, notes the cut
in the cached completion, counts it and says it once on the terminal."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import orjson

from promptrobust.cli.main import main
from promptrobust.testing.fake_openai import FakeOpenAIServer

#: Two "tokens" for the fake server (it counts words): 100,000 characters, far past any 20-token answer.
HUGE = "z" * 100_000 + " positive"


def test_an_answer_far_longer_than_max_tokens_is_cut_before_it_is_kept(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    cache, runs = tmp_path / "c.sqlite", tmp_path / "runs"
    with FakeOpenAIServer(answer=lambda text: HUGE) as server:
        code = main(["run", "--model", "openai:fake-model", "--model-args", f"base_url={server.url}", "--dataset", "rotten_tomatoes",
                     "--limit", "3", "--mode", "generate", "--prompt", "sst2-task-01", "--attack", "checklist", "--budget", "2",
                     "--log-samples", "--cache", str(cache), "--output-dir", str(runs), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 0, err
    bound = 1000 + 64 * 20  # engine.serving.scheduler.answer_bound(20), checked below
    said = [line for line in err.splitlines() if "cut" in line]
    assert len(said) == 1 and "max_tokens" in said[0], err
    with sqlite3.connect(cache) as db:
        answers = [orjson.loads(value) for (value,) in db.execute("SELECT value FROM completions")]
    texts = [a for a in answers if a.get("text") is not None]
    assert texts and all(len(a["text"]) <= bound for a in texts)
    assert all("cut" in (a.get("note") or "") for a in texts if len(a["text"]) == bound)
    (folder,) = runs.iterdir()
    lines = (folder / "samples.jsonl").read_bytes().splitlines()
    assert lines and max(len(line) for line in lines) < 4 * bound
    results = orjson.loads((folder / "results.json").read_bytes())
    assert sum(s.get("answers_cut", 0) for s in results["counters"]["scheduler"].values()) >= 3
    report = tmp_path / "rep"
    assert main(["report", str(runs), "--output-dir", str(report)]) == 0
    pages = list((report / "samples").glob("*.html"))
    assert pages and max(p.stat().st_size for p in pages) < 100 * bound


def test_the_bound_grows_with_max_tokens_and_keeps_real_answers_whole() -> None:
    from promptrobust.engine.serving.scheduler import answer_bound

    assert answer_bound(20) == 1000 + 64 * 20
    assert answer_bound(1) < answer_bound(20) < answer_bound(512)
    assert answer_bound(20) >= 20 * 64  # twenty long tokens still fit
