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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import orjson

from promptrobust.tasks.base import Metric, ParserName, Prompt, Sample
from promptrobust.tasks.common import CONTAINERS, DatasetTask, HFSplit, Rows, column, id_value, kind_of, text_value
from promptrobust.tasks.datafiles import SUPPORTED_EXTENSIONS, DataFile, find_split_file, DataRow
from promptrobust.tasks.errors import TaskDataError
from promptrobust.tasks.metrics import Accuracy, CorpusBleu, ExactMatch, MacroF1, SquadF1
from promptrobust.tasks.own.default_prompts import ANSWERS, DEFAULT_PROMPTS
from promptrobust.tasks.own.definition import DEFAULT_FEW_SHOT_COUNT, TaskDefinition, answer_list, label_text
from promptrobust.tasks.own.template import InputTemplate
from promptrobust.tasks.parsing import LabelParser
from promptrobust.tasks.sampling import seeded_positions, seeded_subset

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

    def data_columns(self) -> tuple[str, ...]:
        d = self.definition
        return tuple(dict.fromkeys([c.column for c in d.input] + [n for n in (d.label, d.target, d.id_column) if n is not None]))

    def eval_rows(self, data_dir: str | None, data_file: str | None, *, seed: int = 0) -> Rows:
        self._refuse_other_data(data_dir, data_file)
        rows, where = self._split_rows(self.definition.data.split, "evaluation")
        if self.definition.data.kind == "hub":
            self._check_columns(list(rows[0][0]) if rows else [], len(rows), where)
        return rows

    def eval_file(self, data_dir: str | None, data_file: str | None) -> tuple[Path, str] | None:
        """The local file of the evaluation split (None: a hub dataset)."""
        self._refuse_other_data(data_dir, data_file)
        d = self.definition.data
        if d.kind == "hub":
            return None
        return self._split_file(d.split, "evaluation"), ""

    def check_data_file(self, data: DataFile) -> None:
        self._check_columns(list(data.columns), data.rows, str(data.path))

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

    def _split_file(self, split: str | None, what: str) -> Path:
        """The local file of one split (None: the evaluation default): the data file itself, or
        the split's file in the data folder."""
        d = self.definition.data
        if d.kind == "file":
            return Path(d.location)
        names = (split,) if split is not None else FOLDER_EVAL_SPLITS
        path = find_split_file(d.location, names)
        if path is None:
            tried = ", ".join(f"{n}.<ext>" for n in names)
            raise TaskDataError(
                f"{d.location}: no {what} file (looked for {tried}; ext one of {', '.join(SUPPORTED_EXTENSIONS)}); "
                f"add one or name the split in {self.definition.origin.where('split')}",
                setting=self.definition.origin.setting("split"),
            )
        return path

    def _split_rows(self, split: str | None, what: str) -> tuple[Rows, str]:
        """The rows of one split of the data (None: the evaluation default), and where they came from
        (a local file's columns checked before its rows are read)."""
        d = self.definition.data
        if d.kind != "hub":
            path = self._split_file(split, what)
            data = self.data_file(path)
            self.check_data_file(data)
            return self._file_rows(data, ""), str(path)
        hub = HFSplit(d.hub_path, d.config, split or HUB_EVAL_SPLIT)
        return self._read_hf([hub]), d.location + (f"/{d.config}" if d.config else "") + f":{hub.split}"

    def _check_columns(self, present: Sequence[str], rows: int, where: str, key: str = "data") -> None:
        """The data has rows, and every column the definition names (checked on a file's header or
        a hub split's first row, so a wrong name fails before anything runs, naming the key to
        fix); ``key``: the key that names the file (data, or few_shot for a file of examples)."""
        d = self.definition
        if not rows:
            raise TaskDataError(f"{where}: no rows (a header at most); add rows, or name another file in {d.origin.where(key)}",
                                setting=d.origin.setting(key))
        wanted = [("input", c.column) for c in d.input] + [
            (key, name) for key, name in (("label", d.label), ("target", d.target), ("id", d.id_column)) if name is not None
        ]
        for key, name in wanted:
            if name not in present:
                found = ", ".join(repr(c) for c in present[:12]) + (", ..." if len(present) > 12 else "")
                raise d.origin.error(key, f"column {name!r} is not in {where} (its columns: {found}); "
                                          f"set {d.origin.name(key)} to the column that holds it")

    def data_file(self, path: Path) -> DataFile:
        """A data file opened; a file the reader refuses (empty, not UTF-8, too large) names the
        setting of this task's form (a task file's key is in the message, the flags' form its flag)."""
        try:
            return super().data_file(path)
        except TaskDataError as exc:
            raise self._named(exc, path) from None

    def _file_rows(self, data: DataFile, tag: str, positions: Sequence[int] | None = None) -> Rows:
        try:
            return super()._file_rows(data, tag, positions)
        except TaskDataError as exc:
            raise self._named(exc, data.path) from None

    def _file_chunks(self, data: DataFile, tag: str) -> Iterator[tuple[Rows, range]]:
        try:
            yield from super()._file_chunks(data, tag)
        except TaskDataError as exc:
            raise self._named(exc, data.path) from None

    def _named(self, exc: TaskDataError, path: Path) -> TaskDataError:
        few = self.definition.few_shot
        key = "few_shot" if few is not None and few.file is not None and Path(few.file) == path else "data"
        exc.setting = self.definition.origin.setting(key)
        return exc

    def to_samples(self, rows: Rows, positions: Sequence[int] | None = None,
                   seen: dict[str, str] | None = None) -> list[Sample]:
        """The rows as samples (``positions``, ``seen``: as ``DatasetTask.to_samples``); two rows with
        one id name the id key and both rows."""
        samples: list[Sample] = []
        seen = {} if seen is None else seen
        for i, (row, origin, tag) in enumerate(rows):
            sample = self.row_to_sample(row, i if positions is None else positions[i], origin, tag)
            if sample.id in seen:
                raise self.definition.origin.error(
                    "id", f"{origin}: duplicate sample id {sample.id.split(':', 1)[1]!r} (also {seen[sample.id]}); "
                    "ids must be unique: fix the data, or choose a column of unique ids")
            seen[sample.id] = origin
            samples.append(sample)
        return samples

    def row_to_sample(self, row: DataRow, index: int, origin: str, tag: str) -> Sample:
        d = self.definition
        values = {c.column: text_value(column(row, (c.column,), origin), c.column, origin) for c in d.input}
        rid = id_value(column(row, (d.id_column,), origin), d.id_column, origin) if d.id_column else str(index)
        prefix = f"{tag}:" if tag else ""
        return Sample(id=f"{self.name}:{prefix}{rid}", fields=values, target=self._target(row, origin))

    def _target(self, row: DataRow, origin: str) -> Any:
        d = self.definition
        if d.label is not None:
            raw = column(row, (d.label,), origin)
            if isinstance(raw, CONTAINERS):
                raise TaskDataError(f"{origin}: column {d.label!r} holds {kind_of(raw)}, not a label value; fix the row")
            value = label_text(raw) if raw is not None else ""
            if value not in self.verbalizers:
                raise TaskDataError(
                    f"{origin}: label value {value!r} (column {d.label!r}) is not one of the task's labels "
                    f"({', '.join(self.labels)}); map it to an answer word ({d.origin.where('labels')}), or drop the row",
                    setting=d.origin.setting("labels"),
                )
            return value
        raw = column(row, (str(d.target),), origin)
        refs = ([text_value(x, str(d.target), origin) for x in raw] if isinstance(raw, (list, tuple))
                else ([] if raw is None else [text_value(raw, str(d.target), origin)]))
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
            data = self.data_file(Path(few.file))
            self._check_columns(data.columns, data.rows, few.file, "few_shot")
            first = range(min(few.count, data.rows))  # only the rows the set holds are read
            examples = self.to_samples(self._file_rows(data, "", first), first)
            if len(examples) < few.count:
                raise TaskDataError(f"{few.file}: {len(examples)} examples, count is {few.count}; add rows or lower count",
                                    setting="shots")
            return examples
        if few is None and d.data.kind == "file":
            raise TaskDataError(
                f"task {self.name}: no worked examples: a single data file has no training split; "
                f"name a file of examples in {d.origin.where('few_shot')}, or use 0 shots",
                setting="shots",
            )
        split = few.split if few is not None else DEFAULT_FEW_SHOT_SPLIT
        count = few.count if few is not None else DEFAULT_FEW_SHOT_COUNT
        try:
            if d.data.kind != "hub":  # a fixed draw from a split file: only its rows are read
                data = self.data_file(self._split_file(split, "few-shot"))
                self.check_data_file(data)
                drawn = seeded_positions(data.rows, count, FEW_SHOT_SEED, count)
                return self.to_samples(self._file_rows(data, "", drawn), drawn)
            rows, where = self._split_rows(split, "few-shot")
        except TaskDataError as exc:
            if few is not None:
                raise
            raise TaskDataError(f"task {self.name}: no worked examples: no {split!r} split in {d.data.location}; "
                                f"name a split or a file in {d.origin.where('few_shot')}, or use 0 shots",
                                setting="shots") from exc
        self._check_columns(list(rows[0][0]) if rows else [], len(rows), where)
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

    def provenance(self) -> dict[str, object]:
        """What results.json records about the task: its name, the task file, the definition's
        hash (the one in the cache key), where the data is and its hash."""
        d = self.definition
        few = d.few_shot
        out: dict[str, object] = {
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
