"""How many offline word candidates change the meaning, with and without the sense filter.

    python scripts/measure_word_senses.py [--show]

Generates every candidate the offline word source (GloVe 6B 50d restricted to
WordNet 3.0 synonyms, ``attacks.synonyms.LexiconNeighbours``) proposes for the
attackable words of 12 prompts written for this project
(``tests/fixtures/senses/prompts.jsonl``), for TextFooler (top 50, cosine >= 0.6)
and TextBugger's word part (top 5), once with ``word_senses=any`` (synonyms of
every sense of the lemma: the source before issue 40) and once with
``word_senses=context`` (the word's part of speech as tagged in its prompt and
its usual senses: the default). Each candidate is judged against the labels
written by hand in ``tests/fixtures/senses/kept.json`` (the replacements that keep
the word's meaning in that prompt; a candidate missing there changes it).
docs/fidelity.md quotes the output. Needs the [attacks] extra (GloVe, spaCy).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from promptrobust.attacks import get_attack
from promptrobust.attacks.base import WordSite
from promptrobust.attacks.pos import load_spacy_tagger, tag_at
from promptrobust.attacks.sentence import CachedEncoder
from promptrobust.attacks.synonyms import WORDNET_POS
from promptrobust.attacks.words import STOPWORDS, is_protected, tokenize, word_indices

HERE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "senses"


class _Unused:
    """No sentence encoder is needed to list candidates."""

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return np.ones((len(texts), 4), dtype=np.float32)


def _prompts() -> dict[str, dict[str, Any]]:
    """The 12 prompts by id."""
    rows = [json.loads(line) for line in (HERE / "prompts.jsonl").read_text().splitlines() if line.strip()]
    return {str(r["id"]): r for r in rows}


def candidates(word_senses: str) -> list[dict[str, object]]:
    rows = list(_prompts().values())
    out = []
    for name in ("textfooler", "textbugger"):
        attack = get_attack(name, embedding="glove", encoder=CachedEncoder(_Unused()), word_senses=word_senses)
        words = attack.transformation(0)
        words = getattr(words, "parts", (None, words))[1]  # TextBugger: the word part of its union
        for r in rows:
            tokens, labels = tokenize(r["text"]), frozenset(r["labels"])
            for i in word_indices(tokens):
                w = tokens[i]
                if not any(c.isalpha() for c in w) or w.lower() in STOPWORDS or is_protected(w, labels):
                    continue
                for new in words.replacements(WordSite(tokens, i)):
                    out.append({"attack": name, "prompt": r["id"], "index": i, "word": w, "candidate": new})
    return out


def kept_labels() -> dict[str, set[str]]:
    """``prompt id|word`` -> the replacements that keep the word's meaning there (kept.json, by hand)."""
    return {k: set(v) for k, v in json.loads((HERE / "kept.json").read_text()).items() if not k.startswith("_")}


def labelled_pairs(word_senses: str, found: list[dict[str, object]] | None = None,
                   attack: str | None = None) -> list[dict[str, object]]:
    """Each distinct candidate (of ``found``, else the source's for ``word_senses``; of one ``attack``, else
    both) as a (clean, adversarial) pair labelled kept or changed by kept.json, in the form of the meaning
    verdict's labelled pairs (``scripts/calibrate_meaning_check.py`` scores them)."""
    prompts, kept = _prompts(), kept_labels()
    out, seen = [], set()
    for c in candidates(word_senses) if found is None else found:
        key = (c["prompt"], c["index"], c["candidate"])
        if key in seen or (attack is not None and c["attack"] != attack):
            continue
        seen.add(key)
        prompt = prompts[str(c["prompt"])]
        tokens = list(tokenize(str(prompt["text"])))
        tokens[int(str(c["index"]))] = str(c["candidate"])
        label = f"{c['prompt']}|{c['word']}"
        if label not in kept:
            raise SystemExit(f"no labels for {label}: add them to {HERE / 'kept.json'}")
        out.append({"category": f"word source ({word_senses})", "split": f"word source ({word_senses})",
                    "prompt": c["prompt"], "word": c["word"], "candidate": c["candidate"], "clean": prompt["text"],
                    "adversarial": "".join(tokens), "labels": prompt["labels"],
                    "meaning": "kept" if c["candidate"] in kept[label] else "changed",
                    "why": f"{c['word']} -> {c['candidate']}"})
    return out


def noun_verb_crossings(found: list[dict[str, object]]) -> list[tuple[str, str, str]]:
    """(prompt, word, candidate) where spaCy tags the word a noun in its prompt and the candidate a
    verb in the attacked prompt, or the other way round (each tagged in its own sentence)."""
    texts = {k: str(r["text"]) for k, r in _prompts().items()}
    tagger = load_spacy_tagger()
    out = []
    for c in found:
        tokens = list(tokenize(texts[str(c["prompt"])]))
        index = int(str(c["index"]))
        start = len("".join(tokens[:index]))
        before = WORDNET_POS.get(tag_at(tagger.tag(["".join(tokens)])[0], start) or "")
        tokens[index] = str(c["candidate"])
        after = WORDNET_POS.get(tag_at(tagger.tag(["".join(tokens)])[0], start) or "")
        if {before, after} == {"n", "v"}:
            out.append((str(c["prompt"]), str(c["word"]), str(c["candidate"])))
    return sorted(set(out))


def main(argv: list[str]) -> int:
    for senses in ("any", "context"):
        found = candidates(senses)
        for attack in ("textfooler", "textbugger", None):
            pairs = labelled_pairs(senses, found, attack)
            changed = sorted((str(p["prompt"]), str(p["word"]), str(p["candidate"])) for p in pairs
                             if p["meaning"] == "changed")
            share = len(changed) / len(pairs) if pairs else 0.0
            print(f"word_senses={senses:8} {attack or 'both':10} candidates {len(pairs):4}  change the meaning "
                  f"{len(changed):4} ({share:.1%})")
            if "--show" in argv and attack is None:
                print("   ", "; ".join(f"{p}: {w} -> {c}" for p, w, c in changed))
        crossings = noun_verb_crossings(found)
        print(f"word_senses={senses:8} noun/verb crossings (spaCy, each prompt tagged on its own): {len(crossings)}"
              + (f": {'; '.join(f'{p}: {w} -> {c}' for p, w, c in crossings)}" if "--show" in argv else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
