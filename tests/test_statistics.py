"""The statistics module against hand-computed values and a coverage simulation."""

from __future__ import annotations

import math
import random
from statistics import mean, stdev

import numpy as np
import pytest

from promptrobust.engine.measuring.statistics import (
    AT_CHANCE_NOTE,
    StatisticsError,
    is_at_chance,
    majority_rate,
    mcnemar_p,
    pdr_interval,
    score_interval,
    summarize_pdrs,
    wilson_interval,
)


def test_wilson_interval_covers_the_true_accuracy_about_95_percent_of_the_time() -> None:
    rng = np.random.default_rng(12345)
    true_p, n, draws = 0.7, 100, 1000
    covered = 0
    for successes in rng.binomial(n, true_p, size=draws):
        lo, hi = score_interval([1.0] * int(successes) + [0.0] * (n - int(successes)))
        covered += lo <= true_p <= hi
    assert 930 <= covered <= 970, covered


def test_wilson_interval_hand_value_and_bounds() -> None:
    # 45 of 60: p = 0.75, z = 1.96 -> Wilson (0.6277, 0.8422)
    lo, hi = score_interval([1] * 45 + [0] * 15)
    assert (lo, hi) == (pytest.approx(0.62768, abs=1e-4), pytest.approx(0.84223, abs=1e-4))
    assert wilson_interval(0, 10)[0] == 0.0 and wilson_interval(10, 10)[1] == 1.0


def test_continuous_scores_use_a_seeded_bootstrap() -> None:
    scores = [0.2, 0.9, 0.5, 0.4, 0.75, 0.6, 0.1, 0.95]
    first = score_interval(scores)
    assert first == score_interval(scores)  # seeded: the same interval every time
    assert first[0] < mean(scores) < first[1]
    with pytest.raises(StatisticsError, match="neither 0 nor 1"):
        score_interval(scores, binary=True)
    with pytest.raises(StatisticsError, match="empty"):
        score_interval([])


def test_mcnemar_exact_p_matches_the_hand_computed_binomial() -> None:
    # b = 8 (right -> wrong), c = 2 (wrong -> right), 5 concordant: p = 2 * (1 + 10 + 45) / 2**10
    clean = [1] * 8 + [0] * 2 + [1] * 5
    adv = [0] * 8 + [1] * 2 + [1] * 5
    assert mcnemar_p(clean, adv) == pytest.approx(0.109375)
    assert mcnemar_p(adv, clean) == pytest.approx(0.109375)  # two-sided
    assert mcnemar_p([1, 0, 1], [1, 0, 1]) == 1.0  # no discordant sample
    assert mcnemar_p([1] * 10, [0] * 10) == pytest.approx(2 / 1024)
    assert mcnemar_p([0.5, 1.0], [0.2, 1.0]) is None  # continuous scores
    with pytest.raises(StatisticsError, match="paired"):
        mcnemar_p([1, 0], [1])


def test_pdr_interval_is_a_paired_bootstrap() -> None:
    # 10 samples; the adversarial prompt flips samples 0 and 3 from right to wrong.
    clean = [1, 1, 1, 1, 0, 1, 1, 0, 1, 1]  # mean 0.8
    adv = [0, 1, 1, 0, 0, 1, 1, 0, 1, 1]  # mean 0.6 -> PDR 0.25
    lo, hi = pdr_interval(clean, adv)
    assert 0 <= lo < 0.25 < hi <= 1
    # By hand: a resample's PDR is (#flipped drawn) / (#clean-right drawn), never below 0 here
    # (every discordant sample goes one way) and at most 1.
    assert pdr_interval(clean, adv) == (lo, hi)  # seeded
    # Identical scores: every resample has PDR 0.
    assert pdr_interval(clean, clean) == (0.0, 0.0)
    assert pdr_interval([0, 0, 0], [1, 0, 0]) is None  # clean mean 0: no PDR


def test_pdr_interval_worked_by_hand() -> None:
    """Clean right on all 10 samples, adversarial right on 5: a resample's PDR is
    1 - X/10 with X ~ Binomial(10, 1/2). P(X <= 1) = 11/1024 < 2.5% < P(X <= 2) = 56/1024,
    so the 2.5% and 97.5% quantiles of X are 2 and 8: the interval is (0.2, 0.8)."""
    assert pdr_interval([1] * 10, [1, 0] * 5) == (pytest.approx(0.2), pytest.approx(0.8))
    assert pdr_interval([1] * 10, [0] * 10) == (1.0, 1.0)  # every resample loses everything


