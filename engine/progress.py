"""Progress of long work: events the engine emits, and who hears them.

The engine never draws anything. Long steps emit small events into the
*current reporter* (a context variable, so concurrent sweep jobs and worker
threads each see the reporter of the call that started them):

- ``phase(text)``: a new step began (converting the model, loading it,
  ranking prompts, attack X on prompt Y, a sweep job);
- ``planned(n)``: n more model requests are expected (negative: fewer than
  announced, e.g. early stopping ended candidates);
- ``search_step(...)``: where an attack's search is (word i of n, candidates
  tried, best score so far);
- ``jobs(done, total)``: sweep jobs finished;
- ``watch(stats)``: a scheduler whose counters (answered, cache hits, sent)
  are polled for requests done;
- ``fallback(key, message)``: a substitute resource was used (said once per
  reporter, i.e. once per run).

``ProgressState`` folds the events and counters into a ``Status`` (requests
done of total, cache hits apart, the rate of requests actually sent, an ETA
that reads "estimating" until it is stable); ``format_status`` makes it one
plain line. ``StreamReporter`` writes phase lines at once and a status line
every ``every`` seconds (a heartbeat thread, so it speaks even while the event
loop is busy loading a model); the CLI's renderer (``cli/progress.py``)
subclasses it to redraw one line on a terminal. The Python API installs a
``StreamReporter`` on stderr by default (``progress=False`` turns it off).

Attack code reports without importing the engine: its search calls the
scorer's optional ``search_step`` hook, and resource fallbacks are logged on
the ``promptrobust.fallback`` logger, which this module forwards.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO

#: Seconds between status lines without a terminal (``$PRE_PROGRESS_EVERY`` overrides).
HEARTBEAT_SECONDS = 30.0
EVERY_ENV = "PRE_PROGRESS_EVERY"
#: The logger attack code reports fallbacks on (``logging`` only: attacks do not import the engine).
FALLBACK_LOGGER = "promptrobust.fallback"

#: The ETA is shown only after requests have been sent for this long (``$PRE_PROGRESS_ETA_AFTER``) ...
ETA_MIN_SECONDS = 10.0
ETA_AFTER_ENV = "PRE_PROGRESS_ETA_AFTER"
#: ... and once this many raw estimates in a row agree within ``ETA_AGREE``.
ETA_AGREEING = 3
ETA_AGREE = 0.35
#: The send rate is measured over this many recent seconds.
RATE_WINDOW = 60.0


def heartbeat_seconds(default: float = HEARTBEAT_SECONDS, env: str = EVERY_ENV) -> float:
    """The status-line interval: ``$PRE_PROGRESS_EVERY`` seconds if set (0 = none), else ``default``."""
    raw = os.environ.get(env, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        return default
    return value if value >= 0 and math.isfinite(value) else default


# -- events ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    text: str
    scope: str = ""
    within: bool = False  # a step inside the current phase (loading the model): the phase resumes after it


@dataclass(frozen=True)
class PhaseEnd:
    """The step started by ``Phase(within=True)`` is over: the phase before it resumes (no line)."""

    scope: str = ""


@dataclass(frozen=True)
class Planned:
    requests: int


@dataclass(frozen=True)
class SearchStep:
    """Where an attack's search is. ``position`` of ``positions`` (words) is None for set searches."""

    position: int | None
    positions: int | None
    candidates: int
    clean_score: float | None
    best_score: float | None
    requests: int = 0  # requests the search has asked for so far (for projecting the rest)
    scoring: int = 0  # candidates being scored right now
    scope: str = ""

    @property
    def best_pdr(self) -> float | None:
        if self.clean_score is None or self.best_score is None or self.clean_score <= 0:
            return None
        return 1.0 - self.best_score / self.clean_score


@dataclass(frozen=True)
class Jobs:
    done: int
    total: int


@dataclass(frozen=True)
class Watch:
    stats: Any  # anything with completed, cache_hits, backend_requests attributes


@dataclass(frozen=True)
class Fallback:
    key: str
    message: str


Event = Phase | PhaseEnd | Planned | SearchStep | Jobs | Watch | Fallback


class Reporter(Protocol):
    def emit(self, event: Event) -> None: ...


class NullReporter:
    """Hears nothing (the default outside the API and the CLI), except fallbacks: a substitute
    resource is always said, once per process, on stderr."""

    said: set[str] = set()

    def emit(self, event: Event) -> None:
        if isinstance(event, Fallback) and event.key not in NullReporter.said:
            NullReporter.said.add(event.key)
            print(f"pre: fallback: {event.message}", file=sys.stderr)


