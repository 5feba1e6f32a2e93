"""Fit and measure the meaning check's learned judge of replaced words (check v11).

    python scripts/fit_meaning_judge.py [--c C[,C...]] [--test SET] [--write]

The meaning check's rules decide what they can; a replaced word they leave open was judged, in checks
v6-v10, by the mean in-context cosine of two encoders against a threshold (``THRESHOLD_CLOSE`` /
``THRESHOLD_FAR``), and since v11 by a logistic regression over the encoders' whole vectors
(``attacks.meaning_judge``: per encoder the unit vectors of the old and new word in context, their
elementwise absolute difference and product, plus the two cosines and the WordNet class the thresholds
used). Its training pairs are every labelled pair whose verdict one such word decides, in every set
``scripts/meaning_sets.py`` names and the offline word source's labelled candidates; the fit is an
L2-regularised logistic regression by Newton's method (numpy only), "changed" at probability 0.5 or more.

Without ``--write`` nothing is changed: the judge is scored leaving each group of pairs out in turn
(fitted on the others, scored on the group; the two halves of the verdict pairs are one group, as are
the two word sources' candidates, since they share prompts), against the thresholds of v10 on the same
pairs. ``--test SET`` fits on every other set and scores that one only (a set written after the judge
was fixed). ``--write`` fits on every pair at ``DEFAULT_C``, writes ``attacks/data/meaning_judge.json``,
then scores as without it.
Encoding every set takes about ten minutes on two cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import promptrobust.attacks.meaning_check as mc
from promptrobust.attacks import meaning_judge
from promptrobust.attacks.changes import changes
from promptrobust.attacks.words import normalize_protected

import calibrate_meaning_check as calibrate  # scripts/: the word sources' labelled candidates
from meaning_sets import ALL_SETS, FOLDER

#: The word source's labels (``scripts/measure_word_senses.py``), which the fit reads too.
KEPT_FILE = FOLDER.parent / "senses" / "kept.json"

#: Regularisation (scikit-learn's C: the weight of the data against 0.5 |w|^2): of 0.001, 0.003, 0.01, 0.03
#: and 0.1, the one with most labelled pairs right when each group is left out in turn (docs/fidelity.md).
DEFAULT_C = 0.003


@dataclass(frozen=True)
class Pair:
    """One labelled pair, the shipped verdict on it, and the features of the word the encoders judge
    (None when the rules decide the pair, or more than one word is left to the encoders)."""

    set_name: str
    changed: bool  # the label
    shipped_changed: bool  # the verdict with v10's thresholds
    features: np.ndarray | None
    category: str = ""


def pairs_of(set_name: str, rows: Sequence[dict[str, Any]], encoder: mc.ContextEncoder) -> list[Pair]:
    """Each row's label, its verdict under the thresholds, and the judge's features of its one open word."""
    encoder = dataclasses.replace(encoder, judge=None)
    out = []
    for row in rows:
        clean, adversarial = str(row["clean"]), str(row["adversarial"])
        verdict = mc.meaning_verdict(clean, adversarial, normalize_protected(row["labels"]), encoder=encoder)
        judged = [c for c in verdict.substitutions if c.threshold_class]
        ruled_out = any(c.kept is False for c in verdict.substitutions if not c.threshold_class)
        vector = None
        if len(judged) == 1 and not ruled_out:
            change = next(c for c in changes(clean, adversarial) if (c.old, c.new) == (judged[0].old, judged[0].new))
            found = mc.context_vectors(encoder, clean, adversarial, change)
            vector = None if found is None else meaning_judge.features(
                found, judged[0].relation in mc.CLOSE_RELATIONS, judged[0].threshold_class)
        out.append(Pair(set_name, row["meaning"] == "changed", verdict.verdict == "changed", vector,
                        str(row.get("category", ""))))
    return out


def fit(x: np.ndarray, y: np.ndarray, c: float, steps: int = 25) -> meaning_judge.LearnedJudge:
    """The L2-regularised logistic regression on standardised features: minimises 0.5 |w|^2 + c * log loss
    (the intercept not penalised), by Newton's method; scored and shipped as the check reads it."""
    mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-9
    z = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])
    w = np.zeros(z.shape[1])
    penalty = np.ones(z.shape[1])
    penalty[-1] = 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(z @ w)))
        gradient = penalty * w + c * z.T @ (p - y)
        hessian = np.diag(penalty) + c * (z.T * (p * (1 - p))) @ z
        step = np.linalg.solve(hessian + 1e-9 * np.eye(len(w)), gradient)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return meaning_judge.LearnedJudge(mean, scale, w[:-1], float(w[-1]), f"fitted at C {c}")


def group(set_name: str) -> str:
    if set_name in ("calibration half", "held-out half"):
        return "verdict pairs"
    return "word sources" if set_name.startswith("word source") else set_name


