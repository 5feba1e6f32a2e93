"""Held-out samples: the ranking and the attack see one part of the samples,
the chosen prompts are re-scored on the other part (engine/measuring/holdout.py)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from promptrobust.cli.main import main
from promptrobust.engine.measuring.holdout import HoldoutError, split_samples
from promptrobust.engine.measuring.settings import AttackSettings
from promptrobust.engine.errors import SettingsError
from promptrobust.tasks import get_prompt, get_task
from promptrobust.testing.fake_openai import FakeOpenAIServer

N = 12
SAMPLES = get_task("rotten_tomatoes").load(limit=N, seed=0)
INDEX = {s.fields["sentence"]: i for i, s in enumerate(SAMPLES)}
P1 = get_prompt("rotten_tomatoes", "sst2-task-01").text
P2 = get_prompt("rotten_tomatoes", "sst2-task-02").text
FLIP = {"positive": "negative", "negative": "positive"}


def _answer(text: str) -> str:
    """P1 is right on the first half of the samples only (it wins the in-sample
    ranking by luck); P2 is right everywhere but on samples 0 and 1. A
    tautology suffix makes every answer 'negative'."""
    if "true is true" in text.lower():
        return "negative"
    sentence = text.rsplit("Sentence: ", 1)[-1].split("\nAnswer:", 1)[0]
    if sentence not in INDEX:  # the client's start-up check
        return "negative"
    i = INDEX[sentence]
    right = SAMPLES[i].target
    if P1 in text:
        return right if i < N // 2 else FLIP[right]
    return right if i >= 2 else FLIP[right]


@pytest.fixture()
def server():
    with FakeOpenAIServer(answer=_answer) as srv:
        yield srv


def _run(tmp_path: Path, srv: FakeOpenAIServer, *extra: str) -> Path:
    out = tmp_path / "runs"
    code = main([
        "run", "--model", "openai:fake-model", "--model-args", f"base_url={srv.url}", "--mode", "choices",
        "--limit", str(N), "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(out), "--no-progress",
        "--prompt", "sst2-task-01,sst2-task-02", *extra,
    ])
    assert code == 0
    (folder,) = list(out.iterdir())
    return folder


def test_prompt_chosen_on_one_half_is_scored_on_the_other(tmp_path, server, capsys) -> None:  # noqa: ANN001
    folder = _run(tmp_path, server, "--attack", "stresstest", "--top-k", "1", "--holdout", "0.5")
    summary = orjson.loads((folder / "results.json").read_bytes())
    held_out = summary["results"]["held_out"]
    assert summary["samples"]["evaluated"] == N // 2 and held_out["samples"] == N // 2 and held_out["fraction"] == 0.5
    # In-sample (first 6): P1 1.0 beats P2 4/6, so P1 is the top prompt ...
    assert summary["results"]["clean"][0]["prompt_id"] == "sst2-task-01"
    assert "held-out: sst2-task-01 in-sample 1.0000 (best of 2), held-out 0.0000" in capsys.readouterr().out
    (top,) = held_out["clean"]
    assert top["prompt_id"] == "sst2-task-01" and top["in_sample_score"] == pytest.approx(1.0)
    # ... and on the 6 samples it was not chosen on it is always wrong.
    assert top["held_out_score"] == pytest.approx(0.0)
    (rec,) = [orjson.loads(x) for x in (folder / "results.jsonl").read_bytes().splitlines()]
    assert rec["samples"] == N // 2 and rec["clean_score"] == pytest.approx(1.0)
    held = rec["held_out"]
    assert held["samples"] == N // 2 and held["fraction"] == 0.5
    assert held["clean_score"] == pytest.approx(0.0)
    # The tautology answers "negative": right on the held-out negatives.
    negatives = sum(s.target == "negative" for s in SAMPLES[N // 2 :]) / (N // 2)
    assert held["adversarial_score"] == pytest.approx(negatives)
    assert held["pdr"] == 0.0  # clean 0: nothing to drop (PDR defined as 0 there)
    assert rec["pdr"] == pytest.approx(1 - sum(s.target == "negative" for s in SAMPLES[: N // 2]) / (N // 2))


def test_held_out_pdr_of_a_prompt_that_holds(tmp_path, server) -> None:  # noqa: ANN001
    folder = _run(tmp_path, server, "--attack", "stresstest", "--top-k", "2", "--holdout", "0.5")
    recs = {r["prompt_id"]: r for r in map(orjson.loads, (folder / "results.jsonl").read_bytes().splitlines())}
    held = recs["sst2-task-02"]["held_out"]
    negatives = sum(s.target == "negative" for s in SAMPLES[N // 2 :])
    assert held["clean_score"] == pytest.approx(1.0)
    assert held["pdr"] == pytest.approx(1 - negatives / (N // 2))
    assert held["pdr_ci95"][0] <= held["pdr"] <= held["pdr_ci95"][1]
    assert 0.0 <= held["mcnemar_p"] <= 1.0


def test_split_rule_and_bad_fractions() -> None:
    search, held = split_samples(SAMPLES, 0.25)
    assert [s.id for s in search + held] == [s.id for s in SAMPLES] and len(held) == 3
    with pytest.raises(HoldoutError, match="leaves a side empty"):
        split_samples(SAMPLES[:1], 0.5)
    with pytest.raises(SettingsError, match="holdout must be a fraction"):
        AttackSettings(attacks=("stresstest",), holdout=1.5)


def test_holdout_without_attack_and_bad_value_are_one_line(tmp_path, capsys) -> None:  # noqa: ANN001
    assert main(["run", "--holdout", "0.5", "--output-dir", str(tmp_path)]) == 2
    assert "--holdout splits the samples of the attack protocol" in capsys.readouterr().err
    assert main(["run", "--attack", "stresstest", "--holdout", "2", "--output-dir", str(tmp_path)]) == 2
    assert "--holdout must be a fraction" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_samples_log_marks_the_held_out_rows(tmp_path, server) -> None:  # noqa: ANN001
    """samples.jsonl logs every sample of each record's prompts; with a holdout each row says whether the
    ranking and the search saw it (the last half of the seeded order here), and the held-out rows' scores
    are the record's held-out scores."""
    folder = _run(tmp_path, server, "--attack", "stresstest", "--top-k", "1", "--holdout", "0.5", "--log-samples")
    rows = [orjson.loads(x) for x in (folder / "samples.jsonl").read_bytes().splitlines()]
    (rec,) = [orjson.loads(x) for x in (folder / "results.jsonl").read_bytes().splitlines()]
    held_ids = {s.id for s in SAMPLES[N // 2 :]}
    assert rows and all(r["held_out"] == (r["sample_id"] in held_ids) for r in rows)
    for role, key in (("clean", "clean_score"), ("adversarial", "adversarial_score")):
        held = [r["score"] for r in rows if r["role"] == role and r["held_out"]]
        searched = [r["score"] for r in rows if r["role"] == role and not r["held_out"]]
        assert len(held) == len(searched) == N // 2
        assert sum(held) / len(held) == pytest.approx(rec["held_out"][key])
        assert sum(searched) / len(searched) == pytest.approx(rec[key])


def test_samples_log_without_holdout_has_no_held_out_column(tmp_path, server) -> None:  # noqa: ANN001
    folder = _run(tmp_path, server, "--attack", "stresstest", "--top-k", "1", "--log-samples")
    rows = [orjson.loads(x) for x in (folder / "samples.jsonl").read_bytes().splitlines()]
    assert rows and not any("held_out" in r for r in rows)
