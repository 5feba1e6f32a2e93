"""Task names, aliases and the one-line catalogue ``pre list datasets`` shows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from promptrobust.tasks.base import Task
from promptrobust.tasks.common import DatasetTask
from promptrobust.tasks.errors import UnknownTaskError
from promptrobust.tasks.glue import cola, mnli, mrpc, qnli, qqp, rte, sst2, wnli
from promptrobust.tasks.math_task import math
from promptrobust.tasks.mmlu import mmlu
from promptrobust.tasks.rotten_tomatoes import rotten_tomatoes
from promptrobust.tasks.squad import squad_v2
from promptrobust.tasks.translation import iwslt, un_multi

_FACTORIES: dict[str, Callable[[], Task]] = {
    "sst2": sst2,
    "cola": cola,
    "qqp": qqp,
    "mrpc": mrpc,
    "mnli": mnli,
    "qnli": qnli,
    "rte": rte,
    "wnli": wnli,
    "mmlu": mmlu,
    "squad_v2": squad_v2,
    "iwslt": iwslt,
    "un_multi": un_multi,
    "math": math,
    "rotten_tomatoes": rotten_tomatoes,
}

#: Extra spellings (compared after lowercasing and dropping "-", "_", " ", "/").
_ALIASES = {
    "glue/sst2": "sst2", "sst": "sst2",
    "squad2": "squad_v2", "squad": "squad_v2",
    "iwslt2017": "iwslt",
    "unmulti": "un_multi", "un": "un_multi",
    "mathematics": "math", "deepmindmath": "math", "dmmath": "math",
    "rt": "rotten_tomatoes", "rottentomatoes": "rotten_tomatoes", "mr": "rotten_tomatoes",
    "mnlimatched": "mnli",
}


def _squash(name: str) -> str:
    return "".join(ch for ch in name.strip().lower() if ch not in "-_ /")


_LOOKUP = {_squash(n): n for n in _FACTORIES} | {_squash(a): n for a, n in _ALIASES.items()}


def canonical_name(name: str) -> str:
    """The registered name for ``name`` or one of its aliases ("SST-2" -> "sst2")."""
    found = _LOOKUP.get(_squash(name))
    if found is None:
        raise UnknownTaskError(f"unknown dataset {name!r}; valid names: {', '.join(list_tasks())}")
    return found


def list_tasks() -> list[str]:
    """Every registered task name: the paper's 13 first, then extras."""
    return list(_FACTORIES)


def get_task(name: str) -> Task:
    """A fresh Task for ``name`` (aliases accepted)."""
    return _FACTORIES[canonical_name(name)]()


def prompt_dataset(name: str) -> str:
    """The dataset whose prompt files ``name`` uses (rotten_tomatoes -> sst2)."""
    task = get_task(name)
    if isinstance(task, DatasetTask) and task.prompt_dataset:
        return task.prompt_dataset
    return task.name


@dataclass(frozen=True)
class TaskInfo:
    name: str
    description: str
    sample_size: int | None
    metric: str
    labels: tuple[str, ...]


def task_info() -> list[TaskInfo]:
    """One row per task for ``pre list datasets``."""
    out = []
    for name in list_tasks():
        t = get_task(name)
        desc = t.description if isinstance(t, DatasetTask) else ""
        size = t.sample_size if isinstance(t, DatasetTask) else None
        out.append(TaskInfo(name, desc, size, t.metric.name, tuple(t.choices()) if t.labels else ()))
    return out
