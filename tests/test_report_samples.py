"""The per-sample view (issue 31 item 6): each record links to a static page of its samples
(input, clean and adversarial answers, both scores, flipped or not), filterable without a
script, built from samples.jsonl and escaped like everything else."""

from __future__ import annotations

import hashlib
import html
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from promptrobust.cli.main import main
from promptrobust.engine.analysis.report import build_report
from promptrobust.engine.analysis.report.samples import HOW_TO_LOG
from promptrobust.testing.fake_openai import FakeOpenAIServer, sentiment_answer


def _flipping_answer(text: str) -> str:
    """The sentence's sentiment, flipped for some instructions: attacks find real drops."""
    base = sentiment_answer(text)
    instruction = text.split("Sentence:")[0] if "Sentence:" in text else text[:200]
    if hashlib.md5(instruction.encode()).digest()[0] < 90:
        return "negative" if base == "positive" else "positive"
    return base


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder written by `pre run --log-samples` against a real HTTP server."""
    root = tmp_path_factory.mktemp("samples")
    with FakeOpenAIServer(answer=_flipping_answer) as srv:
        code = main(["run", "--model", "openai:fake-model", "--model-args", f"base_url={srv.url}", "--mode", "choices",
                     "--attack", "checklist", "--top-k", "2", "--limit", "8", "--seed", "7", "--budget", "20",
                     "--cache", str(root / "c.sqlite"), "--output-dir", str(root / "runs"), "--no-progress", "--log-samples"])
    assert code == 0
    return root / "runs"


def test_each_record_links_to_a_page_of_its_samples(real_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "rep"
    assert main(["report", str(real_run), "--output-dir", str(out), "--format", "html", "--quiet"]) == 0
    page = (out / "report.html").read_text(encoding="utf-8")
    records = [orjson.loads(line) for line in next(real_run.iterdir()).joinpath("results.jsonl").read_bytes().splitlines()]
    assert len(records) == 2
    assert any(c != a for r in records for c, a in zip(r["clean_sample_scores"], r["adversarial_sample_scores"]))
    for r in records:
        href = f"samples/{r['run_key']}.html"
        assert f'href="{href}"' in page
        sample_page = (out / href).read_text(encoding="utf-8")
        rows = re.findall(r'<tr class="(broken flip|fixed flip|same)">', sample_page)
        assert len(rows) == r["samples"] == 8
        changed = sum(c != a for c, a in zip(r["clean_sample_scores"], r["adversarial_sample_scores"]))
        assert sum(x != "same" for x in rows) == changed  # flipped = the record's own paired scores differ
        assert f"flipped ({changed})" in sample_page and f"unchanged ({8 - changed})" in sample_page
        assert 'type="radio"' in sample_page and "#show-flipped:checked~table tr.same{display:none}" in sample_page
        assert "<script" not in sample_page and not re.search(r"""(src|href)=["']?(https?:)?//""", sample_page)
        assert 'href="../report.html"' in sample_page
        assert "Sentence:" in sample_page and '<span class="ph">[clean prompt]</span>' in sample_page  # the input


def _rows(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))


def _record(**kw: Any) -> dict[str, Any]:
    return {"model": "m", "dataset": "sst2", "prompt_id": "p1", "attack": "checklist", "clean_prompt": "Say it.",
            "adversarial_prompt": "Say it xq.", "clean_score": 1.0, "adversarial_score": 0.5, "pdr": 0.5,
            "status": "attacked", "mode": "choices", "samples": 2, "seed": 0, **kw}


def _sample(sid: str, score: float, **kw: Any) -> dict[str, Any]:
    return {"sample_id": sid, "input": f"Say it.\n\nSentence: {sid}\nAnswer:", "target": "positive", "answer": None,
            "prediction": "positive" if score else "negative", "score": score, **kw}


