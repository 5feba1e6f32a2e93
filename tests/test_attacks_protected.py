"""No attack ever modifies a protected word (the label words and the few task
words promptbench protects), whatever quotes, punctuation or case surround it;
template words such as "Sentence", "Question" or "Answer" may change."""

import asyncio

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from promptrobust.attacks import get_attack
from promptrobust.attacks.embeddings import WordEmbedding
from promptrobust.attacks.sentence import CachedEncoder
from promptrobust.testing.synthetic import SyntheticScorer
from promptrobust.attacks.words import normalize_protected, protected_sequence, tokenize

PROTECTED = normalize_protected(
    {
        "positive",
        "negative",
        "answer",
        "question",
        "sentence",
        "entailment",
        "not_entailment",
    }
)
FILLER = [
    "good",
    "nice",
    "tone",
    "mood",
    "review",
    "judge",
    "film",
    "sad",
    "text",
    "label",
]
DRESSED = [
    "'positive'",
    "negative.",
    "Answer:",
    "POSITIVE",
    '"Negative"',
    "not_entailment",
    "(entailment)",
    "Question?",
    "sentence,",
]

# The tiny table makes label words the nearest neighbours of ordinary words,
# the worst case for protection.
VOCAB = FILLER + ["positive", "negative", "answer", "question", "great", "fine"]


def tiny_embedding() -> WordEmbedding:
    rng = np.random.default_rng(0)
    base = rng.normal(size=(len(VOCAB), 8))
    base[VOCAB.index("positive")] = base[VOCAB.index("good")] + 0.01
    base[VOCAB.index("negative")] = base[VOCAB.index("tone")] + 0.01
    return WordEmbedding(VOCAB, base)


class AllTag:
    def tag(self, texts):
        return [[(0, len(t), "X")] for t in texts]


class FlatEncoder:
    def encode(self, texts):
        return np.ones((len(texts), 4), dtype=np.float32)


@pytest.fixture(scope="module")
def attacks(tmp_path_factory):
    enc = CachedEncoder(FlatEncoder())
    emb = tiny_embedding()
    built = {
        "textbugger": get_attack("textbugger", embedding=emb, encoder=enc),
        "deepwordbug": get_attack("deepwordbug", max_edit_distance=1000),
        "textfooler": get_attack(
            "textfooler", embedding=emb, encoder=enc, tagger=AllTag(), min_word_cos=-1.0
        ),
        "checklist": get_attack("checklist"),
        "stresstest": get_attack("stresstest"),
    }
    try:
        from promptrobust.attacks.masked_lm import MaskedLM
        from promptrobust.testing.synthetic import build_tiny_masked_lm

        path = build_tiny_masked_lm(
            str(tmp_path_factory.mktemp("mlm")), VOCAB + ["##s", "."]
        )
        built["bertattack"] = get_attack(
            "bertattack", mlm=MaskedLM(path), encoder=enc, candidates=20
        )
    except ImportError:  # torch/transformers absent: the other attacks still run
        pass
    return built


def erosion_scorer(prompt: str) -> SyntheticScorer:
    """One sample per word of the clean prompt; a sample fails once its word
    is gone, so every change helps the attacker and it changes all it can."""
    words = tokenize(prompt)[1::2]

    def fn(p, i):
        return 1.0 if words[i] in set(tokenize(p)[1::2]) else 0.0

    return SyntheticScorer(fn, len(words))


prompts = st.lists(st.sampled_from(FILLER + DRESSED), min_size=2, max_size=9).map(
    " ".join
)


@given(prompt=prompts, seed=st.integers(0, 2**16))
@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_protected_words_survive_every_attack(attacks, prompt, seed):
    want = protected_sequence(prompt, PROTECTED)
    for name, attack in attacks.items():
        out = asyncio.run(
            attack.run(
                prompt,
                erosion_scorer(prompt),
                protected=PROTECTED,
                seed=seed,
                budget=None,
            )
        )
        adv = out.adversarial_prompt
        if name in ("checklist", "stresstest"):  # text inserted after the last word
            assert protected_sequence(adv, PROTECTED) == want, (name, adv)
            continue
        assert protected_sequence(adv, PROTECTED) == want, (name, prompt, adv)
        for dressed in DRESSED:
            assert adv.count(dressed) >= prompt.count(dressed), (name, dressed, adv)


def test_word_attacks_do_change_the_unprotected_words(attacks):
    prompt = "judge the tone of this review: 'positive' or negative. Answer:"
    for name in ("textbugger", "deepwordbug", "textfooler"):
        out = asyncio.run(
            attacks[name].run(
                prompt, erosion_scorer(prompt), protected=PROTECTED, seed=1, budget=None
            )
        )
        # judge, tone, review (TextFooler's tiny vocabulary may turn one into another prompt word)
        assert out.perturbed_words >= 2, (name, out.adversarial_prompt)
        if name != "textfooler":
            assert out.perturbed_words == 3, (name, out.adversarial_prompt)
        assert out.adversarial_prompt.endswith("'positive' or negative. Answer:")


# --- the protected set the engine builds from a real task -----------------------------

TEMPLATE_WORDS = {"sentence", "question", "context", "premise", "hypothesis", "answer", "text", "from", "to"}


def engine_protected(task):
    """The engine's protected set for ``task``."""
    from promptrobust.engine.measuring.workbench import protected_words

    return protected_words(task)


@pytest.mark.parametrize(
    "name, special",
    [("sst2", {"positive", "negative"}), ("mnli", {"entailment", "neutral", "contradiction"}),
     ("qnli", {"entailment", "not_entailment"}), ("qqp", {"equivalent", "not_equivalent"}),
     ("cola", {"acceptable", "unacceptable"}), ("mmlu", {"a", "b", "c", "d"}),
     ("squad_v2", {"unanswerable"}), ("iwslt", {"translate"}), ("un_multi", {"translate"}),
     ("math", {"math"}), ("rotten_tomatoes", {"positive", "negative"})],
)
def test_tasks_protect_labels_and_promptbench_words_only(name, special):
    from promptrobust.tasks import get_task

    prot = normalize_protected(engine_protected(get_task(name)))
    assert special <= prot, name
    assert not TEMPLATE_WORDS & prot, (name, TEMPLATE_WORDS & prot)


def test_template_words_change_label_words_do_not():
    from promptrobust.tasks import get_task

    prot = normalize_protected(engine_protected(get_task("mnli")))
    prompt = "Read the Premise and the Hypothesis, then reply with entailment, neutral or contradiction. Answer:"
    out = asyncio.run(
        get_attack("deepwordbug", max_edit_distance=1000).run(
            prompt, erosion_scorer(prompt), protected=prot, seed=0, budget=None
        )
    )
    adv_words = tokenize(out.adversarial_prompt)[1::2]
    for template in ("Premise", "Hypothesis", "Answer"):
        assert template not in adv_words, (template, out.adversarial_prompt)
    assert protected_sequence(out.adversarial_prompt, prot) == ["entailment", "neutral", "contradiction"]
    assert "entailment, neutral or contradiction" in out.adversarial_prompt
