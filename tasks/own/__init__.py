"""A user's own task: data, columns, labels and prompts as the same ``Task`` value
the built-in datasets are (``docs/your-task.md``).

``load_task_file(path)`` (TOML), ``task_from_columns(data_file=...,
input_columns=..., label_column=..., labels="value=word,...")`` (the flags' form)
and ``build_task(TaskDefinition(...))`` (code) all make an ``OwnTask``;
``resolve_task`` takes a dataset name, a task file or a task value.
"""

from promptrobust.tasks.own.definition import DataSource, FewShot, InputColumn, TaskDefinition
from promptrobust.tasks.own.reading import load_task_file, parse_labels, read_task_file, task_from_columns
from promptrobust.tasks.own.resolve import resolve_task, task_for_data_file, task_from_provenance
from promptrobust.tasks.own.task import OwnTask, build_task

__all__ = [
    "DataSource", "FewShot", "InputColumn", "OwnTask", "TaskDefinition", "build_task", "load_task_file", "parse_labels",
    "read_task_file", "resolve_task", "task_for_data_file", "task_from_columns", "task_from_provenance",
]
