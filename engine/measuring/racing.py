"""Racing the candidates of a search step: the same choice as scoring every candidate on every
sample, at a stated error rate, for a fraction of the model calls.

An attack's step scores K candidate prompts on the same N samples and keeps the lowest mean score
(the attacker minimises the metric). Candidates of a step differ by a word or a few characters, so
on most samples they answer alike: the difference between two candidates lives in a few samples.
A race scores every surviving candidate on the samples in one shared order, in rounds, and drops
a candidate as soon as the samples seen show, at the stated error rate, that it is worse than
another one. Whoever survives to the end is scored on every sample, so the candidate kept and its
score are exact; only which candidate is kept may differ from an exhaustive search, and only when
a test errs.

The test (one per ordered pair of arms, "i is worse than j"). For a pair, the per-sample paired
differences ``d = s_i - s_j`` lie in [-1, 1]; their mean over the N samples decides the pair.

* The samples come in two parts (``sample_order``). First the informative part, in a fixed order:
  the samples on which the clean prompt's answer was least sure (label scoring: the smallest
  log-probability margin between the best and the second label), where answers change. There no
  statistics are used: ``i`` is dropped against ``j`` only when even the most favourable outcome of
  every unseen sample could not save it (the exact bound of ``engine.measuring.early_stop``).
* Then the rest, in a seeded uniformly random order. Each pair runs a betting test (Waudby-Smith &
  Ramdas, "Estimating means of bounded random variables by betting", JRSS-B 2024, and
  "Confidence sequences for sampling without replacement", NeurIPS 2020): the null hypothesis is
  "i is not worse than j", i.e. the mean of ``d`` over all N samples is at most 0; given the
  informative part's exact sum, that is a bound on the mean of the rest, and under sampling
  without replacement the conditional mean of the next draw under the null is known. A capital
  process bets on ``d`` exceeding it (predictable bets sized by the running mean and variance,
  as their aGRAPA rule); under the null it is a non-negative supermartingale, so by Ville's
  inequality it ever reaches ``1/a`` with probability at most ``a``, however often one looks.
* Union bound over opponents: a race of K arms gives each pair ``a = error_rate / (K - 1)``. The
  true best arm is dropped only if one of its K - 1 tests against the others rejects a true null,
  so ``error_rate`` bounds the chance, per race, that the best candidate is not the one kept.
  With several equally good arms, keeping any of them is no error.

Arms the betting test cannot separate (near ties) run to the end and are compared exactly, so the
saving comes from clearly worse candidates. ``tests/test_racing.py`` checks the error rate on
simulated candidates over many seeds.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from promptrobust.attacks.base import Recipe

__all__ = ["DEFAULT_ERROR_RATE", "MEASURED_SHARE", "Race", "RacingSettings", "sample_order", "search_kind"]

#: The default chance, per race, that the best candidate is dropped (a union bound: an upper bound).
DEFAULT_ERROR_RATE = 0.05


def search_kind(recipe: Recipe) -> str:
    """How a recipe's search spends its calls: greedy (a word ranking, then a step per word), set
    (a given prompt set, every prompt scored: Semantic) or brute (a fixed candidate list)."""
    if recipe.edits_words:
        return "greedy"
    return "set" if recipe.prompt_set is not None else "brute"


#: Share of exhaustive scoring's model calls a race at the default error rate needed, per kind of
#: search, on the recorded exhaustive attacks of ``bench/results/racing.md`` (``python bench/racing.py
#: replay``): what ``pre run --dry-run`` and ``pre sweep --dry-run`` estimate racing at. A prompt set
#: is always scored whole (its mean over the set is the paper's statistic). Measured on 30 attacks of two
#: models, 24 at 200 samples and six at 500 (racing.json's ``share_by_search``): a rough guide, not a
#: promise.
MEASURED_SHARE: dict[str, float] = {"greedy": 0.849, "brute": 0.742, "set": 1.0}


@dataclass(frozen=True)
class RacingSettings:
    """How a search step's candidates are raced (``AttackSettings.search == "racing"``)."""

    error_rate: float = DEFAULT_ERROR_RATE
    """Per race, the most likely chance that the best candidate is dropped (union bound over the
    other arms; every look counted: the tests are anytime-valid)."""
    tolerance: float = 0.0
    """Stop a race once no surviving candidate can be better than the leader by more than this much
    of the metric (0: only a clear loss drops a candidate, near ties run to the end and are compared
    exactly). The error rate then bounds keeping a candidate more than ``tolerance`` worse than the best."""
    informative_fraction: float = 0.25
    """Share of the samples scored first, in order of the least sure answers of the prompt to beat
    (label scoring only; generation has no margin and starts the random part at once); no statistics
    are used on them, only the exact bound. The least sure quarter first needed 70,640 instead of
    75,036 calls on the 500-sample records and 73,080 instead of 74,592 on the 200-sample ones,
    every step choosing as exhaustive scoring (bench/results/racing.md); 0: every sample in random order."""
    round_size: int = 8
    """Samples each surviving arm is scored on per round (one batch of requests per round)."""

    def __post_init__(self) -> None:
        if not (isinstance(self.error_rate, float) and 0.0 < self.error_rate < 1.0):
            raise ValueError(f"error_rate must be a fraction between 0 and 1, e.g. 0.05 (got {self.error_rate!r})")
        if not (0.0 <= self.tolerance < 1.0):
            raise ValueError(f"tolerance must be between 0 and 1, e.g. 0.01 (got {self.tolerance!r})")
        if not (0.0 <= self.informative_fraction <= 1.0):
            raise ValueError(f"informative_fraction must be between 0 and 1 (got {self.informative_fraction!r})")
        if not (isinstance(self.round_size, int) and self.round_size >= 1):
            raise ValueError(f"round_size must be a whole number >= 1 (got {self.round_size!r})")

    def describe(self) -> str:
        """How records and reports name this search evaluation."""
        within = f", within {self.tolerance:g}" if self.tolerance else ""
        return f"racing (error rate {self.error_rate:g} per step{within})"


