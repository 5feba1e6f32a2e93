"""The paper's tables from result records, aggregated with polars.

Every APDR cell is the mean and the *sample* standard deviation (ddof=1) of
PDR over the records that fall into it, as in the paper's tables. A cell with
a single record has no sample deviation: Markdown and HTML show the mean
alone and the CSV leaves ``std`` empty. Rows and columns are sorted
alphabetically (prompt types in the paper's order), and every APDR table
ends with an ``all`` column: the same statistics over the whole row.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import polars as pl

ALL = "all"
MISSING = "–"
STD_NOTE = (
    "mean ± sample standard deviation (ddof=1) of PDR over records; "
    "a cell with one record shows the mean only (its std is empty in the CSV)"
)
PROMPT_TYPE_ORDER = ("zero-shot task", "zero-shot role", "few-shot task", "few-shot role")
COST_COLUMNS = (
    ("candidate_evaluations", "candidate evaluations"),
    ("model_requests", "model requests"),
    ("requests_sent", "requests sent"),
    ("cache_hits", "cache hits"),
    ("saved_by_early_stopping", "saved by early stopping"),
    ("wall_seconds", "wall seconds"),
)


@dataclass(frozen=True)
class Table:
    """One report table: display cells for Markdown/HTML, a frame for CSV."""

    name: str  # file stem, e.g. apdr_attack_x_dataset
    title: str
    header: list[str]
    rows: list[list[str]]
    frame: pl.DataFrame  # long form: one row per cell, numbers in their own columns
    note: str = ""
    numeric: dict[str, list[float | None]] = field(default_factory=dict)

    def markdown(self) -> str:
        """GitHub-style table: first column left-aligned, numbers right-aligned, padded for terminals."""
        header = [_md(h) for h in self.header]
        rows = [[_md(c) for c in r] for r in self.rows]
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
        lines = [f"### {self.title}", ""]
        lines.append("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |")
        lines.append("|" + "|".join((":" + "-" * (w + 1)) if i == 0 else ("-" * (w + 1) + ":") for i, w in enumerate(widths)) + "|")
        for row in rows:
            cells = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
            lines.append("| " + " | ".join(cells) + " |")
        if self.note:
            lines += ["", f"_{self.note}_"]
        return "\n".join(lines) + "\n"

    def write_csv(self, folder: str | os.PathLike[str]) -> str:
        path = os.path.join(folder, f"{self.name}.csv")
        self.frame.write_csv(path)
        return path


def _md(text: str) -> str:
    """A Markdown table cell: a '|' inside a name must not end the cell."""
    return text.replace("|", "\\|")


def cell(mean: float | None, std: float | None, count: int, digits: int = 2) -> str:
    """Display text of one statistic cell: '0.31 ± 0.12', or the mean alone for n=1."""
    if count == 0 or mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return MISSING
    if count == 1 or std is None or math.isnan(std):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def prompt_type_label(shots: int | None, prompt_type: str | None) -> str:
    """The paper's four prompt kinds: zero-/few-shot x task/role."""
    kind = "unknown-shot" if shots is None else ("zero-shot" if int(shots) == 0 else "few-shot")
    return f"{kind} {prompt_type or 'unknown'}"


def with_prompt_kind(records: pl.DataFrame) -> pl.DataFrame:
    """Add a ``prompt_kind`` column (e.g. 'few-shot role') from shots and prompt_type."""
    shots = records["shots"].to_list() if "shots" in records.columns else [None] * records.height
    types = records["prompt_type"].to_list() if "prompt_type" in records.columns else [None] * records.height
    return records.with_columns(pl.Series("prompt_kind", [prompt_type_label(s, t) for s, t in zip(shots, types)], dtype=pl.Utf8))


def _order(values: Sequence[str], preferred: Sequence[str] = ()) -> list[str]:
    present = set(values)
    first = [v for v in preferred if v in present]
    return first + sorted(present - set(first))


def stats(frame: pl.DataFrame, keys: list[str], value: str) -> pl.DataFrame:
    """Mean, sample std (ddof=1; null for n=1) and count of ``value`` per group."""
    return (
        frame.group_by(keys)
        .agg(
            mean=pl.col(value).mean(),
            std=pl.col(value).std(ddof=1),
            count=pl.col(value).count(),
        )
        .sort(keys)
    )


