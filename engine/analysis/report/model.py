"""What a report is: sections of tables and figures (``parts``; built by ``build``), written as
Markdown, CSV, figures, the HTML page (``html``) and the LaTeX document (``latex``). Kept apart
from ``build`` so neither imports the package; the renderers read a report through
``parts.ReportContent``, so none of them imports this module back."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from promptrobust.engine.analysis.report.html import render
from promptrobust.engine.analysis.report.latex import document
from promptrobust.engine.analysis.report.load import ReportInputError
from promptrobust.engine.analysis.report.parts import Figure, Section
from promptrobust.engine.analysis.report.review import SHEET_NAME
from promptrobust.engine.analysis.report.tables import Table

if TYPE_CHECKING:
    from promptrobust.engine.analysis.report.samples import RecordSamples

FORMATS = ("md", "csv", "png", "svg", "pdf", "html", "latex")
FIGURE_FORMATS = ("png", "svg", "pdf")

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
    records: list[dict[str, object]] = field(default_factory=list, repr=False)
    """The records read (normalised, reruns counted once): the per-sample pages are built from them."""
    review_sheet: bytes | None = field(default=None, repr=False)
    """The meaning review sheet (``review.SHEET_NAME``, written with csv): every edited adversarial
    prompt with the meaning check's verdict and a column for a person's (None: no such prompt)."""
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
                if self.review_sheet is not None:
                    staged.write_bytes(out / SHEET_NAME, self.review_sheet)
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
