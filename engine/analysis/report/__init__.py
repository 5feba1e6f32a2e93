"""Reports over finished runs, as library code: ``build_report(paths)``.

A report is a list of sections, one per *setting* (mode, parser, generation
length, sample size, budget): records measured differently are never pooled.
Each section holds the clean scores (with the at-chance flags), the paper's
APDR grids (mean ± sample std and a 95% interval per cell), optional
``group_by`` tables, the cost per attack and the word-frequency analysis.
Across sections come the most damaging and the most helpful adversarial
prompts and the records that were not averaged (skipped or failed).

    report = build_report(["runs/sweeps/embedded"])
    print(report.markdown())
    report.write("report/")
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from promptrobust.engine.analysis.report.load import ReportInputError, RunData, Setting, load_runs
from promptrobust.engine.analysis.report.tables import Table

__all__ = ["FORMATS", "Figure", "Report", "ReportInputError", "Section", "Table", "build_report"]

FORMATS = ("md", "csv", "png", "html")


@dataclass(frozen=True)
class Figure:
    """One picture: PNG bytes, written to ``<name>.png`` and embedded in the HTML page."""

    name: str
    caption: str
    png: bytes


@dataclass
class Section:
    """The tables and figures of one setting."""

    setting: Setting | None
    """None when the whole report has one setting (then it is in the header)."""
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def title(self) -> str:
        return "" if self.setting is None else f"Setting: {self.setting.label()}"


@dataclass
class Report:
    """A built report: read its ``tables`` and ``figures``, or ``write`` it to a folder."""

    meta: list[str]
    notes: list[str]
    sections: list[Section]
    extremes: list[Table] = field(default_factory=list)
    """Most damaging and most helpful adversarial prompts (long rows hold the full prompts)."""
    excluded: Table | None = None
    """Skipped (clean score 0) and failed records: listed, never averaged."""

    @property
    def tables(self) -> list[Table]:
        out = [t for s in self.sections for t in s.tables] + list(self.extremes)
        return out + ([self.excluded] if self.excluded is not None else [])

    @property
    def figures(self) -> list[Figure]:
        return [f for s in self.sections for f in s.figures]

    def table(self, name: str) -> Table:
        """The table named ``name`` (its CSV stem)."""
        for t in self.tables:
            if t.name == name:
                return t
        raise KeyError(f"no table {name!r}; tables: {', '.join(t.name for t in self.tables)}")

    def markdown(self) -> str:
        """Every table as Markdown, sections headed by their setting."""
        from promptrobust.engine.output_safety import markdown_text as md

        lines = ["# promptrobust report", "", *(f"- {md(m)}" for m in self.meta), ""]
        lines += [f"> {md(n)}\n" for n in self.notes]
        for s in self.sections:
            if s.title:
                lines += [f"## {md(s.title)}", ""]
            lines += [f"> {md(n)}\n" for n in s.notes]
            lines += [t.markdown() for t in s.tables]
        if self.extremes or self.excluded is not None:
            lines += ["## Adversarial prompts and records not averaged", ""]
            lines += [t.markdown() for t in self.extremes]
            if self.excluded is not None:
                lines.append(self.excluded.markdown())
        return "\n".join(lines)

    def html(self) -> str:
        """One self-contained HTML page (inline CSS, images as data URIs, no scripts)."""
        from promptrobust.engine.analysis.report.html import render

        return render(self)

    def write(self, folder: str | os.PathLike[str], formats: Iterable[str] = FORMATS) -> list[Path]:
        """Write the chosen formats (md, csv, png, html) into ``folder``; returns the files written."""
        chosen = set(formats)
        unknown = sorted(chosen - set(FORMATS))
        if unknown:
            raise ReportInputError(f"unknown format {unknown[0]!r}: use {', '.join(FORMATS)}")
        out = Path(folder)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ReportInputError(f"cannot create report folder {out} ({exc.strerror}): choose a writable folder") from None
        from promptrobust.engine.atomic_io import Staged

        # Every file to a temporary first, all renamed at the end: a full disk or a kill
        # leaves the previous report whole (no 0-byte PNG, no report without its HTML).
        with Staged() as staged:
            if "md" in chosen:
                staged.write_text(out / "report.md", self.markdown())
            if "csv" in chosen:
                for t in self.tables:
                    staged.write_bytes(out / f"{t.name}.csv", t.csv_bytes())
            if "png" in chosen:
                for f in self.figures:
                    staged.write_bytes(out / f"{f.name}.png", f.png)
            if "html" in chosen:
                staged.write_text(out / "report.html", self.html())
            written = staged.targets
        return written


def build_report(
    paths: Sequence[str | os.PathLike[str]] | str | os.PathLike[str],
    *,
    top: int = 10,
    words: int = 15,
    word_threshold: float | None = None,
    group_by: Sequence[str] = (),
    figures: bool = True,
) -> Report:
    """A report over every run under ``paths`` (run folders, sweep folders or results files).

    ``top``: adversarial prompts listed each way (most damaging, most helpful);
    ``words``: words listed each way in the word-frequency analysis, whose
    robust/vulnerable split is ``word_threshold`` (default: the median PDR);
    ``group_by``: record fields or extra columns (e.g. a pairs file's
    ``source_model``) for an extra APDR table; ``figures``: draw the PNGs.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if top < 1:
        raise ReportInputError(f"top must be at least 1 (got {top})")
    if words < 1:
        raise ReportInputError(f"words must be at least 1 (got {words})")
    data = load_runs(paths)
    _check_group_by(data, group_by)
    from promptrobust.engine.analysis.report.build import build_sections, extremes_and_excluded, meta_and_notes

    sections = build_sections(data, words=words, word_threshold=word_threshold, group_by=group_by, figures=figures)
    extremes, excluded, extreme_notes = extremes_and_excluded(data, top)
    meta, notes = meta_and_notes(data, sections)
    return Report(meta, notes + extreme_notes, sections, extremes, excluded)


def _check_group_by(data: RunData, columns: Sequence[str]) -> None:
    from promptrobust.engine.analysis.report.tables import column_value

    for col in columns:
        if not any(column_value(r, col) is not None for r in data.records):
            extras = sorted({k for r in data.records for k in r["extras"]})
            hint = f"extra columns in these records: {', '.join(extras)}" if extras else "these records carry no extra columns"
            raise ReportInputError(f"no record has a column {col!r} to group by ({hint})")

