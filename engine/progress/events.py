"""Progress events: what the engine says about long work, and the reporter that hears it.

The engine never draws anything. Long steps emit small frozen events into the
*current reporter* (a context variable, so concurrent sweep jobs and worker
threads each see the reporter of the call that started them). Every event
carries the *scope* it was emitted in (a sweep job's label, or ""), so
concurrent jobs stay apart.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

#: The logger attack code reports fallbacks on (``logging`` only: attacks do not import the engine).
FALLBACK_LOGGER = "promptrobust.fallback"

#: What makes sweep jobs alike, most telling first: (attack, model, dataset, shots). Finished
#: jobs of the same shape predict what the others will ask; failing that, those of the same attack.
JobShape = tuple[str, ...]


@runtime_checkable
class Counters(Protocol):
    """What ``watch`` polls: a scheduler's running totals (``SchedulerStats`` has them)."""

    @property
    def completed(self) -> float: ...  # requests answered (any source)

    @property
    def cache_hits(self) -> float: ...  # answered from the persistent cache, at once

    @property
    def backend_requests(self) -> float: ...  # answered by the model (these take time)


@dataclass(frozen=True)
class Phase:
    """A new step began (converting the model, ranking prompts, attack X on prompt Y)."""

    text: str
    scope: str = ""
    within: bool = False  # a step inside the current phase (loading the model): the phase resumes after it
    line: bool = True  # said on a line of its own; False: only shown in the status line (a step too short to log)


@dataclass(frozen=True)
class PhaseEnd:
    """The step started by ``Phase(within=True)`` is over: the phase before it resumes (no line)."""

    scope: str = ""


@dataclass(frozen=True)
class PhaseDone:
    """The current phase's work is over (an attack ended): what it projected is dropped."""

    scope: str = ""


@dataclass(frozen=True)
class Planned:
    """``requests`` more model requests are expected (negative: fewer than announced), of which
    ``cached`` are expected from the cache (an attack re-scoring its clean prompt)."""

    requests: int
    scope: str = ""
    cached: int = 0
    bound: bool = False  # announced up front as the most the work can ask (``reserve``)


@dataclass(frozen=True)
class SearchStep:
    """Where an attack's search is. ``position`` of ``positions`` (words) is None for set searches."""

    position: int | None
    positions: int | None
    candidates: int
    clean_score: float | None
    best_score: float | None
    requests: int = 0  # samples the search has had scored so far (for projecting the rest)
    scoring: int = 0  # candidates being scored right now
    budget: int | None = None  # the most candidates this search may try (None: unlimited)
    reserved: int = 0  # requests announced up front for this attack and not asked yet (``reserve``)
    scope: str = ""

    @property
    def best_pdr(self) -> float | None:
        if self.clean_score is None or self.best_score is None or self.clean_score <= 0:
            return None
        return 1.0 - self.best_score / self.clean_score


@dataclass(frozen=True)
class Jobs:
    """Sweep jobs finished of all; ``shapes``, given once at the start, says what every job is."""

    done: int
    total: int
    shapes: tuple[JobShape, ...] = ()


@dataclass(frozen=True)
class JobStarted:
    scope: str
    shape: JobShape


@dataclass(frozen=True)
class JobEnded:
    """A job's scope closed; ``ok`` False when it raised (its cost then predicts nothing)."""

    scope: str
    ok: bool = True


@dataclass(frozen=True)
class Work:
    """How far a step that is not model requests has come: ``done`` of ``total`` ``unit``
    (bytes of a model being converted, forward passes of an importance analysis)."""

    label: str
    done: float
    total: float | None
    unit: str = ""
    scope: str = ""
    detail: str = ""  # which step of the work is running (converting a model: "reading the GGUF, 2 of 3")


@dataclass(frozen=True)
class Watch:
    stats: Counters


@dataclass(frozen=True)
class Fallback:
    key: str
    message: str


@dataclass(frozen=True)
class LibraryWarning:
    """A third-party library warned something that may matter (``library_warnings``): said once,
    in one line, like a fallback."""

    key: str
    message: str


Event = (Phase | PhaseEnd | PhaseDone | Planned | SearchStep | Jobs | JobStarted | JobEnded | Work | Watch | Fallback
         | LibraryWarning)


class Reporter(Protocol):
    def emit(self, event: Event) -> None: ...


