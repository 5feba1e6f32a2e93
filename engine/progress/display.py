"""Progress as plain lines: a ``Status`` formatted, and a reporter that writes phase lines at
once and a status line every few seconds (the CLI's terminal renderer, ``cli/progress.py``,
builds on it)."""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TextIO

from promptrobust.engine.progress.events import (
    Event,
    Fallback,
    Jobs,
    LibraryWarning,
    NullReporter,
    Phase,
    Reporter,
    SearchStep,
    said_as,
    use,
)
from promptrobust.engine.progress.library_warnings import capture as capture_library_warnings
from promptrobust.engine.progress.recording import Recorder
from promptrobust.engine.progress.state import ProgressState, Status, WorkStatus

#: Seconds between status lines without a terminal (``$PRE_PROGRESS_EVERY`` overrides).
HEARTBEAT_SECONDS = 30.0
EVERY_ENV = "PRE_PROGRESS_EVERY"


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


def _amount(value: float) -> str:
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"


def format_work(work: WorkStatus) -> str:
    """``label done/total unit, ETA mm:ss`` (the step's own ETA, from its own measured speed)."""
    unit = f" {work.unit}" if work.unit else ""
    if work.total is None:
        return f"{work.label} {_amount(work.done)}{unit}"
    eta = "estimating" if work.eta is None else format_duration(work.eta)
    if work.done >= work.total:
        eta = "00:00"
    return f"{work.label} {_amount(work.done)}/{_amount(work.total)}{unit}, ETA {eta}"


def format_status(status: Status) -> str:
    """One plain line: jobs, requests (cache hits apart), send rate, ETA, elapsed, a step's own
    progress, then the phase and the search position (numbers first: a terminal cuts the end
    of a long line)."""
    jobs = [f"jobs {status.jobs[0]}/{status.jobs[1]}"] if status.jobs is not None else []
    work = [format_work(status.work)] if status.work is not None else []
    tail = [status.phase] if status.phase else []
    if status.step is not None:
        tail.append(format_step(status.step))
    if not status.total and not status.done:
        elapsed = f"{format_duration(status.elapsed)} elapsed"
        return " | ".join(jobs + tail + work + ([elapsed] if work else [f"starting | {elapsed}"]))
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
    return " | ".join(jobs + [counts] + work + tail)


class StreamReporter:
    """Phase lines at once, a status line every ``every`` seconds (0: never), fallbacks once.

    ``steps``: also a line per search step (a lively log; off for the heartbeat-only mode).
    ``$PRE_PROGRESS_RECORD=FILE`` also records the events and counters to FILE (``recording``).
    """

    def __init__(self, stream: TextIO | None = None, *, every: float | None = None, steps: bool = False,
                 phases: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream
        self.every = heartbeat_seconds() if every is None else every
        self.steps = steps
        self.phases = phases
        self.recorder = Recorder.from_environment()
        self.state = ProgressState(clock, record=self.recorder.write if self.recorder is not None else None)
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
        if isinstance(event, (Fallback, LibraryWarning)):
            if notable:
                self.write_line(f"pre: {said_as(event)}")
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
        so the rate's observations do not depend on how often a line is printed."""
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

    def stop(self, *, final_line: bool = True) -> None:
        """Stop the heartbeat; a run that asked for requests ends with one last status line
        (``final_line`` False: not that one, when the caller's own last line must stay the last)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
            if final_line and self.phases and self.state.counts()[0]:
                self.heartbeat()
        if self.recorder is not None:
            self.state.status()  # the last counters
            self.recorder.close(self.state.clock() - self.state.started)

    def __enter__(self) -> "StreamReporter":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def reporting(reporter: Reporter) -> Iterator[Reporter]:
    """Install ``reporter`` for the work inside, starting and stopping its heartbeat; third-party
    warnings go through ``library_warnings`` meanwhile (said in a line of ours, or only noted)."""
    start = getattr(reporter, "start", None)
    if start is not None:
        start()
    try:
        with use(reporter), capture_library_warnings():
            yield reporter
    finally:
        stop = getattr(reporter, "stop", None)
        if stop is not None:
            stop()


def api_reporter(progress: bool | Reporter | None) -> Reporter:
    """What the Python API reports to: ``True`` (default) a ``StreamReporter`` on stderr with a
    line per step, ``False``/``None`` nothing, anything else is used as the reporter."""
    if progress is True:
        return StreamReporter(every=heartbeat_seconds(10.0), steps=False)
    if progress is False or progress is None:
        return NullReporter()
    return progress
