"""What a report is: sections of tables and figures (built by ``build``, read by the
HTML page, the LaTeX document and the CLI). Kept apart from ``build`` so neither
imports the package."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from promptrobust.engine.analysis.report.html import render
from promptrobust.engine.analysis.report.load import ReportInputError, Setting
from promptrobust.engine.analysis.report.tables import Table

if TYPE_CHECKING:
    from matplotlib.figure import Figure as Drawing

    from promptrobust.engine.analysis.report.samples import RecordSamples

FORMATS = ("md", "csv", "png", "svg", "pdf", "html", "latex")
FIGURE_FORMATS = ("png", "svg", "pdf")

KIND_TITLES = {
    "clean": "Clean scores",
    "attack": "Attacks (each attack's own search)",
    "pair": "Given pairs (pre eval)",
    "transfer": "Transfers (adversarial prompts of a source model on a target model)",
    "defense": "Defenses (adversarial prompts repaired before scoring)",
}
KIND_ORDER = tuple(KIND_TITLES)


@dataclass(frozen=True, eq=False)
class Figure:
    """One picture, drawn once: saved as ``<name>.png``, ``.svg`` and ``.pdf`` (each rendered
    from the same drawing when first asked for), the PNG embedded in the HTML page."""

    name: str
    caption: str
    drawing: Drawing
    note: str = ""
    """What a reader of the figure alone must know (a scale it shares with other figures)."""
    _rendered: dict[str, bytes] = field(default_factory=dict, init=False, repr=False)

    def render(self, fmt: str) -> bytes:
        """The picture as ``fmt`` (png, svg or pdf)."""
        if fmt not in self._rendered:
            from promptrobust.engine.analysis.report.plots import render

            self._rendered[fmt] = render(self.drawing, fmt)
        return self._rendered[fmt]

    @property
    def png(self) -> bytes:
        return self.render("png")

    @property
    def svg(self) -> bytes:
        return self.render("svg")

    @property
    def pdf(self) -> bytes:
        return self.render("pdf")


@dataclass
class Section:
    """The tables and figures of one kind of measurement under one setting."""

    setting: Setting | None
    kind: str = "attack"
    """clean, attack, pair, transfer or defense (``engine.records``)."""
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    dimensions: dict[str, list[str]] = field(default_factory=dict)
    """Values of the fields the tables lay out as rows and columns (shots, metric), for captions."""

    @property
    def title(self) -> str:
        head = KIND_TITLES.get(self.kind, self.kind)
        return head if self.setting is None else f"{head}: {self.setting.label()}"

    @property
    def settings_text(self) -> str:
        """The kind of measurement and every setting its numbers were made under (for captions)."""
        parts = [KIND_TITLES.get(self.kind, self.kind)]
        if self.setting is not None:
            parts.append(self.setting.label())
        parts += [f"{name} {', '.join(values)}" for name, values in self.dimensions.items() if values]
        return "; ".join(parts)


@dataclass
class Report:
    """A built report: read its ``tables`` and ``figures``, or ``write`` it to a folder."""

    meta: list[str]
    notes: list[str]
    sections: list[Section]
    extremes: list[Table] = field(default_factory=list)
    """Most damaging and most helpful adversarial prompts (long rows hold the full prompts)."""
    excluded: Table | None = None
    """Skipped (clean score 0), failed and invalid records: listed, never averaged."""
    records: list[dict[str, Any]] = field(default_factory=list, repr=False)
    """The records read (normalised, reruns counted once): the per-sample pages are built from them."""
    _samples: dict[str, RecordSamples] | None = field(default=None, init=False, repr=False)

    def __repr__(self) -> str:
        head = self.meta[0].split(";")[0] if self.meta else "empty"
        return (f"Report({head}; {len(self.sections)} sections, {len(self.tables)} tables, "
                f"{len(self.figures)} figures)")

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
        """One self-contained HTML page (inline CSS, images as data URIs, no scripts); records
        link to their per-sample pages (``sample_pages``) when their samples were logged."""
        return render(self)

    def latex(self, figures: str | None = "pdf") -> str:
        """A LaTeX document: one booktabs table per report table, with intervals and a caption
        that states the statistic and the settings, and the figures included from their files
        beside it (``figures``: their format, pdf or png; None when not written; ``latex.document``)."""
        from promptrobust.engine.analysis.report.latex import document

        return document(self, figures)

    def samples(self) -> Mapping[str, RecordSamples]:
        """Each record's logged samples by run_key (read from the run folders' samples.jsonl once)."""
        if self._samples is None:
            from promptrobust.engine.analysis.report.samples import find_samples

            self._samples = find_samples(self.records)
        return self._samples

    def sample_pages(self) -> dict[str, str]:
        """The per-sample pages, by path relative to the report folder (``samples/<run_key>.html``)."""
        from promptrobust.engine.analysis.report.samples import page_html

        return {s.page: page_html(s) for s in self.samples().values()}

    def write(self, folder: str | os.PathLike[str], formats: Iterable[str] = FORMATS) -> list[Path]:
        """Write the chosen formats (md, csv, png, svg, pdf, html, latex) into ``folder``; returns the
        files written. html also writes the per-sample pages under ``samples/``."""
        chosen = set(formats)
        unknown = sorted(chosen - set(FORMATS))
        if unknown:
            raise ReportInputError(f"unknown format {unknown[0]!r}: use {', '.join(FORMATS)}")
        out = Path(folder)
        pages = self.sample_pages() if "html" in chosen else {}
        try:
            out.mkdir(parents=True, exist_ok=True)
            for sub in {(out / path).parent for path in pages}:
                sub.mkdir(exist_ok=True)
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
            for fmt in FIGURE_FORMATS:
                if fmt in chosen:
                    for f in self.figures:
                        staged.write_bytes(out / f"{f.name}.{fmt}", f.render(fmt))
            if "latex" in chosen:
                written_as = next((fmt for fmt in ("pdf", "png") if fmt in chosen), None)  # what \includegraphics finds
                staged.write_text(out / "report.tex", self.latex(written_as))
            if "html" in chosen:
                staged.write_text(out / "report.html", self.html())
                for path, page in pages.items():
                    staged.write_text(out / path, page)
            written = staged.targets
        return written
