"""Text from models, prompts and pair files made safe for each viewer it reaches.

Prompts, attack names and ids are data written by others (a pairs file, a
promptbench checkout, a model's answer). Each output gets them in a form its
viewer cannot execute or misrender:

* a spreadsheet: ``csv_cell`` (OWASP's CSV-injection rule: a text cell that
  begins with ``= + - @``, tab or CR gets a leading apostrophe; NUL and the
  other controls, bidi overrides included, shown as ``[U+XXXX]``);
* an HTML page: ``html_text`` (controls and bidi marks shown as ``[U+XXXX]``, so
  a U+202E in a prompt cannot reverse the rest of the line, then ``html.escape``);
* LaTeX: ``latex_text`` (controls shown as ``[U+XXXX]``, TeX's special characters
  escaped, characters pdfLaTeX cannot set without extra fonts written as ``[U+XXXX]``);
* Markdown: ``markdown_text`` (raw HTML escaped, so ``<img onerror=...>`` in an
  id shows as text in every renderer; brackets escaped, so ``[x](javascript:...)``
  and ``![x](https://...)`` are neither a link nor a remote image);
* a terminal: ``terminal_text`` and ``SafeStream`` (escape sequences, other
  control characters and bidirectional overrides removed);
* matplotlib: ``PLOT_RC`` (labels are never parsed as TeX/mathtext, so an
  attack named ``$\\frac$`` neither crashes the plot nor renders as math).

Controls are shown rather than dropped where the text is data (CSV, HTML,
LaTeX): a reader sees that a prompt held a U+202E; a terminal gets them removed.
"""

from __future__ import annotations

import html
import io
import math
import re
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

__all__ = ["PLOT_RC", "SafeStream", "csv_cell", "html_text", "latex_text", "markdown_text", "terminal_text",
           "visible_controls"]

#: A cell a spreadsheet would read as a formula (or DDE call) starts with one of these.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _is_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def csv_cell(value: object) -> object:
    """``value`` for a CSV cell: text that begins like a formula gets a leading apostrophe,
    controls and bidi marks are shown as ``[U+XXXX]`` (``visible_controls``; a NUL stops
    many CSV readers). Numbers stay numbers (a negative PDR, as value or as text, is data,
    not a formula)."""
    if not isinstance(value, str):
        return value
    value = visible_controls(value)
    if value.startswith(_FORMULA_START) and not _is_number(value):
        return "'" + value
    return value


#: Characters that change how the text around them reads or that viewers choke on:
#: C0 controls other than tab, newline and carriage return, DEL and C1 controls, and the
#: Unicode bidirectional marks, embeddings, overrides and isolates (a U+202E makes the
#: rest of an HTML line read backwards).
_INVISIBLE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def visible_controls(text: str) -> str:
    """``text`` with every control character and bidi mark written as ``[U+XXXX]``."""
    return _INVISIBLE.sub(lambda m: f"[U+{ord(m.group(0)):04X}]", text)


def html_text(text: object, *, quote: bool = True) -> str:
    """``text`` for an HTML page: controls made visible, then ``<>&"'`` escaped."""
    return html.escape(visible_controls(str(text)), quote=quote)


_TEX_SPECIAL = {
    "\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "$": r"\$", "&": r"\&", "#": r"\#", "%": r"\%",
    "_": r"\_", "^": r"\textasciicircum{}", "~": r"\textasciitilde{}", "<": r"\textless{}",
    ">": r"\textgreater{}", "|": r"\textbar{}", '"': r"\textquotedbl{}",
    "[": "{[}", "]": "{]}",  # never read as the optional argument of a \\ that ends a table row
    # symbols our tables print, set without extra packages
    "±": r"$\pm$", "×": r"$\times$", "→": r"$\rightarrow$", "∅": r"$\emptyset$", "–": "--", "—": "---",
    "…": r"\ldots{}", "‘": "`", "’": "'", "“": "``", "”": "''", "≤": r"$\leq$", "≥": r"$\geq$",
    "\n": " ", "\t": " ", "\r": " ",
}


def _tex_settable(ch: str) -> bool:
    """pdfLaTeX with ``inputenc`` utf8 and T1 fonts sets ASCII, Latin-1 letters and Latin Extended-A."""
    code = ord(ch)
    return 0x20 <= code < 0x7F or (0xC0 <= code <= 0x17F and ch not in "×÷")


def latex_text(text: object) -> str:
    """``text`` for a LaTeX document compiled by pdfLaTeX or LuaLaTeX: controls made
    visible, TeX's special characters escaped, and any character outside ASCII, Latin-1
    letters and Latin Extended-A (a Cyrillic homoglyph, CJK) written as ``[U+XXXX]``.
    Brackets are braced, so a cell that starts with one is never read as an argument."""
    out = []
    text = visible_controls(str(text))
    for i, ch in enumerate(text):
        if ch in _TEX_SPECIAL:
            out.append(_TEX_SPECIAL[ch])
        elif _tex_settable(ch):
            out.append(ch)
            if ch in _LIGATURE_START and text[i + 1 : i + 2] in _LIGATURE_NEXT:
                out.append("{}")  # "--", "``", ",," and "!`" stay the characters they are
        else:
            out.append(f"{{[}}U+{ord(ch):04X}{{]}}")
    return "".join(out)


_LIGATURE_START = frozenset("-`',!?")
_LIGATURE_NEXT = frozenset("-`',")


#: Markdown: raw HTML as entities and brackets escaped, so no ``[text](url)`` link, ``![alt](url)``
#: remote image or ``[ref]: url`` definition forms; a backslash is doubled only before ASCII
#: punctuation (elsewhere CommonMark shows it as it is, so a table corner "attack \ dataset" stays readable).
_MARKDOWN = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "[": "\\[", "]": "\\]"})
_ESCAPING_BACKSLASH = re.compile(r"\\(?=[!-/:-@\[-`{-~])")


def markdown_text(text: str) -> str:
    """``text`` for Markdown: raw HTML shown as text (``<``, ``>``, ``&`` as entities), link and
    image syntax shown as typed (brackets escaped), one line."""
    plain = _ESCAPING_BACKSLASH.sub(r"\\\\", terminal_text(str(text)))
    return plain.translate(_MARKDOWN).replace("\n", " ")


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

    def write(self, text: str) -> int:
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
PLOT_RC: dict[RcKeyType, bool] = {"text.usetex": False, "text.parse_math": False}
