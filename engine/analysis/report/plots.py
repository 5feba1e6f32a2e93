"""Report pictures, drawn once with matplotlib and saved as PNG, SVG and PDF.

Each function returns one ``matplotlib.figure.Figure`` (no pyplot state, no
display); ``render`` saves it in a format, so the PNG, the SVG and the PDF of a
picture are the same drawing. Heat maps use a diverging colour scale centred on
0: red where attacks lowered the score, blue where they raised it (negative
PDR); each cell shows its APDR, its 95% interval and its number of records.
Error bars are 95% intervals; a bar of one record draws that record's own
paired-bootstrap PDR interval. Pictures that are compared share their scale
(``Scale``: one colour range for every heat map of a report, one APDR axis for
every bar chart), so a colour or a bar height means the same number in each.

A PDR is at most 1; one below ``CLIP_LOW`` (the adversarial score more than
twice the clean one) would squash every other bar and colour, so bars and
colours stop there and the label gives the value (the picture says so). Text
from the results (names, words) has its control characters shown as
``[U+XXXX]`` (``output_safety.visible_controls``): an SVG is XML, where a NUL
is not allowed.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure as Drawing

from promptrobust.engine.safe_io.output_safety import PLOT_RC, visible_controls

# Labels are data (attack names from a pairs file, prompt ids): never TeX or mathtext.
matplotlib.rcParams.update(PLOT_RC)
# The same report gives the same files: fixed SVG ids; TrueType in PDFs (journals refuse Type 3 fonts).
matplotlib.rcParams.update({"svg.hashsalt": "promptrobust", "pdf.fonttype": 42})

from dataclasses import dataclass

from promptrobust.engine.analysis.report.tables import ALL, SET_MEAN_MARK, Table

_DPI = 110
FORMATS = ("png", "svg", "pdf")
#: No creation date in SVG and PDF files: a report rebuilt from the same runs is the same file.
_METADATA: dict[str, dict[str, object]] = {"png": {}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}
CLIP_LOW = -1.0
"""Bars and colours stop at this PDR (the label gives the value); PDRs never exceed 1."""
CLIPPED_NOTE = f"values below {CLIP_LOW:g} drawn at {CLIP_LOW:g}; labels give the value"
#: Said where a bar or cell has no interval to draw (records without per-sample scores or PDR interval).
NO_INTERVAL = "no interval"


@dataclass(frozen=True)
class Scale:
    """The ranges figures share: ``colour``, the heat maps' colour bound (-colour..colour); ``low`` and
    ``high``, the bar charts' APDR axis. ``of`` computes them from every grid a report draws."""

    colour: float = 0.05
    low: float = 0.0
    high: float = 0.05

    @classmethod
    def of(cls, heat: Sequence[Table], bars: Sequence[Table]) -> "Scale":
        cells = [abs(v) for t in heat for line in t.numeric.values() for v in line[:-1] if v is not None]
        colour = min(-CLIP_LOW, max([0.05, *cells]))
        ends = [_bar_ends(t) for t in bars]
        low = min([0.0, *(e[0] for e in ends)])
        high = max([0.05, *(e[1] for e in ends)])
        return cls(colour, max(CLIP_LOW, low) * 1.15, high * 1.15)


def cells_of(table: Table) -> int:
    """Cells a heat map of ``table`` would draw (its grid without the 'all' column)."""
    return sum(1 for line in table.numeric.values() for v in line[:-1] if v is not None)


def render(drawing: Drawing, fmt: str) -> bytes:
    """``drawing`` saved as ``fmt`` (png, svg or pdf)."""
    if fmt not in FORMATS:
        raise ValueError(f"figure format must be one of {', '.join(FORMATS)} (got {fmt!r})")
    buf = io.BytesIO()
    drawing.savefig(buf, format=fmt, dpi=_DPI, bbox_inches="tight", metadata=_METADATA[fmt])
    return buf.getvalue()


def _text(value: Any) -> str:
    return visible_controls(str(value))


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _xticks(ax: Any, labels: list[str]) -> None:
    """Tick labels, slanted when there are many or they are long, so they never overlap."""
    slant = len(labels) > 4 or max((len(x) for x in labels), default=0) > 14
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=30 if slant else 0, ha="right" if slant else "center", rotation_mode="anchor")


