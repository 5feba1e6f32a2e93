"""What every dataset task shares: where rows come from, seeded selection,
the few-shot pool, and rendering by concatenation.

A concrete task says which Hugging Face splits or local files hold its data
(``Source``), turns one row into a ``Sample`` (``row_to_sample``), lays out a
sample's fields (``fields_block``) and the answer a worked example shows
(``answer_text``), and parses answers.

Rendered input, zero-shot::

    <instruction>

    Sentence: <sample text>
    Answer:

Few-shot puts each worked example (same layout, answer filled in) between the
instruction and the sample, separated by blank lines. As in the paper, the
examples are a fixed set of 3 per dataset (per subject for MMLU, per question
type for math, per direction for translation; ``tasks.fewshot``): a sample is
shown the examples of its own group.

Slots: where the paper's prompts name the MMLU subject, the math question type
or the translation languages, they write ``{}``; ``fill_slots`` puts the
sample's values there, in order. A prompt without slots gets the same facts on
a line of its own, so the model always sees them. Nothing here calls
``str.format`` on data, so braces, quotes and newlines in a sample or prompt
are copied through unchanged.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from promptrobust.engine import progress
from promptrobust.tasks.base import Sample, Task
from promptrobust.tasks.datafiles import DataFile, find_split_file, is_large, missing_split_error, require_dir, size_text, DataRow
from promptrobust.tasks.errors import TaskDataError
from promptrobust.tasks.hf_data import load_hf_rows
from promptrobust.tasks.sampling import seeded_positions, seeded_subset

ANSWER_CUE = "Answer:"
#: The paper's slot for the subject / question type / languages in a prompt.
SLOT = "{}"


@dataclass(frozen=True)
class HFSplit:
    """One Hugging Face split: ``load_dataset(path, config, split=split)``."""

    path: str
    config: str | None
    split: str
    #: Stream only the first rows of a huge split.
    take: int | None = None
    #: A tag the rows get (e.g. the translation direction), passed to row_to_sample.
    tag: str = ""


@dataclass(frozen=True)
class LocalSplit:
    """Local files for one split: the first of ``names`` found in ``data_dir``."""

    names: tuple[str, ...]
    tag: str = ""


@dataclass(frozen=True)
class Source:
    """Where a task's evaluation rows and few-shot pool come from."""

    hf_eval: tuple[HFSplit, ...] = ()
    hf_pool: tuple[HFSplit, ...] = ()
    #: Groups of local split files; every group found is read (MNLI: matched + mismatched).
    local_eval: tuple[LocalSplit, ...] = ()
    local_pool: tuple[LocalSplit, ...] = (LocalSplit(("train",)),)


Rows = list[tuple[DataRow, str, str]]  # (row, origin for messages, tag)


def column(row: DataRow, names: Sequence[str], origin: str) -> Any:
    """The value of the first of ``names`` present in ``row``; a clear error otherwise."""
    for name in names:
        if name in row:
            return row[name]
    also = f" (also accepted: {', '.join(repr(n) for n in names[1:])})" if len(names) > 1 else ""
    found = ", ".join(repr(k) for k in list(row)[:12])
    raise TaskDataError(
        f"{origin}: missing column {names[0]!r}{also}; found {found}; rename the column to {names[0]!r}"
    )


#: Values that are not one piece of text (a JSON object or list, bytes): never shown as their repr
#: (a value nested a thousand deep has none: its repr is a RecursionError).
CONTAINERS = (dict, list, tuple, set, frozenset, bytes, bytearray)


def kind_of(value: object) -> str:
    """What a non-text value is, in words (never its repr)."""
    if isinstance(value, dict):
        return "an object (keys and values)"
    if isinstance(value, (bytes, bytearray)):
        return "bytes"
    return f"a {type(value).__name__}"


def text_value(value: object, name: str, origin: str) -> str:
    """The text of a text column: a string as it is, a number or boolean as it reads (a CSV holds
    those as text too); an empty value, or an object or list (never silently shown as its repr),
    refused naming the row and column."""
    if value is None:
        raise TaskDataError(f"{origin}: empty value in column {name!r}; fill it or drop the row")
    if isinstance(value, str):
        return value
    if isinstance(value, CONTAINERS):
        raise TaskDataError(f"{origin}: column {name!r} holds {kind_of(value)}, not text; put the text itself in the "
                            "column, or name the column that holds it")
    return str(value)