def sample_order(count: int, margins: Sequence[float] | None, settings: RacingSettings, seed: int) -> tuple[list[int], int]:
    """The order samples are scored in, and how many of its first ones are the informative part.

    ``margins``: the clean prompt's label margin per sample (smaller: less sure); None (generation):
    no informative part. The rest follows in a seeded uniformly random order (the tests need it)."""
    indices = list(range(count))
    informative: list[int] = []
    if margins is not None and settings.informative_fraction > 0:
        if len(margins) != count:
            raise ValueError(f"{len(margins)} margins for {count} samples")
        size = int(round(settings.informative_fraction * count))
        informative = sorted(indices, key=lambda i: (margins[i], i))[:size]
    chosen = set(informative)
    rest = [i for i in indices if i not in chosen]
    random.Random(seed).shuffle(rest)
    return informative + rest, len(informative)


class _PairTests:
    """The betting tests "the mean of d_ij over all N samples is at most ``null``" for every ordered
    pair (i, j) of arms, run over the random part of the order (see the module docstring)."""

    def __init__(self, arms: int, total: int, exact_prefix: int, null: float, level: float) -> None:
        self.total, self.exact_prefix, self.null = total, exact_prefix, null
        self.threshold = math.log(1.0 / level)
        self.log_capital = np.zeros((arms, arms))
        self.rejected = np.zeros((arms, arms), dtype=bool)
        self.sum = np.zeros((arms, arms))  # sum of d over the random part taken so far
        self.sum_sq = np.zeros((arms, arms))

    def advance(self, idx: np.ndarray, block: np.ndarray, first: int, last: int) -> None:
        """Take the samples at positions ``first``..``last - 1`` of the order for the arms ``idx``
        (``block``: their scores from position 0, arms x positions)."""
        n_rest = self.total - self.exact_prefix
        prefix = block[:, : self.exact_prefix].sum(axis=1)
        prefix_diff = prefix[:, None] - prefix[None, :]  # sum of d over the informative part, per pair
        sub = np.ix_(idx, idx)
        log_cap, rejected = self.log_capital[sub], self.rejected[sub]
        s, s2 = self.sum[sub], self.sum_sq[sub]
        budget = self.total * self.null - prefix_diff  # what the random part may sum to under the null
        for t in range(first, last):
            x = block[:, t][:, None] - block[:, t][None, :]  # d for every pair at this sample
            taken = t - self.exact_prefix  # draws of the random part before this one
            null_mean = (budget - s) / (n_rest - taken)  # the next draw's conditional mean under the null, at most
            mean = s / taken if taken else np.zeros_like(s)
            var = np.maximum(s2 / taken - mean**2, 0.0) if taken else np.full_like(s, 0.25)
            gap = mean - null_mean
            bet = np.where(gap > 0, gap / (var + gap**2 + 1e-12), 0.0)  # aGRAPA: the growth-optimal bet, approximately
            # 1 + bet * (x - null_mean) stays > 0 for every x >= -1: bets are capped at 3/4 of the room.
            room = np.where(null_mean > -1, 0.75 / np.maximum(1.0 + null_mean, 1e-12), 0.0)
            bet = np.clip(bet, 0.0, room)
            growth = np.log1p(np.maximum(bet * (x - null_mean), -0.999999))
            impossible = null_mean < -1  # the null cannot hold: the rest would have to average below -1
            log_cap = np.where(impossible, np.inf, log_cap + growth)
            rejected |= log_cap >= self.threshold
            s, s2 = s + x, s2 + x * x
        np.fill_diagonal(rejected, False)
        self.log_capital[sub], self.rejected[sub] = log_cap, rejected
        self.sum[sub], self.sum_sq[sub] = s, s2


