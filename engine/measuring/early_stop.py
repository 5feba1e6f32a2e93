"""Exact early stopping for a step of candidate prompts.

The attacker minimises a decomposable metric: the final score of a candidate
is ``fsum(per-sample scores) / N`` with every per-sample score in [0, 1]. After
some samples, a candidate's final score lies in

    [ fsum(seen) / N ,  (fsum(seen) + unseen) / N ]

A candidate stops being evaluated when it can no longer be the winner, where
the winner is the first candidate (in list order) with the minimum score, and
it only counts when it is strictly below ``to_beat``. Candidate ``i`` is
dropped when its lower bound is

* at or above ``to_beat`` (it cannot lower the metric), or
* above some other candidate's upper bound, or
* equal to the upper bound of an earlier candidate (it could at best tie, and
  the earlier one wins ties).

None of these can drop the true winner, so the chosen prompt and its score are
the same as with exhaustive evaluation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class CandidateProgress:
    """Per-sample scores seen so far for one candidate."""

    total: int  # N, the number of samples
    scores: list[float] = field(default_factory=list)
    stopped: bool = False

    @property
    def seen(self) -> int:
        return len(self.scores)

    @property
    def complete(self) -> bool:
        return self.seen == self.total

    def lower(self) -> float:
        return math.fsum(self.scores) / self.total if self.total else 0.0

    def upper(self) -> float:
        if not self.total:
            return 0.0
        # fsum over the seen scores plus the unseen maximum is correctly rounded, so
        # it never falls below the final fsum: the bound stays a bound in floats.
        return math.fsum([*self.scores, float(self.total - self.seen)]) / self.total


def prune(candidates: list[CandidateProgress], to_beat: float | None) -> list[int]:
    """Mark candidates that can no longer win as stopped; return their indices."""
    active = [i for i, c in enumerate(candidates) if not c.stopped]
    lowers = {i: candidates[i].lower() for i in active}
    uppers = {i: candidates[i].upper() for i in active}
    newly: list[int] = []
    for i in active:
        if candidates[i].complete:
            continue
        lb = lowers[i]
        doomed = to_beat is not None and lb >= to_beat
        if not doomed:
            for j in active:
                if j == i:
                    continue
                if lb > uppers[j] or (lb == uppers[j] and j < i):
                    doomed = True
                    break
        if doomed:
            newly.append(i)
    for i in newly:
        candidates[i].stopped = True
    return newly
