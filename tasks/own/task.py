"""The ``Task`` a user's ``TaskDefinition`` becomes: the same kind of value the
built-in datasets are (a ``DatasetTask``), so ranking, attacks, label scoring,
decode-and-parse, held-out splits, reports and sweeps treat it alike.

What it adds to a built-in task:

- rows from the definition's data (a file, a folder of split files, or the
  hub), checked up front for the columns the definition names;
- the layout of its template, its answer words (a ``LabelParser`` that knows
  them, for both parsers), its metric;
- its fixed few-shot set (a file's first rows, or a fixed draw from a split);
- its prompt set (``own_prompts``), served through ``tasks.prompt_sets``;
- its definition hash as the cache namespace, and ``provenance()`` for results.

``build_task`` is the one constructor.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import orjson

from promptrobust.tasks.base import Metric, ParserName, Prompt, Sample
from promptrobust.tasks.common import DatasetTask, HFSplit, Rows, column, text_value
from promptrobust.tasks.datafiles import SUPPORTED_EXTENSIONS, find_split_file
from promptrobust.tasks.errors import TaskDataError
from promptrobust.tasks.metrics import Accuracy, CorpusBleu, ExactMatch, MacroF1, SquadF1
from promptrobust.tasks.own.default_prompts import ANSWERS, DEFAULT_PROMPTS
from promptrobust.tasks.own.definition import DEFAULT_FEW_SHOT_COUNT, TaskDefinition, answer_list, label_text
from promptrobust.tasks.own.template import InputTemplate
from promptrobust.tasks.parsing import LabelParser
from promptrobust.tasks.sampling import seeded_subset

#: A folder without a named split is evaluated on the first of these files found.
FOLDER_EVAL_SPLITS = ("test", "validation", "dev")
HUB_EVAL_SPLIT = "test"
#: Where examples come from when the definition names no source (the paper: the training split).
DEFAULT_FEW_SHOT_SPLIT = "train"
#: The seed of the fixed draw of examples from a split: the same set for every run and seed,
#: as the paper's fixed examples are.
FEW_SHOT_SEED = 0
_METRICS: dict[str, type[Metric]] = {
    "accuracy": Accuracy, "macro_f1": MacroF1, "exact_match": ExactMatch, "squad_f1": SquadF1, "bleu": CorpusBleu,
}
_ANSWER_LEAD = ("the answer is", "answer:", "answer")


def build_task(definition: TaskDefinition) -> "OwnTask":
    """The ``Task`` of a user's definition (the one constructor)."""
    d = definition
    where = d.origin.task_file or d.data.location
    return OwnTask(
        name=d.name,
        labels=tuple(value for value, _ in d.labels),
        verbalizers=dict(d.labels),
        # The engine adds the label values and answer words (Workbench.protected_words).
        protected_words=frozenset(d.protected),
        max_tokens=d.max_tokens,
        # Label tasks decode to promptbench's length, stopping at the end of sequence only; a
        # free-text answer is read from its first line, so stopping at a newline parses the same.
        stop=() if d.labelled else ("\n",),
        supports_choices=d.labelled,
        description=d.description or f"your own task ({where})",
        sample_size=None,
        answer_cue=d.answer_cue,
        definition=d,
    )


