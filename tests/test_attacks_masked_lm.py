"""BertAttack plumbing on a tiny masked LM built in the test (no English MLM ships offline)."""

import asyncio

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from promptrobust.attacks import AttackResourceError, get_attack
from promptrobust.attacks.base import WordSite
from promptrobust.attacks.masked_lm import MaskedLM, MaskedLMSwap
from promptrobust.attacks.sentence import CachedEncoder
from promptrobust.testing.synthetic import SyntheticScorer, build_tiny_masked_lm
from promptrobust.attacks.words import tokenize

WORDS = [
    "the",
    "of",
    "and",
    "a",
    "to",
    "is",
    "this",
    "tone",
    "statement",
    "analyze",
    "respond",
    "either",
    "or",
    "positive",
    "negative",
    "good",
    "bad",
    "mood",
    "review",
    "sentence",
    "answer",
    "judge",
    "feeling",
    "text",
    "movie",
    "film",
    "##ing",
    "##s",
    ",",
    ".",
    ":",
    "'",
    "incorrect",
    "correct",
]


@pytest.fixture(scope="module")
def tiny_mlm(tmp_path_factory):
    path = build_tiny_masked_lm(str(tmp_path_factory.mktemp("mlm")), WORDS)
    return MaskedLM(path)


def test_loads_by_local_path_and_fills_masks(tiny_mlm):
    texts = [
        f"analyze the {tiny_mlm.mask_token} of this statement",
        f"{tiny_mlm.mask_token} review",
    ]
    top = tiny_mlm.top_tokens(texts, 8)
    assert len(top) == 2 and all(len(t) == 8 for t in top)
    vocab = set(WORDS) | {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
    assert all(tok in vocab for row in top for tok in row)
    assert top == tiny_mlm.top_tokens(texts, 8), "deterministic"


def test_swap_proposes_whole_words_as_the_model_spells_them(tiny_mlm):
    site = WordSite(tokenize("Analyze the Tone of this statement"), 5)
    reps = MaskedLMSwap(tiny_mlm, k=40).replacements(site)
    assert reps, "the tiny model proposes something"
    for r in reps:
        assert r.isalpha() and r == r.lower(), "TextAttack inserts the model's token as is"
        assert r.lower() in WORDS and r != "Tone"
    assert all(not r.startswith("#") for r in reps)
    cased = MaskedLMSwap(tiny_mlm, k=40, keep_case=True).replacements(site)
    assert cased and all(r == r.lower().capitalize() for r in cased)
    # antonyms are dropped only on request (the recipe has no such filter)
    correct = WordSite(tokenize("correct answer"), 1)
    assert "incorrect" in MaskedLMSwap(tiny_mlm, k=40).replacements(correct)
    assert "incorrect" not in MaskedLMSwap(tiny_mlm, k=40, filter_antonyms=True).replacements(correct)


class FlatEncoder:
    def encode(self, texts):
        import numpy as np

        return np.ones((len(texts), 4), dtype=np.float32)


def test_bertattack_end_to_end_on_tiny_model(tiny_mlm):
    prompt = "Judge the tone of this movie review: positive or negative?"
    clean_words = set(tokenize(prompt)[1::2])

    def fn(p, i):  # every changed word costs one sample
        changed = len(clean_words - set(tokenize(p)[1::2]))
        return 0.0 if i < changed else 1.0

    attack = get_attack(
        "bertattack", mlm=tiny_mlm, encoder=CachedEncoder(FlatEncoder())
    )
    out = asyncio.run(
        attack.run(
            prompt,
            SyntheticScorer(fn, 10),
            protected=frozenset({"positive", "negative"}),
            seed=0,
            budget=None,
        )
    )
    assert out.perturbed_words >= 1 and out.adversarial_score < out.clean_score
    assert "positive or negative?" in out.adversarial_prompt
    assert out.settings["candidates"] == 48 and out.settings["use_threshold"] == 0.8
    assert out.settings["use_metric"] == "cosine"


def test_missing_model_gives_a_clear_error(tmp_path):
    with pytest.raises(AttackResourceError, match="mlm=PATH"):
        _ = MaskedLM(str(tmp_path / "no-such-model")).mask_token


def _independent_log_probs(path, text):
    """The tiny model's log-probabilities on ``text``, computed here with transformers directly."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForMaskedLM.from_pretrained(path).eval()
    enc = tok(text, return_tensors="pt")
    with torch.inference_mode():
        logits = model(**enc).logits[0]
    return tok, enc["input_ids"][0].tolist(), torch.log_softmax(logits, -1)


def test_bertattack_ranks_words_by_unk_replacement(tiny_mlm):
    prompt = "Judge the tone of this movie review: positive or negative?"
    scorer = SyntheticScorer(lambda p, i: 1.0, 4)
    attack = get_attack("bertattack", mlm=tiny_mlm, encoder=CachedEncoder(FlatEncoder()))
    asyncio.run(attack.run(prompt, scorer, protected=frozenset({"positive", "negative"})))
    ranking, _ = scorer.calls[1]
    tokens = tokenize(prompt)
    expected = [WordSite(tokens, i).with_word("[UNK]") for i in (1, 5, 11, 13)]  # judge tone movie review
    assert ranking == expected
    assert attack.settings()["importance"] == "replace the word by [UNK]"


def test_bertattack_candidates_come_from_the_unmasked_prompt(tiny_mlm):
    seen = []
    original = tiny_mlm.position_log_probs

    def spy(text):
        seen.append(text)
        return original(text)

    tiny_mlm.position_log_probs = spy
    try:
        prompt = "judge the tone of this review"
        site = WordSite(tokenize(prompt), 5)  # "tone": one piece
        got = MaskedLMSwap(tiny_mlm, k=10).proposals(site)
    finally:
        del tiny_mlm.position_log_probs
    assert seen == [prompt], "the model reads the prompt as it is, no mask"
    tok, ids, lp = _independent_log_probs(tiny_mlm.model_id, prompt)
    pos = ids.index(tok.convert_tokens_to_ids("tone"))
    top = [tok.convert_ids_to_tokens(int(t)) for t in lp[pos].topk(10).indices]
    want = [t for t in top if not t.startswith("##") and t not in tok.all_special_tokens and t.isalpha()]
    assert got == want


def test_bertattack_combines_sub_word_predictions_by_perplexity(tiny_mlm):
    import itertools

    prompt = "judge the moods of this review"
    site = WordSite(tokenize(prompt), 5)  # "moods" = mood + ##s
    assert tiny_mlm.piece_count("moods") == 2
    k = 6
    got = MaskedLMSwap(tiny_mlm, k=k).proposals(site)
    tok, ids, lp = _independent_log_probs(tiny_mlm.model_id, prompt)
    pos = ids.index(tok.convert_tokens_to_ids("mood"))
    rows = [lp[p].topk(k) for p in (pos, pos + 1)]
    combos = []
    for (a, la), (b, lb) in itertools.product(
        zip(rows[0].indices.tolist(), rows[0].values.tolist()), zip(rows[1].indices.tolist(), rows[1].values.tolist())
    ):
        pieces = tok.convert_ids_to_tokens([a, b])
        if any(p in tok.all_special_tokens for p in pieces):
            continue
        word = tok.convert_tokens_to_string(pieces).replace("##", "").replace(" ", "")
        if word.isalnum() and any(c.isalpha() for c in word):
            combos.append((-(la + lb), word))
    want = list(dict.fromkeys(w for _, w in sorted(combos, key=lambda c: c[0])))[:k]
    assert got == want
    assert any(w not in WORDS for w in got), "combinations of pieces, not only single vocabulary words"
