"""The report as a LaTeX document: one booktabs table per report table.

Each table keeps the cells the Markdown and HTML show (APDR cells as
mean ± s.d. [95% interval]) and gets a caption that states its statistic
(``Table.statistic``) and the settings of its section (kind of measurement,
mode, samples, seed, budget, shots, metric: ``Section.settings_text``), with
its full note below it. Tables copy into a paper as they are: a ``table``
float holding a ``tabular`` (shrunk to the line width when wider), or a
``longtable`` when it has more rows than a page holds.

The document needs only packages of a basic TeX installation (Debian's
texlive-latex-base and, for booktabs, texlive-latex-recommended) and compiles
with pdfLaTeX or LuaLaTeX (both tried here). All text from the results goes through
``output_safety.latex_text``: TeX's special characters escaped, control
characters and anything pdfLaTeX cannot set without extra fonts (a Cyrillic
homoglyph, CJK) written as ``[U+XXXX]``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from promptrobust.engine.analysis.report.tables import Table, numeric_column
from promptrobust.engine.safe_io.output_safety import latex_text

if TYPE_CHECKING:
    from promptrobust.engine.analysis.report.model import Report

#: More rows than this and a table becomes a longtable (a float cannot break across pages).
LONG_ROWS = 40
#: A column whose longest cell is longer than this wraps in a paragraph column of this width.
WRAP_CHARS = 40
WRAP_WIDTH = "5.5cm"
#: Floats pile up until a page break; a \clearpage after this many keeps LaTeX's float queue short.
FLOATS_PER_PAGE_BREAK = 8

PREAMBLE = r"""\documentclass[10pt]{article}
\usepackage[T1]{fontenc}
\usepackage[utf8]{inputenc}
\IfFileExists{lmodern.sty}{\usepackage{lmodern}}{}
\usepackage[margin=2cm]{geometry}
\usepackage{booktabs}
\usepackage{longtable}
\usepackage{array}
\usepackage{graphicx}
\setlength{\LTcapwidth}{\linewidth}
"""
_MINUS = re.compile(r"(?<![A-Za-z0-9])-(?=\d|\.\d)")


_BREAK_AFTER = re.compile(r"(\\_|-|/)")


def cell(text: str, *, numeric: bool = False, wrap: bool = False) -> str:
    """One cell: escaped; in a numeric column a leading minus is a math minus, not a hyphen;
    in a wrapped column a long name (a run folder) may break after '_', '-' and '/'."""
    out = latex_text(text)
    if numeric:
        return _MINUS.sub("$-$", out)
    return _BREAK_AFTER.sub(lambda m: m.group(1) + r"\allowbreak{}", out) if wrap else out


def _columns(t: Table) -> tuple[str, list[str]]:
    """The tabular column spec, and each column's kind: number (right), wrap (paragraph) or text (left)."""
    spec, kinds = [], []
    for i, _ in enumerate(t.header):
        cells = [row[i] for row in t.rows if i < len(row)]
        if i > 0 and numeric_column(cells):
            spec.append("r")
            kinds.append("number")
        elif max((len(c) for c in cells), default=0) > WRAP_CHARS:
            spec.append(f">{{\\raggedright\\arraybackslash}}p{{{WRAP_WIDTH}}}")
            kinds.append("wrap")
        else:
            spec.append("l")
            kinds.append("text")
    return "".join(spec), kinds


def caption(t: Table, settings: str) -> str:
    """'<title>. <statistic>. Settings: <kind and settings>.' escaped."""
    parts = [t.title, t.statistic or t.note, f"Settings: {settings}" if settings else ""]
    return ". ".join(latex_text(p[:1].upper() + p[1:].rstrip(".")) for p in parts if p) + "."


def table(t: Table, settings: str = "") -> str:
    """One booktabs table: a float (shrunk to the line width when wider) or, past ``LONG_ROWS``, a longtable."""
    spec, kinds = _columns(t)
    header = " & ".join(r"\textbf{" + latex_text(h) + "}" for h in t.header) + r" \\"
    body = [" & ".join(cell(c, numeric=kinds[i] == "number", wrap=kinds[i] == "wrap") for i, c in enumerate(row)) + r" \\"
            for row in t.rows]
    label = r"\label{tab:" + re.sub(r"[^A-Za-z0-9:_-]", "-", t.name) + "}"
    note = (r"{\footnotesize " + latex_text(t.note) + "}") if t.note else ""
    if not t.rows:
        body = [r"\multicolumn{" + str(len(t.header)) + r"}{l}{\emph{no rows}} \\"]
    if len(t.rows) > LONG_ROWS:
        return "\n".join([
            r"{\small",
            r"\begin{longtable}{" + spec + "}",
            r"\caption{" + caption(t, settings) + "}" + label + r" \\",
            r"\toprule", header, r"\midrule", r"\endfirsthead",
            r"\toprule", header, r"\midrule", r"\endhead",
            r"\bottomrule", r"\endlastfoot",
            *body,
            r"\end{longtable}}",
            note + r"\par\medskip" if note else "",
        ])
    return "\n".join([
        r"\begin{table}[htbp]",
        r"\centering\small",
        r"\caption{" + caption(t, settings) + "}" + label,
        r"\resizebox{\ifdim\width>\linewidth\linewidth\else\width\fi}{!}{%",
        r"\begin{tabular}{" + spec + "}",
        r"\toprule", header, r"\midrule",
        *body,
        r"\bottomrule",
        r"\end{tabular}}",
        r"\par\smallskip" + note if note else "",
        r"\end{table}",
    ])


def document(report: Report) -> str:
    """The whole report as one compilable document (sections, their notes, every table)."""
    from promptrobust.engine.runs.run_folder import versions

    __version__ = versions()["promptrobust"]

    lines = [
        f"% promptrobust {__version__}: pre report --format latex",
        "% Every table copies into a paper as it is (booktabs; longtable for long ones).",
        PREAMBLE,
        r"\begin{document}",
        r"\section*{promptrobust report}",
        r"\begin{itemize}",
        *(r"\item " + latex_text(m) for m in report.meta),
        r"\item " + latex_text(f"built by promptrobust {__version__}"),
        r"\end{itemize}",
        *(r"\noindent\emph{" + latex_text(n) + r"}\par" for n in report.notes),
    ]
    for s in report.sections:
        lines += [r"\clearpage", r"\section*{" + latex_text(s.title) + "}"]
        lines += [r"\noindent\emph{" + latex_text(n) + r"}\par" for n in s.notes]
        for i, t in enumerate(s.tables, 1):
            lines.append(table(t, s.settings_text))
            if i % FLOATS_PER_PAGE_BREAK == 0:
                lines.append(r"\clearpage")
    rest = list(report.extremes) + ([report.excluded] if report.excluded is not None else [])
    if rest:
        lines += [r"\clearpage", r"\section*{Adversarial prompts and records not averaged}"]
        lines += [table(t, "each record under its own settings (the CSV's setting column)") for t in rest]
    lines.append(r"\end{document}")
    return "\n".join(line for line in lines if line) + "\n"
