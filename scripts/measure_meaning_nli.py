"""Measure the meaning verdict with an NLI model as the judge of replaced words (``--meaning-nli``).

    python scripts/measure_meaning_nli.py MODEL [--show-wrong]
    python scripts/measure_meaning_nli.py --ceiling | --rules-alone


MODEL: a Hugging Face id (e.g. cross-encoder/nli-deberta-v3-base; needs the hub) or a local
folder. Every set of pairs labelled by hand that docs/fidelity.md measures the shipped check on
(``scripts/meaning_sets.py``: the calibration and held-out halves, the earlier 80 pairs and the
blind sets) is judged by ``meaning_verdict(..., nli=MODEL)``: the same rules, then mutual
entailment under MODEL where the shipped check asks two encoders. Nothing is fitted, so every
set is held out for this judge; it prints accuracy and recall of "changed" per set and per
category over the blind sets, beside nothing else (run ``scripts/calibrate_meaning_check.py``
for the shipped check's figures). promptrobust could not run it on a real NLI model: none
loads offline where it was built.

``--ceiling`` needs no model: a judge that always answers as the pair's label says (it knows the
answer) shows how far the rules alone limit any judge of replaced words, since the rules decide
typos, insertions, deletions, instruction words and opposites before a judge is asked.
``--rules-alone``: the floor, a judge that keeps every replaced word (what the rules catch alone).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from promptrobust.attacks.errors import AttackResourceError
from promptrobust.attacks.meaning_check import meaning_verdict
from promptrobust.attacks.nli_check import Entailment, NliJudge, load_nli_judge
from promptrobust.attacks.words import normalize_protected

from meaning_sets import ALL_SETS  # scripts/meaning_sets.py: the labelled sets, named once


@dataclass(frozen=True)
class KnowingJudge(NliJudge):
    """``--ceiling``: a judge that answers as the pair's label says (no model)."""

    kept: bool = True

    def entailment(self, premise: str, hypothesis: str) -> Entailment:
        p = 1.0 if self.kept else 0.0
        return Entailment(p, p, self.kept, self.kept)


#: ``--rules-alone``: every replaced word the rules pass is kept.
RULES_ALONE = KnowingJudge("none (every replaced word kept)", 0, None, None, kept=True)


def judged(rows: Sequence[dict[str, Any]], judge: NliJudge | None) -> list[tuple[dict[str, Any], str]]:
    """Each pair with the verdict it gets ("changed" or "kept"; "not checked" counts as kept: not flagged).
    ``judge`` None: the pair's own label judges its replaced words (``--ceiling``)."""
    out = []
    for row in rows:
        this = judge or KnowingJudge("the pair's label", 0, None, None, kept=row["meaning"] == "kept")
        verdict = meaning_verdict(str(row["clean"]), str(row["adversarial"]), normalize_protected(row.get("labels") or []),
                                  nli=this)
        out.append((row, "changed" if verdict.verdict == "changed" else "kept"))
    return out


def figures(pairs: Sequence[tuple[dict[str, Any], str]]) -> dict[str, float | int]:
    """Pairs, accuracy, changed meanings and the share of them found."""
    right = sum(1 for row, said in pairs if said == row["meaning"])
    changed = [said for row, said in pairs if row["meaning"] == "changed"]
    return {"pairs": len(pairs), "accuracy": right / len(pairs) if pairs else float("nan"),
            "changed": len(changed), "found": changed.count("changed"),
            "recall": changed.count("changed") / len(changed) if changed else float("nan")}


def main(argv: list[str]) -> int:
    names = [a for a in argv if not a.startswith("--")]
    ceiling, floor = "--ceiling" in argv, "--rules-alone" in argv
    if len(names) != (0 if ceiling or floor else 1) or (ceiling and floor):
        print("usage: python scripts/measure_meaning_nli.py MODEL [--show-wrong] (MODEL: a Hugging Face id or a folder), "
              "or --ceiling, or --rules-alone", file=sys.stderr)
        return 2
    try:
        judge = None if ceiling else RULES_ALONE if floor else load_nli_judge(names[0])
    except AttackResourceError as exc:
        print(f"measure_meaning_nli: {exc}", file=sys.stderr)
        return 2
    if judge is None:
        print("the ceiling of any judge of replaced words: each pair's label judges them; the rules decide the rest")
    elif floor:
        print("the rules alone: every replaced word they pass is kept")
    else:
        print(f"meaning verdict with NLI judge {judge.name} (rules unchanged; mutual entailment decides replaced words)")
    print(f"{'set':<18} {'pairs':>5} {'accuracy':>8} {'recall of changed':>18}")
    blind: list[tuple[dict[str, Any], str]] = []
    wrong: list[tuple[str, dict[str, Any], str]] = []
    for labelled in ALL_SETS:
        name = labelled.name
        pairs = judged(labelled.rows(), judge)
        f = figures(pairs)
        print(f"{name:<18} {f['pairs']:>5} {f['accuracy']:>8.3f} {f['recall']:>8.3f} ({f['found']}/{f['changed']})")
        if name.startswith("blind"):
            blind += pairs
        wrong += [(name, row, said) for row, said in pairs if said != row["meaning"]]
    by_category: dict[str, list[tuple[dict[str, Any], str]]] = defaultdict(list)
    for row, said in blind:
        by_category[str(row.get("category", "?"))].append((row, said))
    print(f"\nblind sets, per category ({len(blind)} pairs)")
    for category, pairs in sorted(by_category.items()):
        f = figures(pairs)
        caught = f"{f['found']}/{f['changed']} changed caught" if f["changed"] else "no changed pair"
        print(f"  {category:<34} {f['pairs']:>4} pairs  accuracy {f['accuracy']:.3f}  {caught}")
    if "--show-wrong" in argv:
        print("\nwrong verdicts")
        for name, row, said in wrong:
            print(f"  [{name}] labelled {row['meaning']}, judged {said}: {row['clean']!r} -> {row['adversarial']!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
