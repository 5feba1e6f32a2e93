"""Character edits, embedding neighbours and the cheap constraints, on fixed inputs."""

import itertools
import random
import zlib
from typing import ClassVar

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from promptrobust.attacks.base import WordSite
from promptrobust.attacks.chars import (
    HOMOGLYPHS,
    LETTERS,
    delete_inner,
    delete_random,
    insert_random,
    insert_space,
    make_homoglyph_edit,
    substitute_random,
    swap_adjacent,
    swap_inner,
)
from promptrobust.attacks.constraints import (
    MaxLevenshtein,
    PartOfSpeechMatch,
    SentenceSimilarity,
    levenshtein,
)
from promptrobust.attacks.embeddings import WordEmbedding, is_antonym
from promptrobust.attacks.sentence import CachedEncoder
from promptrobust.attacks.transformations import CharacterEdits, EmbeddingNeighbours
from promptrobust.attacks.words import tokenize

WORD = "statement"


def _one(edit, word=WORD, seed=3):
    (out,) = edit(word, random.Random(seed))
    return out


def test_insert_space_splits_inside_the_word():
    out = _one(insert_space)
    assert out.replace(" ", "") == WORD and out.count(" ") == 1
    assert not out.startswith(" ") and not out.endswith(" ")


def test_delete_inner_keeps_first_and_last():
    out = _one(delete_inner)
    assert len(out) == len(WORD) - 1 and out[0] == "s" and out[-1] == "t"
    assert any(WORD[:i] + WORD[i + 1 :] == out for i in range(1, len(WORD) - 1))


def test_swap_inner_swaps_two_different_inner_letters():
    out = _one(swap_inner)
    diff = [i for i, (a, b) in enumerate(zip(WORD, out)) if a != b]
    assert (
        len(diff) == 2
        and diff[1] == diff[0] + 1
        and 0 < diff[0]
        and diff[1] < len(WORD) - 1
    )
    assert sorted(out) == sorted(WORD)
    assert swap_inner("aaaa", random.Random(0)) == [], "nothing to swap"


def test_deepwordbug_edits():
    assert sorted(_one(swap_adjacent)) == sorted(WORD) and _one(swap_adjacent) != WORD
    sub = _one(substitute_random)
    assert len(sub) == len(WORD) and sum(a != b for a, b in zip(sub, WORD)) == 1
    assert len(_one(delete_random)) == len(WORD) - 1
    ins = _one(insert_random)
    assert len(ins) == len(WORD) + 1 and any(
        ins[:i] + ins[i + 1 :] == WORD for i in range(len(ins))
    )
    assert (
        delete_random("a", random.Random(0)) == []
        and insert_space("a", random.Random(0)) == []
    )
    assert all(
        sum(a != b for a, b in zip(_one(substitute_random, seed=s), WORD)) == 1
        for s in range(30)
    ), "a substitution always changes exactly one character"


def test_edits_are_deterministic_in_the_seed():
    for edit in (
        insert_space,
        delete_inner,
        swap_inner,
        swap_adjacent,
        substitute_random,
        delete_random,
        insert_random,
    ):
        assert _one(edit, seed=11) == _one(edit, seed=11)
    seen = {_one(substitute_random, seed=s) for s in range(20)}
    assert len(seen) > 5, "different seeds give different edits"


def test_homoglyph_edit_uses_the_table():
    edit = make_homoglyph_edit({"t": "7", "o": "0"})
    assert edit("tool", random.Random(0)) == ["7ool", "t0ol", "to0l"]


@pytest.mark.parametrize("word", ["statement", "Tone", "answer", "it's", "MNLI", "x"])
def test_homoglyph_candidates_one_per_position_and_never_a_space(word):
    out = make_homoglyph_edit()(word, random.Random(0))
    spots = [i for i, c in enumerate(word) if c in HOMOGLYPHS]
    assert len(out) == len(spots), "one candidate per position that has a look-alike"
    for i, cand in zip(spots, out):
        assert len(cand) == len(word) and " " not in cand
        assert [j for j, (a, b) in enumerate(zip(word, cand)) if a != b] == [i]
        assert not cand[i].isascii(), "a Unicode look-alike, not ASCII leet"
    assert all(c.isalpha() for c in "abcdefghijklmnopqrstuvwxyz" if c in HOMOGLYPHS)
    assert set("abcdefghijklmnopqrstuvwxyz") <= set(HOMOGLYPHS)


def test_textbugger_space_never_before_the_last_character():
    for word in ("tone", "the", "statement", "ab", "sentiment"):
        for seed in range(60):
            for cand in insert_space(word, random.Random(seed)):
                left, right = cand.split(" ")
                assert left and len(right) >= 2, (word, cand)
    assert insert_space("ab", random.Random(0)) == []
    seen = {insert_space("tone", random.Random(s))[0] for s in range(60)}
    assert seen == {"t one", "to ne"}


def test_deepwordbug_inserts_and_substitutes_both_cases():
    word = "statement"
    inserted, substituted = set(), set()
    for seed in range(200):
        (ins,) = insert_random(word, random.Random(seed))
        i = next(i for i in range(len(word)) if ins[i] != word[i]) if ins[: len(word)] != word else len(word)
        inserted.add(ins[i])
        assert i < len(word), "TextAttack never inserts after the last character"
        (sub,) = substitute_random(word, random.Random(seed))
        substituted |= {b for a, b in zip(word, sub) if a != b}
    assert any(c.isupper() for c in inserted) and any(c.islower() for c in inserted)
    assert any(c.isupper() for c in substituted) and any(c.islower() for c in substituted)
    assert inserted <= set(LETTERS) and substituted <= set(LETTERS)
    assert insert_random("a", random.Random(0)) == [], "one-letter words are left alone"


