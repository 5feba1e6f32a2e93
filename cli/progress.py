"""A progress line on stderr: requests done, requests/s, cache hits, ETA.

The rate is measured from the first answered request, not from when the line
was created (loading a model must not read as slow requests), and the ETA
stays ``--:--`` until the work done says something: at least
``ETA_MIN_FRACTION`` of it, or ``ETA_MIN_SECONDS`` of answering.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable

#: Show an ETA once this share of the requests is done ...
ETA_MIN_FRACTION = 0.02
#: ... or once requests have been answered for this many seconds.
ETA_MIN_SECONDS = 10.0


def _fmt_eta(seconds: float) -> str:
    if seconds != seconds or seconds == float("inf"):
        return "--:--"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class Progress:
    """Polls counters and redraws one line; on a non-terminal, prints a line every ``every`` seconds."""

    def __init__(
        self,
        total: int,
        counters: Callable[[], dict[str, float]],
        *,
        label: Callable[[], str] = lambda: "",
        enabled: bool = True,
        every: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.clock = clock
        self.counters = counters
        self.label = label
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.every = every if not self.tty else 0.25
        self._task: asyncio.Task[None] | None = None
        self._start = clock()
        self._base = dict(counters())
        self._first: tuple[float, float] | None = None  # (time, requests done) at the first look that saw answers

    def eta(self, done: float) -> float | None:
        """Seconds left, or None while too little is done to tell.

        Measured from the first look that saw answers (time and count then), so
        the time a model took to load never counts as slow answering.
        """
        now = self.clock()
        if self._first is None:
            if done > 0:
                self._first = (now, done)
            return None
        since, done_then = self._first
        working = now - since
        enough = done >= ETA_MIN_FRACTION * self.total or working >= ETA_MIN_SECONDS
        if not enough or working <= 0 or done <= done_then:
            return None
        return max(0.0, (self.total - done) * working / (done - done_then))

    def rate(self, done: float) -> float:
        """Requests answered per second since answers began (over the whole time until then)."""
        now = self.clock()
        since, done_then = self._first if self._first is not None else (now, done)
        if now > since and done > done_then:
            return (done - done_then) / (now - since)
        elapsed = now - self._start
        return done / elapsed if elapsed > 0 else 0.0

    def line(self) -> str:
        now = self.counters()
        done = now.get("completed", 0) - self._base.get("completed", 0)
        hits = now.get("cache_hits", 0) - self._base.get("cache_hits", 0)
        sent = now.get("backend_requests", 0) - self._base.get("backend_requests", 0)
        eta = self.eta(done)
        rate = self.rate(done)
        eta_text = "00:00" if self.total and done >= self.total else "--:--" if eta is None else _fmt_eta(eta)
        pct = 100.0 * done / self.total if self.total else 100.0
        hit_pct = 100.0 * hits / done if done else 0.0
        label = self.label()
        return (
            f"{label}{done}/{self.total} requests ({pct:.0f}%) | {rate:.1f} req/s | "
            f"sent {sent} | cache hits {hits} ({hit_pct:.0f}%) | ETA {eta_text}"
        )

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            self._draw()

    def _draw(self, final: bool = False) -> None:
        text = self.line()
        if self.tty:
            sys.stderr.write("\r\x1b[2K" + text + ("\n" if final else ""))
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()

    def start(self) -> None:
        if self.enabled:
            self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._draw(final=True)


# -- the run's reporter: engine progress events drawn on the terminal -------------------------

MODE_ENV = "PRE_PROGRESS"  # tty | lines | off (default: tty when stderr is a terminal, else lines)
#: Status-line interval when lines are asked for (PRE_PROGRESS=lines, e.g. piping into a timestamper);
#: without a terminal and without asking, the heartbeat is engine.progress.HEARTBEAT_SECONDS (30 s).
FORCED_LINES_SECONDS = 10.0


def progress_mode(no_progress: bool = False) -> str:
    """How progress is shown: ``tty`` (one redrawn line), ``lines`` (no terminal: phase lines and a
    status line every ``$PRE_PROGRESS_EVERY`` s, default 30), ``forced-lines`` (``PRE_PROGRESS=lines``:
    the same every 10 s by default), ``heartbeat`` (--no-progress: only the status line, so a long
    job still shows life in a log) or ``off`` (``PRE_PROGRESS=off``)."""
    import os

    forced = os.environ.get(MODE_ENV, "").strip().lower()
    if forced == "off":
        return "off"
    if no_progress:
        return "heartbeat"
    if forced == "lines":
        return "forced-lines"
    if forced == "tty":
        return "tty"
    return "tty" if sys.stderr.isatty() else "lines"


class TerminalReporter:
    """Renders ``engine.progress`` events: on a terminal one line redrawn 4x a second with phase
    lines printed above it; elsewhere plain lines (``engine.progress.StreamReporter``)."""

    def __init__(self, mode: str) -> None:
        from promptrobust.engine.progress import HEARTBEAT_SECONDS, StreamReporter, heartbeat_seconds

        self.mode = mode
        if mode == "tty":
            self.inner = StreamReporter(every=0.25, steps=False)
            self.inner.heartbeat = self._redraw  # type: ignore[method-assign]
            self.inner.write_line = self._above  # type: ignore[method-assign]
        elif mode in ("lines", "forced-lines"):
            default = FORCED_LINES_SECONDS if mode == "forced-lines" else HEARTBEAT_SECONDS
            self.inner = StreamReporter(every=heartbeat_seconds(default), steps=False)
        elif mode == "heartbeat":
            self.inner = StreamReporter(every=heartbeat_seconds(), phases=False)
        else:
            self.inner = StreamReporter(every=0, phases=False)
        self._drawn = False

    def _above(self, text: str) -> None:
        sys.stderr.write("\r\x1b[2K" + text + "\n")
        self._drawn = False
        sys.stderr.flush()

    def _redraw(self) -> None:
        if self.inner.state.phase or self.inner.state.counts()[0]:
            sys.stderr.write("\r\x1b[2K" + self.inner.status_line()[: _width()])
            self._drawn = True
            sys.stderr.flush()

    def emit(self, event: object) -> None:
        from promptrobust.engine.progress import Fallback

        if self.mode == "off" and not isinstance(event, Fallback):  # a fallback is always said
            return
        self.inner.emit(event)  # type: ignore[arg-type]

    def start(self) -> None:
        self.inner.start()

    def stop(self) -> None:
        self.inner.stop()  # draws the last status once more
        if self.mode == "tty" and self._drawn:
            sys.stderr.write("\n")  # it stays, as the run's summary line
            sys.stderr.flush()


def _width() -> int:
    import shutil

    return max(40, shutil.get_terminal_size((120, 20)).columns - 1)


def reporter_for(no_progress: bool) -> TerminalReporter:
    return TerminalReporter(progress_mode(no_progress))
