"""The paper's few-shot protocol: a fixed, hand-chosen set of 3 worked examples
per dataset (per subject for MMLU, per question type for math, per direction
for translation), the same for every seed.

The sets live in ``tasks/data/fewshot_<dataset>.jsonl``, one row per example
in the columns the task's loader reads (so they pass the same checks as
data). They were written for promptrobust (the math ones generated with our
``tasks.math_gen`` at its training difficulty and checked in); they copy no
dataset's training split, which is not available offline. A user may replace
a set with a ``few_shot`` file (``.jsonl``, ``.csv``, ...) in the data folder.

``few_shot_examples`` is the one entry point (the workbench, the sweep estimate and
``promptrobust.tasks`` use it); this module knows ``tasks.common``, never the reverse.
"""

from __future__ import annotations

import random
from collections.abc import Hashable
from pathlib import Path

from promptrobust.tasks.base import Sample, Task
from promptrobust.tasks.common import DatasetTask
from promptrobust.tasks.datafiles import find_split_file, require_dir
from promptrobust.tasks.errors import TaskDataError

DATA_DIR = Path(__file__).parent / "data"
#: The paper's number of worked examples per dataset (or per group).
PAPER_SHOTS = 3


def builtin_file(task: DatasetTask) -> Path:
    """The built-in set of ``task`` (Rotten Tomatoes uses SST-2's, like its prompts)."""
    return DATA_DIR / f"fewshot_{task.prompt_dataset or task.name}.jsonl"


def examples_file(task: DatasetTask, data_dir: str | None = None) -> Path:
    """A ``few_shot`` file in ``data_dir`` if there is one, else the built-in set."""
    if data_dir is not None:
        found = find_split_file(require_dir(data_dir), ("few_shot", "fewshot"))
        if found is not None:
            return found
    path = builtin_file(task)
    if not path.is_file():
        raise TaskDataError(f"{task.name}: no fixed few-shot set ({path} is missing); add a few_shot file to the data folder "
                            "or use 0 shots", setting="shots")
    return path


def fixed_examples(task: DatasetTask, k: int = PAPER_SHOTS, *, data_dir: str | None = None) -> list[Sample]:
    """The first ``k`` examples of every group of the task's fixed set, in file order."""
    own = task.fixed_few_shot(k)
    if own is not None:
        return own
    if not 0 <= k <= PAPER_SHOTS:
        raise TaskDataError(
            f"{task.name}: the paper's fixed few-shot set has {PAPER_SHOTS} examples per dataset; use 0 to {PAPER_SHOTS} shots",
            setting="shots",
        )
    if k == 0:
        return []
    path = examples_file(task, data_dir)
    samples = task.to_samples(task._read_local(path, ""))
    groups: dict[Hashable | None, list[Sample]] = {}
    for s in samples:
        groups.setdefault(task.few_shot_group(s), []).append(s)
    short = [g for g, items in groups.items() if len(items) < k]
    if not samples or short:
        which = f" (group {short[0]!r} has {len(groups[short[0]])})" if short else ""
        raise TaskDataError(f"{path}: {k} few-shot examples needed per group{which}; add rows or use fewer shots", setting="shots")
    return [s for items in groups.values() for s in items[:k]]


def few_shot_examples(
    task: Task,
    seed: int,
    k: int = 3,
    *,
    data_dir: str | None = None,
    data_file: str | None = None,
) -> list[Sample]:
    """The first ``k`` (at most 3) of the paper's fixed few-shot examples, per
    group (MMLU subject, math question type, translation direction). The set is
    the same for every seed; ``data_dir`` may hold a ``few_shot`` file that
    replaces it. Tasks that are not dataset tasks (test doubles) draw ``k``
    examples from their pool with ``seed``."""
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if k == 0:
        return []
    if isinstance(task, DatasetTask):
        return fixed_examples(task, k, data_dir=data_dir)
    pool = task.few_shot_pool(seed=seed, data_dir=data_dir)
    if len(pool) < k:
        raise TaskDataError(
            f"{task.name}: the few-shot pool has {len(pool)} samples, {k} needed; "
            "add a train file to the data folder or use 0 shots",
            setting="shots",
        )
    return random.Random(seed).sample(pool, k)
