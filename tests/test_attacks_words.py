"""Tokenising prompts and deciding which words are protected."""

from hypothesis import given, settings
from hypothesis import strategies as st

from promptrobust.attacks.base import WordSite
from promptrobust.attacks.words import (
    is_protected,
    match_case,
    mentions_protected,
    normalize_protected,
    protected_sequence,
    tokenize,
    word_indices,
)

PROTECTED = normalize_protected(
    {"positive", "Negative", "Answer:", "'Sentence'", "not_entailment", "entailment"}
)


@given(st.text(max_size=200))
@settings(max_examples=300)
def test_tokens_join_back_and_alternate(text):
    tokens = tokenize(text)
    assert "".join(tokens) == text
    assert len(tokens) % 2 == 1
    for i in word_indices(tokens):
        assert tokens[i], "word tokens are never empty"
    for i in range(0, len(tokens), 2):
        assert tokenize(tokens[i]) == (tokens[i],), "non-word tokens contain no word"


def test_tokenize_keeps_punctuation_and_quotes_apart():
    tokens = tokenize("Is it 'positive' or negative? Answer:")
    assert [tokens[i] for i in word_indices(tokens)] == [
        "Is",
        "it",
        "positive",
        "or",
        "negative",
        "Answer",
    ]
    assert tokens[0] == "" and tokens[-1] == ":"
    assert tokenize("don't re-read not_entailment")[1::2] == (
        "don't",
        "re-read",
        "not_entailment",
    )


def test_normalize_protected_lowercases_and_strips_punctuation():
    assert PROTECTED == frozenset(
        {"positive", "negative", "answer", "sentence", "not_entailment", "entailment"}
    )


def test_protected_words_recognised_in_any_dress():
    text = "Reply 'POSITIVE', \"negative.\" Answer: Sentence; Negative's not_entailment"
    assert protected_sequence(text, PROTECTED) == [
        "POSITIVE",
        "negative",
        "Answer",
        "Sentence",
        "Negative's",
        "not_entailment",
    ]
    assert not is_protected("tone", PROTECTED)
    assert not is_protected("positively", PROTECTED), (
        "only whole words (or their parts) are protected"
    )
    assert is_protected("non-positive", PROTECTED)


def test_mentions_protected_blocks_replacements_that_introduce_labels():
    assert mentions_protected("Positive", PROTECTED)
    assert mentions_protected("to positive", PROTECTED)
    assert not mentions_protected("tone", PROTECTED)


def test_word_site_replaces_only_its_word():
    tokens = tokenize("Rate the tone: 'positive'.")
    site = WordSite(tokens, 5)
    assert site.word == "tone"
    assert site.with_word("t0ne") == "Rate the t0ne: 'positive'."
    assert site.with_word("") == "Rate the : 'positive'."


def test_match_case():
    assert match_case("Tone", "mood") == "Mood"
    assert match_case("TONE", "mood") == "MOOD"
    assert match_case("tone", "mood") == "mood"
