"""Text from models, prompts and pair files made safe for each viewer it reaches.

Prompts, attack names and ids are data written by others (a pairs file, a
promptbench checkout, a model's answer). Each output gets them in a form its
viewer cannot execute or misrender:

* a spreadsheet: ``csv_cell`` (OWASP's CSV-injection rule: a text cell that
  begins with ``= + - @``, tab or CR gets a leading apostrophe);
* Markdown: ``markdown_text`` (raw HTML escaped, so ``<img onerror=...>`` in an
  id shows as text in every renderer);
* a terminal: ``terminal_text`` and ``SafeStream`` (escape sequences, other
  control characters and bidirectional overrides removed);
* matplotlib: ``PLOT_RC`` (labels are never parsed as TeX/mathtext, so an
  attack named ``$\\frac$`` neither crashes the plot nor renders as math).

HTML pages escape with ``html.escape`` at the point of rendering.
"""

from __future__ import annotations

import io
import math
import re
from typing import Any, TextIO

__all__ = ["PLOT_RC", "SafeStream", "csv_cell", "markdown_text", "terminal_text"]

#: A cell a spreadsheet would read as a formula (or DDE call) starts with one of these.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def csv_cell(value: Any) -> Any:
    """``value`` for a CSV cell: text that begins like a formula gets a leading apostrophe.
    Numbers stay numbers (a negative PDR, as value or as text, is data, not a formula)."""
    if isinstance(value, str) and value.startswith(_FORMULA_START) and not _is_number(value):
        return "'" + value
    return value


_HTML = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


def markdown_text(text: str) -> str:
    """``text`` for Markdown: raw HTML shown as text (``<``, ``>``, ``&`` as entities), one line."""
    return terminal_text(str(text)).translate(_HTML).replace("\n", " ")


#: Escape sequences (CSI, OSC, two-character), C0/C1 controls other than newline and tab,
#: and the Unicode bidirectional marks, embeddings, overrides and isolates.
_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: colours, cursor moves, erase
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: window title, hyperlinks
    r"|\x1b[@-_]?"  # other escapes (and a lone ESC)
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]"  # C0 (not \t, \n) and C1 controls, DEL
    r"|[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"  # bidi marks, overrides, isolates
)
#: What our own progress line writes to stderr (carriage return, erase line).
_OWN_SEQUENCES = frozenset({"\r", "\x1b[2K"})


def terminal_text(text: str) -> str:
    """``text`` without anything a terminal would interpret (see ``_CONTROL``)."""
    return _CONTROL.sub("", text)


class SafeStream(io.TextIOBase):
    """A text stream that removes control characters from everything written through it.

    ``keep_own=True`` (stderr) lets the progress line's carriage return and
    erase-line sequence through; nothing else is interpreted by the terminal.
    """

    def __init__(self, inner: TextIO, *, keep_own: bool = False) -> None:
        self.inner = inner
        self.keep_own = keep_own

    def _clean(self, text: str) -> str:
        if self.keep_own:
            return _CONTROL.sub(lambda m: m.group(0) if m.group(0) in _OWN_SEQUENCES else "", text)
        return _CONTROL.sub("", text)

    def write(self, text: str) -> int:  # type: ignore[override]
        self.inner.write(self._clean(text))
        return len(text)

    def flush(self) -> None:
        self.inner.flush()

    def isatty(self) -> bool:
        return self.inner.isatty()

    def fileno(self) -> int:
        return self.inner.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.inner, "encoding", "utf-8")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


#: matplotlib settings for every report and attention plot: no TeX, no mathtext.
PLOT_RC = {"text.usetex": False, "text.parse_math": False}
