"""From what a user names to the ``Task`` to measure: a built-in dataset's name, a
task file, or a task value built in code (``resolve_task``); and the rule that a
data file is never silently read as another task (``task_for_data_file``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from promptrobust.tasks.base import Task
from promptrobust.tasks.classification import ClassificationTask
from promptrobust.tasks.datafiles import DataFile
from promptrobust.tasks.errors import TaskDataError, TaskDefinitionError
from promptrobust.tasks.own.definition import HUB_PREFIX, Origin
from promptrobust.tasks.own.reading import definition_from_table, is_task_file, load_task_file
from promptrobust.tasks.own.task import OwnTask, build_task
from promptrobust.tasks.registry import get_task



def _ways(spell: Callable[[str], str] | None) -> tuple[str, str, str]:
    """The ways to say which task a data file holds: by its columns, by a task file, by a dataset's
    name, as settings (``input_columns=COLUMN``) or as ``spell`` names them (the CLI: its flags)."""
    def say(setting: str, value: str) -> str:
        return f"{setting}={value}" if spell is None else f"{spell(setting)} {value}"

    columns = ", ".join((say("input_columns", "COLUMN"), say("label_column", "COLUMN"), say("labels", "VALUE=WORD,...")))
    return (f"name its columns ({columns})", f"write a task file ({say('task', 'FILE')})",
            f"name the built-in dataset it holds ({say('dataset', 'NAME')})")


def resolve_task(task: str | Task) -> Task:
    """The task ``task`` names: a ``Task`` as it is, a task file (``.toml``)
    read, or a built-in dataset's name (aliases accepted)."""
    if isinstance(task, Task):
        return task
    if is_task_file(task):
        return load_task_file(task)
    if task.startswith(HUB_PREFIX):
        by_columns, by_file, _ = _ways(None)
        raise TaskDefinitionError(
            f"{task}: a hub dataset of your own needs its columns: {by_columns}, or {by_file} with data = \"{task}\"",
            setting="dataset",
        )
    return get_task(task)


def task_for_data_file(data_file: str | Path, dataset: str | Task | None, *,
                       spell: Callable[[str], str] | None = None) -> Task:
    """The task a data file given on its own is read as: the dataset named beside it, whose
    columns the file must hold. None (nothing named) is an error: a file is never read as
    the default dataset whatever it holds. ``spell``: how messages name a setting (the CLI's flags)."""
    by_columns, by_file, by_dataset = _ways(spell)
    if dataset is None:
        raise TaskDefinitionError(f"{data_file}: which task does this data file hold? {by_columns}, {by_file}, or {by_dataset}",
                                  setting="data_file")
    task = resolve_task(dataset)
    if isinstance(task, ClassificationTask):
        check_columns(task, data_file, spell=spell)
    return task


def check_columns(task: ClassificationTask, data_file: str | Path, *, spell: Callable[[str], str] | None = None) -> None:
    """``data_file`` holds the input and label columns of ``task`` (a built-in label task),
    under one of the names the task accepts (read from its header: no row is held)."""
    data = DataFile(data_file, headerless_tsv_columns=task.headerless_tsv_columns)
    present = list(data.columns)
    if not present:
        return  # the task's own loader says the file is empty
    by_columns, by_file, _ = _ways(spell)
    wanted = [f.columns for f in task.fields] + [task.label_columns]
    for names in wanted:
        if not any(n in present for n in names):
            also = f" (or {', '.join(repr(n) for n in names[1:])})" if len(names) > 1 else ""
            found = ", ".join(repr(c) for c in present[:12])
            raise TaskDefinitionError(
                f"{data_file}: no column {names[0]!r}{also}, which {task.name} reads; the file has {found}. "
                f"If it is a task of your own, {by_columns} or {by_file}",
                setting="data_file",
            )


def task_from_provenance(provenance: Mapping[str, Any], *, where: str) -> OwnTask:
    """The user's task a run folder recorded (an entry of its results.json ``tasks``, written by
    ``OwnTask.provenance``), to measure its records again (``pre transfer``, ``pre defend``,
    ``pre attention``): read back from the recorded definition, which must still hash as
    recorded, on data that must still hash as recorded (else the records' samples are gone).
    ``where``: the results.json it came from, for messages."""
    table = provenance.get("definition")
    name = provenance.get("name", "?")
    if not isinstance(table, Mapping):
        raise TaskDefinitionError(f"{where}: task {name} has no recorded definition (written before pre recorded it); "
                                  "run the task again")
    origin = Origin(task_file=provenance.get("task_file"), recorded_in=where)
    task = build_task(definition_from_table(table, origin=origin, base_dir=Path(where).parent))
    if task.definition_hash != provenance.get("definition_hash"):
        raise TaskDefinitionError(f"{where}: task {name} reads back with definition {task.definition_hash}, not the "
                                  f"recorded {provenance.get('definition_hash')}; run the task again")
    recorded = provenance.get("data_hash")
    if recorded and task.data_hash() != recorded:
        raise TaskDataError(f"{where}: the data of task {name} ({task.definition.data.location}) changed since the run "
                            "(its SHA-256 differs), so its records' samples are gone; restore the data, or run the task again")
    return task
