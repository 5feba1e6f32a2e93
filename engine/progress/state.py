"""Events and polled counters folded into a ``Status``: what a progress line shows.

``ProgressState`` hears every event (``apply``) and, at each look
(``status``), reads the watched schedulers' counters: requests done (cache
hits apart, answered at once) of the expected total (``total.RequestTotal``),
the rate of requests actually sent and the ETA (``rate.SendRate``), and the
progress of a step that is not model requests (``Work``: converting a model,
an importance analysis) with its own ETA from its own measured speed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from promptrobust.engine.progress.events import (
    Counters,
    Event,
    Fallback,
    JobEnded,
    Jobs,
    LibraryWarning,
    Phase,
    PhaseDone,
    PhaseEnd,
    SearchStep,
    Watch,
    Work,
)
from promptrobust.engine.progress.rate import SendRate
from promptrobust.engine.progress.total import RequestTotal


@dataclass(frozen=True)
class WorkStatus:
    """A step's own progress: ``done`` of ``total`` ``unit``, and its ETA (None: not yet measured)."""

    label: str
    done: float
    total: float | None
    unit: str
    eta: float | None
    detail: str = ""


@dataclass(frozen=True)
class Status:
    phase: str
    step: SearchStep | None
    jobs: tuple[int, int] | None
    done: int
    total: int
    cache_hits: int
    sent: int
    rate: float | None  # requests actually sent per second (None: no answer has arrived yet)
    eta: float | None  # seconds left; None while estimating (before any answer arrived)
    elapsed: float
    work: WorkStatus | None = None
    usd: float | None = None  # what the answers so far cost (a priced API model), else None


class _WorkTrack:
    """A ``Work`` counter with a rate of its own, measured between its moves as the request
    rate is between arrivals (so its ETA counts down between two moves)."""

    def __init__(self, event: Work, now: float) -> None:
        self.event = event
        self.rate = SendRate()
        self.rate.observe(now, event.done, busy=True)

    def move(self, event: Work, now: float) -> None:
        self.event = event
        self.rate.observe(now, event.done, busy=True)

    def status(self, now: float) -> WorkStatus:
        w = self.event
        eta = None if w.total is None else self.rate.eta(now, w.total - w.done)
        return WorkStatus(w.label, w.done, w.total, w.unit, eta, w.detail)


RecordHook = Callable[[float, Event | None, list[tuple[int, int, int]] | None], None]


