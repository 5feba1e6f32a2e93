"""What the numbers of a record may be, so that a report survives any results file.

Results files are read from disk, where anything can be written: a hand edit, a
foreign tool, Python's json writing NaN. Every number a report computes with or
draws passes through here first:

* a record whose PDR cannot be right is *invalid*: listed under the records not
  averaged with the reason, never averaged or drawn. A PDR cannot be right when it
  is not a finite number, is above 1 (scores are never negative, so 1 - adversarial/clean
  is at most 1), is below ``PDR_FLOOR``, or contradicts the record's own scores;
* a record of a kind this version does not know is listed the same way, never counted
  as an attack;
* a clean score that is not a finite number in ``SCORE_RANGE`` is left out of the clean
  tables;
* per-sample scores that are not finite numbers in ``SCORE_RANGE``, or not one adversarial
  score per clean one, are dropped: the record keeps its PDR, without an interval;
* intervals, p-values, similarities and costs that are not finite numbers (intervals:
  not two of them, low before high) are read as missing.

Each kind of problem becomes one note in the report and one line on stderr
(``ReadProblems``), however many records have it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: Every metric we score (accuracy, F1, exact match, BLEU) lies in [0, 100].
SCORE_RANGE = (0.0, 100.0)
#: A PDR below this says the adversarial score is a million times the clean one: no
#: sample count we run gives a clean score that small and non-zero.
PDR_FLOOR = -1e6
#: Scores a record writes with 4 decimals still agree with its PDR within this much,
#: plus what the rounding of the scores moves the ratio (see ``pdr_problem``).
PDR_TOLERANCE = 1e-4
_ROUNDING = 5e-5
INVALID = "invalid"
"""The status of a record whose numbers cannot be right (the report's own; never written)."""


def number(value: object, low: float = -math.inf, high: float = math.inf) -> float | None:
    """``value`` as a finite float within [low, high], else None (a bool, text, NaN, ±inf)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        x = float(value)
    except OverflowError:  # an int beyond a float's range
        return None
    return x if math.isfinite(x) and low <= x <= high else None


def interval(value: object) -> list[float] | None:
    """A 95% interval as [low, high] of two finite numbers, else None."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return None
    low, high = number(value[0]), number(value[1])
    return [low, high] if low is not None and high is not None and low <= high else None


def score(value: object) -> float | None:
    """A clean or adversarial score: a finite number in ``SCORE_RANGE``, else None."""
    return number(value, *SCORE_RANGE)


def pdr_problem(pdr: object, clean: object, adversarial: object) -> str | None:
    """Why an attacked record's PDR cannot be right, or None when it can.

    Scores are never negative, so PDR = 1 - adversarial/clean is at most 1; a record
    whose PDR differs from its own scores' by more than rounding is inconsistent
    (which of them is wrong cannot be told, so neither is used)."""
    if isinstance(pdr, bool) or not isinstance(pdr, (int, float)) or not math.isfinite(pdr):
        return f"PDR is {pdr!r}, not a finite number"
    if pdr > 1 + 1e-9:
        return f"PDR {pdr:.6g} is above 1, which no scores give (scores are never negative)"
    if pdr < PDR_FLOOR:
        return f"PDR {pdr:.6g} is below {PDR_FLOOR:.0e}: the adversarial score would be a million times the clean one"
    c, a = score(clean), score(adversarial)
    if clean is not None and c is None:
        return f"clean score {clean!r} is not a finite number in [0, 100]"
    if adversarial is not None and a is None:
        return f"adversarial score {adversarial!r} is not a finite number in [0, 100]"
    if c is None or a is None:
        return None  # an older record without both scores: its PDR is all there is
    if c == 0:
        return "clean score 0 gives no PDR"
    expected = 1.0 - a / c
    if abs(pdr - expected) > PDR_TOLERANCE + _ROUNDING * (2 + abs(expected)) / c:
        return f"PDR {pdr:.4g} contradicts its scores {c:.4g} -> {a:.4g} (1 - adversarial/clean = {expected:.4g})"
    return None


def sample_scores(clean: object, adversarial: object) -> tuple[list[float], list[float], bool]:
    """Paired per-sample scores, and whether they had to be dropped (not finite numbers
    in ``SCORE_RANGE``, or not one adversarial score per clean one)."""
    c = clean if isinstance(clean, list) else []
    a = adversarial if isinstance(adversarial, list) else []
    if not c and not a:
        return [], [], False
    cs, ads = [score(x) for x in c], [score(x) for x in a]
    if (c and a and len(c) != len(a)) or None in cs or None in ads:
        return [], [], True
    return [float(x) for x in cs], [float(x) for x in ads], False  # type: ignore[arg-type]


@dataclass
class ReadProblems:
    """What the loader found wrong in the files, counted, for one note per kind of problem."""

    invalid: list[str] = field(default_factory=list)
    """One line per invalid record: where, and why."""
    unknown_kinds: Counter[str] = field(default_factory=Counter)
    bad_clean_scores: list[str] = field(default_factory=list)
    dropped_sample_scores: int = 0
    unreadable_numbers: int = 0
    """Intervals, p-values, similarities, costs read as missing."""

    def notes(self) -> list[str]:
        """One sentence per kind of problem (empty when the files were sound)."""
        out = []
        if self.unknown_kinds:
            kinds = ", ".join(f"{k!r} ({n})" for k, n in sorted(self.unknown_kinds.items()))
            out.append(f"records of a kind this version does not know: {kinds}; known kinds are attack, pair, transfer "
                       "and defense: not counted in any table, listed under the records not averaged")
        flagged = len(self.invalid) - sum(self.unknown_kinds.values())
        if flagged:
            out.append(f"{flagged} record(s) hold a PDR that cannot be right (not a finite number, above 1, or "
                       f"contradicting their own scores), e.g. {self.invalid[0]}: left out of every average and "
                       "figure, listed under the records not averaged")
        if self.bad_clean_scores:
            out.append(f"{len(self.bad_clean_scores)} clean score(s) are not finite numbers in [0, 100], e.g. "
                       f"{self.bad_clean_scores[0]}: left out of the clean-score tables")
        if self.dropped_sample_scores:
            out.append(f"{self.dropped_sample_scores} record(s) hold per-sample scores that are not finite numbers "
                       "in [0, 100] or not paired: their scores were dropped, so their PDRs carry no interval")
        if self.unreadable_numbers:
            out.append(f"{self.unreadable_numbers} interval(s), p-value(s), similarity or cost figure(s) were not "
                       "finite numbers: shown as missing")
        return out


def clean_numbers(row: Mapping[str, Any], keys: Sequence[str], problems: ReadProblems) -> dict[str, float | None]:
    """``row[key]`` as a finite number or None for each key, counting the ones that were there but unreadable."""
    out: dict[str, float | None] = {}
    for k in keys:
        raw = row.get(k)
        out[k] = number(raw)
        if raw is not None and out[k] is None:
            problems.unreadable_numbers += 1
    return out