class NullReporter:
    """Hears nothing (the default outside the API and the CLI), except fallbacks and library
    warnings: a substitute resource is always said, once per process, on stderr."""

    said: set[str] = set()

    def emit(self, event: Event) -> None:
        if isinstance(event, (Fallback, LibraryWarning)) and event.key not in NullReporter.said:
            NullReporter.said.add(event.key)
            print(f"pre: {said_as(event)}", file=sys.stderr)


def said_as(event: Fallback | LibraryWarning) -> str:
    """The line a fallback or a library warning is said in (after ``pre: ``)."""
    return f"fallback: {event.message}" if isinstance(event, Fallback) else f"warning: {event.message}"


_current: contextvars.ContextVar[Reporter] = contextvars.ContextVar("promptrobust_progress", default=NullReporter())
_scope: contextvars.ContextVar[str] = contextvars.ContextVar("promptrobust_progress_scope", default="")


def current() -> Reporter:
    return _current.get()


def active() -> bool:
    """Whether a reporter listens (else phase lines go nowhere and a caller may print its own)."""
    return not isinstance(_current.get(), NullReporter)


@contextlib.contextmanager
def use(reporter: Reporter) -> Iterator[Reporter]:
    """Make ``reporter`` hear the events of everything run inside (tasks and threads started inside too)."""
    token = _current.set(reporter)
    try:
        yield reporter
    finally:
        _current.reset(token)


@contextlib.contextmanager
def scope(label: str) -> Iterator[None]:
    """Label the events emitted inside, so concurrent work stays apart."""
    outer = _scope.get()
    token = _scope.set(f"{outer} | {label}" if outer else label)
    try:
        yield
    finally:
        _scope.reset(token)


@contextlib.contextmanager
def job(label: str, shape: JobShape) -> Iterator[None]:
    """A sweep job: its events carry ``label`` as their scope, and its start and end are said,
    so what it asked in all (its measured cost) can predict the jobs of the same ``shape``."""
    with scope(label):
        where = _scope.get()
        _emit(JobStarted(where, tuple(shape)))
        ok = False
        try:
            yield
            ok = True
        finally:
            _emit(JobEnded(where, ok))


def _emit(event: Event) -> None:
    try:
        _current.get().emit(event)
    except Exception:  # noqa: BLE001 - progress must never break the work it reports
        pass


def phase(text: str, *, line: bool = True) -> None:
    """A new step began. ``line`` False: shown in the status line only, not said on a line of its
    own (preparing a run: a log gets no line for it, a terminal shows what is happening)."""
    _emit(Phase(text, _scope.get(), line=line))


def phase_done() -> None:
    """The current phase's work is over (e.g. an attack returned): its projection goes."""
    _emit(PhaseDone(_scope.get()))


@contextlib.contextmanager
def during(text: str, *, line: bool = True) -> Iterator[None]:
    """A step inside whatever phase is running (e.g. loading the model on the first cache miss):
    said as a phase (``line`` False: in the status line only), and the phase it interrupted is
    shown again when it is over. Its time is not counted when measuring the request rate (it is
    not spent on requests)."""
    _emit(Phase(text, _scope.get(), within=True, line=line))
    try:
        yield
    finally:
        _emit(PhaseEnd(_scope.get()))


class _Reservation:
    """Requests announced up front, not yet claimed by the work inside. A plain reservation
    (``reserve``) is claimed by every plan inside; a pool (``reserve_pool``) only by
    reservations of its kind. ``cached``: how many of the requests the cache will answer."""

    def __init__(self, requests: int, cached: int, pool: str | None, after_search: int = 0) -> None:
        self.requests = self.left = int(requests)
        self.cached = int(cached)
        self.after_search = int(after_search)
        self.cached_claimed = 0  # a pool: the cached share of the reservations that claimed it
        self.pool = pool

    def absorb(self, requests: int, kind: str | None, cached: int) -> tuple[int, int]:
        """Claim what was already announced; returns what is still to announce (requests, cached)."""
        if requests <= 0 or (self.pool is not None and kind != self.pool):
            return requests, cached
        taken = min(requests, self.left)
        self.left -= taken
        cached_taken = min(cached, taken)
        self.cached_claimed += cached_taken
        return requests - taken, cached - cached_taken

    def for_search(self) -> int:
        """What it still holds for a search's candidates (not for what comes after the search)."""
        return max(0, self.left - self.after_search) if self.pool is None else 0

    def unused(self) -> tuple[int, int]:
        """(requests, cached) announced and never claimed. A plain reservation cannot tell which
        plans were the cached ones: its cached share counts as claimed once as many were."""
        if self.pool is not None:
            cached = self.cached - self.cached_claimed
        else:
            cached = self.cached - (self.requests - self.left)
        return self.left, max(0, min(cached, self.left))


