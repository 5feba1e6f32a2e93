"""The report's tables, built from normalised records (see ``load``).

Every APDR cell comes from ``statistics.summarize_pdrs``: the mean PDR of
the attacked records in the cell, their sample standard deviation (ddof=1)
and a 95% bootstrap interval over prompts and samples. Skipped (clean score
0) and failed records are listed in their own table, never averaged.
Rows and columns are sorted alphabetically (prompt types in the paper's
order) and every APDR grid ends with an ``all`` column over the whole row.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars

from promptrobust.engine.analysis.report.checks import INVALID
from promptrobust.engine.safe_io.output_safety import csv_cell, markdown_text
from promptrobust.engine.measuring.statistics import AT_CHANCE_NOTE, PDRSummary, summarize_pdrs

ALL = "all"
MISSING = "–"
APDR_STATISTIC = "APDR: mean ± sample s.d. [95% bootstrap interval over prompts and samples] of per-record PDRs"
APDR_NOTE = (
    "mean ± sample standard deviation (ddof=1) of PDR over the attacked records, "
    "then its 95% interval (bootstrap over prompts and samples; none where the records hold no per-sample scores); "
    "one record: its PDR and its own 95% interval (paired bootstrap over samples)"
)
#: Marks a cell that holds a prompt-set record (Semantic) as its set's mean PDR (``semantic.set_mean_view``).
SET_MEAN_MARK = "†"
#: The field of such a record's view that says so.
SET_MEAN_FIELD = "set_mean"
SET_MEAN_STATISTIC = f"{SET_MEAN_MARK}: a Semantic record enters as the mean PDR over its prompt set (the paper's statistic)"
SET_MEAN_NOTE = (
    f"{SET_MEAN_MARK}: the cell holds Semantic records, each entered as the mean PDR over its prompt set (the paper's "
    "statistic; its own interval is the two-level bootstrap over the set's prompts and samples, drawn as normal "
    "replicates where records are pooled), never as the worst prompt of the set, which the Semantic table shows"
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
#: Cost columns shown only when a record of the table has them (newer records: racing, tokens, dollars).
OPTIONAL_COST_COLUMNS = (
    ("saved_by_racing", "saved by racing"),
    ("input_tokens", "input tokens"),
    ("output_tokens", "output tokens"),
    ("usd", "USD"),
)


@dataclass(frozen=True)
class Table:
    """One report table: display cells for Markdown/HTML, long rows for CSV."""

    name: str
    """File stem, e.g. ``apdr_attack_x_dataset``."""
    title: str
    header: list[str]
    rows: list[list[str]]
    long: list[dict[str, Any]]
    """One row per cell (numbers in their own columns): the CSV and ``frame``."""
    note: str = ""
    numeric: dict[str, list[float | None]] = field(default_factory=dict)
    """Row label -> the mean of each column (grids only; for heat maps)."""
    statistic: str = ""
    """What the numbers are, in a few words (the LaTeX caption says it; ``note`` says it in full)."""
    record_ci95: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    """(row, column) -> the record's own 95% PDR interval, for grid cells that hold one record
    (the table shows it beside the PDR; the figures draw it as the error bar)."""
    bookkeeping: tuple[str, ...] = ()
    """Columns (by header) that find a row again (the run folder, how the score was made) but say
    nothing a paper reports: the LaTeX table leaves them out; Markdown, HTML and CSV keep them."""

    @property
    def frame(self) -> polars.DataFrame:
        """The long rows as a polars DataFrame."""
        import polars as pl

        return pl.DataFrame(self.long, infer_schema_length=None)

    def markdown(self) -> str:
        """GitHub-style table: first column left-aligned, numbers right-aligned, padded for terminals."""
        header = [_md(h) for h in self.header]
        rows = [[_md(c) for c in r] for r in self.rows]
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
        lines = [f"### {markdown_text(self.title)}", ""]
        lines.append("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |")
        lines.append("|" + "|".join((":" + "-" * (w + 1)) if i == 0 else ("-" * (w + 1) + ":") for i, w in enumerate(widths)) + "|")
        for row in rows:
            cells = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
            lines.append("| " + " | ".join(cells) + " |")
        if self.note:
            lines += ["", f"_{markdown_text(self.note)}_"]
        return "\n".join(lines) + "\n"

    def csv_bytes(self) -> bytes:
        """The long rows as CSV, every text cell safe to open in a spreadsheet (``output_safety.csv_cell``)."""
        columns: dict[str, None] = {}
        for row in self.long:
            columns.update(dict.fromkeys(row))
        fh = io.StringIO(newline="")
        writer = csv.DictWriter(fh, fieldnames=[csv_cell(c) for c in columns])
        writer.writeheader()
        for row in self.long:
            writer.writerow({csv_cell(k): _csv_value(v) for k, v in row.items()})
        return fh.getvalue().encode("utf-8")

    def write_csv(self, folder: str | os.PathLike[str]) -> Path:
        from promptrobust.engine.safe_io.atomic_io import write_bytes

        return write_bytes(Path(folder) / f"{self.name}.csv", self.csv_bytes())


def _csv_value(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        text = " ".join(f"{x:.4f}" if isinstance(x, float) else str(x) for x in v)
        numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
        return text if numbers else csv_cell(text)
    return "" if v is None else csv_cell(v)


def _md(text: str) -> str:
    """A Markdown table cell: raw HTML shown as text; a '|' inside a name must not end the cell."""
    return markdown_text(text).replace("|", "\\|")


#: A number (then, after a space, anything: '0.31 ± 0.12 [0.20, 0.43]'), a bound ('< 0.001'), or an interval.
_NUMBER_CELL = re.compile(r"(<\s)?[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?%?(\s.*)?|\[.*")


def numeric_column(cells: Sequence[str]) -> bool:
    """A column of numbers, intervals and missing marks (set right-aligned in HTML and LaTeX);
    '2026..._run' or 'sst2-task-01' are names, not numbers."""
    shown = [c for c in cells if c and c != MISSING]
    return bool(shown) and all(_NUMBER_CELL.fullmatch(c) for c in shown)


def interval_text(ci: Sequence[float] | None, digits: int = 2) -> str:
    return MISSING if not ci else f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


NO_INTERVAL = "no interval: per-sample scores not recorded"


def p_text(p: float | None) -> str:
    """A p-value with the 3 decimals the PDRs beside it have ('0.250'); '< 0.001' below that; '–' for none."""
    if p is None:
        return MISSING
    return "< 0.001" if p < 0.0005 else f"{p:.3f}"


def has_sample_scores(records: Iterable[Mapping[str, Any]]) -> bool:
    """Every record carries per-sample scores (so a bootstrap over samples is possible)."""
    return all(r.get("has_sample_scores", True) for r in records)


def apdr_cell(s: PDRSummary, digits: int = 2, *, samples: bool = True, marked: bool = False) -> str:
    """'0.31 ± 0.12 [0.20, 0.43]'; one record: its PDR and its own interval ('0.25 [0.10, 0.40]', the
    interval the figures draw), or its PDR alone when it kept none; '–' for none; without per-sample
    scores the interval is replaced by ``NO_INTERVAL``; ``marked``: the cell holds a prompt set's mean
    (``SET_MEAN_MARK`` at the end)."""
    if s.n == 0 or s.mean is None:
        return MISSING
    mark = f" {SET_MEAN_MARK}" if marked else ""
    if s.n == 1 or s.std is None:
        if s.ci95 is not None:
            return f"{s.mean:.{digits}f} {interval_text(s.ci95, digits)}{mark}"
        return f"{s.mean:.{digits}f}" + ("" if samples else f" ({NO_INTERVAL})") + mark
    interval = interval_text(s.ci95, digits) if samples else f"({NO_INTERVAL})"
    return f"{s.mean:.{digits}f} ± {s.std:.{digits}f} {interval}{mark}"


def set_means(members: Iterable[Mapping[str, Any]]) -> int:
    """How many of ``members`` are a prompt set's mean (``semantic.set_mean_view``)."""
    return sum(1 for r in members if r.get(SET_MEAN_FIELD) and r.get("status") == "attacked")


