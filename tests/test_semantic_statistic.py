"""Semantic's two statistics: the record's PDR is the worst prompt of its set (a selection), and
``prompt_set_pdr`` the mean PDR over the whole set with its interval (an APDR over the set's
prompts); `pre report` shows both, and derives the mean for records made before the field."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from promptrobust.cli.main import main
from promptrobust.engine.analysis.report.semantic import set_statistic
from promptrobust.engine.measuring.statistics import prompt_set_pdr, summarize_pdrs
from promptrobust.tasks import get_task
from promptrobust.testing.fake_openai import FakeOpenAIServer

FIX = Path(__file__).parent / "fixtures" / "promptbench" / "paper"
N = 10
SAMPLES = get_task("rotten_tomatoes").load(limit=N, seed=0)
LABELS = {s.fields["sentence"]: s.target for s in SAMPLES}
NEGATIVE = sum(s.target == "negative" for s in SAMPLES) / N


def _answer(text: str) -> str:
    """Right on every sample, except with the fixture's French semantic prompt: always 'negative'."""
    if "opinion of this review" in text:
        return "negative"
    sentence = text.rsplit("Sentence: ", 1)[-1].split("\nAnswer:", 1)[0]
    return LABELS.get(sentence, "negative")


def test_the_set_statistic_is_the_apdr_over_the_sets_prompts() -> None:
    clean = [1.0, 1.0, 1.0, 0.0]
    prompts = [("a", 0.75, 0.0, [1.0, 1.0, 1.0, 0.0]), ("b", 0.25, 2 / 3, [1.0, 0.0, 0.0, 0.0]),
               ("c", 0.5, 1 / 3, [0.0, 1.0, 1.0, 0.0])]
    stat = prompt_set_pdr(0.75, clean, prompts)
    assert stat is not None and stat["prompts"] == 3
    assert stat["mean"] == pytest.approx(1 / 3) and stat["worst"] == pytest.approx(2 / 3) and stat["best"] == 0.0
    assert stat["std"] == pytest.approx(1 / 3)
    # the same numbers summarize_pdrs gives the records the set's prompts would be
    rows = [{"prompt_id": t, "clean_score": 0.75, "pdr": p, "clean_sample_scores": clean, "adversarial_sample_scores": s}
            for t, _, p, s in prompts]
    assert stat["ci95"] == list(summarize_pdrs(rows).ci95)
    assert stat["ci95"][0] <= stat["mean"] <= stat["ci95"][1]
    assert prompt_set_pdr(0.0, clean, prompts) is None and prompt_set_pdr(0.75, clean, []) is None


def test_a_semantic_record_carries_the_worst_and_the_mean_and_the_report_shows_both(tmp_path) -> None:  # noqa: ANN001
    out = tmp_path / "runs"
    with FakeOpenAIServer(answer=_answer) as srv:
        assert main(["run", "--model", "openai:fake-model", "--model-args", f"base_url={srv.url}", "--mode", "choices",
                     "--limit", str(N), "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(out), "--no-progress",
                     "--promptbench", str(FIX), "--attack", "semantic", "--top-k", "1"]) == 0
    (folder,) = list(out.iterdir())
    (rec,) = [orjson.loads(x) for x in (folder / "results.jsonl").read_bytes().splitlines()]
    scores = [s for _, _, s in rec["prompt_scores"]]
    assert rec["clean_score"] == 1.0 and sorted(scores) == [pytest.approx(NEGATIVE), 1.0]
    assert rec["pdr"] == pytest.approx(1 - NEGATIVE)  # the worst of the set: the record's PDR
    stat = rec["prompt_set_pdr"]
    assert stat["prompts"] == 2 and stat["mean"] == pytest.approx((1 - NEGATIVE) / 2)
    assert stat["worst"] == pytest.approx(rec["pdr"]) and stat["statistic"].startswith("mean PDR over the 2 prompts")
    assert stat["ci95"][0] <= stat["mean"] <= stat["ci95"][1]

    report = tmp_path / "report"
    assert main(["report", str(out), "--output-dir", str(report), "--format", "md"]) == 0
    md = (report / "report.md").read_text()
    assert "Semantic: the worst prompt of the set and the mean over the set" in md
    assert "PDR worst of N" in md and "PDR mean over the set" in md
    assert f"{(1 - NEGATIVE) / 2:.3f} \\[" in md and f"{1 - NEGATIVE:.3f} \\[" in md  # brackets escaped: Markdown renders [


def test_an_older_record_gets_the_mean_derived_from_its_prompt_scores() -> None:
    old = {"clean_score": 0.8, "prompt_scores": [["fr", "p1", 0.8], ["zh", "p2", 0.4], ["es", "p3", 0.6]]}
    stat = set_statistic(old)
    assert stat is not None and stat["derived"] and stat["ci95"] is None and stat["prompts"] == 3
    assert stat["mean"] == pytest.approx((0.0 + 0.5 + 0.25) / 3) and stat["worst"] == pytest.approx(0.5)
    assert set_statistic({"clean_score": 0.8, "prompt_scores": []}) is None