def test_character_edits_depend_only_on_seed_and_site():
    tokens = tokenize("Analyze the statement carefully")
    site = WordSite(tokens, 5)
    make = lambda seed: CharacterEdits(
        (insert_space, delete_inner, swap_inner), seed=seed
    )
    first = make(7).replacements(site)
    make(7).replacements(
        WordSite(tokens, 1)
    )  # visiting another word first changes nothing
    assert make(7).replacements(site) == first
    assert len(first) == 3 and all(c != "statement" for c in first)


def _tiny_embedding() -> WordEmbedding:
    words = ["good", "great", "fine", "bad", "positive", "nice", "tone", "mood", "x1"]
    vecs = np.array(
        [
            [1.0, 0.1, 0.0],
            [0.95, 0.2, 0.0],
            [0.9, 0.0, 0.3],
            [0.97, 0.15, 0.0],  # antonym sits close, as in GloVe
            [0.9, 0.2, 0.1],
            [0.2, 1.0, 0.0],
            [0.0, 0.0, 1.0],
            [0.1, 0.0, 0.95],
            [1.0, 0.1, 0.01],  # not alphabetic: never proposed
        ]
    )
    return WordEmbedding(words, vecs)


def test_embedding_neighbours_sorted_filtered_and_cased():
    emb = _tiny_embedding()
    near = emb.neighbours("good", 3)
    assert [w for w, _ in near] == ["bad", "great", "positive"]
    assert all(a[1] >= b[1] for a, b in itertools.pairwise(near))
    assert [w for w, _ in emb.neighbours("good", 10, 0.9)] == [
        "bad",
        "great",
        "positive",
        "fine",
    ]
    swap = EmbeddingNeighbours(k=3, embedding=emb)
    assert swap.replacements(WordSite(("", "Good", ""), 1)) == ["Great", "Positive"], (
        "antonym 'bad' dropped"
    )
    assert swap.replacements(WordSite(("", "unknownword", ""), 1)) == []


def test_antonyms():
    assert (
        is_antonym("positive", "negative")
        and is_antonym("Correct", "incorrect")
        and is_antonym("like", "dislike")
    )
    assert not is_antonym("good", "great")
    # a prefix negates a content word, not a function word: "into" is not the opposite of "to"
    assert not is_antonym("into", "to") and not is_antonym("unit", "it") and is_antonym("non-linear", "linear")


@given(st.text("abc", max_size=12), st.text("abc", max_size=12), st.integers(0, 6))
@settings(max_examples=300)
def test_banded_levenshtein_matches_full_table(a, b, limit):
    full = levenshtein(a, b)
    assert levenshtein(a, b, limit) == (full if full <= limit else limit + 1)


def test_levenshtein_known_values_and_constraint():
    assert levenshtein("kitten", "sitting") == 3
    assert levenshtein("", "abc") == 3
    base = "Classify the sentiment of this review"
    c = MaxLevenshtein(30)
    near = base.replace("sentiment", "sentimnet")
    far = base + " " + "z" * 31
    assert c.allowed(base, [near, far, base]) == [True, False, True]
    assert MaxLevenshtein(2).allowed("abcdef", ["abcxyz"]) == [False]


class TrigramEncoder:
    """A cheap real encoder: hashed character-trigram counts."""

    def encode(self, texts):
        out = np.zeros((len(texts), 256), dtype=np.float32)
        for r, t in enumerate(texts):
            t = f"  {t.lower()} "
            for i in range(len(t) - 2):
                out[r, zlib.crc32(t[i : i + 3].encode()) % 256] += 1
        return out


def test_sentence_similarity_with_injected_encoder():
    sim = SentenceSimilarity(0.8, encoder=CachedEncoder(TrigramEncoder()))
    base = "Classify the sentiment of this movie review as positive or negative."
    close = base.replace("movie", "film")
    far = "Translate the next paragraph from German into French, please."
    assert sim.allowed(base, [close, far]) == [True, False]
    assert sim.allowed(base, []) == []
    with pytest.raises(ValueError, match="threshold"):
        SentenceSimilarity(1.5)


class TableTagger:
    """Tags whitespace tokens from a fixed table (NOUN otherwise)."""

    TAGS: ClassVar[dict[str, str]] = {
        "quick": "ADJ",
        "fast": "ADJ",
        "quickly": "ADV",
        "run": "VERB",
        "the": "DET",
    }

    def tag(self, texts):
        out = []
        for t in texts:
            spans, pos = [], 0
            for w in t.split(" "):
                spans.append((pos, pos + len(w), self.TAGS.get(w, "NOUN")))
                pos += len(w) + 1
            out.append(spans)
        return out


def test_part_of_speech_compares_the_changed_word():
    c = PartOfSpeechMatch(tagger=TableTagger())
    assert c.allowed(
        "the quick dog",
        ["the fast dog", "the quickly dog", "the quick cat", "the run dog"],
    ) == [
        True,
        False,
        True,
        False,
    ]
    swap = PartOfSpeechMatch(tagger=TableTagger(), allow_noun_verb_swap=True)
    assert swap.allowed("the quick dog", ["the quick run"]) == [True]
