"""What a report is: sections of tables and figures (built by ``build``, read by the
HTML page and the CLI). Kept apart from ``build`` so neither imports the package."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from promptrobust.engine.analysis.report.html import render
from promptrobust.engine.analysis.report.load import ReportInputError, Setting
from promptrobust.engine.analysis.report.tables import Table

FORMATS = ("md", "csv", "png", "html")

KIND_TITLES = {
    "clean": "Clean scores",
    "attack": "Attacks (each attack's own search)",
    "pair": "Given pairs (pre eval)",
    "transfer": "Transfers (adversarial prompts of a source model on a target model)",
    "defense": "Defenses (adversarial prompts repaired before scoring)",
}
KIND_ORDER = tuple(KIND_TITLES)


@dataclass(frozen=True)
class Figure:
    """One picture: PNG bytes, written to ``<name>.png`` and embedded in the HTML page."""

    name: str
    caption: str
    png: bytes


@dataclass
class Section:
    """The tables and figures of one kind of measurement under one setting."""

    setting: Setting | None
    kind: str = "attack"
    """clean, attack, pair, transfer or defense (``engine.records``)."""
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def title(self) -> str:
        head = KIND_TITLES.get(self.kind, self.kind)
        return head if self.setting is None else f"{head}: {self.setting.label()}"


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
        from promptrobust.engine.safe_io.output_safety import markdown_text as md

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
        from promptrobust.engine.safe_io.atomic_io import Staged

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