def _summary(members: Sequence[Mapping[str, Any]]) -> tuple[PDRSummary, bool]:
    """APDR of ``members`` and whether its interval may be shown (it is withheld without per-sample scores).
    One record's interval is its own PDR interval (the figures draw the same one)."""
    s = summarize_pdrs(members)
    attacked = [r for r in members if r.get("status") == "attacked"]
    samples = has_sample_scores(attacked)
    if s.n == 1:
        own = next(r.get("pdr_ci95") for r in attacked if r.get("pdr") is not None and math.isfinite(float(r["pdr"])))
        return PDRSummary(s.mean, None, (float(own[0]), float(own[1])) if own else None, 1, s.n_prompts), samples
    if not samples and s.ci95 is not None:
        s = PDRSummary(s.mean, s.std, None, s.n, s.n_prompts)
    return s, samples


def summary_columns(s: PDRSummary) -> dict[str, Any]:
    return {"mean": s.mean, "std": s.std, "ci_low": s.ci95[0] if s.ci95 else None,
            "ci_high": s.ci95[1] if s.ci95 else None, "count": s.n, "prompts": s.n_prompts}


def prompt_kind(rec: Mapping[str, Any]) -> str:
    """The paper's four prompt kinds: zero-/few-shot x task/role."""
    shots = rec.get("shots")
    kind = "unknown-shot" if shots is None else ("zero-shot" if int(shots) == 0 else "few-shot")
    return f"{kind} {rec.get('prompt_type') or 'unknown'}"