_current: contextvars.ContextVar[Any] = contextvars.ContextVar("promptrobust_progress", default=NullReporter())
_scope: contextvars.ContextVar[str] = contextvars.ContextVar("promptrobust_progress_scope", default="")


def current() -> Any:
    return _current.get()


def active() -> bool:
    """Whether a reporter listens (else phase lines go nowhere and a caller may print its own)."""
    return not isinstance(_current.get(), NullReporter)


@contextlib.contextmanager
def use(reporter: Any) -> Iterator[Any]:
    """Make ``reporter`` hear the events of everything run inside (tasks and threads started inside too)."""
    token = _current.set(reporter)
    try:
        yield reporter
    finally:
        _current.reset(token)


@contextlib.contextmanager
def scope(label: str) -> Iterator[None]:
    """Label the events emitted inside (e.g. a sweep job), so concurrent jobs stay apart."""
    outer = _scope.get()
    token = _scope.set(f"{outer} | {label}" if outer else label)
    try:
        yield
    finally:
        _scope.reset(token)


def _emit(event: Event) -> None:
    try:
        _current.get().emit(event)
    except Exception:  # noqa: BLE001 - progress must never break the work it reports
        pass


def phase(text: str) -> None:
    _emit(Phase(text, _scope.get()))


@contextlib.contextmanager
def during(text: str) -> Iterator[None]:
    """A step inside whatever phase is running (e.g. loading the model on the first cache miss):
    said as a phase, and the phase it interrupted is shown again when it is over."""
    _emit(Phase(text, _scope.get(), within=True))
    try:
        yield
    finally:
        _emit(PhaseEnd(_scope.get()))


_reserved: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("promptrobust_progress_reserved", default=None)


def planned(requests: int) -> None:
    """``requests`` more (or, negative, fewer) model requests are expected."""
    left = _reserved.get()
    if left is not None and requests > 0:
        absorbed = min(requests, left[0])  # already announced by ``reserve``
        left[0] -= absorbed
        requests -= absorbed
    if requests:
        _emit(Planned(int(requests)))


@contextlib.contextmanager
def reserve(requests: int) -> Iterator[None]:
    """Announce a phase's requests up front; what the work inside plans is counted against them,
    and whatever was not used is taken back at the end."""
    planned(requests)
    left = [int(requests)]
    token = _reserved.set(left)
    try:
        yield
    finally:
        _reserved.reset(token)
        if left[0]:
            _emit(Planned(-left[0]))


def search_step(**fields: Any) -> None:
    _emit(SearchStep(scope=_scope.get(), **fields))


def jobs(done: int, total: int) -> None:
    _emit(Jobs(done, total))


def watch(stats: Any) -> None:
    _emit(Watch(stats))


def fallback(key: str, message: str) -> None:
    _emit(Fallback(key, message))


class _FallbackHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        fallback(str(getattr(record, "fallback_key", record.getMessage())), record.getMessage())


def _install_fallback_forwarding() -> None:
    log = logging.getLogger(FALLBACK_LOGGER)
    if not any(isinstance(h, _FallbackHandler) for h in log.handlers):
        log.addHandler(_FallbackHandler())
        log.propagate = False
        log.setLevel(logging.INFO)


_install_fallback_forwarding()


# -- state: events + counters -> status ---------------------------------------------------


@dataclass(frozen=True)
class Status:
    phase: str
    step: SearchStep | None
    jobs: tuple[int, int] | None
    done: int
    total: int
    cache_hits: int
    sent: int
    rate: float | None  # requests actually sent per second (None: none sent yet)
    eta: float | None  # seconds left; None while estimating
    elapsed: float