@dataclass
class Race:
    """One race over ``arms`` arms on ``total`` samples taken in a fixed order whose first
    ``exact_prefix`` are the informative part (``sample_order``).

    Feed each arm's per-sample scores (in [0, 1], in the order's sequence) with ``observe``; an arm
    known in advance (the prompt a step must beat) is observed whole at once. ``drop`` applies the
    tests; ``needed`` says what each surviving arm is scored on next; the race is over when
    ``needed`` is empty. Then ``winner`` is the arm to keep: the one survivor, the exact best when
    every survivor was scored on every sample (ties: the earlier arm, as exhaustive search), or,
    with a ``tolerance``, the leader once no survivor can still be better than it by more than the
    tolerance.

    Guarantee (``tests/test_racing.py`` simulates it): with probability at least ``1 - error_rate``
    the winner's mean over all samples is within ``tolerance`` of the best arm's (with tolerance 0:
    it is a best arm)."""

    arms: int
    total: int
    exact_prefix: int
    error_rate: float = DEFAULT_ERROR_RATE
    tolerance: float = 0.0
    keep: int = 1
    """How many arms to keep: the best (1, a search step) or the best ``keep`` (the prompts to attack)."""
    scores: list[list[float]] = field(default_factory=list)
    alive: list[bool] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.arms < 1 or self.total < 1:
            raise ValueError("a race needs at least one arm and one sample")
        if not 1 <= self.keep:
            raise ValueError("a race keeps at least one arm")
        if self.tolerance > 0 and self.keep > 1:
            raise ValueError("a tolerance applies to a race that keeps one arm")
        if not 0 <= self.exact_prefix <= self.total:
            raise ValueError("the informative part cannot be longer than the samples")
        if not 0.0 <= self.tolerance < 1.0:
            raise ValueError(f"tolerance must be between 0 and 1 (got {self.tolerance!r})")
        self.scores = [[] for _ in range(self.arms)]
        self.alive = [True] * self.arms
        opponents = max(self.arms - 1, 1)
        # Union bound: each of the ``keep`` best arms has K - 1 opponents; with a tolerance, half the
        # error for dropping the best, half for stopping on a leader more than the tolerance worse.
        share = 2 if self.tolerance > 0 else 1
        level = self.error_rate / (share * self.keep * opponents)
        self._worse = _PairTests(self.arms, self.total, self.exact_prefix, 0.0, level)
        self._close = _PairTests(self.arms, self.total, self.exact_prefix, -self.tolerance, level) if self.tolerance > 0 else None
        self._tested = 0  # positions in the order the tests have taken (shared by the surviving arms)
        self.stopped_on: int | None = None  # the leader the tolerance stopped on, if it did

    # -- what was seen --------------------------------------------------------------------------
    def observe(self, arm: int, scores: Sequence[float]) -> None:
        """The next scores of ``arm`` in the sample order (appended)."""
        if len(self.scores[arm]) + len(scores) > self.total:
            raise ValueError("more scores than samples")
        self.scores[arm].extend(float(x) for x in scores)

    def seen(self, arm: int) -> int:
        return len(self.scores[arm])

    @property
    def survivors(self) -> list[int]:
        return [i for i, a in enumerate(self.alive) if a]

    @property
    def over(self) -> bool:
        alive = self.survivors
        return self.stopped_on is not None or len(alive) <= self.keep or all(self.seen(i) == self.total for i in alive)

    def needed(self, round_size: int) -> dict[int, range]:
        """For each surviving arm behind, the samples (positions in the order) it is scored on next:
        one round past the arm furthest behind, so that the arms share samples (paired differences
        need both); an arm known ahead (the prompt to beat) waits. Empty once the race is over."""
        if self.over:
            return {}
        alive = self.survivors
        target = min(self.total, min(self.seen(i) for i in alive) + round_size)
        return {i: range(self.seen(i), target) for i in alive if self.seen(i) < target}

    def winner(self) -> int:
        """The arm to keep (call once the race is over); see the class docstring."""
        return self.winners()[0]

    def winners(self) -> list[int]:
        """The ``keep`` arms kept, best first (call once the race is over)."""
        if self.stopped_on is not None:
            return [self.stopped_on]
        return self._ranked(self.survivors)[: self.keep]

    def _ranked(self, arms: list[int]) -> list[int]:
        shared = min(self.seen(i) for i in arms)
        return sorted(arms, key=lambda i: (math.fsum(self.scores[i][:shared]), i))

    # -- the tests -------------------------------------------------------------------------------
    def drop(self) -> list[int]:
        """Apply every test on the samples all surviving arms share; drop arms shown worse than
        another (alive or not); stop on the leader when the tolerance allows. Returns the arms dropped now."""
        alive = self.survivors
        if len(alive) <= self.keep or self.stopped_on is not None:
            return []
        shared = min(self.seen(i) for i in alive)
        first = max(self._tested, self.exact_prefix)
        if shared > first:
            idx = np.array(alive)
            block = np.array([self.scores[i][:shared] for i in alive])
            for tests in (self._worse, self._close):
                if tests is not None:
                    tests.advance(idx, block, first, shared)
        self._tested = max(self._tested, shared)
        dropped = [i for i in alive if self._shown_worse(i, alive, shared)]
        if len(alive) - len(dropped) < self.keep:  # never keep fewer than asked: the best on the shared samples stay
            for i in self._ranked(alive)[: self.keep]:
                if i in dropped:
                    dropped.remove(i)
        for i in dropped:
            self.alive[i] = False
        self._maybe_stop(shared)
        return dropped

    def _shown_worse(self, i: int, alive: list[int], shared: int) -> bool:
        """Shown worse than ``keep`` other arms: exactly (even if every unseen sample went ``i``'s way
        it ends above a surviving arm, or ties with an earlier one, which wins ties) or by a betting test."""
        unseen = self.total - shared
        si = math.fsum(self.scores[i][:shared])
        beaten_by = {int(j) for j in np.flatnonzero(self._worse.rejected[i])}
        for j in alive:
            if j != i:
                diff = si - math.fsum(self.scores[j][:shared])
                if diff > unseen or (diff == unseen and j < i):
                    beaten_by.add(j)
        return len(beaten_by) >= self.keep

    def _maybe_stop(self, shared: int) -> None:
        if self._close is None:
            return
        alive = self.survivors
        if len(alive) <= 1:
            return
        leader = min(alive, key=lambda i: (math.fsum(self.scores[i][:shared]), i))
        if all(self._close.rejected[i, leader] for i in alive if i != leader):
            self.stopped_on = leader