def _order(values: Iterable[str], preferred: Sequence[str] = ()) -> list[str]:
    present = set(values)
    first = [v for v in preferred if v in present]
    return first + sorted(present - set(first))


Key = Callable[[Mapping[str, Any]], str]


def _key(k: str | Key) -> Key:
    return k if callable(k) else (lambda r: str(r.get(k)))


def grid_table(
    records: Sequence[Mapping[str, Any]],
    row: str | Key,
    col: str | Key,
    *,
    name: str,
    title: str,
    row_title: str,
    col_title: str,
    row_order: Sequence[str] = (),
    note: str = APDR_NOTE,
) -> Table:
    """APDR of attacked ``records`` in a row x col grid plus an 'all' column."""
    rk, ck = _key(row), _key(col)
    cells: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in records:
        cells.setdefault((rk(r), ck(r)), []).append(r)
        cells.setdefault((rk(r), ALL), []).append(r)
    rows = _order({k[0] for k in cells}, row_order)
    cols = _order({k[1] for k in cells} - {ALL}) + [ALL]
    marked = set_means(records) > 0  # a prompt set's mean in the table: its cells say so (and only then)
    display: list[list[str]] = []
    long: list[dict[str, Any]] = []
    numeric: dict[str, list[float | None]] = {}
    own: dict[tuple[str, str], tuple[float, float]] = {}
    for rv in rows:
        line: list[str] = [rv]
        means: list[float | None] = []
        for cv in cols:
            members = cells.get((rv, cv))
            if not members:
                line.append(MISSING)
                means.append(None)
                continue
            s, samples = _summary(members)
            n_sets = set_means(members)
            line.append(apdr_cell(s, samples=samples, marked=n_sets > 0))
            means.append(s.mean)
            long.append({row_title: rv, col_title: cv, **summary_columns(s), **({"set_means": n_sets} if marked else {})})
            if s.n == 1 and s.ci95 is not None:
                own[(rv, cv)] = s.ci95
        display.append(line)
        numeric[rv] = means
    return Table(name, title, [f"{row_title} \\ {col_title}", *cols], display, long, with_set_note(note, marked),
                 numeric, statistic=with_set_statistic(APDR_STATISTIC, marked), record_ci95=own)


def with_set_note(note: str, marked: bool) -> str:
    """``note`` and, where a prompt set's mean is in the table, what its mark means (said only then)."""
    return f"{note}; {SET_MEAN_NOTE}" if marked else note


def with_set_statistic(statistic: str, marked: bool) -> str:
    return f"{statistic} ({SET_MEAN_STATISTIC})" if marked else statistic


