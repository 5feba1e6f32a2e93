"""Calibrate the meaning check on the pairs labelled by hand.

    python scripts/calibrate_meaning_check.py [tests/fixtures/meaning/labelled_pairs.jsonl]

For each layer of all-MiniLM-L6-v2 and each threshold, the verdict's precision
and recall at finding a changed meaning (and the kept ones' too), over all
pairs and with the threshold chosen on one half and measured on the other.
docs/fidelity.md quotes the committed setting's figures.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import promptrobust.attacks.meaning_check as mc

PAIRS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "meaning" / "labelled_pairs.jsonl"


def scores(rows: list[dict], layer: int) -> list[tuple[str, float | None, bool | None]]:
    """(label, lowest in-context similarity of the pair's word substitutions, rule verdict if no similarity decides)."""
    encoder = mc.ContextEncoder(layer)
    out = []
    for r in rows:
        saved = mc.CONTEXT_THRESHOLD
        mc.CONTEXT_THRESHOLD = -2.0  # every similarity passes: what is left is the rules' verdict
        try:
            v = mc.meaning_verdict(r["clean"], r["adversarial"], frozenset(r["labels"]), encoder=encoder)
        finally:
            mc.CONTEXT_THRESHOLD = saved
        sims = [s.similarity for s in v.substitutions if s.similarity is not None]
        out.append((r["meaning"], min(sims) if sims else None, v.verdict == "kept"))
    return out


def confusion(rows: list[tuple[str, float | None, bool | None]], threshold: float) -> dict[str, float]:
    tp = fp = fn = tn = 0
    for label, sim, rules_keep in rows:
        kept = bool(rules_keep) and (sim is None or sim >= threshold)
        if label == "changed":
            tp += not kept
            fn += kept
        else:
            fp += not kept
            tn += kept
    prec = tp / (tp + fp) if tp + fp else 1.0
    rec = tp / (tp + fn) if tp + fn else 1.0
    kept_prec = tn / (tn + fn) if tn + fn else 1.0
    kept_rec = tn / (tn + fp) if tn + fp else 1.0
    return {"tp": tp, "fp": fp, "fn": fn, "tn": tn, "precision": prec, "recall": rec,
            "kept_precision": kept_prec, "kept_recall": kept_rec, "accuracy": (tp + tn) / len(rows)}


def best(rows: list[tuple[str, float | None, bool | None]]) -> float:
    """The threshold with the most pairs right (ties: the lowest)."""
    grid = [round(0.20 + 0.01 * i, 2) for i in range(61)]
    return max(grid, key=lambda t: (confusion(rows, t)["accuracy"], -t))


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else PAIRS
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    print(f"{len(rows)} pairs, {sum(r['meaning'] == 'changed' for r in rows)} changed")
    for layer in range(1, 7):
        s = scores(rows, layer)
        t = best(s)
        half_a, half_b = s[0::2], s[1::2]
        held = [confusion(half_b, best(half_a)), confusion(half_a, best(half_b))]
        c = confusion(s, t)
        print(f"layer {layer}: best threshold {t:.2f}: precision {c['precision']:.3f} recall {c['recall']:.3f} "
              f"accuracy {c['accuracy']:.3f} | two-fold (threshold from the other half): accuracy "
              f"{(held[0]['accuracy'] + held[1]['accuracy']) / 2:.3f}")
    s = scores(rows, mc.CONTEXT_LAYER)
    c = confusion(s, mc.CONTEXT_THRESHOLD)
    print(f"committed: layer {mc.CONTEXT_LAYER}, threshold {mc.CONTEXT_THRESHOLD}: " + json.dumps(c))
    for (label, sim, rules_keep), r in zip(s, rows):
        kept = bool(rules_keep) and (sim is None or sim >= mc.CONTEXT_THRESHOLD)
        if (label == "kept") != kept:
            print(f"  wrong: {label:8} sim={'-' if sim is None else f'{sim:.3f}'} {r['why']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