def grid_table(
    frame: pl.DataFrame,
    row: str,
    col: str,
    value: str,
    *,
    name: str,
    title: str,
    note: str,
    row_order: Sequence[str] = (),
    marginal: bool = True,
    row_title: str | None = None,
) -> Table:
    """Pivot ``value`` statistics into a row x col grid (plus an 'all' column)."""
    data = frame.select(pl.col(row).cast(pl.Utf8), pl.col(col).cast(pl.Utf8), pl.col(value).cast(pl.Float64)).drop_nulls()
    cells = stats(data, [row, col], value)
    cols = _order(cells[col].to_list())
    if marginal:
        whole = stats(data, [row], value).with_columns(pl.lit(ALL).alias(col)).select(cells.columns)
        cells = pl.concat([cells, whole])
        cols = cols + [ALL]
    rows = _order(cells[row].to_list(), row_order)
    lookup = {(r[row], r[col]): r for r in cells.iter_rows(named=True)}
    display: list[list[str]] = []
    numeric: dict[str, list[float | None]] = {}
    for r in rows:
        line = [r]
        means: list[float | None] = []
        for c in cols:
            hit = lookup.get((r, c))
            line.append(cell(hit["mean"], hit["std"], hit["count"]) if hit else MISSING)
            means.append(hit["mean"] if hit else None)
        display.append(line)
        numeric[r] = means
    rank_r = {v: i for i, v in enumerate(rows)}
    rank_c = {v: i for i, v in enumerate(cols)}
    long = cells.with_columns(
        pl.col(row).replace_strict(rank_r, return_dtype=pl.Int64).alias("_r"),
        pl.col(col).replace_strict(rank_c, return_dtype=pl.Int64).alias("_c"),
    ).sort("_r", "_c").drop("_r", "_c")
    return Table(name, title, [f"{row_title or row} \\ {col}", *cols], display, long, note, numeric)


def apdr_tables(records: pl.DataFrame) -> list[Table]:
    """The four APDR tables of the paper (attack, model, prompt kind: each x dataset) plus model x attack."""
    recs = with_prompt_kind(records)
    specs = [
        ("attack", "dataset", "apdr_attack_x_dataset", "APDR by attack and dataset", ()),
        ("model", "dataset", "apdr_model_x_dataset", "APDR by model and dataset", ()),
        ("prompt_kind", "dataset", "apdr_prompt_type_x_dataset", "APDR by prompt type and dataset", PROMPT_TYPE_ORDER),
        ("model", "attack", "apdr_model_x_attack", "APDR by model and attack", ()),
    ]
    return [
        grid_table(recs, r, c, "pdr", name=n, title=t, note=STD_NOTE, row_order=o, row_title=r.replace("prompt_kind", "prompt type"))
        for r, c, n, t, o in specs
    ]


def clean_table(clean: pl.DataFrame) -> Table:
    """Clean scores, model (and shots) x dataset: mean and sample std over prompts."""
    per_prompt = clean.group_by("model", "shots", "dataset", "prompt_id").agg(pl.col("score").cast(pl.Float64).mean())
    settings = [m if s is None else f"{m} ({s}-shot)" for m, s in zip(per_prompt["model"], per_prompt["shots"])]
    frame = per_prompt.with_columns(pl.Series("setting", settings, dtype=pl.Utf8))
    note = (
        "mean ± sample standard deviation (ddof=1) of the clean score over the prompts of each set; "
        "a prompt scored by several runs counts once, with the mean of its scores"
    )
    table = grid_table(
        frame, "setting", "dataset", "score", name="clean_model_x_dataset", title="Clean scores by model and dataset", note=note, marginal=False
    )
    # The CSV gets model and shots as columns of their own, next to the display label.
    keys = {st: (m, sh) for st, m, sh in zip(frame["setting"], frame["model"], frame["shots"])}
    long = table.frame.with_columns(
        pl.Series("model", [keys[st][0] for st in table.frame["setting"]], dtype=pl.Utf8),
        pl.Series("shots", [keys[st][1] for st in table.frame["setting"]], dtype=pl.Int64),
    ).select("model", "shots", "dataset", "mean", "std", "count")
    return Table(table.name, table.title, ["model \\ dataset", *table.header[1:]], table.rows, long, table.note, table.numeric)


def cost_table(records: pl.DataFrame) -> Table:
    """Mean cost per attacked prompt, per attack."""
    present = [(c, label) for c, label in COST_COLUMNS if c in records.columns]
    frame = (
        records.group_by("attack")
        .agg(pl.len().alias("records"), *[pl.col(c).cast(pl.Float64).mean().alias(c) for c, _ in present])
        .sort("attack")
    )
    header = ["attack", "records", *(f"mean {label}" for _, label in present)]
    rows = []
    for r in frame.iter_rows(named=True):
        line = [r["attack"], str(r["records"])]
        for c, _ in present:
            v = r[c]
            line.append(MISSING if v is None else (f"{v:.2f}" if c == "wall_seconds" else f"{v:.1f}"))
        rows.append(line)
    note = "mean per attacked prompt (one record = one prompt attacked on one model and dataset)"
    return Table("cost_by_attack", "Attack cost per attacked prompt", header, rows, frame, note)


def worst_prompts(records: pl.DataFrame, top: int) -> pl.DataFrame:
    """The ``top`` records with the highest PDR among attacks that lowered the score (PDR > 0)."""
    cols = ["pdr", "model", "dataset", "attack", "prompt_id", "clean_score", "adversarial_score", "clean_prompt", "adversarial_prompt"]
    changed = records.filter((pl.col("adversarial_prompt") != pl.col("clean_prompt")) & (pl.col("pdr") > 0))
    return changed.sort(
        ["pdr", "model", "dataset", "attack", "prompt_id"], descending=[True, False, False, False, False]
    ).head(top).select([c for c in cols if c in records.columns])
