"""How many model requests a run will ask in all: the ``Y`` of ``requests X/Y``.

Three sources, each corrected as the work goes on, so that ``Y`` ends at what
was really asked:

- *planned* requests (``progress.planned``): a scorer call announces the most
  it can ask, takes back a candidate's unasked samples the moment early
  stopping ends it, and settles the difference when it returns; an attack
  with a query budget announces its bound up front (``progress.reserve``:
  its budget's candidates on every sample), and what it did not use goes
  back when it ends;
- a search's *projection*: for a word search, the words still to walk times
  what a word has cost so far, never more than its budget still allows; for a
  set search (CheckList, StressTest), the candidates of its one call. It
  replaces what the attack's reservation still holds (usually less: a short
  prompt, or three StressTest candidates, end the search before the budget
  does) and is dropped when the attack ends (``progress.phase_done``);
- in a sweep, the *jobs not finished*. A finished job counts exactly what it
  asked; finished jobs of the same shape (else of the same attack) predict
  the others: a job whose own plan is a bound (a budget) is expected to ask
  the prediction or its bound, whichever is less, one without a bound the
  prediction or its own plan, whichever is more; a job that has not started
  and has no finished sibling, what its running siblings expect. At the last
  job the total is that job's own work and nothing else.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field

from promptrobust.engine.progress.events import (
    JobEnded,
    Jobs,
    JobShape,
    JobStarted,
    Phase,
    PhaseDone,
    Planned,
    SearchStep,
)


@dataclass
class _Search:
    """A search's cost so far, as its steps reported it (``SearchStep``)."""

    latest: SearchStep
    whole_set: bool = False  # a set search (brute force): one call scores every candidate it will try
    start_candidates: int = 0  # a word search, after ranking its words (position 0)
    start_requests: int = 0
    basis: SearchStep | None = None  # a word search's latest step whose candidates are all scored

    def _per_candidate(self) -> float:
        """Requests a candidate costs: measured over the words walked, else as the clean prompt's scoring."""
        basis = self.basis
        if basis is not None and basis.candidates > self.start_candidates:
            return (basis.requests - self.start_requests) / (basis.candidates - self.start_candidates)
        return self.latest.requests / (self.latest.candidates + 1)

    def _beyond(self) -> float:
        """Candidates the words after the current one will try: what a word has cost so far, never
        more than the budget leaves; with no word walked yet, what the budget leaves (0: unlimited)."""
        step, basis = self.latest, self.basis
        if self.whole_set or step.position is None or not step.positions:
            return 0.0
        budget_left = None if step.budget is None else max(0, step.budget - step.candidates - step.scoring)
        if basis is not None and basis.position:
            per_word = (basis.candidates - self.start_candidates) / basis.position
            candidates = max(0, step.positions - step.position) * per_word
            return candidates if budget_left is None else min(candidates, budget_left)
        return float(budget_left or 0)

    def correction(self) -> int:
        """What the search changes in the planned total. Its attack's reservation (``reserved``)
        holds what the search may still ask: the search's own projection replaces it. The call it
        is about to make (``scoring``) is planned by the scorer; inside a reservation that plan is
        absorbed, so the projection counts it, outside it announces itself."""
        step = self.latest
        per_candidate = self._per_candidate()
        projected = self._beyond() * per_candidate
        if step.reserved:
            projected += step.scoring * per_candidate
        return int(round(projected)) - step.reserved


@dataclass
class _Job:
    shape: JobShape
    finished: bool = False
    ok: bool = True