@dataclass
class _Eta:
    """Requests-sent rate over a recent window, and an ETA shown only once stable: after
    ``after`` seconds of sending, when the last ``ETA_AGREEING`` raw estimates (kept at least
    ``after / 10`` s apart, at most 1 s) agree within ``ETA_AGREE`` of their median."""

    after: float = ETA_MIN_SECONDS
    samples: deque[tuple[float, int]] = field(default_factory=deque)
    first_sent: float | None = None
    raw: deque[float] = field(default_factory=lambda: deque(maxlen=ETA_AGREEING))
    stable: bool = False
    last_raw: float = -1e9  # when the last raw estimate was kept

    def rate(self, now: float, sent: int) -> float | None:
        if sent <= 0:
            return None
        if self.first_sent is None:
            self.first_sent = now
            self.samples.append((now, sent))
            return None
        if not self.samples or self.samples[-1][1] != sent or now - self.samples[-1][0] >= 1.0:
            self.samples.append((now, sent))
        while len(self.samples) > 2 and now - self.samples[1][0] >= RATE_WINDOW:
            self.samples.popleft()
        t0, s0 = self.samples[0]
        if now <= t0 or sent <= s0:
            return None
        return (sent - s0) / (now - t0)

    def eta(self, now: float, remaining_to_send: float, rate: float | None) -> float | None:
        if remaining_to_send <= 0:
            return 0.0
        if rate is None or rate <= 0 or self.first_sent is None:
            return None
        estimate = remaining_to_send / rate
        if not self.stable:
            if now - self.last_raw >= min(1.0, self.after / 10):
                self.raw.append(estimate)
                self.last_raw = now
            if now - self.first_sent < self.after or len(self.raw) < ETA_AGREEING:
                return None
            mid = sorted(self.raw)[len(self.raw) // 2]
            if mid <= 0 or any(abs(x - mid) > ETA_AGREE * mid for x in self.raw):
                return None
            self.stable = True
        return estimate


class ProgressState:
    """Folds events and polled scheduler counters into a ``Status``."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started = clock()
        self.phase = ""
        self.step: SearchStep | None = None
        self.jobs: tuple[int, int] | None = None
        self.planned = 0
        self.fallbacks: dict[str, str] = {}
        self._stats: list[tuple[Any, tuple[int, int, int]]] = []
        self._steps: dict[str, SearchStep] = {}
        self._resume: dict[str, tuple[str, SearchStep | None]] = {}
        self._eta = _Eta(after=heartbeat_seconds(ETA_MIN_SECONDS, ETA_AFTER_ENV))
        self._lock = threading.Lock()

    def apply(self, event: Event) -> bool:
        """Fold one event in; True when it is worth a line of its own (a phase, a first fallback)."""
        with self._lock:
            if isinstance(event, Phase):
                if event.within:
                    self._resume[event.scope] = (self.phase, self.step)
                else:
                    self._steps.pop(event.scope, None)
                self.phase = f"{event.scope}: {event.text}" if event.scope else event.text
                self.step = None
                return True
            if isinstance(event, PhaseEnd):
                if event.scope in self._resume:
                    self.phase, self.step = self._resume.pop(event.scope)
                return False
            if isinstance(event, Planned):
                self.planned += event.requests
            elif isinstance(event, SearchStep):
                self._steps[event.scope] = event
                self.step = event
            elif isinstance(event, Jobs):
                self.jobs = (event.done, event.total)
                return True
            elif isinstance(event, Watch):
                if all(s is not event.stats for s, _ in self._stats):
                    self._stats.append((event.stats, _counts(event.stats)))
            elif isinstance(event, Fallback):
                if event.key not in self.fallbacks:
                    self.fallbacks[event.key] = event.message
                    return True
            return False

    def counts(self) -> tuple[int, int, int]:
        """(answered, cache hits, sent) since each scheduler was first watched."""
        done = hits = sent = 0
        for stats, base in self._stats:
            now = _counts(stats)
            hits += now[1] - base[1]
            sent += now[2] - base[2]
            # An answer the backend gave counts as done before its caller collects it.
            done += max(now[0] - base[0], (now[1] - base[1]) + (now[2] - base[2]))
        return done, hits, sent

    def _projected(self) -> int:
        """Requests a word search will still ask for, from its cost per word so far."""
        extra = 0
        for step in self._steps.values():
            if step.position and step.positions and step.position < step.positions:
                extra += int(step.requests / step.position * (step.positions - step.position))
        return extra

    def status(self) -> Status:
        with self._lock:
            now = self.clock()
            done, hits, sent = self.counts()
            total = max(self.planned + self._projected(), done)
            rate = self._eta.rate(now, sent)
            # Cache hits come back at once: only the share that had to be sent takes time.
            send_share = sent / max(sent + hits, 1) if sent else 1.0
            eta = self._eta.eta(now, (total - done) * send_share, rate)
            return Status(self.phase, self.step, self.jobs, done, total, hits, sent, rate, eta, now - self.started)


def _counts(stats: Any) -> tuple[int, int, int]:
    return int(stats.completed), int(stats.cache_hits), int(stats.backend_requests)


def format_duration(seconds: float) -> str:
    seconds = int(max(0.0, seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def format_step(step: SearchStep) -> str:
    parts = []
    if step.position is not None and step.positions:
        parts.append(f"word {step.position} of {step.positions}")
    parts.append(f"{step.candidates} candidates tried")
    if step.scoring:
        parts.append(f"{step.scoring} being scored")
    pdr = step.best_pdr
    if pdr is not None:
        parts.append(f"best PDR so far {pdr:.3f}")
    return ", ".join(parts)


def format_status(status: Status) -> str:
    """One plain line: jobs, requests (cache hits apart), send rate, ETA, elapsed, then the phase and
    the search position (numbers first: a terminal cuts the end of a long line)."""
    jobs = [f"jobs {status.jobs[0]}/{status.jobs[1]}"] if status.jobs is not None else []
    tail = [status.phase] if status.phase else []
    if status.step is not None:
        tail.append(format_step(status.step))
    if not status.total and not status.done:
        return " | ".join(jobs + tail + [f"starting | {format_duration(status.elapsed)} elapsed"])
    rate = "-" if status.rate is None else f"{status.rate:.1f}"
    if status.total and status.done >= status.total:
        eta = "00:00"
    elif status.eta is None:
        eta = "estimating"
    else:
        eta = format_duration(status.eta)
    total = f"/{status.total}" if status.total else ""
    counts = (
        f"requests {status.done}{total} (cache hits {status.cache_hits}, sent {status.sent}) | "
        f"sent {rate} req/s | ETA {eta} | {format_duration(status.elapsed)} elapsed"
    )
    return " | ".join(jobs + [counts] + tail)


# -- a reporter that writes lines --------------------------------------------------------------


class StreamReporter:
    """Phase lines at once, a status line every ``every`` seconds (0: never), fallbacks once.

    ``steps``: also a line per search step (a lively log; off for the heartbeat-only mode).
    """

    def __init__(self, stream: TextIO | None = None, *, every: float | None = None, steps: bool = False,
                 phases: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream
        self.every = heartbeat_seconds() if every is None else every
        self.steps = steps
        self.phases = phases
        self.state = ProgressState(clock)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._write_lock = threading.Lock()

    @property
    def out(self) -> TextIO:
        return self.stream if self.stream is not None else sys.stderr

    def write_line(self, text: str) -> None:
        with self._write_lock:
            try:
                self.out.write(text + "\n")
                self.out.flush()
            except (OSError, ValueError):
                pass

    def emit(self, event: Event) -> None:
        notable = self.state.apply(event)
        if isinstance(event, Fallback):
            if notable:
                self.write_line(f"pre: fallback: {event.message}")
        elif isinstance(event, Phase):
            if self.phases:
                self.write_line(f"pre: {self.state.phase}")
        elif isinstance(event, Jobs):
            if self.phases:
                self.write_line(f"pre: sweep jobs {event.done}/{event.total} done")
        elif isinstance(event, SearchStep) and self.steps:
            where = f"{event.scope}: " if event.scope else ""
            self.write_line(f"pre: {where}{format_step(event)}")

    def status_line(self) -> str:
        return format_status(self.state.status())

    def heartbeat(self) -> None:
        self.write_line(f"pre: {self.status_line()}")

    def _loop(self) -> None:
        """Print every ``every`` seconds; look at the counters at least once a second in between,
        so the ETA's samples do not depend on how often a line is printed."""
        tick = min(self.every, 1.0)
        last = time.monotonic()
        while not self._stop.wait(tick):
            if time.monotonic() - last >= self.every - 1e-3:
                last = time.monotonic()
                self.heartbeat()
            else:
                self.state.status()

    def start(self) -> "StreamReporter":
        if self.every > 0 and self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="pre-progress", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the heartbeat; a run that asked for requests ends with one last status line."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
            if self.phases and self.state.counts()[0]:
                self.heartbeat()

    def __enter__(self) -> "StreamReporter":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def reporting(reporter: Any) -> Iterator[Any]:
    """Install ``reporter`` for the work inside, starting and stopping its heartbeat."""
    start = getattr(reporter, "start", None)
    if start is not None:
        start()
    try:
        with use(reporter):
            yield reporter
    finally:
        stop = getattr(reporter, "stop", None)
        if stop is not None:
            stop()


def api_reporter(progress: bool | Any) -> Any:
    """What the Python API reports to: ``True`` (default) a ``StreamReporter`` on stderr with a
    line per step, ``False``/``None`` nothing, anything else is used as the reporter."""
    if progress is True:
        return StreamReporter(every=heartbeat_seconds(10.0), steps=False)
    if progress is False or progress is None:
        return NullReporter()
    return progress