def test_pdr_interval_of_the_same_scores_unpaired_would_be_wider() -> None:
    rng = random.Random(3)
    clean = [1 if rng.random() < 0.8 else 0 for _ in range(200)]
    adv = [c if rng.random() < 0.9 else 0 for c in clean]  # adversarial wrong on ~10% of clean-right samples
    lo, hi = pdr_interval(clean, adv)
    pdr = 1 - mean(adv) / mean(clean)
    assert lo <= pdr <= hi
    ca, cb = score_interval(clean), score_interval(adv)
    naive_width = (1 - cb[0] / ca[1]) - (1 - cb[1] / ca[0])
    assert hi - lo < naive_width / 2


def test_majority_rate_and_chance_flag() -> None:
    assert majority_rate(["pos", "neg", "pos", "pos"]) == 0.75
    assert majority_rate([["a"], ["a"], ["b"]]) == pytest.approx(2 / 3)  # unhashable labels
    assert is_at_chance((0.41, 0.63), 0.5)
    assert not is_at_chance((0.55, 0.75), 0.5)
    assert not is_at_chance((0.41, 0.63), None)
    assert is_at_chance((0.01, 0.06), 0.55)  # far below chance: not above it either
    assert "not meaningful" in AT_CHANCE_NOTE
    with pytest.raises(StatisticsError):
        majority_rate([])


def test_summarize_pdrs_mean_and_sample_std_by_hand() -> None:
    records = [
        {"pdr": 0.10, "clean_prompt": "a", "status": "attacked"},
        {"pdr": 0.30, "clean_prompt": "a", "status": "attacked"},
        {"pdr": 0.50, "clean_prompt": "b", "status": "attacked"},
        {"pdr": 0.0, "clean_prompt": "c", "status": "skipped_clean_zero", "clean_score": 0.0},
        {"pdr": None, "clean_prompt": "d", "status": "failed", "error": "boom"},
    ]
    s = summarize_pdrs(records)
    # mean 0.3; deviations -0.2, 0, 0.2 -> sum of squares 0.08 / (3 - 1) = 0.04 -> std 0.2
    assert s.mean == pytest.approx(0.3)
    assert s.std == pytest.approx(0.2)
    assert s.std == pytest.approx(stdev([0.1, 0.3, 0.5]))
    assert (s.n, s.n_prompts) == (3, 2)
    assert s.ci95 is not None and 0.1 <= s.ci95[0] <= 0.3 <= s.ci95[1] <= 0.5
    assert summarize_pdrs(list(reversed(records))) == s  # order does not matter


def test_summarize_pdrs_edge_cases_and_old_records() -> None:
    assert summarize_pdrs([]).mean is None
    one = summarize_pdrs([{"pdr": 0.4, "clean_prompt": "a"}])
    assert (one.mean, one.std, one.ci95, one.n) == (0.4, None, None, 1)
    # An old record without status and with clean score 0 was never attacked: not averaged.
    old = summarize_pdrs([{"pdr": 0.0, "clean_score": 0.0, "clean_prompt": "x"}, {"pdr": 0.2, "clean_score": 0.5, "clean_prompt": "y"}])
    assert old.n == 1 and old.mean == pytest.approx(0.2)


def test_apdr_interval_reflects_sample_noise_within_records() -> None:
    """Two records with the same PDR: without sample scores the interval is a point;
    with them, the inner (sample) bootstrap widens it."""
    flat = [{"pdr": 0.25, "clean_prompt": p} for p in ("a", "b")]
    assert summarize_pdrs(flat).ci95 == (0.25, 0.25)
    clean = [1, 1, 1, 1, 0, 1, 1, 0, 1, 1]
    adv = [0, 1, 1, 0, 0, 1, 1, 0, 1, 1]
    paired = [{**r, "clean_sample_scores": clean, "adversarial_sample_scores": adv} for r in flat]
    lo, hi = summarize_pdrs(paired).ci95
    assert lo < 0.25 < hi and not math.isclose(lo, hi)