def default_prompts(definition: TaskDefinition) -> tuple[Prompt, ...]:
    """Ten task- and ten role-oriented instructions naming the task's answer words."""
    answers = answer_list(definition.answer_words)
    return tuple(
        Prompt(id=f"{definition.name}-{pid}", dataset=definition.name, type=kind, text=text.replace(ANSWERS, answers))
        for pid, kind, text in DEFAULT_PROMPTS
    )


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass(eq=False)
class OwnTask(DatasetTask):
    """A user's task; equal to another when their definitions (name included) and selection are."""

    definition: TaskDefinition = field(kw_only=True)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OwnTask) and (self.definition, self.selection) == (other.definition, other.selection)

    def __hash__(self) -> int:
        return hash((self.definition, self.selection))

    # -- what the engine asks of every task ---------------------------------------------

    @property
    def metric(self) -> Metric:
        return self._metric

    @cached_property
    def _metric(self) -> Metric:
        return _METRICS[str(self.definition.metric)]()

    @property
    def definition_hash(self) -> str:
        return self.definition.definition_hash()

    @property
    def cache_namespace(self) -> str:
        return "own-task:" + self.definition_hash

    def own_prompts(self) -> Sequence[Prompt]:
        return self.definition.prompts or default_prompts(self.definition)

    @cached_property
    def _layout(self) -> InputTemplate:
        return self.definition.layout()

    @cached_property
    def _parser(self) -> LabelParser:
        return LabelParser({value: (word,) for value, word in self.definition.labels})

    def fields_block(self, sample: Sample, *, slots_shown: bool = False) -> list[str]:
        return [self._layout.render(sample.fields)]

    def answer_text(self, sample: Sample) -> str:
        if self.definition.labelled:
            return self.verbalizers[sample.target]
        return sample.target if isinstance(sample.target, str) else str(sample.target[0])

    def parse(self, answer: str, parser: ParserName = "last_word") -> str | None:
        """Label tasks: the answer word (``last_word``: the last word, as the paper; ``robust``:
        the one answer word anywhere in a short answer). Free text: the first non-empty line
        (``robust`` also drops a leading "Answer:" / "The answer is" and quotes)."""
        if parser not in ("last_word", "robust"):
            raise ValueError(f"unknown parser {parser!r}; use 'last_word' or 'robust'")
        if self.definition.labelled:
            return self._parser.parse(answer, parser)
        line = next((ln.strip() for ln in answer.strip().splitlines() if ln.strip()), "")
        if parser == "robust":
            low = line.lower()
            lead = next((w for w in _ANSWER_LEAD if low.startswith(w)), "")
            line = line[len(lead):].strip().lstrip(":").strip().strip("\"'").strip()
        return line

    # -- rows -----------------------------------------------------------------------------

    def eval_rows(self, data_dir: str | None, data_file: str | None, *, seed: int = 0) -> Rows:
        self._refuse_other_data(data_dir, data_file)
        rows, where = self._split_rows(self.definition.data.split, "evaluation")
        self._check_columns(rows, where)
        return rows

    def _refuse_other_data(self, data_dir: str | None, data_file: str | None) -> None:
        """A user's task reads the data its definition names; other data given beside it is an error."""
        location = self.definition.data.location
        other = data_dir if data_dir is not None else data_file
        if other is None or (data_file is not None and Path(data_file).resolve() == Path(location).resolve()):
            return
        raise TaskDataError(
            f"task {self.name} reads its data from {location}; {other} would be another task's data: "
            f"change data in {self.definition.origin.task_file or 'the task'} instead",
            setting="data_dir" if data_dir is not None else "data_file",
        )

    def _split_rows(self, split: str | None, what: str) -> tuple[Rows, str]:
        """The rows of one split of the data (None: the evaluation default), and where they came from."""
        d = self.definition.data
        if d.kind == "file":
            return self._read_local(Path(d.location), ""), d.location
        if d.kind == "folder":
            names = (split,) if split is not None else FOLDER_EVAL_SPLITS
            path = find_split_file(d.location, names)
            if path is None:
                tried = ", ".join(f"{n}.<ext>" for n in names)
                raise TaskDataError(
                    f"{d.location}: no {what} file (looked for {tried}; ext one of {', '.join(SUPPORTED_EXTENSIONS)}); "
                    f"add one or name the split in {self.definition.origin.where('split')}",
                    setting=self.definition.origin.setting("split"),
                )
            return self._read_local(path, ""), str(path)
        hub = HFSplit(d.hub_path, d.config, split or HUB_EVAL_SPLIT)
        return self._read_hf([hub]), d.location + (f"/{d.config}" if d.config else "") + f":{hub.split}"

    def _check_columns(self, rows: Rows, where: str, key: str = "data") -> None:
        """Every column the definition names is in the data (checked on its first row, so a
        wrong name fails before anything runs, naming the key to fix); ``key``: the key that
        names the file (data, or few_shot for a file of examples)."""
        d = self.definition
        if not rows:
            raise TaskDataError(f"{where}: no rows (a header at most); add rows, or name another file in {d.origin.where(key)}",
                                setting=d.origin.setting(key))
        present = list(rows[0][0])
        wanted = [("input", c.column) for c in d.input] + [
            (key, name) for key, name in (("label", d.label), ("target", d.target), ("id", d.id_column)) if name is not None
        ]
        for key, name in wanted:
            if name not in rows[0][0]:
                found = ", ".join(repr(c) for c in present[:12]) + (", ..." if len(present) > 12 else "")
                raise d.origin.error(key, f"column {name!r} is not in {where} (its columns: {found}); "
                                          f"set {key} to the column that holds it")

    def _read_local(self, path: Path, tag: str) -> Rows:
        """A data file's rows; a file the reader refuses (empty, not UTF-8, too large) names the
        setting of this task's form (a task file's key is in the message, the flags' form its flag)."""
        try:
            return super()._read_local(path, tag)
        except TaskDataError as exc:
            few = self.definition.few_shot
            key = "few_shot" if few is not None and few.file is not None and Path(few.file) == path else "data"
            exc.setting = self.definition.origin.setting(key)
            raise

    def to_samples(self, rows: Rows) -> list[Sample]:
        """The rows as samples; two rows with one id name the id key and both rows."""
        samples: list[Sample] = []
        seen: dict[str, str] = {}
        for i, (row, origin, tag) in enumerate(rows):
            sample = self.row_to_sample(row, i, origin, tag)
            if sample.id in seen:
                raise self.definition.origin.error(
                    "id", f"{origin}: duplicate sample id {sample.id.split(':', 1)[1]!r} (also {seen[sample.id]}); "
                    "ids must be unique: fix the data, or choose a column of unique ids")
            seen[sample.id] = origin
            samples.append(sample)
        return samples

    def row_to_sample(self, row: dict[str, Any], index: int, origin: str, tag: str) -> Sample:
        d = self.definition
        values = {c.column: text_value(column(row, (c.column,), origin), c.column, origin) for c in d.input}
        rid = text_value(column(row, (d.id_column,), origin), d.id_column, origin) if d.id_column else str(index)
        prefix = f"{tag}:" if tag else ""
        return Sample(id=f"{self.name}:{prefix}{rid}", fields=values, target=self._target(row, origin))

    def _target(self, row: dict[str, Any], origin: str) -> Any:
        d = self.definition
        if d.label is not None:
            raw = column(row, (d.label,), origin)
            value = label_text(raw) if raw is not None else ""
            if value not in self.verbalizers:
                raise TaskDataError(
                    f"{origin}: label value {value!r} (column {d.label!r}) is not one of the task's labels "
                    f"({', '.join(self.labels)}); map it to an answer word ({d.origin.where('labels')}), or drop the row",
                    setting=d.origin.setting("labels"),
                )
            return value
        raw = column(row, (str(d.target),), origin)
        refs = [str(x) for x in raw] if isinstance(raw, (list, tuple)) else ([] if raw is None else [str(raw)])
        if not refs or not all(r.strip() for r in refs):
            raise TaskDataError(f"{origin}: empty target in column {d.target!r}; fill it or drop the row")
        if d.metric == "bleu":
            if len(refs) > 1:
                raise TaskDataError(f"{origin}: bleu scores against one reference; column {d.target!r} holds {len(refs)}")
            return refs[0]
        return refs

    # -- few-shot ---------------------------------------------------------------------------

    def fixed_few_shot(self, k: int) -> list[Sample]:
        if k == 0:
            return []
        examples = self.few_shot_set()
        if k > len(examples):
            raise TaskDataError(
                f"task {self.name}: {k} worked examples asked for, its few-shot set holds {len(examples)}; "
                f"use at most {len(examples)} shots or raise count in {self.definition.origin.where('few_shot')}",
                setting="shots",
            )
        return examples[:k]

    def few_shot_set(self) -> list[Sample]:
        """The task's fixed worked examples: a file's first ``count`` rows, or ``count`` rows
        drawn from a split with a fixed seed (default: the data's "train" split, where it has one)."""
        d = self.definition
        few = d.few_shot
        if few is not None and few.file is not None:
            rows = self._read_local(Path(few.file), "")
            self._check_columns(rows, few.file, "few_shot")
            examples = self.to_samples(rows)
            if len(examples) < few.count:
                raise TaskDataError(f"{few.file}: {len(examples)} examples, count is {few.count}; add rows or lower count",
                                    setting="shots")
            return examples[: few.count]
        if few is None and d.data.kind == "file":
            raise TaskDataError(
                f"task {self.name}: no worked examples: a single data file has no training split; "
                f"name a file of examples in {d.origin.where('few_shot')}, or use 0 shots",
                setting="shots",
            )
        split = few.split if few is not None else DEFAULT_FEW_SHOT_SPLIT
        count = few.count if few is not None else DEFAULT_FEW_SHOT_COUNT
        try:
            rows, where = self._split_rows(split, "few-shot")
        except TaskDataError as exc:
            if few is not None:
                raise
            raise TaskDataError(f"task {self.name}: no worked examples: no {split!r} split in {d.data.location}; "
                                f"name a split or a file in {d.origin.where('few_shot')}, or use 0 shots",
                                setting="shots") from exc
        self._check_columns(rows, where)
        return seeded_subset(self.to_samples(rows), count, FEW_SHOT_SEED)

    def few_shot_pool(self, *, seed: int = 0, data_dir: str | None = None, data_file: str | None = None) -> list[Sample]:
        self._refuse_other_data(data_dir, data_file)
        return self.few_shot_set()

    # -- provenance -----------------------------------------------------------------------------

    def data_hash(self) -> str:
        """SHA-256 of the evaluation data: the file's bytes (a folder: its evaluation split file),
        or, for a hub dataset, of its rows as canonical JSON."""
        d = self.definition.data
        if d.kind == "file":
            return file_sha256(d.location)
        if d.kind == "folder":
            path = find_split_file(d.location, (d.split,) if d.split else FOLDER_EVAL_SPLITS)
            return file_sha256(path) if path is not None else ""
        rows, _ = self._split_rows(d.split, "evaluation")
        raw = orjson.dumps([r for r, _, _ in rows], option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY, default=str)
        return hashlib.sha256(raw).hexdigest()

    def provenance(self) -> dict[str, Any]:
        """What results.json records about the task: its name, the task file, the definition's
        hash (the one in the cache key), where the data is and its hash."""
        d = self.definition
        few = d.few_shot
        out: dict[str, Any] = {
            "name": d.name,
            "task_file": str(Path(d.origin.task_file).resolve()) if d.origin.task_file else None,
            "definition_hash": d.definition_hash(),
            "data": d.data.location,
            "config": d.data.config,
            "split": d.data.split,
            "data_hash": self.data_hash(),
            "labels": {value: word for value, word in d.labels} if d.labelled else None,
            "metric": d.metric,
            "protected": sorted(d.protected),
            "prompts": "own" if d.prompts else "default",
            "definition": d.to_table(),
        }
        if few is not None and few.file is not None:
            out["few_shot_file"] = few.file
            out["few_shot_hash"] = file_sha256(few.file)
        return out
