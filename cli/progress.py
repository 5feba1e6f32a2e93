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
    """Renders ``engine.progress`` events: on a terminal one line redrawn 4x a second, fitted to the
    terminal's width, with phase lines printed above it; elsewhere plain lines
    (``engine.progress.StreamReporter``). Either way the command's own last line (where its results
    are) is the last one: a terminal's status line is erased before it, and a log's last status
    line is written before the command's first output after progress moved, never after it."""

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
        if mode in ("lines", "forced-lines", "heartbeat"):
            self._log_line = self.inner.heartbeat
            self.inner.heartbeat = self._logged_status  # type: ignore[method-assign]
        self._drawn = False
        self._stopped = False
        self._events = 0  # events heard: progress moved
        self._quiet_at: tuple[int, int] | None = None  # (events, requests done) when the command last printed
        self._status_at: tuple[int, int] | None = None  # ... when a log's status line was last written

    def _above(self, text: str) -> None:
        with self._lock:
            self._term.write("\r\x1b[2K" + text + "\n")
            self._drawn = False
            self._term.flush()

    def _mark(self) -> tuple[int, int]:
        return self._events, self.inner.state.counts()[0]

    def _redraw(self) -> None:
        """The status line, redrawn in place and fitted to the terminal's width (measured at every
        draw: a resized window gets lines of its new width); not after the command printed its own
        lines until progress moves again (an event, an answer), so the command's last line stays the
        last one."""
        line = self.inner.status_line(terminal_width())  # looked at every tick: the rate's observations go on
        with self._lock:
            if self._stopped or (self._quiet_at is not None and self._quiet_at == self._mark()):
                return
            self._quiet_at = None
            if self.inner.state.phase or self.inner.state.counts()[0]:
                self._term.write("\r\x1b[2K" + line)
                self._drawn = True
                self._term.flush()

    def _logged_status(self) -> None:
        """A log's status line (the heartbeat), unless nothing moved since the command printed."""
        with self._lock:
            mark = self._mark()
            if self._stopped or self._quiet_at == mark:
                return
            self._status_at = mark
            self._log_line()

    def _clear(self) -> None:
        """Before the command writes: on a terminal take the status line away (it comes back when
        progress moves); in a log write the status line first if progress moved since the last one
        and requests were asked, so the counts of the work come before the command's last words."""
        with self._lock:
            if self.mode == "tty":
                if self._drawn:
                    self._term.write("\r\x1b[2K")
                    self._term.flush()
                    self._drawn = False
            elif not self._stopped and self.mode != "off" and self.inner.every > 0:  # 0: no status line was asked for
                mark = self._mark()
                if mark[1] and mark != self._status_at and mark != self._quiet_at:
                    self._status_at = mark
                    self._log_line()
            self._quiet_at = self._mark()

    def emit(self, event: object) -> None:
        from promptrobust.engine.progress import Fallback, LibraryWarning

        if self.mode == "off" and not isinstance(event, (Fallback, LibraryWarning)):  # these are always said
            return
        self._events += 1
        self.inner.emit(event)  # type: ignore[arg-type]

    def start(self) -> None:
        if self.mode != "off":  # prints of the command go above the status line (a log: after its counts)
            self._term = sys.stderr
            self.inner.stream = sys.stderr  # the reporter's own lines bypass the wrapper below
            self._saved = (sys.stdout, sys.stderr)
            sys.stdout = _ClearingStream(sys.stdout, self._clear)
            sys.stderr = _ClearingStream(sys.stderr, self._clear)
        self.inner.start()

    def stop(self) -> None:
        """Stop drawing and, on a terminal, take the status line away: the command's own last line
        (where its results are) stays the last thing on the screen. A log ends with a status line
        only when progress moved after the command last printed (a command that printed nothing).
        ``main`` stops it before it prints an error or the interrupt message."""
        with self._lock:
            self._stopped = True
            final = self.mode != "tty" and self._quiet_at != self._mark()
        self.inner.stop(final_line=final)
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


def terminal_width() -> int:
    """Cells a status line may take on the terminal stderr writes to: its width less one (a line
    that fills the last column wraps on some terminals, and a wrapped line cannot be redrawn in
    place), measured now; ``$COLUMNS`` or 80 where it cannot be measured (or is not set)."""
    import os

    for stream in (sys.__stderr__, sys.__stdout__):
        if stream is None:
            continue
        try:
            columns = os.get_terminal_size(stream.fileno()).columns
        except (OSError, ValueError, AttributeError):
            continue
        if columns > 0:  # a pseudo-terminal whose size was never set says 0: unknown
            return max(20, columns - 1)
    try:
        return max(20, int(os.environ.get("COLUMNS", "")) - 1)
    except ValueError:
        return 79


def reporter_for(no_progress: bool) -> TerminalReporter:
    return TerminalReporter(progress_mode(no_progress))
