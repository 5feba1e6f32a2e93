"""Calibrate the meaning verdict on pairs labelled by hand, and measure it on pairs it never saw.

    python scripts/calibrate_meaning_check.py [--show-wrong]

``tests/fixtures/meaning/verdict_pairs.jsonl`` holds 217 (clean, adversarial) pairs written
for promptrobust, each labelled kept or changed, in categories (wrong sense, same field,
changed instructions: language, scope, role; real-word typos, synonyms, words in a label's
clause, opposites, character edits, insertions, deletions). Each pair's ``split`` was fixed
before anything was measured: within each category, alternately ``calibration`` and
``held-out``. The verdict's two numbers (``meaning_check.THRESHOLD_CLOSE`` and
``THRESHOLD_FAR``: the encoder's in-context cosine a replacement needs when WordNet relates
it closely to the old word, and when not) are chosen on the calibration pairs only (most
pairs right; ties: more changed meanings found, then the lower thresholds); the held-out
pairs, never used to choose them, give the figures docs/fidelity.md quotes, per category.
The rules (instruction words, opposites, part of speech, spelling, WordNet relations) have
no number fitted to these pairs. The earlier 80 pairs (``labelled_pairs.jsonl``, issue 30)
are scored too, as a further set, and so is ``blind_pairs.jsonl``: 62 pairs on nine prompts none of
the other sets use, written and committed on 2026-11-29 after the verdict (check v4) was fixed and
before it was run on them, since the held-out half's errors had been read while rules were written.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import promptrobust.attacks.meaning_check as mc
from promptrobust.attacks.words import normalize_protected

HERE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "meaning"
PAIRS = HERE / "verdict_pairs.jsonl"
EARLIER = HERE / "labelled_pairs.jsonl"
BLIND = HERE / "blind_pairs.jsonl"
GRID = [round(0.20 + 0.01 * i, 2) for i in range(61)]


@dataclass(frozen=True)
class Evidence:
    """What the verdict saw on one pair: per changed stretch, its rule verdict when no
    similarity decides it, else its similarity and whether the close threshold applies."""

    label: str
    category: str
    split: str
    why: str
    checks: tuple[tuple[bool | None, float | None, bool], ...]

    def changed(self, close: float, far: float) -> bool:
        for rule, sim, is_close in self.checks:
            if sim is None:
                if rule is not True:
                    return True
            elif sim < (close if is_close else far):
                return True
        return False


def _verdict(row: dict[str, object], close: float, far: float) -> mc.MeaningVerdict:
    saved = mc.THRESHOLD_CLOSE, mc.THRESHOLD_FAR
    mc.THRESHOLD_CLOSE, mc.THRESHOLD_FAR = close, far
    try:
        return mc.meaning_verdict(str(row["clean"]), str(row["adversarial"]),
                                  normalize_protected(row["labels"]))  # type: ignore[arg-type]
    finally:
        mc.THRESHOLD_CLOSE, mc.THRESHOLD_FAR = saved


def evidence(path: Path) -> list[Evidence]:
    """Each pair's evidence: run once with every similarity passing under the close threshold only
    (so a check that passes there is in the close class) and once with every similarity passing."""
    out = []
    for row in (json.loads(line) for line in path.read_text().splitlines() if line.strip()):
        open_close = _verdict(row, -2.0, 2.0).substitutions
        everything = _verdict(row, -2.0, -2.0).substitutions
        checks = tuple((c.kept if c.similarity is None else None, c.similarity, bool(k.kept))
                       for c, k in zip(everything, open_close))
        out.append(Evidence(str(row["meaning"]), str(row.get("category", "earlier set")),
                            str(row.get("split", "earlier set")), str(row["why"]), checks))
    return out


def score(rows: list[Evidence], close: float, far: float) -> dict[str, float]:
    right = sum((e.label == "changed") == e.changed(close, far) for e in rows)
    changed = [e for e in rows if e.label == "changed"]
    found = sum(e.changed(close, far) for e in changed)
    flagged = sum(e.changed(close, far) for e in rows)
    return {"pairs": len(rows), "accuracy": right / len(rows) if rows else float("nan"),
            "changed": len(changed), "recall": found / len(changed) if changed else float("nan"),
            "precision": found / flagged if flagged else float("nan")}


def choose(rows: list[Evidence]) -> tuple[float, float]:
    def key(pair: tuple[float, float]) -> tuple[float, float, float, float]:
        s = score(rows, *pair)
        return s["accuracy"], s["recall"], -pair[0], -pair[1]

    return max(((c, f) for c in GRID for f in GRID), key=key)


def lines(title: str, rows: list[Evidence], close: float, far: float) -> Iterator[str]:
    groups: dict[str, list[Evidence]] = defaultdict(list)
    for e in rows:
        groups[e.category].append(e)
    yield title
    for name, members in [("all", rows), *sorted(groups.items())]:
        s = score(members, close, far)
        recall = f"{s['recall']:.3f} ({round(s['recall'] * s['changed'])}/{s['changed']})" if s["changed"] else "-"
        yield (f"  {name:24} pairs {s['pairs']:3}  accuracy {s['accuracy']:.3f}  recall of changed {recall}")


def main(argv: list[str]) -> int:
    rows = evidence(PAIRS)
    calibration = [e for e in rows if e.split == "calibration"]
    held_out = [e for e in rows if e.split == "held-out"]
    close, far = choose(calibration)
    print(f"{len(rows)} pairs ({sum(e.label == 'changed' for e in rows)} changed); calibration {len(calibration)}, "
          f"held-out {len(held_out)}")
    print(f"chosen on the calibration pairs: THRESHOLD_CLOSE {close}, THRESHOLD_FAR {far}; committed: "
          f"{mc.THRESHOLD_CLOSE}, {mc.THRESHOLD_FAR}")
    for line in lines("calibration pairs (used to choose the thresholds):", calibration, mc.THRESHOLD_CLOSE,
                      mc.THRESHOLD_FAR):
        print(line)
    for line in lines("HELD-OUT pairs (never used to choose anything):", held_out, mc.THRESHOLD_CLOSE,
                      mc.THRESHOLD_FAR):
        print(line)
    earlier = evidence(EARLIER)
    for line in lines(f"the earlier {len(earlier)} pairs (issue 30's set):", earlier, mc.THRESHOLD_CLOSE,
                      mc.THRESHOLD_FAR):
        print(line)
    blind = evidence(BLIND)
    for line in lines(f"the blind {len(blind)} pairs (written after the verdict was fixed, never used to choose anything):",
                      blind, mc.THRESHOLD_CLOSE, mc.THRESHOLD_FAR):
        print(line)
    if "--show-wrong" in argv:
        for e in rows + earlier + blind:
            if (e.label == "changed") != e.changed(mc.THRESHOLD_CLOSE, mc.THRESHOLD_FAR):
                print(f"  wrong ({e.split}, {e.category}): labelled {e.label}: {e.why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
