"""The parts of a report (sections of tables and figures) and what a renderer reads of a whole
report (``ReportContent``): the HTML page and the LaTeX document take a report through it, so
neither imports ``model``, which imports them to write a report."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from promptrobust.engine.analysis.report.load import Setting
from promptrobust.engine.analysis.report.tables import Table

if TYPE_CHECKING:
    from matplotlib.figure import Figure as Drawing

    from promptrobust.engine.analysis.report.samples import RecordSamples

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
    """clean, attack, pair, transfer or defense (``engine.measuring.records``)."""
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




class ReportContent(Protocol):
    """What a renderer reads of a built report (``model.Report`` is one)."""

    meta: list[str]
    notes: list[str]
    sections: list[Section]
    extremes: list[Table]
    excluded: Table | None
    records: list[dict[str, Any]]

    @property
    def tables(self) -> list[Table]: ...

    @property
    def figures(self) -> list[Figure]: ...

    def samples(self) -> Mapping[str, RecordSamples]: ...