def id_value(value: object, name: str, origin: str) -> str:
    """A sample id from an id column: a scalar as it reads; an object or a list refused (never
    shown as its repr, which a value nested a thousand deep cannot even give), so an id names one row."""
    if isinstance(value, CONTAINERS):
        raise TaskDataError(f"{origin}: id column {name!r} holds {kind_of(value)}, not an id; ids are text or numbers: "
                            "fix the row, or choose another id column")
    return value if isinstance(value, str) else str(value)


@dataclass
class DatasetTask(Task):
    """A Task whose samples come from rows (hub or local files)."""

    description: str = ""
    #: The paper's sample size (the default number of evaluation samples).
    sample_size: int | None = None
    #: Name of the prompt set (tasks/prompts/<prompt_dataset>.toml); default ``name``.
    prompt_dataset: str = ""
    source: Source = field(default_factory=Source)
    headerless_tsv_columns: tuple[str, ...] = ()
    #: "seeded": a seeded random draw of ``sample_size`` (the default); "first": the
    #: paper's selection, the first rows in source order (per group where stratified).
    selection: Literal["seeded", "first"] = "seeded"
    #: The line that asks for the answer, after the sample (and after each worked example).
    answer_cue: str = ANSWER_CUE

    # -- rows ----------------------------------------------------------------

    def row_to_sample(self, row: DataRow, index: int, origin: str, tag: str) -> Sample:
        raise NotImplementedError

    def data_columns(self) -> tuple[str, ...] | None:
        """The columns a row is read with (None: all of them): a task that names the columns it
        reads never holds a wide file's others."""
        return None

    def data_file(self, path: Path) -> DataFile:
        """``path`` opened as a data file (checked; its columns and rows known, none held)."""
        return DataFile(path, headerless_tsv_columns=self.headerless_tsv_columns)

    def _read_local(self, path: Path, tag: str) -> Rows:
        return self._file_rows(self.data_file(path), tag)

    def _file_rows(self, data: DataFile, tag: str, positions: Sequence[int] | None = None) -> Rows:
        """The rows of ``data`` at ``positions`` (None: all), each with its origin ("FILE row N")."""
        rows = data.read(self.data_columns(), positions)
        order = range(len(rows)) if positions is None else positions
        return [(r, f"{data.path} row {i + 1}", tag) for r, i in zip(rows, order)]

    def _file_chunks(self, data: DataFile, tag: str) -> Iterator[tuple[Rows, range]]:
        """Every row of ``data`` as ``_file_rows`` gives them, a chunk at a time, with their positions."""
        start = 0
        for rows in data.iter_rows(self.data_columns()):
            positions = range(start, start + len(rows))
            yield [(r, f"{data.path} row {i + 1}", tag) for r, i in zip(rows, positions)], positions
            start += len(rows)

    def _read_hf(self, splits: Sequence[HFSplit]) -> Rows:
        out: Rows = []
        for s in splits:
            rows = load_hf_rows(s.path, s.config, s.split, take=s.take)
            where = f"{s.path}" + (f"/{s.config}" if s.config else "") + f":{s.split}"
            out.extend((r, f"{where} row {i + 1}", s.tag) for i, r in enumerate(rows))
        return out

    def _local_group_rows(self, data_dir: str, groups: Sequence[LocalSplit], what: str) -> Rows | None:
        d = require_dir(data_dir)
        out: Rows = []
        found = False
        for g in groups:
            path = find_split_file(d, g.names)
            if path is not None:
                found = True
                out.extend(self._read_local(path, g.tag))
        return out if found else None

    def eval_rows(self, data_dir: str | None, data_file: str | None, *, seed: int = 0) -> Rows:
        """All candidate evaluation rows (``seed`` matters only to generated data)."""
        if data_file is not None:
            return self._read_local(Path(data_file), "")
        if data_dir is not None:
            rows = self._local_group_rows(data_dir, self.source.local_eval, "evaluation")
            if rows is None:
                names = tuple(n for g in self.source.local_eval for n in g.names)
                raise missing_split_error(data_dir, names, f"{self.name} evaluation")
            return rows
        return self._read_hf(self.source.hf_eval)

    def eval_file(self, data_dir: str | None, data_file: str | None) -> tuple[Path, str] | None:
        """The one local file whose rows are the evaluation rows, one for one, and their tag;
        None when they come from the hub, are generated, or come from several files."""
        if data_file is not None:
            return Path(data_file), ""
        if data_dir is not None and len(self.source.local_eval) == 1:
            group = self.source.local_eval[0]
            path = find_split_file(require_dir(data_dir), group.names)
            return (path, group.tag) if path is not None else None
        return None

    #: Whether a row of a data file is one evaluation row (False: rows are built from the
    #: file's documents, as SQuAD's nested layout).
    rows_are_file_rows: ClassVar[bool] = True

    @property
    def draws_by_position(self) -> bool:
        """Whether the evaluation draw depends only on how many rows there are (the plain seeded
        draw over a file's rows), so a limit reads only the rows it uses."""
        return type(self).select is DatasetTask.select and self.rows_are_file_rows

    def check_data_file(self, data: DataFile) -> None:
        """Refuse a data file that cannot hold this task's rows before any row is read (a user's
        task: its columns); rows are checked one by one as they become samples."""

    def to_samples(self, rows: Rows, positions: Sequence[int] | None = None,
                   seen: dict[str, str] | None = None) -> list[Sample]:
        """The rows as samples; ``positions``: each row's place in its file (default: its place in
        ``rows``), which names a sample that has no id column; ``seen``: the ids of samples made
        before (id -> origin), when rows come a chunk at a time."""
        samples = []
        seen = {} if seen is None else seen
        for i, (row, origin, tag) in enumerate(rows):
            s = self.row_to_sample(row, i if positions is None else positions[i], origin, tag)
            if s.id in seen:
                raise TaskDataError(f"{origin}: duplicate sample id {s.id!r}; ids must be unique")
            seen[s.id] = origin
            samples.append(s)
        return samples

    # -- selection -------------------------------------------------------------

    def select(self, samples: list[Sample], seed: int) -> list[Sample]:
        """The paper's sample size, drawn with ``seed``; subclasses stratify."""
        return seeded_subset(samples, self.sample_size, seed, first=self.selection == "first")

    def load(
        self,
        *,
        limit: int | None = None,
        seed: int = 0,
        data_dir: str | None = None,
        data_file: str | None = None,
    ) -> list[Sample]:
        """The first ``limit`` samples of the task's draw with ``seed`` (all: None). Where the draw
        depends only on the number of rows of one data file (``draws_by_position``), only the rows
        it uses are read; otherwise every row is (said when the file is large)."""
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        source = self.eval_file(data_dir, data_file)
        try:
            if source is not None and self.draws_by_position:
                return self._load_positions(source[0], source[1], limit, seed)
            if limit is not None and source is not None:
                self._reading_all(source[0], limit)
            samples = self.select(self.to_samples(self.eval_rows(data_dir, data_file, seed=seed)), seed)
        except MemoryError:
            where = source[0] if source is not None else data_file or data_dir or self.name
            raise TaskDataError(
                f"{where}: ran out of memory while turning its rows into samples; read fewer rows (a limit), keep a "
                f"sample of them in a smaller file, or lower PRE_MAX_DATA_FILE_MB below what this machine has free",
                setting="limit") from None
        if not samples:
            raise TaskDataError(f"{data_file or data_dir or self.name}: no samples; the data is empty")
        return samples if limit is None else samples[:limit]

    def _load_positions(self, path: Path, tag: str, limit: int | None, seed: int) -> list[Sample]:
        """The draw's first ``limit`` samples, reading only their rows: the same samples, in the same
        order, as drawing from every row (``seeded_positions`` replays ``seeded_subset``). Without a
        limit, every row, turned into samples a chunk at a time (a chunk's rows are let go), then drawn."""
        data = self.data_file(path)
        self.check_data_file(data)
        if data.rows == 0:
            raise TaskDataError(f"{path}: no samples; the data is empty")
        if limit is None:
            seen: dict[str, str] = {}
            samples = [s for rows, positions in self._file_chunks(data, tag) for s in self.to_samples(rows, positions, seen)]
            return self.select(samples, seed)
        positions = seeded_positions(data.rows, self.sample_size, seed, limit, first=self.selection == "first")
        return self.to_samples(self._file_rows(data, tag, positions), positions)

    def _reading_all(self, path: Path, limit: int) -> None:
        """Say that a limit could not shorten the read of a large file, and why."""
        size = path.stat().st_size if path.is_file() else 0
        if not is_large(size):
            return
        why = ("its draw spreads the samples over groups" if type(self).select is not DatasetTask.select
               else "its rows are built from the file's documents")
        progress.fallback(f"read-all:{path}", f"limit {limit} cannot shorten the read of {path} ({size_text(size)}): "
                                              f"{self.name} draws from every row ({why}), so every row is read")

    def few_shot_pool(
        self, *, seed: int = 0, data_dir: str | None = None, data_file: str | None = None
    ) -> list[Sample]:
        """The training split; without one, the rows that ``load`` with the same
        seed leaves out (so the pool never holds evaluation samples)."""
        if data_dir is not None:
            rows = self._local_group_rows(data_dir, self.source.local_pool, "training")
            if rows is not None:
                return self._exclude_eval(self.to_samples(rows), seed, data_dir, data_file)
        if data_dir is None and data_file is None and self.source.hf_pool:
            return self.to_samples(self._read_hf(self.source.hf_pool))
        return self.held_out(seed, data_dir=data_dir, data_file=data_file)

    def held_out(self, seed: int, *, data_dir: str | None, data_file: str | None) -> list[Sample]:
        everything = self.to_samples(self.eval_rows(data_dir, data_file, seed=seed))
        chosen = {s.id for s in self.select(everything, seed)}
        return [s for s in everything if s.id not in chosen]

    def _exclude_eval(self, pool: list[Sample], seed: int, data_dir: str | None, data_file: str | None) -> list[Sample]:
        """Drop pool items whose input equals an evaluation sample's (files can overlap)."""
        try:
            evals = self.load(seed=seed, data_dir=data_dir, data_file=data_file)
        except TaskDataError:
            return pool
        keys = {tuple(sorted(s.fields.items())) for s in evals}
        return [s for s in pool if tuple(sorted(s.fields.items())) not in keys]

    # -- rendering --------------------------------------------------------------

    def slot_values(self, sample: Sample) -> tuple[str, ...]:
        """What the paper's ``{}`` slots show for ``sample`` (none for most tasks)."""
        return ()

    def context_lines(self, sample: Sample) -> list[str]:
        """The slot facts on lines of their own, for prompts without slots."""
        return []

    def fill_slots(self, instruction: str, sample: Sample) -> tuple[str, bool]:
        """``instruction`` with its ``{}`` slots filled in order (a slot past the
        last value repeats it), and whether it carried any."""
        values = self.slot_values(sample)
        if not values or SLOT not in instruction:
            return instruction, False
        parts = instruction.split(SLOT)
        out = [parts[0]]
        for i, part in enumerate(parts[1:]):
            out.append(values[min(i, len(values) - 1)])
            out.append(part)
        return "".join(out), True

    def fixed_few_shot(self, k: int) -> list[Sample] | None:
        """The first ``k`` worked examples of a fixed set the task brings itself (a
        user's own task); None: the set in tasks/data or a few_shot file (``tasks.fewshot``)."""
        return None

    def few_shot_group(self, sample: Sample) -> Hashable | None:
        """Which fixed few-shot set a sample uses (None: one set for the dataset)."""
        return None

    def examples_for(self, sample: Sample, examples: Sequence[Sample]) -> Sequence[Sample]:
        """The examples of ``sample``'s group; a group with none falls back to the
        first group's examples (never to all of them)."""
        key = self.few_shot_group(sample)
        if key is None or not examples:
            return examples
        same = [e for e in examples if self.few_shot_group(e) == key]
        if same:
            return same
        first = self.few_shot_group(examples[0])
        return [e for e in examples if self.few_shot_group(e) == first]

    def fields_block(self, sample: Sample, *, slots_shown: bool = False) -> list[str]:
        """The sample's lines, e.g. ``["Sentence: ..."]`` (``slots_shown``: the
        instruction already names what the slots hold)."""
        raise NotImplementedError

    def answer_text(self, sample: Sample) -> str:
        """The answer a worked example shows."""
        raise NotImplementedError

    def render(self, instruction: str, sample: Sample, examples: Sequence[Sample] = ()) -> str:
        text, shown = self.fill_slots(instruction, sample)
        parts: list[str] = []
        if text:
            parts.append(text)
        if not shown:
            parts.extend(self.context_lines(sample))
        for ex in self.examples_for(sample, examples):
            block = "\n".join(self.fields_block(ex, slots_shown=shown))
            parts.append(block + "\n" + self.answer_cue + " " + self.answer_text(ex))
        parts.append("\n".join(self.fields_block(sample, slots_shown=shown)) + "\n" + self.answer_cue)
        return "\n\n".join(parts)