def learned_verdicts(pairs: Sequence[Pair], c: float, test: str | None = None) -> list[bool | None]:
    """Per pair, the verdict with the learned judge fitted without the pair's group (``test``: fitted on
    every other set, only that set scored; None for the pairs not scored)."""
    said: list[bool | None] = [None] * len(pairs)
    groups = [test] if test else list(dict.fromkeys(group(p.set_name) for p in pairs))
    for held in groups:
        train = [p for p in pairs if p.features is not None and group(p.set_name) != held and p.set_name != held]
        judge = fit(np.array([p.features for p in train]), np.array([p.changed for p in train], float), c)
        for i, p in enumerate(pairs):
            if group(p.set_name) == held or p.set_name == held:
                said[i] = (judge.changed_probability(p.features) >= meaning_judge.CUT if p.features is not None
                           else p.shipped_changed)
    return said


def figures(labels: Sequence[bool], said: Sequence[bool]) -> str:
    right = sum(a == b for a, b in zip(labels, said))
    changed = [s for a, s in zip(labels, said) if a]
    recall = f"{sum(changed) / len(changed):.3f} ({sum(changed)}/{len(changed)})" if changed else "-"
    return f"{right / len(labels):.3f} ({right}/{len(labels)})  {recall}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--c", default=str(DEFAULT_C),
                        help=f"regularisation, or several separated by commas, each scored (default {DEFAULT_C})")
    parser.add_argument("--test", help="fit on every other set and score this one only (a set's name as printed)")
    parser.add_argument("--write", action="store_true", help=f"fit on every pair at C {DEFAULT_C} and write "
                        f"{meaning_judge.JUDGE_FILE.relative_to(meaning_judge.JUDGE_FILE.parents[2])}")
    args = parser.parse_args(argv)
    try:
        strengths = [float(c) for c in args.c.split(",")]
    except ValueError:
        print(f"fit_meaning_judge: --c takes numbers separated by commas, not {args.c!r}", file=sys.stderr)
        return 2
    names = [s.name for s in ALL_SETS] + ["word source context", "word source any"]
    if args.test and args.test not in names:
        print(f"fit_meaning_judge: no set named {args.test!r}; one of: {', '.join(names)}", file=sys.stderr)
        return 2
    encoder = mc.load_encoders()
    pairs: list[Pair] = []
    for labelled in ALL_SETS:
        pairs += pairs_of(labelled.name, labelled.rows(), encoder)
    pairs += pairs_of("word source context", calibrate.word_source_pairs("context"), encoder)
    pairs += pairs_of("word source any", calibrate.word_source_pairs("any"), encoder)
    judged = sum(p.features is not None for p in pairs)
    if args.write:
        write(pairs)
    for c in strengths:
        said = learned_verdicts(pairs, c, args.test)
        print(f"{judged} of {len(pairs)} pairs decided by one encoder-judged word; C = {c}; "
              + (f"fitted on every set but {args.test}" if args.test else "each group left out in turn"))
        print(f"{'set':22} pairs  shipped: accuracy  recall of changed   learned: accuracy  recall of changed")
        scored: list[tuple[Pair, bool]] = []
        for name in names:
            rows = [(p, bool(s)) for p, s in zip(pairs, said) if p.set_name == name and s is not None]
            if rows:
                scored += rows
                print(f"{name:22} {len(rows):5}  {_both(rows)}")
        if not args.test:
            labelled = [(p, s) for p, s in scored if not p.set_name.startswith("word source")]
            print(f"{'every labelled set':22} {len(labelled):5}  {_both(labelled)}")
            blind = [(p, s) for p, s in labelled if p.set_name.startswith("blind ") and p.set_name != "blind 1"]
            print(f"per category, blind sets 2 and on ({len(blind)} pairs):")
            for category in sorted({p.category for p, _ in blind}):
                rows = [(p, s) for p, s in blind if p.category == category]
                print(f"  {category:20} {len(rows):5}  {_both(rows)}")
    return 0


def write(pairs: Sequence[Pair], path: Path = meaning_judge.JUDGE_FILE) -> None:
    """Fit on every judged pair at ``DEFAULT_C`` and write the judge, naming the files it was fitted on."""
    train = [p for p in pairs if p.features is not None]
    judge = fit(np.array([p.features for p in train]), np.array([p.changed for p in train], float), DEFAULT_C)
    files = sorted({labelled.path for labelled in ALL_SETS} | {KEPT_FILE})
    trained_on = {str(f.relative_to(FOLDER.parents[2])): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}
    judge = dataclasses.replace(judge, trained_on=trained_on)
    path.write_bytes(meaning_judge.to_json(judge, c=DEFAULT_C, pairs=len(train)))
    print(f"wrote {path}: fitted on {len(train)} pairs at C {DEFAULT_C}")


def _both(rows: Sequence[tuple[Pair, bool]]) -> str:
    labels = [p.changed for p, _ in rows]
    return f"{figures(labels, [p.shipped_changed for p, _ in rows]):>30}   {figures(labels, [s for _, s in rows]):>30}"


if __name__ == "__main__":
    sys.exit(main())
