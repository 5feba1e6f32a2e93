"""The report as a LaTeX document: one booktabs table per report table, and the figures.

Each table keeps the numbers the Markdown and HTML show, laid out for a paper:
an APDR cell is set on two lines (mean ± s.d., then its 95% interval below),
columns that only find a row again (``Table.bookkeeping``: the run folder, how a
score was made) are left out, and the table is fitted to the line width at a
readable size instead of being shrunk: first at ``\\small`` (9 pt), else at
``\\footnotesize`` (8 pt, the smallest used), long text columns wrapping in
paragraph columns whose widths are fractions of ``\\linewidth`` (so a table
pasted into a narrower column wraps more rather than overflowing). Only a table
whose numbers alone are wider than the page at 8 pt overhangs the margins,
centred. Each table has a caption that states its statistic (``Table.statistic``)
and the settings of its section (``Section.settings_text``), and its full note
below it (a note already printed under an earlier table is referred to by that
table's number). A table with more rows than a page holds is a ``longtable``.

Figures are included with ``\\includegraphics`` from the files ``pre report``
writes beside ``report.tex`` (``--format latex,pdf``; PDF preferred, else PNG);
a figure whose file is missing prints a line saying how to write it, so the
document always compiles, and its first lines say where the figures are.

The document needs only packages of a basic TeX installation (Debian's
texlive-latex-base and, for booktabs, texlive-latex-recommended) and compiles
with pdfLaTeX or LuaLaTeX (both tried here). All text from the results goes through
``output_safety.latex_text``: TeX's special characters escaped, control
characters and anything pdfLaTeX cannot set without extra fonts (a Cyrillic
homoglyph, CJK) written as ``[U+XXXX]``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from promptrobust.engine.analysis.report.tables import NO_INTERVAL, SET_MEAN_MARK, Table, numeric_column
from promptrobust.engine.safe_io.output_safety import latex_text

if TYPE_CHECKING:
    from promptrobust.engine.analysis.report.parts import Figure, ReportContent as Report

#: More rows than this and a table becomes a longtable (a float cannot break across pages).
LONG_ROWS = 40
#: Floats pile up until a page break; a \clearpage after this many keeps LaTeX's float queue short.
FLOATS_PER_PAGE_BREAK = 8
#: The line width the tables are fitted to: A4 with 2 cm margins (17 cm), in TeX points.
LINE_WIDTH_PT = 17 / 2.54 * 72.27
#: Font sizes tried, largest first: (LaTeX size command, size in pt, \tabcolsep in pt). None smaller.
FONT_SIZES = (("small", 9.0, 5.0), ("footnotesize", 8.0, 3.5))
#: Average width of a character of Latin Modern in em (digits are exactly 0.5 em); bold a little wider.
CHAR_EM, BOLD_EM = 0.5, 0.56
#: A wrapped text column is never narrower than this many characters (nor than its longest word).
MIN_WRAP_CHARS = 8
#: Figures wider than the line are set at the line's width; narrower ones at their own size.
LINE_WIDTH_IN = 17 / 2.54

PREAMBLE = r"""\documentclass[10pt]{article}
\usepackage[T1]{fontenc}
\usepackage[utf8]{inputenc}
\IfFileExists{lmodern.sty}{\usepackage{lmodern}}{}
\usepackage[a4paper,margin=2cm]{geometry}
\usepackage{booktabs}
\usepackage{longtable}
\usepackage{array}
\usepackage{graphicx}
\setlength{\LTcapwidth}{\linewidth}
"""
_MINUS = re.compile(r"(?<![A-Za-z0-9])-(?=\d|\.\d)")
_BREAK_AFTER = re.compile(r"(\\_|-|/|=|:(?=\S))")
#: The pieces a wrapped cell may break into: words, and names after '_', '-', '/', '=' and ':'.
_PIECES = re.compile(r"[^\s_\-/=:]*[_\-/=:]?")
#: Where a number cell is split over two lines: before its interval or its parenthesised remark.
_SECOND_LINE = re.compile(r" (?=[\[(])")


def cell(text: str, *, numeric: bool = False, wrap: bool = False) -> str:
    """One cell: escaped; in a numeric column a leading minus is a math minus, not a hyphen;
    in a wrapped column a long name (a run folder) may break after '_', '-', '/', '=' and ':'."""
    out = r"\dag{}".join(latex_text(part) for part in text.split(SET_MEAN_MARK))
    if numeric:
        return _MINUS.sub("$-$", out)
    return _BREAK_AFTER.sub(lambda m: m.group(1) + r"\allowbreak{}", out) if wrap else out


def number_lines(text: str) -> list[str]:
    """A number cell's lines: '0.31 ± 0.12 [0.20, 0.43] †' -> ['0.31 ± 0.12 †', '[0.20, 0.43]']; the
    long remark of a cell without an interval is shortened (the table's note says it in full)."""
    text = _short(text)
    mark = ""
    if text.endswith(f" {SET_MEAN_MARK}"):
        text, mark = text[: -len(SET_MEAN_MARK) - 1], f" {SET_MEAN_MARK}"
    head, *rest = _SECOND_LINE.split(text, maxsplit=1)
    return [head + mark, *rest]


def _chars(text: str) -> float:
    """Width of ``text`` in average characters (capitals are wider; '±' is set as a wider math symbol)."""
    return len(text) + 0.4 * sum(ch.isupper() for ch in text) + text.count("±") + text.count("→")


#: A header may take this many characters a line even where its column's numbers are narrower.
HEADER_CHARS = 7


@dataclass(frozen=True)
class Layout:
    """How one table is set: its font size, each column's kind and, for wrapped columns, width."""

    size: str
    colsep: float
    kinds: tuple[str, ...]
    """'number' (right, on two lines), 'text' (left, one line) or 'wrap' (a paragraph column)."""
    wrap_widths: tuple[float, ...]
    """Width in pt of each wrapped column (0 for the others)."""
    fits: bool


def _widths(header: Sequence[str], rows: Sequence[Sequence[str]], kinds: Sequence[str], size: float) -> tuple[
        list[float], list[float]]:
    """Each column's natural width and its narrowest wrapped width, in pt, at ``size``."""
    em = size
    natural, narrowest = [], []
    for i, kind in enumerate(kinds):
        cells = [r[i] for r in rows]
        lines = [line for c in cells for line in (number_lines(c) if kind == "number" else [c])]
        longest_word = max((_chars(w) for w in header[i].split()), default=1) * BOLD_EM * em
        header_room = min(len(header[i]), HEADER_CHARS) * BOLD_EM * em
        content = max((_chars(x) for x in lines), default=1) * CHAR_EM * em
        natural.append(max(content, longest_word, header_room))
        words = max((_chars(w) for c in cells for w in _PIECES.findall(c)), default=1)
        narrowest.append(max(longest_word, min(content, max(words * 1.1, MIN_WRAP_CHARS) * CHAR_EM * em)))  # 10% spare
    return natural, narrowest


def layout(header: Sequence[str], rows: Sequence[Sequence[str]]) -> Layout:
    """The largest font size at which the table fits the line width, text columns wrapping as little as
    needed (the widest ones first, never below ``MIN_WRAP_CHARS`` or their longest word)."""
    kinds = tuple("number" if i > 0 and numeric_column([r[i] for r in rows]) else "text" for i in range(len(header)))
    best: Layout | None = None
    for size, pt, colsep in FONT_SIZES:
        natural, narrowest = _widths(header, rows, kinds, pt)
        room = LINE_WIDTH_PT - 2 * colsep * len(header)
        fixed = sum(w for w, k in zip(natural, kinds) if k == "number")
        text = [i for i, k in enumerate(kinds) if k == "text"]
        if fixed + sum(natural[i] for i in text) <= room:
            return Layout(size, colsep, kinds, tuple(0.0 for _ in kinds), True)
        # Water-filling: every text column wider than a common cap is cut to it (not below its narrowest).
        low, high = 0.0, max((natural[i] for i in text), default=0.0)
        for _ in range(40):
            cap = (low + high) / 2
            total = fixed + sum(min(natural[i], max(cap, narrowest[i])) for i in text)
            low, high = (cap, high) if total <= room else (low, cap)
        widths = [min(natural[i], max(low, narrowest[i])) if i in text else 0.0 for i in range(len(kinds))]
        fits = fixed + sum(widths) <= room + 0.5
        wrapped = tuple("wrap" if i in text and widths[i] < natural[i] else k for i, k in enumerate(kinds))
        best = Layout(size, colsep, wrapped, tuple(w if k == "wrap" else 0.0 for w, k in zip(widths, wrapped)), fits)
        if fits:
            return best
    assert best is not None
    return best


def _spec(lay: Layout) -> str:
    cols = []
    for kind, width in zip(lay.kinds, lay.wrap_widths):
        if kind == "number":
            cols.append("r")
        elif kind == "wrap":
            cols.append(f">{{\\raggedright\\arraybackslash}}p{{{width / LINE_WIDTH_PT:.3f}\\linewidth}}")
        else:
            cols.append("l")
    return "".join(cols)


def _stack(lines: Sequence[str], align: str, pos: str = "t") -> str:
    """Lines set one under the other inside a cell (a tabular without outer padding)."""
    if len(lines) == 1:
        return lines[0]
    return rf"\begin{{tabular}}[{pos}]{{@{{}}{align}@{{}}}}" + r"\\".join(lines) + r"\end{tabular}"


def _header_cell(text: str, kind: str, width_chars: float) -> str:
    """A bold header, broken into lines no longer than its column (a wrapped column wraps it itself)."""
    if kind == "wrap":
        return r"\textbf{" + cell(text, wrap=True) + "}"
    lines: list[str] = []
    for word in text.split():
        if lines and _chars(lines[-1]) + 1 + _chars(word) <= width_chars:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return _stack([r"\textbf{" + cell(line) + "}" for line in lines or [""]], "r" if kind == "number" else "l", "b")


def _body_cell(text: str, kind: str) -> str:
    if kind == "number":
        return _stack([cell(line, numeric=True) for line in number_lines(text)], "r")
    return cell(text, wrap=kind == "wrap")


def _short(text: str) -> str:
    """A cell's long remark shortened (the table's note says it in full)."""
    return text.replace(f"({NO_INTERVAL})", "(no interval)").replace(NO_INTERVAL, "no interval")


def paper_columns(t: Table) -> tuple[list[str], list[list[str]]]:
    """The header and rows a paper shows: the table without its bookkeeping columns, long remarks shortened."""
    keep = [i for i, h in enumerate(t.header) if h not in t.bookkeeping]
    return [t.header[i] for i in keep], [[_short(row[i]) for i in keep if i < len(row)] for row in t.rows]


def caption(t: Table, settings: str, title: str | None = None) -> str:
    """'<title>. <statistic>. Settings: <kind and settings>.' escaped."""
    parts = [title if title is not None else t.title, t.statistic or t.note, f"Settings: {settings}" if settings else ""]
    return ". ".join(cell(p[:1].upper() + p[1:].rstrip("."), wrap=True) for p in parts if p) + "."


def label_of(t: Table) -> str:
    return "tab:" + re.sub(r"[^A-Za-z0-9:_-]", "-", t.name)


def table(t: Table, settings: str = "", *, title: str | None = None, see: str | None = None) -> str:
    """One booktabs table fitted to the line width (``layout``): a float or, past ``LONG_ROWS``, a longtable.
    ``title``: the caption's title (default the table's); ``see``: the label of an earlier table whose
    note this one shares (the note is then referred to, not repeated)."""
    header, rows = paper_columns(t)
    lay = layout(header, rows) if rows else Layout("small", 5.0, tuple("text" for _ in header), (0.0,) * len(header), True)
    size_pt = {size: pt for size, pt, _ in FONT_SIZES}[lay.size]
    natural, _ = _widths(header, rows, lay.kinds, size_pt) if rows else ([0.0] * len(header), None)
    head = " & ".join(_header_cell(h, k, max(natural[i] / (BOLD_EM * size_pt), 1.0))
                      for i, (h, k) in enumerate(zip(header, lay.kinds))) + r" \\"
    body = [" & ".join(_body_cell(c, lay.kinds[i]) for i, c in enumerate(row)) + r" \\" for row in rows]
    if not rows:
        body = [r"\multicolumn{" + str(len(header)) + r"}{l}{\emph{no rows}} \\"]
    spec = _spec(lay)
    if see is not None:
        below = r"{\footnotesize Note as under Table~\ref{" + see + "}.}"
    else:  # a minipage sets the note as a justified paragraph under the centred table
        below = (r"\begin{minipage}{\linewidth}\footnotesize " + cell(t.note) + r"\end{minipage}") if t.note else ""
    # a caption above its table: no skip above it, some below it (the class's defaults suit captions below)
    setup = (rf"\{lay.size}\setlength{{\tabcolsep}}{{{lay.colsep:g}pt}}"
             r"\setlength{\abovecaptionskip}{0pt}\setlength{\belowcaptionskip}{6pt}")
    if len(rows) > LONG_ROWS:
        return "\n".join([
            r"{" + setup,
            r"\begin{longtable}{" + spec + "}",
            r"\caption{" + caption(t, settings, title) + "}\\label{" + label_of(t) + r"} \\",
            r"\toprule", head, r"\midrule", r"\endfirsthead",
            r"\toprule", head, r"\midrule", r"\endhead",
            r"\bottomrule", r"\endlastfoot",
            *body,
            r"\end{longtable}}",
            r"\noindent" + below + r"\par\medskip" if below else "",
        ])
    tabular = [r"\begin{tabular}{" + spec + "}", r"\toprule", head, r"\midrule", *body, r"\bottomrule", r"\end{tabular}"]
    if not lay.fits:  # wider than the page even at 8 pt: centred over both margins, never shrunk
        tabular = [r"\makebox[\linewidth][c]{%", *tabular, "}"]
    return "\n".join([
        r"\begin{table}[htbp]",
        r"\centering" + setup,
        r"\caption{" + caption(t, settings, title) + "}\\label{" + label_of(t) + "}",
        *tabular,
        r"\par\smallskip" + below if below else "",
        r"\end{table}",
    ])


def figure(f: Figure, fmt: str | None) -> str:
    """A figure float that includes ``f``'s file (``fmt``: the format written beside report.tex, pdf or png;
    None: not written) at its own width, or the line's when wider; a missing file prints how to write it."""
    name = f"{f.name}.{fmt or 'pdf'}"
    width_in = min(float(f.drawing.get_size_inches()[0]), LINE_WIDTH_IN)
    missing = (r"\fbox{\parbox{0.9\linewidth}{\centering\small figure file " + cell(name) +
               r" not found beside this file: write it with \texttt{pre report RUN\_DIR --format latex,pdf}}}")
    graphic = rf"\includegraphics[width={width_in:.2f}in]{{{name}}}"
    caption_text = cell(f.caption[:1].upper() + f.caption[1:]) + "." + (" " + cell(f.note) if f.note else "")
    return "\n".join([
        r"\begin{figure}[htbp]",
        r"\centering",
        rf"\IfFileExists{{{name}}}{{{graphic}}}{{{missing}}}" if fmt else missing,
        r"\caption{" + caption_text + "}\\label{fig:" + re.sub(r"[^A-Za-z0-9:_-]", "-", f.name) + "}",
        r"\end{figure}",
    ])


def _short_title(t: Table, setting_label: str | None) -> str:
    """The table's title without its section's settings (the caption says them after 'Settings:')."""
    suffix = f" ({setting_label})" if setting_label else ""
    return t.title[: -len(suffix)] if suffix and t.title.endswith(suffix) else t.title


def document(report: Report, figures: str | None = "pdf") -> str:
    """The whole report as one compilable document (sections, their notes, every table and figure).
    ``figures``: the format the figure files were written in beside report.tex (pdf or png), or None."""
    from promptrobust.engine.runs.run_folder import versions

    __version__ = versions()["promptrobust"]

    names = [f"{f.name}.{figures}" for f in report.figures] if figures else []
    where = (f"% Figures: {len(names)} {figures.upper()} files beside this file, included with \\includegraphics "
             "(a missing one prints how to write it)." if figures and names else
             "% Figures: none written with this report; pre report RUN_DIR --format latex,pdf writes them beside it."
             if report.figures else "% Figures: this report has none.")
    lines = [
        f"% promptrobust {__version__}: pre report --format latex",
        "% Every table copies into a paper as it is (booktabs; longtable for long ones), fitted to the line",
        "% width at 9 or 8 pt (never shrunk): an APDR cell is mean +- s.d. over its 95% interval.",
        where,
        PREAMBLE,
        r"\begin{document}",
        r"\section*{promptrobust report}",
        r"\begin{itemize}",
        *(r"\item " + cell(m, wrap=True) for m in report.meta),
        r"\item " + cell(f"built by promptrobust {__version__}"),
        r"\end{itemize}",
        *(r"\noindent\emph{" + cell(n, wrap=True) + r"}\par" for n in report.notes),
    ]
    if report.figures and not figures:
        lines.append(r"\noindent\emph{" + cell("figures were not written with this report: pre report RUN_DIR "
                                                "--format latex,pdf writes them beside report.tex") + r"}\par")
    seen: dict[str, str] = {}  # note text -> label of the first table printed with it
    floats = 0
    for s in report.sections:
        lines += [r"\clearpage", r"\section*{\raggedright " + cell(s.title, wrap=True) + "}"]  # long settings: ragged
        lines += [r"\noindent\emph{" + cell(n, wrap=True) + r"}\par" for n in s.notes]
        label = s.setting.label() if s.setting is not None else None
        for t in s.tables:
            lines.append(table(t, s.settings_text, title=_short_title(t, label), see=seen.get(t.note)))
            if t.note:
                seen.setdefault(t.note, label_of(t))
            floats += 1
            if floats % FLOATS_PER_PAGE_BREAK == 0:
                lines.append(r"\clearpage")
        for f in s.figures:
            lines.append(figure(f, figures))
            floats += 1
            if floats % FLOATS_PER_PAGE_BREAK == 0:
                lines.append(r"\clearpage")
    rest = list(report.extremes) + ([report.excluded] if report.excluded is not None else [])
    if rest:
        lines += [r"\clearpage", r"\section*{Adversarial prompts and records not averaged}"]
        lines += [table(t, "each record under its own settings (the CSV's setting column)") for t in rest]
    lines.append(r"\end{document}")
    return "\n".join(line for line in lines if line) + "\n"
