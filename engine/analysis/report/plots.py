"""Report pictures as PNG bytes (matplotlib, Agg backend: no display needed).

Each function returns the PNG bytes, so the same picture is written to a
file and embedded in the HTML page without drawing it twice. Heat maps use a
diverging colour scale centred on 0: red where attacks lowered the score,
blue where they raised it (negative PDR).
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from promptrobust.engine.safe_io.output_safety import PLOT_RC

# Labels are data (attack names from a pairs file, prompt ids): never TeX or mathtext.
matplotlib.rcParams.update(PLOT_RC)

from promptrobust.engine.analysis.report.tables import ALL, Table

_DPI = 110


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _xticks(ax: Any, labels: list[str]) -> None:
    """Tick labels, slanted when there are many or they are long, so they never overlap."""
    slant = len(labels) > 4 or max((len(x) for x in labels), default=0) > 14
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=30 if slant else 0, ha="right" if slant else "center", rotation_mode="anchor")


def apdr_bars(table: Table, what: str) -> bytes:
    """Bars of each row's overall APDR (the grid's 'all' column) with its 95% interval as error bars."""
    row_col, col_col = list(table.long[0])[:2] if table.long else (what, "")
    data = [r for r in table.long if r.get(col_col) == ALL]
    labels = [str(r[row_col]) for r in data]
    means = [float(r["mean"]) for r in data]
    # An interval that misses its mean (records whose PDR disagrees with their own sample
    # scores: a hand-edited or foreign file) draws no bar on that side instead of crashing.
    lows = [max(0.0, m - (r["ci_low"] if r["ci_low"] is not None else m)) for m, r in zip(means, data)]
    highs = [max(0.0, (r["ci_high"] if r["ci_high"] is not None else m) - m) for m, r in zip(means, data)]
    counts = [r["count"] for r in data]
    fig, ax = plt.subplots(figsize=(max(4.5, 0.75 * len(labels) + 1.5), 4.0))
    colors = ["#c0392b" if m >= 0 else "#2e6da4" for m in means]
    bars = ax.bar(range(len(labels)), means, yerr=[lows, highs], capsize=4, color=colors, ecolor="#333333")
    for b, m, h in zip(bars, means, highs):
        ax.annotate(f"{m:.2f}", (b.get_x() + b.get_width() / 2, max(m + h, m, 0.0)), xytext=(0, 3),
                    textcoords="offset points", ha="center", va="bottom", fontsize=8, color="#222222")
    lo = min([0.0, *(m - l for m, l in zip(means, lows))])
    hi = max([0.05, *(m + h for m, h in zip(means, highs))])
    ax.set_ylim(lo * 1.15, hi * 1.15)
    _xticks(ax, [f"{label} ({n})" for label, n in zip(labels, counts)])
    ax.set_ylabel("APDR (mean PDR)")
    ax.set_xlabel(what)
    ax.set_title(f"APDR by {what} (error bars: 95% interval; records in brackets)", fontsize=10)
    ax.axhline(0, color="#888888", linewidth=0.8)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    return _png(fig)


def heatmap(table: Table, row_label: str, col_label: str) -> bytes:
    """Heat map of the grid's mean cells (without 'all'), centred on 0 with a diverging scale."""
    cols = [c for c in table.header[1:] if c != ALL]
    keep = [i for i, c in enumerate(table.header[1:]) if c != ALL]
    rows = list(table.numeric)
    values = [[table.numeric[r][i] for i in keep] for r in rows]
    flat = [abs(v) for line in values for v in line if v is not None]
    bound = max([0.05, *flat])
    grid = [[math.nan if v is None else v for v in line] for line in values]
    label_room = 0.075 * max((len(r) for r in rows), default=0)
    fig, ax = plt.subplots(figsize=(max(4.5, 0.75 * len(cols) + 1.8 + label_room), max(2.5, 0.45 * len(rows) + 1.6)))
    cmap = matplotlib.colormaps["RdBu_r"].with_extremes(bad="#eeeeee")
    im = ax.imshow(grid, cmap=cmap, vmin=-bound, vmax=bound, aspect="auto")
    for i, line in enumerate(values):
        for j, v in enumerate(line):
            text = "–" if v is None else f"{v:.2f}"
            dark = v is not None and abs(v) / bound > 0.6
            ax.text(j, i, text, ha="center", va="center", fontsize=9, color="white" if dark else "#222222")
    _xticks(ax, cols)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(rows)
    ax.set_xlabel(col_label)
    ax.set_ylabel(row_label)
    ax.set_title(f"APDR: {row_label} x {col_label} (0 = white)")
    fig.colorbar(im, ax=ax, label="APDR (negative: the attack helped)")
    return _png(fig)


def word_bars(robust: Sequence[Mapping[str, Any]], vulnerable: Sequence[Mapping[str, Any]]) -> bytes:
    """Horizontal bars: frequency difference (robust - vulnerable) per word."""
    data = sorted(vulnerable, key=lambda r: r["difference"]) + sorted(robust, key=lambda r: r["difference"])
    words = [r["word"] for r in data]
    diffs = [r["difference"] for r in data]
    fig, ax = plt.subplots(figsize=(7.0, max(2.5, 0.28 * len(words) + 1.2)))
    ax.barh(range(len(words)), diffs, color=["#2e7d32" if d > 0 else "#c62828" for d in diffs])
    ax.set_yticks(range(len(words)))
    ax.set_yticklabels(words, fontsize=9)
    ax.axvline(0, color="#555555", linewidth=0.8)
    ax.set_xlabel("relative frequency: robust - vulnerable")
    ax.set_title("Words in robust (green) vs vulnerable (red) prompts")
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    return _png(fig)