@dataclass
class RequestTotal:
    """Folds planning events into the expected total of requests."""

    planned: dict[str, int] = field(default_factory=dict)  # by scope
    bounded: set[str] = field(default_factory=set)  # scopes whose plan is an upper bound (a reservation)
    cached: int = 0  # of all planned, how many the cache is expected to answer
    searches: dict[str, _Search] = field(default_factory=dict)  # by scope
    jobs: dict[str, _Job] = field(default_factory=dict)  # by scope (a sweep job's label)
    shapes: Counter[JobShape] = field(default_factory=Counter)  # every job of the sweep, by shape

    def apply(self, event: object) -> None:
        if isinstance(event, Planned):
            self.planned[event.scope] = self.planned.get(event.scope, 0) + event.requests
            self.cached += event.cached
            if event.bound and event.requests > 0:
                self.bounded.add(event.scope)
        elif isinstance(event, SearchStep):
            self._search_step(event)
        elif isinstance(event, (PhaseDone, Phase)):
            if isinstance(event, PhaseDone) or not event.within:
                self.searches.pop(event.scope, None)
        elif isinstance(event, Jobs):
            if event.shapes:
                self.shapes = Counter(event.shapes)
        elif isinstance(event, JobStarted):
            self.jobs[event.scope] = _Job(event.shape)
        elif isinstance(event, JobEnded):
            job = self.jobs.get(event.scope)
            if job is not None:
                job.finished, job.ok = True, event.ok
            self.searches.pop(event.scope, None)

    def _search_step(self, step: SearchStep) -> None:
        search = self.searches.get(step.scope)
        if step.position is None:  # a set search: what it says is all there is
            self.searches[step.scope] = _Search(step, whole_set=True)
        elif search is None or search.whole_set or step.position == 0:
            self.searches[step.scope] = _Search(step, start_candidates=step.candidates, start_requests=step.requests,
                                                basis=None if step.scoring else step)
        else:
            search.latest = step
            if not step.scoring:  # after a word's candidates came back: its cost is known
                search.basis = step

    def _own(self, scope: str) -> int:
        """What a scope has planned so far, its search's projection in place of its reservation."""
        search = self.searches.get(scope)
        return self.planned.get(scope, 0) + (search.correction() if search is not None else 0)

    def _predicted(self, shape: JobShape, *, any_job: bool = False) -> float | None:
        """What a job of ``shape`` will ask in all: the mean of finished jobs of the same shape,
        else of the same attack (``shape[0]``), else (``any_job``) of any; None when none has finished."""
        ways = (lambda s: s == shape, lambda s: s[:1] == shape[:1]) + ((lambda s: True,) if any_job else ())
        for alike in ways:
            costs = [self.planned.get(scope, 0) for scope, job in self.jobs.items()
                     if job.finished and job.ok and alike(job.shape)]
            if costs:
                return statistics.fmean(costs)
        return None

    def _expected(self, scope: str, job: _Job) -> float:
        """A running job's expected total."""
        own = self._own(scope)
        predicted = self._predicted(job.shape)
        if predicted is None:
            return own
        return min(own, predicted) if scope in self.bounded else max(own, predicted)

    def _waiting(self, shape: JobShape) -> float:
        """A job that has not started: the prediction from finished jobs of its shape or attack, else
        what running jobs of its shape (else of its attack) expect, else the mean of any finished
        or running job."""
        predicted = self._predicted(shape)
        if predicted is not None:
            return predicted
        running = [(scope, job) for scope, job in self.jobs.items() if not job.finished]
        for alike in (lambda s: s == shape, lambda s: s[:1] == shape[:1]):
            expected = [self._expected(scope, job) for scope, job in running if alike(job.shape)]
            if expected:
                return statistics.fmean(expected)
        predicted = self._predicted(shape, any_job=True)
        if predicted is not None:
            return predicted
        expected = [self._expected(scope, job) for scope, job in running]
        return statistics.fmean(expected) if expected else 0.0

    def total(self) -> int:
        total = 0.0
        for scope in set(self.planned) | set(self.searches):
            if scope not in self.jobs:
                total += self._own(scope)
        started: Counter[JobShape] = Counter()
        for scope, job in self.jobs.items():
            started[job.shape] += 1
            total += self.planned.get(scope, 0) if job.finished else self._expected(scope, job)
        for shape, count in self.shapes.items():
            waiting = count - started[shape]
            if waiting > 0:
                total += waiting * self._waiting(shape)
        return int(round(total))
