"""Reading choice log-probabilities from a first token's top alternatives."""

from __future__ import annotations

import math

import pytest

from promptrobust.engine.serving.backends.openai.scoring import MISSING_CHOICE_MARGIN, choice_logprobs_from_top

L = math.log


def test_variants_of_a_label_are_summed_case_and_space_insensitively():
    top = [("Positive", L(0.5)), (" positive", L(0.2)), ("negative", L(0.1)), ("\u0120neg", L(0.05))]
    pos, neg = choice_logprobs_from_top(top, ("positive", "negative"))
    assert pos == pytest.approx(L(0.7))
    assert neg == pytest.approx(L(0.15))


def test_exact_token_goes_only_to_its_own_choice():
    top = [("no", L(0.6)), ("not", L(0.3)), ("yes", L(0.05))]
    no, not_ent, yes = choice_logprobs_from_top(top, ("no", "not_entailment", "yes"))
    assert no == pytest.approx(L(0.6))  # "no" is exactly a choice: not credited to not_entailment
    assert not_ent == pytest.approx(L(0.3))  # "not" is a prefix of not_entailment only
    assert yes == pytest.approx(L(0.05))


def test_missing_choice_gets_floor_below_everything_listed():
    top = [("positive", L(0.9)), ("The", L(0.01))]
    pos, neu = choice_logprobs_from_top(top, ("positive", "neutral"))
    assert neu == pytest.approx(L(0.01) - MISSING_CHOICE_MARGIN)
    assert neu < min(lp for _, lp in top) < pos


def test_whitespace_only_tokens_match_nothing():
    top = [(" ", L(0.9)), ("negative", L(0.05))]
    pos, neg = choice_logprobs_from_top(top, ("positive", "negative"))
    assert neg == pytest.approx(L(0.05)) and pos < neg


def test_empty_top_list_is_an_error():
    with pytest.raises(ValueError, match="no top log-probabilities"):
        choice_logprobs_from_top([], ("a",))
