"""Memory of a word attack against the length of the prompt (issue 32).

    python bench/attack_memory.py [--attack deepwordbug] [--budget 20] [--words 1000,3000,10000,20000]

Each size runs in a fresh interpreter: DeepWordBug (by default) on a prompt of
N words with a counting scorer that keeps no prompt, Python's allocation peak
measured with tracemalloc over the attack (the WordNet table, the meaning
check's encoder and the sentence encoder are fixed resources, loaded before or
stubbed). It prints the peak, the time, and the peak per prompt character: a
flat last column is memory linear in the prompt. Before issue 32 the ranking
held one whole prompt per word: 10,000 words with --budget 20 peaked at
597 MiB (143 s) on an Intel Xeon (2 cores).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = """
import asyncio, json, random, sys, time, tracemalloc
import numpy as np
import promptrobust.attacks.meaning_check as meaning_check
import promptrobust.attacks.sentence as sentence
from promptrobust.attacks import get_attack
from promptrobust.attacks.base import CandidateScore
from promptrobust.attacks.errors import AttackResourceError
from promptrobust.attacks.lexicon import load_lexicon

class Flat:
    name = "flat"
    def encode(self, texts):
        return np.ones((len(texts), 4), dtype=np.float32)

def no_encoder():
    raise AttackResourceError("not loaded in this benchmark")

sentence.load_use = lambda threads=2: sentence.CachedEncoder(Flat())
meaning_check.load_context_encoder = no_encoder
load_lexicon()
attack, words, budget = sys.argv[1], int(sys.argv[2]), None if sys.argv[3] == "none" else int(sys.argv[3])
rng = random.Random(0)
vocab = ["review", "sentence", "classify", "movie", "tone", "judge", "writer", "opinion", "careful", "answer"]
prompt = " ".join(rng.choice(vocab) for _ in range(words - 3)) + " positive or negative."  # N words in all

class Counting:
    async def __call__(self, prompts, *, to_beat=None, incumbent=None):
        return [CandidateScore(p, min(1.0, p.count(" judge ") / 5000), True, 8) for p in prompts]

tracemalloc.start()
started = time.perf_counter()
out = asyncio.run(get_attack(attack).run(prompt, Counting(), protected=frozenset({"positive", "negative"}),
                                         budget=budget, seed=0))
print(json.dumps({"peak": tracemalloc.get_traced_memory()[1], "seconds": time.perf_counter() - started,
                  "chars": len(prompt), "queries": out.queries}))
"""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attack", default="deepwordbug")
    parser.add_argument("--budget", default="20", help="candidate evaluations, or 'none' for unlimited")
    parser.add_argument("--words", default="1000,3000,10000,20000,20001")
    args = parser.parse_args(argv)
    print(f"{args.attack}, --budget {args.budget}")
    print(f"{'words':>8} {'peak MiB':>9} {'seconds':>8} {'queries':>8} {'peak bytes / prompt char':>25}")
    for words in (int(w) for w in args.words.split(",")):
        done = subprocess.run([sys.executable, "-c", CHILD, args.attack, str(words), args.budget],
                              capture_output=True, text=True)
        if done.returncode != 0:
            print(f"{words:>8} {(done.stderr.strip().splitlines() or ['failed'])[-1]}")
            continue
        got = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{words:>8} {got['peak'] / 2**20:>9.1f} {got['seconds']:>8.1f} {got['queries']:>8} "
              f"{got['peak'] / got['chars']:>25.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
