"""Report pictures as PNG bytes (matplotlib, Agg backend: no display needed).

Each function returns the PNG bytes, so the same picture is written to a
file and embedded in the HTML page without drawing it twice.
"""

from __future__ import annotations

import io
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import polars as pl

from promptrobust.cli.report_tables import ALL, Table

_DPI = 110


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _xticks(ax, labels: list[str]) -> None:
    """Tick labels, slanted when there are many or they are long, so they never overlap."""
    slant = len(labels) > 4 or max((len(x) for x in labels), default=0) > 14
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=30 if slant else 0, ha="right" if slant else "center", rotation_mode="anchor")


def apdr_bars(table: Table, what: str) -> bytes:
    """Bars of each row's overall APDR (the table's 'all' column) with sample-std error bars."""
    row = table.frame.columns[0]
    col = table.frame.columns[1]
    data = table.frame.filter(pl.col(col) == ALL)
    labels = data[row].to_list()
    means = data["mean"].to_list()
    stds = [0.0 if s is None or math.isnan(s) else s for s in data["std"].to_list()]
    counts = data["count"].to_list()
    fig, ax = plt.subplots(figsize=(max(4.5, 0.75 * len(labels) + 1.5), 4.0))
    bars = ax.bar(range(len(labels)), means, yerr=stds, capsize=4, color="#4c78a8", edgecolor="#2b4a6f", ecolor="#333333")
    for b, m, s in zip(bars, means, stds):
        ax.annotate(f"{m:.2f}", (b.get_x() + b.get_width() / 2, max(m + s, m, 0.0)), xytext=(0, 3),
                    textcoords="offset points", ha="center", va="bottom", fontsize=8, color="#222222")
    lo = min([0.0, *(m - s for m, s in zip(means, stds))])
    hi = max([0.05, *(m + s for m, s in zip(means, stds))])
    ax.set_ylim(lo * 1.15, hi * 1.15)  # room for the labels; start at 0 unless a PDR is negative
    _xticks(ax, [f"{label} ({n})" for label, n in zip(labels, counts)])
    ax.set_ylabel("APDR (mean PDR)")
    ax.set_xlabel(what)
    ax.set_title(f"APDR by {what} (error bars: sample std; records in brackets)", fontsize=10)
    ax.axhline(0, color="#888888", linewidth=0.8)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    return _png(fig)


def heatmap(table: Table, row_label: str, col_label: str) -> bytes:
    """Heat map of the table's mean cells (without the 'all' column), each cell annotated."""
    cols = [c for c in table.header[1:] if c != ALL]
    keep = [i for i, c in enumerate(table.header[1:]) if c != ALL]
    rows = list(table.numeric)
    values = [[table.numeric[r][i] for i in keep] for r in rows]
    flat = [v for line in values for v in line if v is not None]
    lo = min(0.0, *flat) if flat else 0.0
    hi = max(max(flat) if flat else 1.0, lo + 1e-6, 0.05)
    grid = [[math.nan if v is None else v for v in line] for line in values]
    label_room = 0.075 * max((len(r) for r in rows), default=0)
    fig, ax = plt.subplots(figsize=(max(4.5, 0.75 * len(cols) + 1.8 + label_room), max(2.5, 0.45 * len(rows) + 1.6)))
    cmap = matplotlib.colormaps["OrRd"].with_extremes(bad="#eeeeee")
    im = ax.imshow(grid, cmap=cmap, vmin=lo, vmax=hi, aspect="auto")
    for i, line in enumerate(values):
        for j, v in enumerate(line):
            text = "–" if v is None else f"{v:.2f}"
            dark = v is not None and (v - lo) / (hi - lo) > 0.6
            ax.text(j, i, text, ha="center", va="center", fontsize=9, color="white" if dark else "#222222")
    _xticks(ax, cols)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows)
    ax.set_xlabel(col_label)
    ax.set_ylabel(row_label)
    ax.set_title(f"APDR: {row_label} x {col_label}")
    fig.colorbar(im, ax=ax, label="APDR")
    return _png(fig)


def word_bars(robust: pl.DataFrame, vulnerable: pl.DataFrame) -> bytes:
    """Horizontal bars: frequency difference (robust - vulnerable) per word."""
    data = pl.concat([vulnerable.sort("difference"), robust.sort("difference")])  # strongest at the ends
    words = data["word"].to_list()
    diffs = data["difference"].to_list()
    fig, ax = plt.subplots(figsize=(7.0, max(2.5, 0.28 * len(words) + 1.2)))
    colors = ["#2e7d32" if d > 0 else "#c62828" for d in diffs]
    ax.barh(range(len(words)), diffs, color=colors)
    ax.set_yticks(range(len(words)))
    ax.set_yticklabels(words, fontsize=9)
    ax.axvline(0, color="#555555", linewidth=0.8)
    ax.set_xlabel("relative frequency: robust - vulnerable")
    ax.set_title("Words in robust (green) vs vulnerable (red) prompts")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    return _png(fig)