def apdr_tables(records: Sequence[Mapping[str, Any]], suffix: str = "", title_suffix: str = "") -> list[Table]:
    """The paper's APDR tables (attack, model, prompt type: each x dataset) plus model x attack."""
    specs: list[tuple[str | Key, str, str, str, str, Sequence[str]]] = [
        ("attack", "attack", "dataset", "apdr_attack_x_dataset", "APDR by attack and dataset", ()),
        ("model", "model", "dataset", "apdr_model_x_dataset", "APDR by model and dataset", ()),
        (prompt_kind, "prompt type", "dataset", "apdr_prompt_type_x_dataset", "APDR by prompt type and dataset", PROMPT_TYPE_ORDER),
        ("model", "model", "attack", "apdr_model_x_attack", "APDR by model and attack", ()),
    ]
    return [
        grid_table(records, row, col, name=name + suffix, title=title + title_suffix, row_title=rt, col_title=col, row_order=order)
        for row, rt, col, name, title, order in specs
    ]


def group_table(records: Sequence[Mapping[str, Any]], columns: Sequence[str], suffix: str = "", title_suffix: str = "",
                *, name: str = "", title: str = "") -> Table:
    """APDR per combination of ``columns`` (record fields or extra columns of a pairs file)."""
    groups: dict[tuple[str, ...], list[Mapping[str, Any]]] = {}
    for r in records:
        groups.setdefault(tuple(_column_text(r, c) for c in columns), []).append(r)
    marked = set_means(records) > 0
    display, long = [], []
    for key in sorted(groups):
        s, samples = _summary(groups[key])
        n_sets = set_means(groups[key])
        display.append([*key, str(s.n), str(s.n_prompts), apdr_cell(s, samples=samples, marked=n_sets > 0)])
        long.append({**dict(zip(columns, key)), **summary_columns(s), **({"set_means": n_sets} if marked else {})})
    name = (name or "apdr_by_" + "_".join(columns)) + suffix
    title = (title or "APDR by " + ", ".join(columns)) + title_suffix
    return Table(name, title, [*columns, "records", "prompts", "APDR"], display, long, with_set_note(APDR_NOTE, marked),
                 statistic=with_set_statistic(APDR_STATISTIC, marked))


def column_value(rec: Mapping[str, Any], column: str) -> Any:
    """A record's field, or an extra column it carries (e.g. source_model)."""
    if column in rec and column not in ("extras", "cost", "settings") and rec[column] is not None:
        return rec[column]
    return rec.get("extras", {}).get(column)


def _column_text(rec: Mapping[str, Any], column: str) -> str:
    v = column_value(rec, column)
    return MISSING if v is None else str(v)


def _mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    m = math.fsum(values) / len(values)
    if len(values) < 2:
        return m, None
    return m, math.sqrt(math.fsum((v - m) ** 2 for v in values) / (len(values) - 1))


def clean_table(clean: Sequence[Mapping[str, Any]], suffix: str = "", title_suffix: str = "") -> Table:
    """Clean scores, model (and shots) x dataset: mean ± sample std (ddof=1) over prompts; a prompt
    scored by several runs counts once, with the mean of its scores."""
    per_prompt: dict[tuple[Any, ...], list[float]] = {}
    for c in clean:
        per_prompt.setdefault((c["model"], c["shots"], c["dataset"], c["prompt_id"]), []).append(c["score"])
    cells: dict[tuple[str, str], list[float]] = {}
    labels: dict[str, tuple[str, int | None]] = {}
    for (model, shots, dataset, _), scores in per_prompt.items():
        label = model if shots is None else f"{model} ({shots}-shot)"
        labels[label] = (model, shots)
        cells.setdefault((label, dataset), []).append(math.fsum(scores) / len(scores))
    rows = _order({k[0] for k in cells})
    cols = _order({k[1] for k in cells})
    display, long = [], []
    for rv in rows:
        line = [rv]
        for cv in cols:
            values = cells.get((rv, cv))
            if not values:
                line.append(MISSING)
                continue
            m, sd = _mean_std(values)
            line.append(f"{m:.2f}" if sd is None else f"{m:.2f} ± {sd:.2f}")
            long.append({"model": labels[rv][0], "shots": labels[rv][1], "dataset": cv, "mean": m, "std": sd, "count": len(values)})
        display.append(line)
    note = ("mean ± sample standard deviation (ddof=1) of the clean score over every distinct prompt listed in "
            "the per-prompt table for that model and dataset (count in the CSV), whatever measurement scored it; "
            "a prompt scored by several runs counts once, with the mean of its scores")
    return Table("clean_model_x_dataset" + suffix, "Clean scores by model and dataset" + title_suffix,
                 ["model \\ dataset", *cols], display, long, note,
                 statistic="clean score: mean ± sample s.d. over prompts")


