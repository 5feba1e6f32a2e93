"""Label tasks: a few text fields in, one label word out (GLUE, Rotten Tomatoes)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from promptrobust.tasks.base import Metric, ParserName, Sample
from promptrobust.tasks.common import CONTAINERS, DatasetTask, column, id_value, kind_of, text_value
from promptrobust.tasks.errors import TaskDataError
from promptrobust.tasks.metrics import Accuracy
from promptrobust.tasks.parsing import LabelParser, last_word
from promptrobust.tasks.datafiles import DataRow


@dataclass(frozen=True)
class Field:
    """A sample field: its key, the label shown in the input, accepted column names."""

    key: str
    display: str
    columns: tuple[str, ...]


@dataclass
class ClassificationTask(DatasetTask):
    fields: tuple[Field, ...] = ()
    label_columns: tuple[str, ...] = ("label",)
    #: Raw label value (as a string: "0", "1", "entailment"...) -> canonical label.
    raw_labels: Mapping[str, str] = field(default_factory=dict)
    #: Extra words ``robust`` accepts for a label (the verbaliser always counts).
    synonyms: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    id_columns: tuple[str, ...] = ("idx", "id", "index")
    #: Whether ``last_word`` reads a bare label id ("0", "1") as that label:
    #: promptbench's label set holds the ids for SST-2, QNLI, RTE and WNLI only.
    digit_answers: bool = False

    @property
    def metric(self) -> Metric:
        return Accuracy()

    @cached_property
    def _parser(self) -> LabelParser:
        words = {lab: (self.verbalizers[lab], *self.synonyms.get(lab, ())) for lab in self.labels}
        return LabelParser(words)

    def _label(self, raw: Any, origin: str) -> str:
        if isinstance(raw, CONTAINERS):
            raise TaskDataError(f"{origin}: column {self.label_columns[0]!r} holds {kind_of(raw)}, not a label; "
                                "fix the row")
        key = str(raw).strip() if raw is not None else ""
        if key.lower() in self.labels:
            return key.lower()
        if key in self.raw_labels:
            return self.raw_labels[key]
        valid = sorted(set(self.raw_labels) | set(self.labels))
        raise TaskDataError(
            f"{origin}: unknown label {raw!r} in column {self.label_columns[0]!r}; expected one of {', '.join(valid)}"
        )

    def data_columns(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([c for f in self.fields for c in f.columns] + [*self.label_columns, *self.id_columns]))

    def row_to_sample(self, row: DataRow, index: int, origin: str, tag: str) -> Sample:
        values = {f.key: text_value(column(row, f.columns, origin), f.columns[0], origin) for f in self.fields}
        target = self._label(column(row, self.label_columns, origin), origin)
        rid = next((id_value(row[c], c, origin) for c in self.id_columns if c in row and row[c] is not None), index)
        prefix = f"{tag}:" if tag else ""
        return Sample(id=f"{self.name}:{prefix}{rid}", fields=values, target=target)

    def fields_block(self, sample: Sample, *, slots_shown: bool = False) -> list[str]:
        return [f.display + ": " + sample.fields[f.key] for f in self.fields]

    def answer_text(self, sample: Sample) -> str:
        return self.verbalizers[sample.target]

    def parse(self, answer: str, parser: ParserName = "last_word") -> str | None:
        """``last_word`` also reads a bare label id ("0", "1") where promptbench's
        label set has them (its ids are GLUE's, the same as ``raw_labels``)."""
        label = self._parser.parse(answer, parser)
        if label is None and parser == "last_word" and self.digit_answers:
            word = last_word(answer)
            if word.isdigit():
                return self.raw_labels.get(word)
        return label


def binary_labels(zero: str, one: str) -> dict[str, str]:
    return {"0": zero, "1": one}


def field_displays(fields: Sequence[Field]) -> list[str]:
    return [f.display for f in fields]