def test_every_shape_of_samples_file_is_matched_and_escaped(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "a"
    run.mkdir(parents=True)
    hostile = "<script>alert(1)</script>\u202eevil\x00"
    _rows(run / "results.jsonl", [
        _record(run_key="k-attack"),
        _record(run_key="k-transfer", kind="transfer", model="target", source_model="m", prompt_id="p2"),
        _record(run_key="k-pair", kind="pair", prompt_id="p3", adversarial_given=True, clean_prompt="Pair clean.",
                adversarial_prompt="Pair adv."),
        _record(run_key="k-none", prompt_id="p4", clean_prompt="Unlogged.", adversarial_prompt="Unlogged xq."),
    ])
    _rows(run / "samples.jsonl", [
        # pre run: run_key and role
        _sample("s1", 1.0, run_key="k-attack", role="clean"), _sample("s2", 1.0, run_key="k-attack", role="clean"),
        _sample("s1", 0.0, run_key="k-attack", role="adversarial", answer=hostile),
        _sample("s2", 1.0, run_key="k-attack", role="adversarial"),
        # pre transfer: the prompt text and its dataset
        _sample("s1", 1.0, prompt="Say it.", dataset="sst2"), _sample("s1", 1.0, prompt="Say it xq.", dataset="sst2"),
        _sample("s1", 0.0, prompt="Say it xq.", dataset="other"),  # another dataset's row: not this record's
        # pre eval: prompt_id and role
        _sample("s1", 0.0, prompt_id="p3", role="clean"), _sample("s1", 1.0, prompt_id="p3", role="adversarial"),
    ])
    report = build_report([tmp_path / "runs"], figures=False)
    found = report.samples()
    assert sorted(found) == ["k-attack", "k-pair", "k-transfer"]
    assert [p.change for p in found["k-attack"].pairs] == ["broken", "unchanged"]
    assert [p.change for p in found["k-transfer"].pairs] == ["unchanged"]
    assert [p.change for p in found["k-pair"].pairs] == ["fixed"]
    pages = report.sample_pages()
    attack_page = pages["samples/k-attack.html"]
    assert "<script>" not in attack_page and "&lt;script&gt;alert(1)&lt;/script&gt;[U+202E]evil[U+0000]" in attack_page
    assert "\u202e" not in attack_page and "\x00" not in attack_page
    html = report.html()
    assert html.count('href="samples/') == 3 + 1  # the records index, and the most damaging prompt's row
    assert "not logged (--log-samples)" in html  # k-none
    out = tmp_path / "rep"
    written = report.write(out, ["html"])
    assert sorted(p.relative_to(out).as_posix() for p in written) == [
        "report.html", "samples/k-attack.html", "samples/k-pair.html", "samples/k-transfer.html"]


def test_a_run_key_that_is_not_a_plain_name_never_becomes_a_path(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "a"
    run.mkdir(parents=True)
    _rows(run / "results.jsonl", [_record(run_key="../../escape")])
    _rows(run / "samples.jsonl", [_sample("s1", 1.0, run_key="../../escape", role="clean")])
    pages = build_report([tmp_path / "runs"], figures=False).sample_pages()
    (name,) = pages
    assert re.fullmatch(r"samples/r[0-9a-f]{16}\.html", name)


def test_without_any_samples_the_page_says_how_to_log_them() -> None:
    fixture = Path(__file__).parent / "fixtures" / "report" / "sweep"
    report = build_report([fixture], figures=False)
    assert report.sample_pages() == {}
    assert HOW_TO_LOG.replace("'", "&#x27;") in report.html()


TICKETS = Path(__file__).resolve().parents[1] / "docs" / "examples" / "tickets" / "tickets.toml"
_BILLING = ("charged", "refund", "invoice", "paid", "billed", "price", "receipt", "payment", "plan")
_TECHNICAL = ("error", "crash", "app", "page", "log in", "pdf", "search", "notification", "freezes", "upload")


def _route(text: str) -> str:
    """A fake dispatcher: the queue from keywords of the last ticket in the input; anything after a
    CheckList suffix (a digit before the question mark) routes to billing, so some samples break."""
    ticket = text.rsplit("Ticket: ", 1)[-1].split("\nAnswer:", 1)[0].lower()
    instruction = text.split("\n", 1)[0]
    if any(ch.isdigit() for ch in instruction):
        return "billing"
    if any(w in ticket for w in _BILLING):
        return "billing"
    return "technical" if any(w in ticket for w in _TECHNICAL) else "other"


def test_a_few_shot_own_task_page_shows_each_sample_and_answers_as_words(tmp_path: Path) -> None:
    """Issue 42 item 1: the 3 worked examples (identical on every row) are shown once, folded; each row
    shows the sample being classified; target and answers are the task's words with its label value beside."""
    runs = tmp_path / "runs"
    with FakeOpenAIServer(answer=_route) as srv:
        assert main(["run", "--task", str(TICKETS), "--model", "openai:fake-model", "--model-args", f"base_url={srv.url}",
                     "--mode", "choices", "--shots", "3", "--attack", "checklist", "--top-k", "1", "--limit", "12",
                     "--budget", "10", "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(runs), "--no-progress",
                     "--log-samples"]) == 0
    (folder,) = list(runs.iterdir())
    logged = [orjson.loads(x) for x in (folder / "samples.jsonl").read_bytes().splitlines()]
    examples = ["My credit card was charged for a plan I never ordered.", "The website shows a blank page after I sign in."]
    assert all(e in row["input"] for row in logged for e in examples)  # every input starts with the worked examples
    out = tmp_path / "rep"
    assert main(["report", str(runs), "--output-dir", str(out), "--format", "html", "--quiet"]) == 0
    (page_path,) = list((out / "samples").iterdir())
    page = page_path.read_text(encoding="utf-8")
    for example in examples:
        assert page.count(example) == 1  # once, in the folded block, not on each of the 12 rows
    shared = page[page.index('<details class="shared">'):page.index("</details>")]
    assert all(e in shared for e in examples) and "3 worked examples" in shared
    rows = re.findall(r'<tr class="[^"]*">(.*?)</tr>', page, flags=re.S)
    clean = [r for r in logged if r["role"] == "clean"]
    assert len(rows) == len(clean) == 12
    for row, sample in zip(rows, clean):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S)
        ticket = sample["input"].rsplit("Ticket: ", 1)[-1].split("\nAnswer:", 1)[0]
        assert html.escape(ticket, quote=True) in cells[2] and "Answer: billing" not in cells[2]  # the sample itself
        words = {"BIL": "billing", "TEC": "technical", "OTH": "other"}
        assert cells[3] == f'{words[sample["target"]]} <span class="code">{sample["target"]}</span>'
        assert cells[4] == f'{words[sample["prediction"]]} <span class="code">{sample["prediction"]}</span>'
        assert cells[6].split(" ", 1)[0] in words.values()
    assert "billing = BIL, technical = TEC, other = OTH" in page
    assert "broken" in page  # the suffix broke some samples: the page has something to show
