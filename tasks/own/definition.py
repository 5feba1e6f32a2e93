"""A user's own task, as one frozen, validated value.

``TaskDefinition`` says everything ``pre`` needs to measure a task that is not
one of the built-in datasets: where the data is, which columns are the input
and how they are shown, the label column and the answer word of each label (or,
for free-text answers, the target column and the metric), where few-shot
examples come from, the prompts, and the words no attack may change. What it
leaves out follows the paper's protocol, as for the built-in tasks.

A task file (``tasks.own.reading.load_task_file``), the flags' form
(``task_from_columns``) and Python code all end in this one value, checked
here, in ``__post_init__``, in one place; ``tasks.own.task.build_task`` turns
it into the ``Task`` the engine measures.

``definition_hash`` is a content hash of what decides a prompt's score on the
task (how samples are read and shown, the answer words, the metric), and
reaches the cache key: editing a label word or the template never reuses an
answer cached for the old definition. The name, the description, where the data
lives, the prompt set and the protected words are not in it; the provenance
(``OwnTask.provenance``) records them and the data's own hash.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from promptrobust.tasks.base import MAX_NEW_TOKENS, PROMPT_TYPES, Prompt
from promptrobust.tasks.common import ANSWER_CUE
from promptrobust.tasks.errors import TaskDefinitionError, UnknownTaskError
from promptrobust.tasks.own.template import InputTemplate
from promptrobust.tasks.parsing import strip_word
from promptrobust.tasks.placeholders import PLACEHOLDER
from promptrobust.tasks.registry import canonical_name

#: Metrics of label tasks and of free-text tasks (``metric``).
LABEL_METRICS = ("accuracy", "macro_f1")
TEXT_METRICS = ("exact_match", "squad_f1", "bleu")
#: promptbench's generation length for every label task (20 new tokens).
DEFAULT_MAX_TOKENS = 20
#: The paper's few-shot set: 3 worked examples.
DEFAULT_FEW_SHOT_COUNT = 3
HUB_PREFIX = "hf:"
#: A task name is used in file and folder names: letters, digits, ``_ . -``.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
#: Bumped when the canonical form changes (every cached answer of a user task is then asked again).
HASH_FORMAT = "promptrobust-own-task/1"
#: The task-file key each definition field is read from (messages name the key).
KEYS = ("name", "description", "data", "config", "split", "input", "label", "labels", "target", "metric",
        "template", "answer_cue", "few_shot", "prompts", "protected", "id", "max_tokens")


@dataclass(frozen=True)
class Origin:
    """Where a definition came from, so every message names the file and key at fault (the
    flags' form: the parameter, as its caller spells it)."""

    task_file: str | None = None
    """The task file (TOML) it was read from; None for the other forms."""
    parameters: tuple[tuple[str, str], ...] = ()
    """The flags' form: the name of the parameter each key came from (``input`` -> ``input_columns``)."""
    spellings: tuple[tuple[str, str], ...] = ()
    """The flags' form: how messages name each parameter (the command line: its flags,
    ``input_columns`` -> ``--input-column``); a parameter not listed is named as it is."""
    recorded_in: str | None = None
    """Read back from a run folder's results.json (this path), not from where it was first given."""

    def name(self, key: str) -> str:
        """How a message names the setting of ``key``: the flags' form's parameter (or flag), else the key."""
        parameter = dict(self.parameters).get(key)
        if parameter is None or self.recorded_in is not None or self.task_file is not None:
            return key
        return dict(self.spellings).get(parameter, parameter)

    def where(self, key: str) -> str:
        if self.recorded_in is not None:
            return f"{self.recorded_in}: the task's key {key!r} (as recorded)"
        if self.task_file is not None:
            return f"{self.task_file}: key {key!r}"
        if key in dict(self.parameters):
            return self.name(key)
        return f"TaskDefinition.{key}"

    def setting(self, key: str) -> str | None:
        """The setting to change (the CLI prints its flag) for the flags' form."""
        return None if self.recorded_in is not None else dict(self.parameters).get(key)

    @property
    def relative_to(self) -> str:
        """Where a relative path in the definition is read from."""
        if self.task_file is not None or self.recorded_in is not None:
            return "the task file's folder"
        return "the current folder"

    def error(self, key: str, message: str) -> TaskDefinitionError:
        return TaskDefinitionError(f"{self.where(key)}: {message}", setting=self.setting(key))


@dataclass(frozen=True)
class DataSource:
    """Where the evaluation rows are."""

    location: str
    """A local data file (CSV, TSV, JSONL, JSON, Parquet), a folder of split files
    (``test.csv``, ``train.jsonl``...), or ``hf:PATH`` for a Hugging Face dataset
    (a hub id, or a local folder ``datasets`` reads; the [hub] extra)."""
    config: str | None = None
    """The hub dataset's configuration (``load_dataset(PATH, config)``); hub only."""
    split: str | None = None
    """The evaluation split: a split of the hub dataset, or the file stem in a folder.
    None: "test" on the hub; the first of test, validation, dev in a folder."""

    @property
    def kind(self) -> str:
        """"hub", "folder" or "file"."""
        if self.location.startswith(HUB_PREFIX):
            return "hub"
        return "folder" if Path(self.location).is_dir() else "file"

    @property
    def hub_path(self) -> str:
        return self.location[len(HUB_PREFIX):]


@dataclass(frozen=True)
class InputColumn:
    """One input column and how it is shown."""

    column: str
    """The column's name in the data."""
    display: str
    """What the default layout writes before its value ("Ticket" -> "Ticket: ...")."""


@dataclass(frozen=True)
class FewShot:
    """Where the fixed set of worked examples comes from (the paper: 3 from the training split)."""

    split: str | None = None
    """A split of the task's data (hub or folder), e.g. "train"; never the evaluation split."""
    file: str | None = None
    """A file of examples in the data's columns; its first ``count`` rows are the set."""
    count: int = DEFAULT_FEW_SHOT_COUNT
    """How many examples the set holds; a run's shots take its first ones (base models: 3)."""


def display_name(column: str) -> str:
    """How the default layout shows a column: "ticket_body" -> "Ticket body"."""
    text = " ".join(column.replace("_", " ").split())
    return text[:1].upper() + text[1:] if text else column


def label_text(value: object) -> str:
    """A label value as text, the same from every file format: 1, 1.0 and "1" all read "1",
    booleans "true"/"false"."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def _reading(word: str) -> str:
    """What a reader sees of an answer word: Unicode-normalised (NFKC: an NFD accent, a ligature,
    full-width letters are the plain word) and case-folded."""
    return unicodedata.normalize("NFKC", word.strip()).casefold()


def answer_list(words: tuple[str, ...]) -> str:
    """"a, b or c": the answer words as the default prompts name them."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


@dataclass(frozen=True)
class TaskDefinition:
    """A user's task. Defaults follow the paper's protocol; ``__post_init__`` checks every field."""

    name: str
    """The task's name in records, run folders and reports; never a built-in dataset's name."""
    data: DataSource
    """Where the evaluation rows are."""
    input: tuple[InputColumn, ...]
    """The input column(s), in the order they are shown."""
    label: str | None = None
    """The label column (a label task); exactly one of ``label`` and ``target``."""
    labels: tuple[tuple[str, str], ...] = ()
    """(label value, answer word) per label, in order: the value as the label column holds it,
    the word the model is asked to answer with (the verbaliser). Label scoring compares these words."""
    target: str | None = None
    """The target column of a free-text task (one reference, or a list of references)."""
    metric: str | None = None
    """accuracy or macro_f1 (label tasks; default accuracy); exact_match, squad_f1 or bleu (free text)."""
    template: str | None = None
    """How a sample is shown, with a ``{column}`` slot per input column (``{{``/``}}``: a brace);
    None: a ``<display>: <value>`` line per input column."""
    answer_cue: str = ANSWER_CUE
    """The line after the sample that asks for the answer (and precedes a worked example's answer)."""
    few_shot: FewShot | None = None
    """Where the worked examples come from; None: the data's "train" split where there is one."""
    prompts: tuple[Prompt, ...] = ()
    """The task's prompts (ids unique; types task, role, semantic); empty: for a label task, ten
    task- and ten role-oriented instructions that name the answer words (``tasks/own/default_prompts.py``)."""
    protected: tuple[str, ...] = ()
    """Words no attack may change besides the answer words and label values (always protected)."""
    id_column: str | None = None
    """A column of unique sample ids; None: the row number."""
    max_tokens: int = DEFAULT_MAX_TOKENS
    """Most new tokens in generate mode (promptbench's 20)."""
    description: str = ""
    """One line for listings."""
    origin: Origin = field(default_factory=Origin, compare=False)
    """Where the definition came from (for messages and provenance only)."""

    def __post_init__(self) -> None:
        err = self.origin.error
        if not isinstance(self.name, str) or not NAME_RE.match(self.name):
            raise err("name", f"{self.name!r} is not a usable name; use letters, digits, '_', '.' or '-' (e.g. tickets)")
        try:
            builtin = canonical_name(self.name)
        except UnknownTaskError:
            builtin = None
        if builtin is not None:
            raise err("name", f"{self.name!r} is the built-in dataset {builtin} (pre list datasets); choose another name")
        self._check_data()
        self._check_input()
        if (self.label is None) == (self.target is None):
            name = self.origin.name
            raise err("label", f"give exactly one of {name('label')} (the label column) and {name('target')} (the free-text "
                      "target column)")
        if self.label is not None:
            self._check_labels()
        elif self.labels:
            raise err("labels", "labels map label values to answer words; they need a label column: set "
                      f"{self.origin.name('label')}, not {self.origin.name('target')}")
        self._check_metric()
        if self.template is not None:
            self.layout()  # parses, naming the fault
        if not isinstance(self.answer_cue, str) or not self.answer_cue.strip() or "\n" in self.answer_cue:
            raise err("answer_cue", "must be one line of text, e.g. \"Answer:\"")
        self._check_few_shot()
        self._check_prompts()
        if not all(isinstance(w, str) and w.strip() for w in self.protected):
            raise err("protected", "must be a list of words")
        if self.id_column is not None and (not isinstance(self.id_column, str) or not self.id_column):
            raise err("id", "must be a column name")
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or not 1 <= self.max_tokens <= MAX_NEW_TOKENS:
            raise err("max_tokens", f"must be a whole number >= 1 and at most {MAX_NEW_TOKENS} (got {self.max_tokens!r})")

    # -- checks ---------------------------------------------------------------------

    def _check_data(self) -> None:
        err = self.origin.error
        d = self.data
        if not isinstance(d.location, str) or not d.location.strip() or d.location == HUB_PREFIX:
            raise err("data", "name a data file, a folder of split files, or hf:PATH")
        if d.kind != "hub":
            if not Path(d.location).exists():
                raise err("data", f"{d.location} not found; check the path (relative to {self.origin.relative_to})")
            if d.config is not None:
                raise err("config", "a configuration applies to a hub dataset only (data = \"hf:PATH\")")
            if d.kind == "file" and d.split is not None:
                raise err("split", "a single data file has no splits; name a folder of split files or a hub dataset")
        for key, value in (("config", d.config), ("split", d.split)):
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise err(key, "must be a non-empty name")

    def _check_input(self) -> None:
        err = self.origin.error
        if not self.input:
            raise err("input", "name the input column(s), e.g. input = \"text\"")
        columns = [c.column for c in self.input]
        for c in self.input:
            if not isinstance(c.column, str) or not c.column.strip():
                raise err("input", "a column name must be non-empty text")
            if not isinstance(c.display, str) or not c.display.strip() or "\n" in c.display:
                raise err("input", f"column {c.column!r}: its display must be one line of text")
        dup = next((c for c in columns if columns.count(c) > 1), None)
        if dup is not None:
            raise err("input", f"column {dup!r} is listed twice; list each input column once")
        for key, column in (("label", self.label), ("target", self.target)):
            if column in columns:
                raise err("input", f"column {column!r} is also the {key} column: the model would be shown the answer")

    def _check_labels(self) -> None:
        err = self.origin.error
        if len(self.labels) < 2:
            raise err("labels", "map at least two label values to answer words, e.g. billing=billing,tech=technical")
        values: dict[str, str] = {}
        words: dict[str, str] = {}
        reads_as: dict[str, tuple[str, str]] = {}
        for value, word in self.labels:
            if not isinstance(value, str) or not value.strip():
                raise err("labels", "a label value must be non-empty text")
            if value in values:
                raise err("labels", f"label value {value!r} is mapped twice; map each value once")
            if not isinstance(word, str) or not word.strip():
                raise err("labels", f"label {value!r}: its answer word must be non-empty text")
            if len(word.split()) != 1:
                raise err("labels", f"label {value!r}: answer word {word!r} is several words; the paper's parser reads "
                          "the last word of an answer: use one word (e.g. " + "_".join(word.split()) + ")")
            if strip_word(word) != word.strip().lower():
                raise err("labels", f"label {value!r}: answer word {word!r} starts or ends with punctuation, which "
                          "answers are read without; drop it")
            hidden = next((ch for ch in word if unicodedata.category(ch) in ("Cf", "Cc")), None)
            if hidden is not None:
                raise err("labels", f"label {value!r}: answer word {word!r} holds an invisible character (U+{ord(hidden):04X}), "
                          "so an answer cannot be told apart from the word without it; remove it")
            low = word.strip().lower()
            if low in words:
                raise err("labels", f"labels {words[low]!r} and {value!r} share the answer word {word!r}; give each its own")
            seen = reads_as.get(_reading(word))
            if seen is not None:
                raise err("labels", f"labels {seen[0]!r} and {value!r} have answer words that read the same ({seen[1]!r} and "
                          f"{word!r} are one word once Unicode-normalised, NFKC); give each its own word")
            values[value] = word
            words[low] = value
            reads_as[_reading(word)] = (value, word)

    def _check_metric(self) -> None:
        allowed = LABEL_METRICS if self.label is not None else TEXT_METRICS
        if self.metric is None:
            if self.label is None:
                raise self.origin.error("metric", f"a free-text task needs a metric: one of {', '.join(TEXT_METRICS)}")
            object.__setattr__(self, "metric", LABEL_METRICS[0])
            return
        if self.metric not in allowed:
            kind = "a label task" if self.label is not None else "a free-text task"
            name = self.origin.name
            known = f" (it fits a label task: set {name('label')} and {name('labels')})" if self.metric in LABEL_METRICS else (
                f" (it fits a free-text task: set {name('target')})" if self.metric in TEXT_METRICS else "")
            raise self.origin.error("metric", f"unknown metric {self.metric!r} for {kind}{known}; use one of {', '.join(allowed)}")

    def _check_few_shot(self) -> None:
        f = self.few_shot
        if f is None:
            return
        err = self.origin.error
        if (f.split is None) == (f.file is None):
            raise err("few_shot", "give exactly one of split (a split of the data) and file (a file of examples)")
        if isinstance(f.count, bool) or not isinstance(f.count, int) or f.count < 1:
            raise err("few_shot", f"count must be a whole number >= 1 (got {f.count!r})")
        if f.split is not None:
            if self.data.kind == "file":
                raise err("few_shot", "a single data file has no other split; name a file of examples instead (file = ...)")
            if f.split == self.data.split:
                raise err("few_shot", f"split {f.split!r} is the evaluation split; examples must come from another split or a file")
        if f.file is not None and not Path(f.file).is_file():
            raise err("few_shot", f"file {f.file} not found; check the path (relative to {self.origin.relative_to})")

    def _check_prompts(self) -> None:
        err = self.origin.error
        seen: dict[str, int] = {}
        for n, p in enumerate(self.prompts, 1):
            if not isinstance(p.id, str) or not p.id.strip():
                raise err("prompts", f"prompt #{n} has no id; give each prompt a unique id")
            if p.id in seen:
                raise err("prompts", f"prompt #{n}: duplicate id {p.id!r} (also prompt #{seen[p.id]}); ids must be unique")
            seen[p.id] = n
            if p.type not in PROMPT_TYPES:
                raise err("prompts", f"prompt {p.id!r}: type {p.type!r}; use one of {', '.join(PROMPT_TYPES)}")
            if not isinstance(p.text, str) or not p.text.strip():
                raise err("prompts", f"prompt {p.id!r} has no text")
            if PLACEHOLDER in p.text:
                raise err("prompts", f"prompt {p.id!r} holds promptbench's {PLACEHOLDER}; pre shows the sample after the "
                          f"instruction itself: remove {PLACEHOLDER}")
            if p.dataset != self.name:
                raise err("prompts", f"prompt {p.id!r} belongs to {p.dataset!r}, not {self.name!r}")
        if not self.prompts and self.label is None:
            raise err("prompts", "a free-text task needs its own prompts (what should the model do?); give its instruction"
                      + (f" with {self.origin.name('prompts')}" if self.origin.name("prompts") != "prompts" else "s (a list)"))

    # -- derived ----------------------------------------------------------------------

    @property
    def labelled(self) -> bool:
        """A label task (else the answers are free text)."""
        return self.label is not None

    @property
    def answer_words(self) -> tuple[str, ...]:
        """The verbalisers, in label order."""
        return tuple(word for _, word in self.labels)

    def layout(self) -> InputTemplate:
        """The parsed template (or the default one line per input column)."""
        columns = [c.column for c in self.input]
        if self.template is None:
            return InputTemplate.lines([(c.column, c.display) for c in self.input])
        if not isinstance(self.template, str) or not self.template.strip():
            raise self.origin.error("template", "must be non-empty text with a {column} slot per input column")
        return InputTemplate.parse(self.template, columns, lambda message: self.origin.error("template", message))

    def canonical(self) -> dict[str, object]:
        """What decides a prompt's score on this task, as plain data (the hash's input)."""
        few = self.few_shot
        return {
            "format": HASH_FORMAT,
            "layout": self.layout().canonical(),
            "answer_cue": self.answer_cue,
            "label": self.label,
            "labels": [list(pair) for pair in self.labels],
            "target": self.target,
            "metric": self.metric,
            "max_tokens": self.max_tokens,
            "few_shot": None if few is None else {"split": few.split, "file": few.file is not None, "count": few.count},
        }

    def definition_hash(self) -> str:
        """16 hex digits of SHA-256 over ``canonical()``: the task's part of the cache key."""
        raw = orjson.dumps(self.canonical(), option=orjson.OPT_SORT_KEYS)
        return hashlib.sha256(raw).hexdigest()[:16]

    def to_table(self) -> dict[str, object]:
        """The definition as a task file's keys (paths absolute): what results.json keeps, so a
        run folder's records can be measured again on the same task without the task file
        (``tasks.own.reading.definition_from_table`` reads it back to an equal definition)."""
        d = self.data
        table: dict[str, object] = {
            "name": self.name, "description": self.description, "data": d.location,
            "input": [{"column": c.column, "display": c.display} for c in self.input],
            "answer_cue": self.answer_cue, "max_tokens": self.max_tokens,
            "prompts": [{"id": p.id, "type": p.type, "text": p.text, "language": p.language} for p in self.prompts],
            "protected": list(self.protected),
        }
        optional = {"config": d.config, "split": d.split, "label": self.label, "target": self.target,
                    "metric": self.metric, "template": self.template, "id": self.id_column}
        table.update({k: v for k, v in optional.items() if v is not None})
        if self.labels:
            table["labels"] = dict(self.labels)
        if self.few_shot is not None:
            few = self.few_shot
            table["few_shot"] = {"count": few.count, **({"split": few.split} if few.split else {"file": few.file})}
        if not table["prompts"]:
            del table["prompts"]  # the default set, derived from the answer words
        if not table["description"]:
            del table["description"]
        return table
