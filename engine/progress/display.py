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


def counted(n: int, noun: str) -> str:
    """``1 prompt``, ``10 prompts``: a count with its noun in the right number."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


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


def _work_eta(work: WorkStatus) -> str:
    if work.total is not None and work.done >= work.total:
        return "00:00"
    return "estimating" if work.eta is None else format_duration(work.eta)


def format_work(work: WorkStatus, *, short: bool = False) -> str:
    """``label done/total unit, ETA mm:ss`` (the step's own ETA, from its own measured speed); a
    share of the whole work (unit ``%``) reads ``label 23% (detail), ETA mm:ss``. ``short``: without
    the detail."""
    detail = f" ({work.detail})" if work.detail and not short else ""
    if work.total is None:
        unit = f" {work.unit}" if work.unit else ""
        return f"{work.label} {_amount(work.done)}{unit}{detail}"
    if work.unit == "%":
        share = 100.0 * work.done / work.total if work.total else 0.0
        return f"{work.label} {min(100, int(share))}%{detail}, ETA {_work_eta(work)}"
    unit = f" {work.unit}" if work.unit else ""
    return f"{work.label} {_amount(work.done)}/{_amount(work.total)}{unit}{detail}, ETA {_work_eta(work)}"


def cell_width(text: str) -> int:
    """Terminal cells ``text`` takes: East Asian wide characters two, combining marks none."""
    import unicodedata

    cells = 0
    for ch in text:
        if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
            continue
        cells += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return cells


def cut_to(text: str, cells: int) -> str:
    """``text`` in at most ``cells`` terminal cells, ending in an ellipsis when cut."""
    if cell_width(text) <= cells:
        return text
    if cells <= 0:
        return ""
    out, used = [], 0
    for ch in text:
        w = cell_width(ch)
        if used + w > cells - 1:
            break
        out.append(ch)
        used += w
    return "".join(out).rstrip() + "…"


#: The fewest cells a phase (what is running) keeps before the counts are shortened.
PHASE_CELLS = 40
#: ... and before it goes altogether.
PHASE_CELLS_MIN = 10
#: The fewest cells a search position keeps (else it goes first).
STEP_CELLS = 16
_SEP = " | "


def _pieces(status: Status) -> dict[str, str]:
    """The parts of a status line, each in its full form (and the counts' and work's short forms)."""
    pieces = {"jobs": f"jobs {status.jobs[0]}/{status.jobs[1]}" if status.jobs is not None else "",
              "elapsed": f"{format_duration(status.elapsed)} elapsed", "phase": status.phase,
              "step": format_step(status.step) if status.step is not None else "",
              "work": format_work(status.work) if status.work is not None else "",
              "work_short": format_work(status.work, short=True) if status.work is not None else "",
              "answered": "yes" if status.done else ""}
    if status.total or status.done:
        if status.total and status.done >= status.total:
            eta = "00:00"
        elif status.eta is None:
            eta = "estimating"
        else:
            eta = format_duration(status.eta)
        total = f"/{status.total}" if status.total else ""
        pieces.update(counts=f"requests {status.done}{total} (cache hits {status.cache_hits}, sent {status.sent})",
                      counts_short=f"requests {status.done}{total}",
                      rate=f"sent {'-' if status.rate is None else f'{status.rate:.1f}'} req/s", eta=f"ETA {eta}",
                      usd="" if status.usd is None else f"USD {status.usd:.4f} so far")
    else:
        pieces.update(counts="", counts_short="", rate="", eta="", usd="")
    return pieces


def _line(pieces: dict[str, str], *, counts: str, rate: bool, work: str, phase: int | None, step: int | None,
          width: int | None) -> str | None:
    """One arrangement of the pieces, numbers first: the jobs, requests and their ETA, the elapsed
    time, a step's own progress, then what runs (phase, search position), cut to what ``width``
    leaves them (None: this arrangement does not fit)."""
    work_text = pieces[work] if pieces["work"] else ""
    if pieces["counts"] and pieces["work"] and pieces["answered"]:
        fixed = [pieces["jobs"], pieces[counts], pieces["usd"] if rate else "", pieces["rate"] if rate else "", pieces["eta"],
                 pieces["elapsed"], work_text]
    elif pieces["work"]:  # work before any request is answered (converting the model): its own ETA leads
        fixed = [pieces["jobs"], work_text, pieces["elapsed"], pieces["counts_short"]]
    elif pieces["counts"]:
        fixed = [pieces["jobs"], pieces[counts], pieces["usd"] if rate else "", pieces["rate"] if rate else "", pieces["eta"],
                 pieces["elapsed"]]
    else:
        fixed = [pieces["jobs"], pieces["elapsed"]]
    head = _SEP.join(p for p in fixed if p)
    tail = [p for p in (pieces["phase"], pieces["step"]) if p]
    if width is None:
        return _SEP.join([head, *tail] if tail or pieces["work"] or pieces["counts"] else [head, "starting"])
    room = width - cell_width(head)
    parts = [head]
    if pieces["phase"] and phase is not None:
        room -= len(_SEP)
        if room < min(phase, cell_width(pieces["phase"])):
            return None
        text = cut_to(pieces["phase"], room)
        parts.append(text)
        room -= cell_width(text)
    if pieces["step"] and step is not None and room - len(_SEP) >= min(step, cell_width(pieces["step"])):
        parts.append(cut_to(pieces["step"], room - len(_SEP)))
    line = _SEP.join(parts)
    return line if cell_width(line) <= width else None


def format_status(status: Status, width: int | None = None) -> str:
    """One plain line, numbers first (a terminal cuts the end of a long line): jobs, requests
    (cache hits apart), send rate, ETA, elapsed, a step's own progress, then the phase and the
    search position. Before any request is answered, a step's own progress (converting the model,
    with its ETA) leads. ``width`` (terminal cells): the line fits it, shortening in this order: the
    search position, the phase down to a few words, the counts' cache hits and sent, the rate, a
    step's detail, the phase down to a word; at last it is cut."""
    pieces = _pieces(status)
    if width is None:
        return _line(pieces, counts="counts", rate=True, work="work", phase=0, step=0, width=None) or ""
    arrangements = (
        dict(counts="counts", rate=True, work="work", phase=PHASE_CELLS, step=STEP_CELLS),
        dict(counts="counts", rate=True, work="work", phase=PHASE_CELLS, step=None),
        dict(counts="counts_short", rate=True, work="work", phase=PHASE_CELLS, step=None),
        dict(counts="counts_short", rate=False, work="work", phase=PHASE_CELLS, step=None),
        dict(counts="counts_short", rate=False, work="work_short", phase=PHASE_CELLS, step=None),
        dict(counts="counts_short", rate=False, work="work_short", phase=PHASE_CELLS_MIN, step=None),
        dict(counts="counts_short", rate=False, work="work_short", phase=None, step=None),
    )
    for how in arrangements:
        line = _line(pieces, width=width, **how)  # type: ignore[arg-type]
        if line is not None:
            return line
    return cut_to(_line(pieces, counts="counts_short", rate=False, work="work_short", phase=None, step=None,
                        width=None) or "", width)


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
            if self.phases and event.line:
                self.write_line(f"pre: {self.state.phase}")
        elif isinstance(event, Jobs):
            if self.phases:
                self.write_line(f"pre: sweep jobs {event.done}/{event.total} done")
        elif isinstance(event, SearchStep) and self.steps:
            where = f"{event.scope}: " if event.scope else ""
            self.write_line(f"pre: {where}{format_step(event)}")

    def status_line(self, width: int | None = None) -> str:
        """The status line now (``width``: fitted to that many terminal cells)."""
        return format_status(self.state.status(), width)

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
