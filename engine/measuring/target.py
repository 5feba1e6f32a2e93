"""What one evaluation measures, decided once: ``decide_target`` is the only place that picks the
task, the shots and the mode from ``EvaluationSettings``.

A run plan (``engine.runs.plan``), a sweep cell, ``pre eval`` and the Python API all decide a
``MeasurementTarget`` before any model loads; the workbench (``Workbench.open``) then takes it as
given. The one decision left once the model is up is a backend's: a model that cannot score label
log-probs generates instead (``engine.measuring.mode``), said as a note.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from promptrobust.engine.errors import SettingsError
from promptrobust.engine.measuring.mode import decide_mode
from promptrobust.engine.measuring.settings import DEFAULT_SAMPLE_SELECTION, EvaluationSettings, Mode, SampleSelection
from promptrobust.tasks.base import Task
from promptrobust.tasks.common import DatasetTask
from promptrobust.tasks.own import OwnTask
from promptrobust.tasks.own.resolve import resolve_task
from promptrobust.tasks.registry import get_task, list_tasks

__all__ = ["MeasurementTarget", "decide_target", "task_of", "with_selection"]


@dataclass(frozen=True)
class MeasurementTarget:
    """One evaluation as decided: the task (drawing its samples as the settings say), the settings
    (their ``dataset`` the task's name, ``task`` set only for a user's own task), the mode and the shots."""

    task: Task = field(hash=False)  # a Task need not be hashable; equality still compares it
    """The task measured."""
    evaluation: EvaluationSettings
    """The settings it is measured under."""
    mode: Mode
    """As the task allows (a backend without label log-probs still generates; said when it starts)."""
    shots: int
    """Worked examples before each sample (the paper's base-model rule applied)."""

    def __post_init__(self) -> None:
        if self.evaluation.dataset != self.task.name:
            raise SettingsError(f"dataset {self.evaluation.dataset!r} is not the target's task {self.task.name!r}")

    @property
    def shots_by_rule(self) -> bool:
        """Whether the paper's base-model rule chose the shots (none were given)."""
        return self.evaluation.shots is None and self.shots > 0


def decide_target(evaluation: EvaluationSettings, *, base_model: bool, strict: bool = False,
                  task: Task | None = None) -> MeasurementTarget:
    """The task, mode and shots of ``evaluation`` on a model (``base_model``: the paper's 3-shot rule
    applies). ``strict``: what a user asked for explicitly (``pre run``): choices of a free-text task
    is an error naming the fix; otherwise (a sweep's grid, the Python API) it generates. ``task``: the
    task already resolved (a plan resolves every dataset name before deciding anything)."""
    task = with_selection(task if task is not None else (evaluation.task or resolve_task(evaluation.dataset)),
                          evaluation.sample_selection)
    own = None if _is_builtin(task) else task  # a built-in dataset is found again by its name
    mode = decide_mode(evaluation.mode, task, strict=strict)
    shots = evaluation.shots_for(base_model)
    return MeasurementTarget(task=task, evaluation=evaluation.with_(dataset=task.name, task=own), mode=mode, shots=shots)


def task_of(evaluation: EvaluationSettings) -> Task:
    """The task an evaluation names: its user's task value (``EvaluationSettings.task``), else the
    built-in dataset or task file its ``dataset`` names, drawing its samples as ``sample_selection`` says."""
    return with_selection(evaluation.task or resolve_task(evaluation.dataset), evaluation.sample_selection)


def with_selection(task: Task, selection: SampleSelection) -> Task:
    """The task drawing its samples as ``selection`` says (``EvaluationSettings.sample_selection``)."""
    if getattr(task, "selection", DEFAULT_SAMPLE_SELECTION) == selection:
        return task
    if not isinstance(task, DatasetTask):  # the only tasks with rows to select from
        raise SettingsError(
            f"sample_selection {selection!r}: {task.name} generates its samples, it has no rows to take first",
            setting="sample_selection",
        )
    return dataclasses.replace(task, selection=selection)


def _is_builtin(task: Task) -> bool:
    """The registry's own task of that name (a changed copy or a user's task is carried as a value)."""
    if isinstance(task, OwnTask) or task.name not in list_tasks():
        return False
    selection: SampleSelection = getattr(task, "selection", "seeded")
    return with_selection(get_task(task.name), selection) == task