FROM_TEXT = {"run": "prompt set", "attack": "attacked prompt", "pair": "pair (clean half)",
             "transfer": "transfer (clean half)", "defense": "defense (clean half)"}


def clean_prompts_table(clean: Sequence[Mapping[str, Any]], suffix: str = "", title_suffix: str = "") -> Table:
    """Every prompt's clean score with its 95% interval and the at-chance flag (one row per prompt and run)."""
    rows: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    for c in clean:
        rows.setdefault((c["model"], c["shots"], c["dataset"], c["prompt_id"], c["source"]), c)
    display, long = [], []
    for key in sorted(rows, key=lambda k: tuple(str(x) for x in k)):
        c = rows[key]
        ci = c.get("ci95")
        chance = MISSING if c.get("chance_rate") is None else f"{c['chance_rate']:.2f}"
        model = c["model"] if c["shots"] is None else f"{c['model']} ({c['shots']}-shot)"
        display.append([model, c["dataset"], c["prompt_id"], f"{c['score']:.2f}", interval_text(ci) if ci else NO_INTERVAL,
                        "yes" if c.get("at_chance") else "", chance, FROM_TEXT.get(c.get("from", ""), str(c.get("from") or "")),
                        Path(str(c["source"])).name])
        long.append({k: c.get(k) for k in ("model", "shots", "dataset", "prompt_id", "score", "ci95", "at_chance",
                                           "chance_rate", "from", "source")})
    return Table("clean_prompts" + suffix, "Clean score of every prompt" + title_suffix,
                 ["model", "dataset", "prompt", "clean score", "95% interval", "at chance", "chance rate", "scored as", "run"],
                 display, long, f"95% interval: Wilson (0/1 scores) or bootstrap over samples; at chance: {AT_CHANCE_NOTE}",
                 statistic="clean score of each prompt [95% interval over samples]", bookkeeping=("scored as", "run"))


def at_chance_table(clean: Sequence[Mapping[str, Any]], suffix: str = "", title_suffix: str = "") -> Table | None:
    """The clean scores whose 95% interval contains the majority-class rate."""
    flagged = sorted((c for c in clean if c.get("at_chance")), key=lambda c: (c["model"], c["dataset"], c["prompt_id"]))
    if not flagged:
        return None
    display, long, seen = [], [], set()
    for c in flagged:
        key = (c["model"], c["shots"], c["dataset"], c["prompt_id"], c["source"])
        if key in seen:
            continue
        seen.add(key)
        chance = MISSING if c.get("chance_rate") is None else f"{c['chance_rate']:.2f}"
        display.append([c["model"], c["dataset"], c["prompt_id"], f"{c['score']:.2f}", interval_text(c.get("ci95")), chance])
        long.append({k: c.get(k) for k in ("model", "shots", "dataset", "prompt_id", "score", "ci95", "chance_rate", "source")})
    return Table("clean_at_chance" + suffix, "Clean scores at chance" + title_suffix,
                 ["model", "dataset", "prompt", "clean score", "95% interval", "chance rate"], display, long, AT_CHANCE_NOTE,
                 statistic="clean scores whose 95% interval holds the majority-class rate")


