"""Which task a command measures, as a user names it: built-in dataset names, a task file, or
a data file (or a hub dataset) with its columns, the quick form of a task of one's own.

    choice = TaskChoice(input_columns=("body",), label_column="queue", labels="BIL=billing,TEC=technical,OTH=other")
    targets = choice.targets(datasets=None, data_file="tickets.csv")     # [OwnTask "tickets"]

A task file and the columns form become the same ``Task`` value (``tasks.own``: one constructor,
one definition, the same cache keys), so everything after this point treats them alike. The
rules are checked here, before anything loads, each a ``SettingsError`` naming the setting: a
task file or columns, not both; a task and a dataset name, not both; columns need their data
(``data_file``, or ``dataset="hf:PATH"``); and a data file given alone is read as the default
dataset only when it holds that dataset's columns, else refused naming the ways to say which
task it holds (``tasks.own.task_for_data_file``): never silently read as another task.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

from typing import TYPE_CHECKING, TypeAlias

from promptrobust.engine.errors import SettingsError
from promptrobust.engine.measuring.settings import DEFAULT_DATASET

if TYPE_CHECKING:  # the command line reads this module for its flags; what reads tasks loads when called
    from promptrobust.tasks.base import Task

__all__ = ["COLUMN_SETTINGS", "Target", "TaskChoice"]

#: What one command measures: a built-in dataset's name, or a task value (a task file's, or of columns).
Target: TypeAlias = "str | Task"

#: The prefix of a Hugging Face dataset given as ``dataset`` (``tasks.own``'s ``hf:PATH``).
HUB_PREFIX = "hf:"


@dataclass(frozen=True)
class TaskChoice:
    """A user's own task, named by a task file or by the columns of its data (the fields after
    ``task``: ``tasks.own.task_from_columns``'s parameters, so the two forms are one definition)."""

    task: str | None = None
    """Your own task's file (TOML; docs/your-task.md): its data, columns, answer words and prompts."""
    input_columns: tuple[str, ...] = ()
    """Your own task without a task file: the input column(s) of the data file (or of the hub dataset hf:PATH), comma-separated or repeated."""
    label_column: str | None = None
    """The label column of a task given by its columns."""
    labels: str | None = None
    """Label value=answer word, comma-separated, e.g. BIL=billing,TEC=technical,OTH=other (the model answers with the words)."""
    target_column: str | None = None
    """The reference column of a free-text task given by its columns (instead of label_column and labels)."""
    metric: str | None = None
    """The metric of a task given by its columns: accuracy or macro_f1; free text: exact_match, squad_f1 or bleu."""
    template: str | None = None
    """How a sample of a task given by its columns is shown, a {column} slot per input column; default: one "Column: value" line each."""
    few_shot_file: str | None = None
    """Worked examples of a task given by its columns: a file in the data's columns (its first rows are the set)."""
    protected: tuple[str, ...] = ()
    """Words no attack may change in a task given by its columns, comma-separated or repeated (its answer words and label values always are)."""
    id_column: str | None = None
    """Sample ids of a task given by its columns: a column of unique ids; default: the row number."""
    task_name: str | None = None
    """The name of a task given by its columns; default: the data file's stem (the hub path's last part)."""
    split: str | None = None
    """The evaluation split of a task given by its columns: a split of the hub dataset (default test), or a file stem in a folder."""
    dataset_config: str | None = None
    """The configuration of a hub dataset given by its columns (load_dataset(PATH, CONFIG))."""

    def __post_init__(self) -> None:
        for name in LISTS:  # each item may hold several, comma-separated
            if not isinstance(getattr(self, name), tuple):
                raise SettingsError(f"{name} must be a tuple of names", setting=name)
            object.__setattr__(self, name, tuple(c.strip() for item in getattr(self, name) for c in item.split(",") if c.strip()))
        if self.task is not None and self.by_columns:
            given = next(f.name for f in fields(self) if f.name in COLUMN_SETTINGS and getattr(self, f.name) not in (None, ()))
            raise SettingsError(f"task {self.task} is a task file and {given} describes a task by its columns: "
                                "give one of them (a task file holds the columns itself)", setting="task")

    @property
    def by_columns(self) -> bool:
        """A task given by its columns (any column setting given)."""
        return any(getattr(self, name) not in (None, ()) for name in COLUMN_SETTINGS)

    def targets(self, datasets: Sequence[str] | None, data_file: str | None = None, *, prompt_text: str | None = None,
                spell: Callable[[str], str] | None = None) -> list[Target]:
        """What to measure: the task file's task, the task of these columns, else the ``datasets``
        named (None or empty: the default dataset; a data file given alone must hold its columns).
        ``data_file``: ``EvaluationSettings.data_file``; ``prompt_text``: the instruction the
        command evaluates (``PromptChoice.text``), a free-text task's prompt in the columns form;
        ``spell``: how messages name a setting (the command line passes its flag for each)."""
        from promptrobust.tasks.own import load_task_file, task_for_data_file

        name = spell or (lambda setting: setting)
        named = [d.strip() for d in datasets or () if d.strip()]
        if self.task is not None:
            if named:
                raise SettingsError(f"{name('task')} {self.task} and {name('dataset')} {named[0]} both name what to "
                                    "measure: give one", setting="task")
            return [load_task_file(self.task)]
        if self.by_columns:
            return [self._from_columns(named, data_file, prompt_text, name)]
        for dataset in named or [DEFAULT_DATASET]:  # a data file must hold the columns of what it is read as
            if data_file:
                task_for_data_file(data_file, dataset, spell=spell)
        return list(named) or [DEFAULT_DATASET]

    def _from_columns(self, named: list[str], data_file: str | None, prompt_text: str | None,
                      name: Callable[[str], str]) -> Task:
        hub = [d for d in named if d.startswith(HUB_PREFIX)]
        data_flags = f"{name('data_file')} FILE or {name('dataset')} hf:PATH"
        if named and (len(named) > 1 or not hub):
            other = next((d for d in named if not d.startswith(HUB_PREFIX)), named[-1])
            raise SettingsError(f"{name('dataset')} {other}: the column settings describe one task of your own; name "
                                f"its data with {data_flags}, or drop the column settings for a built-in dataset",
                                setting="dataset")
        if hub and data_file:
            raise SettingsError(f"{name('data_file')} {data_file} and {name('dataset')} {hub[0]} both name the task's "
                                "data: give one", setting="data_file")
        location = hub[0] if hub else data_file
        if not location:
            raise SettingsError(f"a task given by its columns needs its data: {data_flags} (csv, tsv, jsonl, json, "
                                "parquet)", setting="data_file")
        if not self.input_columns:
            raise SettingsError(f"a task given by its columns needs {name('input_columns')} (the column(s) the model "
                                "reads)", setting="input_columns")
        from promptrobust.tasks.own import task_from_columns
        from promptrobust.tasks.own.reading import FLAG_PARAMETERS

        values: dict[str, object] = {n: getattr(self, n) for n in COLUMN_SETTINGS if getattr(self, n) not in (None, ())}
        if self.target_column is not None and prompt_text:  # free text: the instruction is the task's prompt
            values["prompts"] = [prompt_text]
        names = {parameter: name(parameter) for _, parameter in FLAG_PARAMETERS}
        names["prompts"] = name("prompt_text")
        if hub:
            names["data_file"] = name("dataset")
        return task_from_columns(data_file=location, names=names, **values)  # type: ignore[arg-type]


#: The settings given as lists (a repeatable flag, or one comma-separated value).
LISTS = ("input_columns", "protected")
#: The settings of a task given by its columns (``tasks.own.task_from_columns``'s parameters).
COLUMN_SETTINGS: tuple[str, ...] = tuple(f.name for f in fields(TaskChoice) if f.name != "task")
