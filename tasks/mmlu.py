"""MMLU: four-option multiple choice over 57 subjects, at most 10 per subject.

As in the paper, the subject is shown: in the prompt's ``{}`` slot ("... a
question about {} ..."), else on a "Subject:" line; few-shot examples are the
fixed 3 of the sample's subject.

Rows: ``question``, ``choices`` (a list of four; in CSV a JSON list) or
columns ``A``..``D``, ``answer`` (0-3 or a letter; ``target`` also accepted),
and ``subject``. The paper's 564 samples are spread over the subjects, at most
10 each, with ``seed``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import orjson

from promptrobust.tasks.base import Metric, ParserName, Sample
from promptrobust.tasks.common import DatasetTask, HFSplit, LocalSplit, Source, column, text_value
from promptrobust.tasks.errors import TaskDataError
from promptrobust.tasks.glue import LABEL_MAX_TOKENS
from promptrobust.tasks.metrics import Accuracy
from promptrobust.tasks.parsing import LabelParser
from promptrobust.tasks.sampling import stratified_subset
from promptrobust.tasks.datafiles import DataRow

LETTERS = ("A", "B", "C", "D")
PER_SUBJECT = 10


def subject_key(subject: str) -> str:
    """A subject as MMLU's configs name it ("High School Physics" -> "high_school_physics")."""
    return "_".join(subject.strip().lower().replace("_", " ").split())


def subject_name(subject: str) -> str:
    """A subject as the paper's prompts show it ("high_school_physics" -> "high school physics")."""
    return subject_key(subject).replace("_", " ")


@dataclass
class MMLUTask(DatasetTask):
    @property
    def metric(self) -> Metric:
        return Accuracy()

    @cached_property
    def _parser(self) -> LabelParser:
        return LabelParser({x: (x,) for x in LETTERS}, case_sensitive_tokens=frozenset(x.lower() for x in LETTERS))

    def _choices(self, row: DataRow, origin: str) -> list[str]:
        if all(x in row for x in LETTERS):
            return [text_value(row[x], x, origin) for x in LETTERS]
        raw = column(row, ("choices", "options"), origin)
        if isinstance(raw, str):
            try:
                raw = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise TaskDataError(f"{origin}: column 'choices' must be a JSON list of 4 strings; got {raw[:40]!r}") from exc
        if not isinstance(raw, (list, tuple)) or len(raw) != 4:
            raise TaskDataError(f"{origin}: column 'choices' must hold exactly 4 options; got {raw!r:.60}")
        return [text_value(c, "choices", origin) for c in raw]

    def _answer(self, row: DataRow, origin: str) -> str:
        raw = column(row, ("answer", "target", "label"), origin)
        key = str(raw).strip()
        if key.upper() in LETTERS:
            return key.upper()
        if key in ("0", "1", "2", "3"):
            return LETTERS[int(key)]
        raise TaskDataError(f"{origin}: answer {raw!r} is not 0-3 or A-D; fix column 'answer'")

    def row_to_sample(self, row: DataRow, index: int, origin: str, tag: str) -> Sample:
        question = text_value(column(row, ("question", "input"), origin), "question", origin)
        options = self._choices(row, origin)
        subject = str(row.get("subject") or tag or "")
        fields = {"question": question, "subject": subject, **dict(zip(LETTERS, options))}
        return Sample(id=f"mmlu:{subject}:{index}", fields=fields, target=self._answer(row, origin))

    def select(self, samples: list[Sample], seed: int) -> list[Sample]:
        return stratified_subset(samples, lambda s: s.fields["subject"], self.sample_size, seed, per_group_cap=PER_SUBJECT,
                                 first=self.selection == "first")

    def slot_values(self, sample: Sample) -> tuple[str, ...]:
        return (subject_name(sample.fields["subject"]),) if sample.fields.get("subject") else ()

    def context_lines(self, sample: Sample) -> list[str]:
        values = self.slot_values(sample)
        return ["Subject: " + values[0]] if values else []

    def few_shot_group(self, sample: Sample) -> str:
        return subject_key(sample.fields.get("subject", ""))

    def fields_block(self, sample: Sample, *, slots_shown: bool = False) -> list[str]:
        return ["Question: " + sample.fields["question"]] + [x + ". " + sample.fields[x] for x in LETTERS]

    def answer_text(self, sample: Sample) -> str:
        return sample.target

    def parse(self, answer: str, parser: ParserName = "last_word") -> str | None:
        return self._parser.parse(answer, parser)


def mmlu() -> MMLUTask:
    return MMLUTask(
        name="mmlu",
        labels=LETTERS,
        verbalizers={x: x for x in LETTERS},
        # promptbench's label set is the letters in both cases; the engine adds
        # the labels, and protection is case-insensitive.
        protected_words=frozenset(),
        max_tokens=LABEL_MAX_TOKENS,
        stop=(),
        description="MMLU multiple choice, 57 subjects, <=10 per subject (test split)",
        sample_size=564,
        source=Source(
            hf_eval=(HFSplit("cais/mmlu", "all", "test"),),
            hf_pool=(HFSplit("cais/mmlu", "all", "dev"),),
            local_eval=(LocalSplit(("test",)),),
            local_pool=(LocalSplit(("dev", "train")),),
        ),
    )