def _interval(row: Mapping[str, Any], own: tuple[float, float] | None) -> tuple[float | None, float | None]:
    """A cell's 95% interval: the APDR's bootstrap interval, or for one record its own PDR interval."""
    low, high = _finite(row.get("ci_low")), _finite(row.get("ci_high"))
    if (low is None or high is None) and row.get("count") == 1 and own is not None:
        low, high = _finite(own[0]), _finite(own[1])
    return low, high


def _bar_rows(table: Table, what: str) -> tuple[str, list[Mapping[str, Any]]]:
    row_col, col_col = list(table.long[0])[:2] if table.long else (what, "")
    return row_col, [r for r in table.long if r.get(col_col) == ALL and _finite(r.get("mean")) is not None]


def _bar_ends(table: Table) -> tuple[float, float]:
    """The lowest and highest point a bar chart of ``table`` draws (bars and their intervals)."""
    row_col, data = _bar_rows(table, "")
    points = [0.0]
    for r in data:
        low, high = _interval(r, table.record_ci95.get((str(r[row_col]), ALL)))
        points += [max(CLIP_LOW, float(r["mean"])), *(max(CLIP_LOW, x) for x in (low, high) if x is not None)]
    return min(points), max(points)


def apdr_bars(table: Table, what: str, scale: Scale | None = None) -> Drawing:
    """Bars of each row's overall APDR (the grid's 'all' column) with its 95% interval as error bars;
    ``scale``: the APDR axis shared with the report's other bar charts (else this chart's own)."""
    row_col, data = _bar_rows(table, what)
    labels = [str(r[row_col]) for r in data]
    means = [float(r["mean"]) for r in data]
    shown = [max(CLIP_LOW, m) for m in means]
    intervals = [_interval(r, table.record_ci95.get((str(r[row_col]), ALL))) for r in data]
    # An interval that misses its mean (records whose PDR disagrees with their own sample
    # scores: a hand-edited or foreign file) draws no bar on that side instead of crashing.
    lows = [max(0.0, s - max(CLIP_LOW, lo)) if lo is not None else 0.0 for s, (lo, _) in zip(shown, intervals)]
    highs = [max(0.0, max(CLIP_LOW, hi) - s) if hi is not None else 0.0 for s, (_, hi) in zip(shown, intervals)]
    counts = [r["count"] for r in data]
    clipped = any(m < CLIP_LOW for m in means)
    fig = Drawing(figsize=(max(4.5, 0.75 * len(labels) + 1.5), 4.0))
    ax = fig.subplots()
    colors = ["#c0392b" if m >= 0 else "#2e6da4" for m in means]
    drawn = [lo is not None and hi is not None for lo, hi in intervals]  # no cap at all where there is no interval
    yerr = [[x if d else math.nan for x, d in zip(side, drawn)] for side in (lows, highs)]
    bars = ax.bar(range(len(labels)), shown, yerr=yerr, capsize=4, color=colors, ecolor="#333333",
                  hatch=["//" if m < CLIP_LOW else "" for m in means])
    marks = [f" {SET_MEAN_MARK}" if r.get("set_means") else "" for r in data]
    for b, m, s, h, d, mark in zip(bars, means, shown, highs, drawn, marks):
        label = f"{m:.2f}{mark}" if d else f"{m:.2f}{mark}\n{NO_INTERVAL}"
        ax.annotate(label, (b.get_x() + b.get_width() / 2, max(s + h, s, 0.0)), xytext=(0, 3),
                    textcoords="offset points", ha="center", va="bottom", fontsize=8, color="#222222")
    lo = min([0.0, *(s - low for s, low in zip(shown, lows))])
    hi = max([0.05, *(s + h for s, h in zip(shown, highs))])
    if scale is None:
        ax.set_ylim(max(CLIP_LOW, lo) * 1.15, hi * 1.15)
    else:
        ax.set_ylim(scale.low, scale.high)
    _xticks(ax, [f"{_text(label)} ({n})" for label, n in zip(labels, counts)])
    ax.set_ylabel("APDR (mean PDR)")
    ax.set_xlabel(_text(what))
    title = (f"APDR by {_text(what)} (records in brackets)\n"
             "error bars: 95% interval (of one record: its own PDR interval)")
    if any(marks):
        title += f"\n{SET_MEAN_MARK} Semantic as the mean over its prompt set"
    ax.set_title(title + (f"\n{CLIPPED_NOTE}" if clipped else ""), fontsize=9)
    ax.axhline(0, color="#888888", linewidth=0.8)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    return fig