def cost_table(records: Sequence[Mapping[str, Any]], suffix: str = "", title_suffix: str = "") -> Table:
    """Mean cost per attacked prompt, per attack; wall seconds are each record's own time."""
    by_attack: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        by_attack.setdefault(r["attack"], []).append(r)
    display, long = [], []
    columns = [*COST_COLUMNS, *(c for c in OPTIONAL_COST_COLUMNS
                                if any(r["cost"].get(c[0]) not in (None, 0) for r in records))]
    for attack in sorted(by_attack):
        recs = by_attack[attack]
        line, row = [attack, str(len(recs))], {"attack": attack, "records": len(recs)}
        for col, _ in columns:
            values = [r["cost"][col] for r in recs if r["cost"].get(col) is not None]
            m = math.fsum(values) / len(values) if values else None
            row[col] = m
            line.append(MISSING if m is None else (f"{m:.2f}" if col == "wall_seconds" else f"{m:.4f}" if col == "usd"
                                                    else f"{m:.1f}"))
        display.append(line)
        long.append(row)
    header = ["attack", "records", *(f"mean {label}" for _, label in columns)]
    note = ("mean per attacked prompt (one record = one prompt attacked on one model and dataset); requests: the record's own; "
            "wall seconds: elapsed while its attack ran (attacks that ran at the same time overlap, so they do not add up)")
    return Table("cost_by_attack" + suffix, "Attack cost per attacked prompt" + title_suffix, header, display, long, note,
                 statistic="mean cost per attacked prompt")


def excluded_table(records: Sequence[Mapping[str, Any]]) -> Table | None:
    """Records that are listed but not averaged: skipped (clean score 0), failed, and invalid
    (numbers that cannot be right, or a kind this version does not know: ``checks``)."""
    out = sorted((r for r in records if r["status"] != "attacked"),
                 key=lambda r: (r["status"], r["model"], r["dataset"], r["attack"], r["prompt_id"]))
    if not out:
        return None
    display, long = [], []
    for r in out:
        reason = "clean score 0: nothing to drop" if r["status"] == "skipped_clean_zero" else str(r.get("error") or r["status"])
        reason = reason.splitlines()[0] if reason else reason
        display.append([r["status"], r["model"], r["dataset"], r["attack"], r["prompt_id"], reason])
        long.append({"status": r["status"], "model": r["model"], "dataset": r["dataset"], "attack": r["attack"],
                     "prompt_id": r["prompt_id"], "reason": reason, "setting": r["setting"].label(), "source": r["source"]})
    invalid = any(r["status"] == INVALID for r in out)
    title = "Records not averaged (skipped, failed or invalid)" if invalid else "Records not averaged (skipped or failed)"
    if any(r["status"] == "nothing_to_change" for r in out):
        title = title.replace("(skipped", "(skipped, nothing to change")
    return Table("records_not_averaged", title,
                 ["status", "model", "dataset", "attack", "prompt", "reason"], display, long,
                 "listed for completeness; none of them enters an APDR", statistic="records left out of every average")


PROMPT_COLUMNS = ("pdr", "pdr_ci95", "mcnemar_p", "at_chance", "model", "dataset", "attack", "prompt_id", "setting",
                  "clean_score", "adversarial_score", "clean_prompt", "adversarial_prompt",
                  "substitutions", "final_similarity", "held_out")


def extreme_prompts(records: Sequence[Mapping[str, Any]], top: int, *, helpful: bool = False) -> list[dict[str, Any]]:
    """The ``top`` attacked records with the highest PDR (> 0), or with ``helpful`` the lowest (< 0):
    adversarial prompts that raised the score."""
    changed = [r for r in records if r["status"] == "attacked" and r["adversarial_prompt"] != r["clean_prompt"]
               and (r["pdr"] < 0 if helpful else r["pdr"] > 0)]
    changed.sort(key=lambda r: (r["pdr"] if helpful else -r["pdr"], r["model"], r["dataset"], r["attack"], r["prompt_id"]))
    return [{k: (r[k].label() if k == "setting" else r.get(k)) for k in PROMPT_COLUMNS} for r in changed[:top]]


