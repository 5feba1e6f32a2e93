"""Word-frequency analysis: robust (low PDR) vs vulnerable (high PDR) clean prompts.

In the fixture the rte prompts have mean PDRs 0.225 and 0.2125, the sst2
prompts 0.375 and 0.4 (over both models and attacks), so the median split
(0.3) puts rte on the robust side. "carefully" occurs only in the two rte
prompts, "quickly" only in the two sst2 prompts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from promptrobust.engine.analysis.report import build_report
from promptrobust.engine.analysis.report.load import load_runs
from promptrobust.engine.analysis.report.word_frequency import WordFrequencyError, analyse, prompt_pdr, tables, words

FIXTURE = Path(__file__).parent / "fixtures" / "report" / "sweep"


@pytest.fixture(scope="module")
def records():
    return load_runs([str(FIXTURE)]).records


def test_words_lowercase_and_drop_stopwords_punctuation_numbers() -> None:
    assert words("As a Linguist, judge: 'carefully'! 42 times. It's don’t") == ["linguist", "judge", "carefully", "times", "it's", "don't"]


def test_prompt_pdr_is_the_mean_over_models_and_attacks(records) -> None:
    per_prompt = {text.split()[0]: pdr for _, text, pdr in prompt_pdr(records)}
    assert per_prompt["Read"] == pytest.approx((0.0 + 0.30 + 0.15 + 0.45) / 4)
    assert per_prompt["Decide"] == pytest.approx((0.10 + 0.50 + 0.30 + 0.60) / 4)


def test_word_only_in_robust_prompts_tops_the_robust_side(records) -> None:
    wf = analyse(records, top=15)
    assert (wf.robust_prompts, wf.vulnerable_prompts) == (2, 2)
    assert wf.split == pytest.approx(0.3)
    robust = {r["word"]: r for r in wf.robust_words()}
    vulnerable = {r["word"]: r for r in wf.vulnerable_words()}
    # robust prompts: "Read carefully and answer entailment or not_entailment." and
    # "As a logician, judge carefully: entailment or not_entailment?" -> 10 counted words
    assert robust["carefully"]["robust_count"] == 2
    assert robust["carefully"]["robust_freq"] == pytest.approx(2 / 10)
    assert robust["carefully"]["vulnerable_freq"] == 0
    assert "carefully" not in vulnerable
    assert vulnerable["quickly"]["difference"] == pytest.approx(-2 / 12)
    assert "quickly" not in robust
    diffs = [r["difference"] for r in wf.robust_words()]
    assert diffs == sorted(diffs, reverse=True)


def test_threshold_moves_prompts_between_groups(records) -> None:
    wf = analyse(records, threshold=0.38)  # "Decide quickly ..." (0.375) becomes robust
    assert (wf.robust_prompts, wf.vulnerable_prompts) == (3, 1)
    assert "decide" in {r["word"] for r in wf.robust_words()}


def test_top_limits_each_side_and_tables_have_csv_columns(records) -> None:
    wf = analyse(records, top=2)
    assert len(wf.robust_words()) == 2 and len(wf.vulnerable_words()) == 2
    robust, vulnerable = tables(wf)
    assert list(robust.long[0]) == ["word", "robust_count", "vulnerable_count", "robust_freq", "vulnerable_freq", "difference"]
    assert robust.rows[0][0] == "entailment" and vulnerable.name == "words_vulnerable"


def test_one_sided_split_is_reported_not_crashed(records) -> None:
    with pytest.raises(WordFrequencyError, match="no vulnerable prompts"):
        analyse(records, threshold=1.0)
    report = build_report([FIXTURE], word_threshold=1.0, figures=False)
    assert not any(t.name.startswith("words_") for t in report.tables)
    assert any("word frequency skipped" in n for s in report.sections for n in s.notes)


def test_single_prompt_is_not_enough() -> None:
    recs = [{"dataset": "d", "clean_prompt": "same text", "pdr": p} for p in (0.1, 0.5)]
    with pytest.raises(WordFrequencyError, match="at least 2"):
        analyse(recs)
