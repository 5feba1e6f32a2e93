"""An attack's memory is bounded by its work, not by the square of the prompt (issue 32).

A word attack makes one candidate per word, each the whole prompt: built as a
list, the ranking of a 10,000-word prompt held 10,000 prompts of 10,000 words
(~600 MB), whatever the budget. These tests run DeepWordBug on such a prompt
in a fresh interpreter under an address-space cap, with Python's own
allocation peak measured, and check the prompt-size limit and the linear diff.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import textwrap

import pytest

from promptrobust.attacks import get_attack
from promptrobust.attacks.attack import MAX_PROMPT_WORDS
from promptrobust.attacks.changes import changes, substitutions
from promptrobust.attacks.errors import AttackError, PromptTooLongError
from promptrobust.attacks.words import tokenize
from promptrobust.testing.synthetic import SyntheticScorer

VOCAB = ["review", "sentence", "classify", "movie", "tone", "judge", "writer", "opinion", "careful", "answer"]


def long_prompt(words: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(VOCAB) for _ in range(words)) + " positive or negative."


# The child: a counting scorer that keeps no prompt (a sample fails for each of a
# few marked words missing, so the search really changes words), the sentence
# encoders stubbed (their weights are not the attack's memory), tracemalloc over the run.
CHILD = textwrap.dedent(
    """
    import asyncio, json, random, resource, sys, tracemalloc
    import numpy as np
    import promptrobust.attacks.sentence as sentence
    from promptrobust.attacks import get_attack
    from promptrobust.attacks.base import CandidateScore

    class Flat:
        name = "flat"
        def encode(self, texts):
            return np.ones((len(texts), 4), dtype=np.float32)

    sentence.load_use = lambda threads=2: sentence.CachedEncoder(Flat())
    import promptrobust.attacks.meaning_check as meaning_check
    from promptrobust.attacks.errors import AttackResourceError

    def no_encoder():  # the verdict's rules and diff run; its encoder's weights are not the attack's memory
        raise AttackResourceError("not loaded in this test")

    meaning_check.load_context_encoder = no_encoder
    from promptrobust.attacks.lexicon import load_lexicon

    load_lexicon()  # the WordNet table: a fixed resource of every process, loaded before the measurement
    from promptrobust.attacks.pos import load_spacy_tagger

    try:  # the meaning verdict's part-of-speech tagger: a fixed resource too (its weights, spaCy, thinc, torch)
        load_spacy_tagger().tag(["warm up"])
    except AttackResourceError:
        pass
    words, budget = int(sys.argv[1]), int(sys.argv[2])
    rng = random.Random(0)
    vocab = {vocab!r}
    prompt = " ".join(rng.choice(vocab) for _ in range(words)) + " positive or negative."

    class Counting:
        def __init__(self):
            self.prompts = self.calls = self.largest_call = 0
        async def __call__(self, prompts, *, to_beat=None, incumbent=None):
            self.calls += 1
            self.prompts += len(prompts)
            self.largest_call = max(self.largest_call, sum(map(len, prompts)))
            # score: how many "judge" are kept, so changing one lowers it
            return [CandidateScore(p, min(1.0, p.count(" judge ") / 5000), True, 8) for p in prompts]

    with open("/proc/self/status") as fh:  # the cap: what the interpreter has now, plus the headroom
        size = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmSize:"))
    limit = size + (int(sys.argv[3]) << 20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    tracemalloc.start()
    scorer = Counting()
    out = asyncio.run(get_attack("deepwordbug").run(
        prompt, scorer, protected=frozenset({{"positive", "negative"}}), budget=budget, seed=0))
    peak = tracemalloc.get_traced_memory()[1]
    print(json.dumps({{"peak": peak, "queries": out.queries, "changed": out.perturbed_words,
                      "calls": scorer.calls, "largest_call": scorer.largest_call,
                      "prompt_chars": len(prompt), "exhausted": out.budget_exhausted}}))
    """
).format(vocab=VOCAB)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc for the address-space cap")
@pytest.mark.parametrize("budget", [20, 10_040])
def test_deepwordbug_on_10k_words_stays_far_under_a_memory_cap(budget):
    """budget 20: only the ranking, cut by the budget; 10,040: every word ranked (10,000 candidates
    of 10,000 words, ~600 MB if held at once) and 40 more candidates of the greedy search."""
    words = 10_000
    headroom_mib = 1024  # the address space the run may add to the loaded interpreter
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", CHILD, str(words), str(budget), str(headroom_mib)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["queries"] == budget and got["exhausted"]
    prompt_mib = got["prompt_chars"] / 2**20
    # Python's own allocations: a few prompts' worth, not one per word (the old ranking: ~600 MiB)
    assert got["peak"] < 40 * 2**20, got
    assert got["peak"] < 200 * got["prompt_chars"]  # linear in the prompt (~70 KB here)
    # each scorer call carries at most the ranking's share of text plus one prompt
    assert got["largest_call"] <= 2**20 + got["prompt_chars"], (got, prompt_mib)
    if budget > words:
        assert got["changed"] >= 1, "the greedy search ran past the ranking and changed words"


def test_a_prompt_over_the_limit_is_refused_in_one_line_before_any_scoring():
    prompt = long_prompt(MAX_PROMPT_WORDS + 1)
    scorer = SyntheticScorer(lambda p, i: 1.0, 2)
    with pytest.raises(PromptTooLongError) as info:
        asyncio.run(get_attack("deepwordbug").run(prompt, scorer, budget=20))
    message = str(info.value)
    assert "\n" not in message and f"{MAX_PROMPT_WORDS:,}" in message and "shorter" in message
    assert isinstance(info.value, AttackError) and scorer.calls == []


def test_the_limit_itself_is_accepted():
    prompt = " ".join(["judge"] * (MAX_PROMPT_WORDS - 2)) + " positive."
    out = asyncio.run(get_attack("checklist").run(prompt, SyntheticScorer(lambda p, i: 1.0, 1), budget=1))
    assert out.queries == 1


def test_changes_of_a_long_prompt_are_exact_and_in_order():
    clean = long_prompt(10_000, seed=1)
    tokens = list(tokenize(clean))
    edits = {5: "rveiew", 9_001: "t one", 19_999: "ansWer"}  # word tokens sit at odd indices
    for i, new in edits.items():
        tokens[i] = new
    adversarial = "".join(tokens)
    found = changes(clean, adversarial)
    assert [(c.old, c.new) for c in found] == [(tokenize(clean)[i], new) for i, new in sorted(edits.items())]
    for c in found:
        assert clean[c.old_start : c.old_end] == c.old and adversarial[c.new_start : c.new_end] == c.new
    assert changes(clean, clean) == []


@pytest.mark.parametrize(
    "clean, adversarial, expected",
    [
        ("Is the writer pleased?", "Is the author pleased?", [("writer", "author")]),
        ("a good film", "a g ood film", [("good", "g ood")]),
        ("Judge the review.", "Judge the review X1.", [("", "X1")]),
        ("one two three four", "uno two three cuatro", [("one", "uno"), ("four", "cuatro")]),
    ],
)
def test_changes_agree_on_short_and_long_prompts(clean, adversarial, expected):
    assert substitutions(clean, adversarial) == expected
    # the same edits at both ends of a long prompt: the middle is aligned in linear time
    filler = " ".join(["filler", "word", "the"] * 300)
    long_clean, long_adversarial = f"{clean} {filler} {clean}", f"{adversarial} {filler} {adversarial}"
    assert substitutions(long_clean, long_adversarial) == expected + expected