class ProgressState:
    """Folds events and polled scheduler counters into a ``Status``.

    ``record``: called with (seconds since start, event, None) for every event and with
    (seconds, None, counters) whenever the counters changed (``recording.Recorder``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, *, record: RecordHook | None = None) -> None:
        self.clock = clock
        self.started = clock()
        self.phase = ""
        self.step: SearchStep | None = None
        self.jobs: tuple[int, int] | None = None
        self.fallbacks: dict[str, str] = {}
        self.total = RequestTotal()
        self.rate = SendRate()
        self._record = record
        self._last_counts: list[tuple[int, int, int]] | None = None
        self._stats: list[tuple[Counters, tuple[int, int, int]]] = []
        self._usd_base: dict[int, float] = {}  # each watched scheduler's dollars when first watched
        self._resume: dict[str, tuple[str, SearchStep | None]] = {}
        self._loading: set[str] = set()  # scopes inside a ``during`` step (the model loads)
        self._work: dict[str, _WorkTrack] = {}
        self._work_scope: str | None = None  # whose work the line shows (the latest to move)
        self._lock = threading.Lock()

    def apply(self, event: Event) -> bool:
        """Fold one event in; True when it is worth a line of its own (a phase, a first fallback)."""
        with self._lock:
            now = self.clock()
            if self._record is not None:
                self._record(now - self.started, event, None)
            self.total.apply(event)
            notable = self._fold(event, now)
            # Work appearing or ending, a model starting or ending to load: the busy clock of the
            # rate starts or stops now, not at the next look.
            self._look(now)
            return notable

    def _fold(self, event: Event, now: float) -> bool:
        if isinstance(event, Phase):
            if event.within:
                self._resume[event.scope] = (self.phase, self.step)
                self._loading.add(event.scope)
            self._work.pop(event.scope, None)
            self.phase = f"{event.scope}: {event.text}" if event.scope else event.text
            self.step = None
            return True
        if isinstance(event, PhaseEnd):
            self._loading.discard(event.scope)
            self._work.pop(event.scope, None)
            if event.scope in self._resume:
                self.phase, self.step = self._resume.pop(event.scope)
        elif isinstance(event, (PhaseDone, JobEnded)):
            self._work.pop(event.scope, None)
        elif isinstance(event, SearchStep):
            self.step = event
        elif isinstance(event, Work):
            track = self._work.get(event.scope)
            if track is None or track.event.label != event.label or event.done < track.event.done:
                self._work[event.scope] = _WorkTrack(event, now)
            else:
                track.move(event, now)
            self._work_scope = event.scope
        elif isinstance(event, Jobs):
            self.jobs = (event.done, event.total)
            return True
        elif isinstance(event, Watch):
            if all(s is not event.stats for s, _ in self._stats):
                self._stats.append((event.stats, _counts(event.stats)))
                self._usd_base[id(event.stats)] = _usd(event.stats) or 0.0
        elif isinstance(event, (Fallback, LibraryWarning)):
            if event.key not in self.fallbacks:
                self.fallbacks[event.key] = event.message
                return True
        return False

    def counts(self) -> tuple[int, int, int]:
        """(answered, cache hits, sent) since each scheduler was first watched."""
        done = hits = sent = 0
        raw = []
        for stats, base in self._stats:
            now = _counts(stats)
            raw.append(now)
            hits += now[1] - base[1]
            sent += now[2] - base[2]
            # An answer the backend gave counts as done before its caller collects it.
            done += max(now[0] - base[0], (now[1] - base[1]) + (now[2] - base[2]))
        if self._record is not None and raw != self._last_counts:
            self._last_counts = raw
            self._record(self.clock() - self.started, None, raw)
        return done, hits, sent

    def spent(self) -> float | None:
        """US dollars the watched schedulers' answers cost since first watched (None: none is priced)."""
        priced = [(stats, usd) for stats, _ in self._stats if (usd := _usd(stats)) is not None]
        if not priced:
            return None
        return sum(usd - self._usd_base.get(id(stats), 0.0) for stats, usd in priced)

    def _look(self, now: float) -> tuple[int, int, int, int]:
        """Read the counters and tell the rate: (done, hits, sent, total)."""
        done, hits, sent = self.counts()
        total = max(self.total.total(), done)
        self.rate.observe(now, sent, busy=total > done and not self._loading)
        return done, hits, sent, total

    def status(self) -> Status:
        with self._lock:
            now = self.clock()
            done, hits, sent, total = self._look(now)
            # Cache hits come back at once: the hits still expected take no time, and of the rest
            # only the share that had to be sent so far (apart from expected hits) will.
            expected_hits = max(0, self.total.cached - hits)
            other_hits = hits - min(hits, self.total.cached)
            send_share = sent / (sent + other_hits) if sent else 1.0
            eta = self.rate.eta(now, max(0, total - done - expected_hits) * send_share)
            work = None
            if self._work_scope is not None and self._work_scope in self._work:
                work = self._work[self._work_scope].status(now)
            return Status(self.phase, self.step, self.jobs, done, total, hits, sent,
                          self.rate.rate(now), eta, now - self.started, work, self.spent())


def _usd(stats: Counters) -> float | None:
    """A scheduler's dollars so far, where its counters know a price (``SchedulerStats.usd``)."""
    value = getattr(stats, "usd", None)
    return float(value) if isinstance(value, (int, float)) else None


def _counts(stats: Counters) -> tuple[int, int, int]:
    return int(stats.completed), int(stats.cache_hits), int(stats.backend_requests)
