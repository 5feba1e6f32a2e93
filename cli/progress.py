"""How `pre` shows progress: ``engine.progress`` events rendered for a terminal or a log.

The engine emits events (phases, planned requests, search steps, jobs, fallbacks) and
knows nothing of terminals; this module picks the mode from the flags, the environment and
whether stderr is a terminal, and renders: on a terminal one status line redrawn 4 times a
second with phase lines printed above it; otherwise plain lines (``StreamReporter``).
``cli/main.py`` installs one reporter around every command and stops it before it prints an
error or the interrupt message; a stopped reporter erases its line, so the command's last
line (``pre: results in ...``) is the last one on the screen.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TextIO


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

        import threading

        self.mode = mode
        self._lock = threading.RLock()
        self._term = sys.stderr
        self._saved: tuple[object, object] | None = None
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
        self._stopped = False
        self._events = 0  # events heard: progress moved
        self._quiet_at: tuple[int, int] | None = None  # (events, requests done) when the command last printed

    def _above(self, text: str) -> None:
        with self._lock:
            self._term.write("\r\x1b[2K" + text + "\n")
            self._drawn = False
            self._term.flush()

    def _mark(self) -> tuple[int, int]:
        return self._events, self.inner.state.counts()[0]

    def _redraw(self) -> None:
        """The status line, redrawn in place; not after the command printed its own lines until
        progress moves again (an event, an answer), so the command's last line stays the last one."""
        line = self.inner.status_line()  # looked at every tick: the rate's observations go on
        with self._lock:
            if self._stopped or (self._quiet_at is not None and self._quiet_at == self._mark()):
                return
            self._quiet_at = None
            if self.inner.state.phase or self.inner.state.counts()[0]:
                self._term.write("\r\x1b[2K" + line[: _width()])
                self._drawn = True
                self._term.flush()

    def _clear(self) -> None:
        """Before the command writes to the terminal: take the status line away; it comes back
        when progress moves."""
        with self._lock:
            if self._drawn:
                self._term.write("\r\x1b[2K")
                self._term.flush()
                self._drawn = False
            self._quiet_at = self._mark()

    def emit(self, event: object) -> None:
        from promptrobust.engine.progress import Fallback, LibraryWarning

        if self.mode == "off" and not isinstance(event, (Fallback, LibraryWarning)):  # these are always said
            return
        self._events += 1
        self.inner.emit(event)  # type: ignore[arg-type]

    def start(self) -> None:
        if self.mode == "tty":  # prints of the command go above the status line, not into it
            self._term = sys.stderr
            self._saved = (sys.stdout, sys.stderr)
            sys.stdout = _ClearingStream(sys.stdout, self._clear)
            sys.stderr = _ClearingStream(sys.stderr, self._clear)
        self.inner.start()

    def stop(self) -> None:
        """Stop drawing and, on a terminal, take the status line away: the command's own last line
        (where its results are) stays the last thing on the screen. ``main`` stops it before it
        prints an error or the interrupt message."""
        with self._lock:
            self._stopped = True
        # A log keeps its last status line (the run's counts); a terminal's last line is the command's.
        self.inner.stop(final_line=self.mode != "tty")
        if self._saved is not None:
            sys.stdout, sys.stderr = self._saved
            self._saved = None
        with self._lock:
            if self.mode == "tty" and self._drawn:
                self._term.write("\r\x1b[2K")
                self._term.flush()
                self._drawn = False


class _ClearingStream:
    """A text stream that clears the status line before each write (then passes everything on)."""

    def __init__(self, stream: TextIO, clear: Callable[[], None]) -> None:
        self._stream = stream
        self._clear = clear

    def write(self, text: str) -> int:
        if text:
            self._clear()
        return self._stream.write(text)

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def _width() -> int:
    import shutil

    return max(40, shutil.get_terminal_size((120, 20)).columns - 1)


def reporter_for(no_progress: bool) -> TerminalReporter:
    return TerminalReporter(progress_mode(no_progress))
