"""A command run in a pseudo-terminal, as a user sees it: every byte the terminal received,
and the screen those bytes leave (what ``pre`` draws in place is replayed, not read as lines).

    recording = run_in_terminal(["pre", "run", "--limit", "10"])
    recording.lines[-1]      # the last line left on the screen
    recording.after_last_line()  # what the terminal received after that line was written

``render`` understands what ``pre``'s progress line uses (carriage return, ``ESC [ 2 K`` erase
line, ``ESC [ K`` erase to the end) and drops any other escape sequence.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TerminalRecording", "render", "run_in_terminal"]

_CSI = re.compile(r"\x1b\[([0-9;?]*)([@-~])")


def render(raw: bytes | str, *, columns: int = 10_000) -> list[str]:
    """The lines a terminal ``columns`` wide shows after receiving ``raw`` (trailing spaces and
    the empty lines after the last text dropped); longer text wraps onto the next line."""
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else raw
    screen: list[list[str]] = [[]]
    row = col = 0
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\x1b":
            match = _CSI.match(text, i)
            if match is not None:
                if match.group(2) == "K":
                    line = screen[row]
                    if match.group(1) == "2":
                        screen[row] = []
                    elif match.group(1) in ("", "0"):
                        del line[col:]
                i = match.end()
                continue
            i += 2  # another escape: dropped with the character after it
            continue
        if ch == "\r":
            col = 0
        elif ch == "\n":
            row += 1
            col = 0
            if row == len(screen):
                screen.append([])
        elif ch == "\b":
            col = max(0, col - 1)
        elif ch == "\t":
            col = (col // 8 + 1) * 8
        elif ch >= " ":
            if col >= columns:  # autowrap: the character after the last column starts a new line
                row, col = row + 1, 0
                if row == len(screen):
                    screen.append([])
            line = screen[row]
            line.extend(" " * (col - len(line)))
            if col < len(line):
                line[col] = ch
            else:
                line.append(ch)
            col += 1
        i += 1
    lines = ["".join(line).rstrip() for line in screen]
    while lines and not lines[-1]:
        lines.pop()
    return lines


@dataclass(frozen=True)
class TerminalRecording:
    """What a command sent to its terminal (stdout and stderr both go there)."""

    raw: bytes
    returncode: int

    @property
    def lines(self) -> list[str]:
        """The screen the command left (``render``)."""
        return render(self.raw)

    def after_last_line(self) -> str:
        """Everything received after the last line on the screen was written, escapes included:
        ``""`` or mere erasing (``"\\r\\x1b[2K"``) when nothing was drawn after it."""
        text = self.raw.decode("utf-8", errors="replace")
        last = self.lines[-1] if self.lines else ""
        at = text.rfind(last)
        return "" if at < 0 else text[at + len(last):]


def run_in_terminal(argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
                    timeout: float = 600.0, columns: int = 160, rows: int = 40,
                    interrupt_when: Callable[[bytes], bool] | None = None) -> TerminalRecording:
    """Run ``argv`` with a pseudo-terminal as its stdin, stdout and stderr, ``columns`` wide,
    and read everything it writes until it exits. ``interrupt_when(received)``: send SIGINT
    (Ctrl-C) once it returns True."""
    import fcntl
    import struct
    import termios

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    proc = subprocess.Popen(list(argv), stdin=slave, stdout=slave, stderr=slave, env=dict(env) if env is not None else None,
                            cwd=cwd, close_fds=True, start_new_session=True)
    os.close(slave)
    received = b""
    interrupted = interrupt_when is None
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 1 << 16)
                except OSError:  # the command exited and the terminal closed
                    break
                if not chunk:
                    break
                received += chunk
            elif proc.poll() is not None:
                break
            if not interrupted and interrupt_when is not None and interrupt_when(received):
                proc.send_signal(signal.SIGINT)
                interrupted = True
        else:
            proc.kill()
        return TerminalRecording(received, proc.wait(timeout=60))
    finally:
        os.close(master)