_reserved: contextvars.ContextVar[_Reservation | None] = contextvars.ContextVar("promptrobust_progress_reserved", default=None)


def _announce(requests: int, kind: str | None, cached: int = 0, bound: bool = False) -> None:
    held = _reserved.get()
    if held is not None:
        requests, cached = held.absorb(requests, kind, cached)
    if requests:
        _emit(Planned(int(requests), _scope.get(), int(cached), bound))


def planned(requests: int) -> None:
    """``requests`` more (or, negative, fewer) model requests are expected."""
    _announce(requests, None)


@contextlib.contextmanager
def _reserving(requests: int, kind: str | None, pool: str | None, cached: int, after_search: int = 0) -> Iterator[None]:
    _announce(requests, kind, cached, bound=True)
    held = _Reservation(requests, cached, pool, after_search)
    token = _reserved.set(held)
    try:
        yield
    finally:
        _reserved.reset(token)
        left, cached_left = held.unused()
        if left:
            _emit(Planned(-left, _scope.get(), -cached_left, True))


def reserve(requests: int, *, kind: str | None = None, cached: int = 0,
            after_search: int = 0) -> contextlib.AbstractContextManager[None]:
    """Announce a phase's requests up front; what the work inside plans is counted against them,
    and whatever was not used is taken back at the end. ``kind`` (e.g. ``"ranking"``): the
    announcement is itself claimed from an enclosing ``reserve_pool`` of that kind. ``cached``:
    how many of them the cache will answer (at once: they take no time). ``after_search``: how
    many are for after an attack's search (re-scoring its result): a search's projection of
    its own remaining requests replaces the rest."""
    return _reserving(requests, kind, None, cached, after_search)


def reserve_pool(kind: str, requests: int, *, cached: int = 0) -> contextlib.AbstractContextManager[None]:
    """Announce up front the requests of every ``reserve(kind=kind)`` to come inside (a sweep:
    every cell's ranking). Only those claim it: a job's other plans inside stay its own."""
    return _reserving(requests, None, kind, cached)


def search_step(
    *,
    position: int | None,
    positions: int | None,
    candidates: int,
    clean_score: float | None,
    best_score: float | None,
    requests: int = 0,
    scoring: int = 0,
    budget: int | None = None,
) -> None:
    held = _reserved.get()
    reserved = held.for_search() if held is not None else 0  # what the search's projection replaces
    _emit(SearchStep(position, positions, candidates, clean_score, best_score, requests, scoring, budget, reserved,
                     _scope.get()))


def jobs(done: int, total: int, *, shapes: Sequence[JobShape] = ()) -> None:
    _emit(Jobs(done, total, tuple(tuple(s) for s in shapes)))


def work(label: str, done: float, total: float | None, unit: str = "", *, detail: str = "") -> None:
    """``done`` of ``total`` ``unit`` of a step that is not model requests (``total`` None: unknown;
    ``unit`` "%": a share of the whole work). Moves of one ``label`` are measured as one speed, so
    a work made of unlike steps reports them under one label (``detail`` says which step runs)."""
    _emit(Work(label, done, total, unit, _scope.get(), detail))


def watch(stats: object) -> None:
    """Poll ``stats`` (anything with ``Counters``' attributes, e.g. a ``SchedulerStats``) for requests done."""
    if isinstance(stats, Counters):
        _emit(Watch(stats))


def fallback(key: str, message: str) -> None:
    _emit(Fallback(key, message))


def library_warning(key: str, message: str) -> None:
    """A third-party warning worth a line (``library_warnings`` decides which)."""
    _emit(LibraryWarning(key, message))


class _FallbackHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        fallback(str(getattr(record, "fallback_key", record.getMessage())), record.getMessage())


def install_fallback_forwarding() -> None:
    """Forward the ``promptrobust.fallback`` logger (attack code) to the current reporter."""
    log = logging.getLogger(FALLBACK_LOGGER)
    if not any(isinstance(h, _FallbackHandler) for h in log.handlers):
        log.addHandler(_FallbackHandler())
        log.propagate = False
        log.setLevel(logging.INFO)