def _cell_text(row: Mapping[str, Any] | None, own: tuple[float, float] | None) -> str:
    """'0.25', its 95% interval (or 'no interval') and n, one per line; '–' for an empty cell."""
    if row is None or _finite(row.get("mean")) is None:
        return "–"
    lines = [f"{row['mean']:.2f}" + (f" {SET_MEAN_MARK}" if row.get("set_means") else "")]
    low, high = _interval(row, own)
    lines.append(f"[{low:.2f}, {high:.2f}]" if low is not None and high is not None else NO_INTERVAL)
    lines.append(f"n={row.get('count')}")
    return "\n".join(lines)


def heatmap(table: Table, row_label: str, col_label: str, scale: Scale | None = None) -> Drawing:
    """Heat map of the grid's cells (without 'all'), centred on 0 with a diverging scale;
    each cell shows its APDR, 95% interval and records (n). ``scale``: the colour range shared
    with the report's other heat maps (else this map's own)."""
    cols = [c for c in table.header[1:] if c != ALL]
    rows = list(table.numeric)
    row_col, col_col = list(table.long[0])[:2] if table.long else ("", "")
    cells = {(str(r[row_col]), str(r[col_col])): r for r in table.long}
    values = [[_finite((cells.get((rv, cv)) or {}).get("mean")) for cv in cols] for rv in rows]
    flat = [abs(v) for line in values for v in line if v is not None]
    bound = scale.colour if scale is not None else min(-CLIP_LOW, max([0.05, *flat]))
    clipped = any(v is not None and v < CLIP_LOW for line in values for v in line)
    grid = [[math.nan if v is None else v for v in line] for line in values]
    label_room = 0.075 * max((len(r) for r in rows), default=0)
    fig = Drawing(figsize=(max(4.5, 1.25 * len(cols) + 2.0 + label_room), max(2.5, 0.8 * len(rows) + 1.7)))
    ax = fig.subplots()
    cmap = matplotlib.colormaps["RdBu_r"].with_extremes(bad="#eeeeee")
    im = ax.imshow(grid, cmap=cmap, vmin=-bound, vmax=bound, aspect="auto")
    for i, rv in enumerate(rows):
        for j, cv in enumerate(cols):
            v = values[i][j]
            dark = v is not None and abs(v) / bound > 0.6
            ax.text(j, i, _cell_text(cells.get((rv, cv)), table.record_ci95.get((rv, cv))), ha="center",
                    va="center", fontsize=7.5, linespacing=1.15, color="white" if dark else "#222222")
    _xticks(ax, [_text(c) for c in cols])
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([_text(r) for r in rows])
    ax.set_xlabel(_text(col_label))
    ax.set_ylabel(_text(row_label))
    title = f"APDR: {_text(row_label)} x {_text(col_label)} (0 = white; cells: APDR, 95% interval, records)"
    if scale is not None:
        title += f"\ncolour scale ±{bound:.2f}, shared by every heat map of this report"
    if any(r.get("set_means") for r in table.long):
        title += f"\n{SET_MEAN_MARK} Semantic as the mean over its prompt set"
    ax.set_title(title + (f"\ncolours of {CLIPPED_NOTE}" if clipped else ""), fontsize=9)
    fig.colorbar(im, ax=ax, label="APDR (negative: the attack helped)", extend="min" if clipped else "neither")
    return fig


def word_bars(robust: Sequence[Mapping[str, Any]], vulnerable: Sequence[Mapping[str, Any]]) -> Drawing:
    """Horizontal bars: frequency difference (robust - vulnerable) per word."""
    data = sorted(vulnerable, key=lambda r: r["difference"]) + sorted(robust, key=lambda r: r["difference"])
    words = [_text(r["word"]) for r in data]
    diffs = [r["difference"] for r in data]
    fig = Drawing(figsize=(7.0, max(2.5, 0.28 * len(words) + 1.2)))
    ax = fig.subplots()
    ax.barh(range(len(words)), diffs, color=["#2e7d32" if d > 0 else "#c62828" for d in diffs])
    ax.set_yticks(range(len(words)))
    ax.set_yticklabels(words, fontsize=9)
    ax.axvline(0, color="#555555", linewidth=0.8)
    ax.set_xlabel("relative frequency: robust - vulnerable")
    ax.set_title("Words in robust (green) vs vulnerable (red) prompts")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    return fig