def prompts_table(rows: Sequence[Mapping[str, Any]], *, helpful: bool) -> Table:
    name, title = (("most_helpful_prompts", "Most helpful adversarial prompts (PDR < 0: the score rose)") if helpful
                   else ("worst_prompts", "Most damaging adversarial prompts"))
    display = []
    for i, r in enumerate(rows, 1):
        p = p_text(r.get("mcnemar_p"))
        ci = interval_text(r.get("pdr_ci95"), 3) if r.get("pdr_ci95") else NO_INTERVAL
        display.append([str(i), f"{r['pdr']:.3f}", ci, p, "yes" if r.get("at_chance") else "",
                        r["attack"], r["model"], r["dataset"], r["prompt_id"]])
    note = "PDR interval: paired bootstrap over samples; p: exact McNemar test on discordant samples"
    if any(r.get("at_chance") for r in rows):
        note += f"; at chance: {AT_CHANCE_NOTE}"
    return Table(name, title, ["#", "PDR", "95% interval", "McNemar p", "at chance", "attack", "model", "dataset", "prompt"],
                 display, list(map(dict, rows)), note,
                 statistic="PDR of each record [95% paired bootstrap interval over samples], exact McNemar p")


# -- kinds other than an attack's own search: their own tables, never pooled with attacks -----------------


def pair_tables(records: Sequence[Mapping[str, Any]], suffix: str = "", title_suffix: str = "") -> list[Table]:
    """Given clean/adversarial pairs (``pre eval``): APDR per model, dataset and attack name of the file."""
    return [group_table(records, ["model", "dataset", "attack"], suffix, title_suffix,
                        name="pairs_apdr", title="APDR of given pairs by model, dataset and attack")]


def transfer_tables(records: Sequence[Mapping[str, Any]], suffix: str = "", title_suffix: str = "") -> list[Table]:
    """Transfers: the source x target matrix (all attacks), then per (source, target, attack)."""
    matrix = grid_table(records, "source_model", "model", name="transfer_source_x_target" + suffix,
                        title="Transfer APDR: source model x target model" + title_suffix,
                        row_title="source model", col_title="target model")
    return [matrix, group_table(records, ["source_model", "model", "attack"], suffix, title_suffix,
                                name="transfer_by_attack", title="Transfer APDR by source, target and attack")]


def _undefended(r: Mapping[str, Any]) -> dict[str, Any]:
    """A defense record as it was without the defense (its settings keep the undefended PDR)."""
    pdr = r["settings"].get("undefended_pdr")
    return {**r, "pdr": pdr, "status": r["status"] if pdr is not None else "skipped_clean_zero",
            "adversarial_sample_scores": [], "has_sample_scores": False}


def defense_table(records: Sequence[Mapping[str, Any]], suffix: str = "", title_suffix: str = "") -> Table:
    """Defenses: APDR without and with the defense per (model, attack, defense), and the share recovered."""
    groups: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["model"], r["attack"], str(r.get("defense") or MISSING)), []).append(r)
    display, long = [], []
    for key in sorted(groups):
        members = groups[key]
        without = summarize_pdrs([_undefended(r) for r in members])
        with_, samples = _summary(members)
        recovered = (without.mean - with_.mean) / without.mean if (
            without.mean and without.mean > 0 and with_.mean is not None) else None
        display.append([*key, str(with_.n), apdr_cell(PDRSummary(without.mean, without.std, None, without.n, without.n_prompts),
                                                      samples=without.n < 2),
                        apdr_cell(with_, samples=samples), MISSING if recovered is None else f"{recovered:.0%}"])
        long.append({"model": key[0], "attack": key[1], "defense": key[2], "pdr_without": without.mean,
                     "pdr_without_std": without.std, **summary_columns(with_), "recovered": recovered})
    note = ("APDR without the defense: mean ± sample std of the undefended PDRs (the records keep no per-sample scores of "
            "the undefended prompt, so no interval); with: mean ± std and its 95% interval; recovered: share of the drop undone")
    return Table("defense_with_without" + suffix, "Defense: APDR without and with it" + title_suffix,
                 ["model", "attack", "defense", "records", "APDR without", "APDR with", "recovered"], display, long, note,
                 statistic="APDR without the defense (mean ± s.d.) and with it (mean ± s.d. [95% bootstrap interval])")
