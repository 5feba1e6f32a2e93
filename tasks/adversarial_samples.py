"""Adversarial samples for the joint attack on prompt and sample (the paper's AdvGLUE study, its
Table 11): the prompt is attacked while the samples themselves are adversarial ones.

Sources: a local file in AdvGLUE's layout (``dev.json``: one key per task, ``sst2``, ``qqp``,
``mnli``, ``mnli-mm``, ``qnli``, ``rte``, each a list of rows with the GLUE columns, ``label`` and
``idx``), a local file of rows in the task's own columns (.json list or .jsonl), or ``hub``: the
``adv_glue`` dataset on the Hugging Face hub (``promptrobust[hub]``), its validation split.
Rotten Tomatoes (SST-2's source sentences, same labels) reads AdvGLUE's SST-2 rows.
"""

from __future__ import annotations

from pathlib import Path

from promptrobust.tasks.base import Sample, Task
from promptrobust.tasks.datafiles import read_rows, DataRow
from promptrobust.tasks.errors import TaskDataError
from promptrobust.tasks.hf_data import load_hf_rows

#: ``--adversarial-samples hub``: AdvGLUE from the hub.
HUB = "hub"
HUB_DATASET = "adv_glue"

#: Our dataset -> AdvGLUE's keys (file) and hub configs, in order.
ADV_GLUE: dict[str, tuple[tuple[str, str], ...]] = {
    "sst2": (("sst2", "adv_sst2"),),
    "rotten_tomatoes": (("sst2", "adv_sst2"),),
    "qqp": (("qqp", "adv_qqp"),),
    "mnli": (("mnli", "adv_mnli"), ("mnli-mm", "adv_mnli_mismatched")),
    "qnli": (("qnli", "adv_qnli"),),
    "rte": (("rte", "adv_rte"),),
}


def source_name(source: str) -> str:
    """How records name the adversarial samples: ``adv_glue`` (hub) or the file's name."""
    return HUB_DATASET if source == HUB else Path(source).name


def load_adversarial_samples(task: Task, source: str) -> list[Sample]:
    """Every adversarial sample ``source`` holds for ``task``, in source order (the caller draws and limits)."""
    to_samples = getattr(task, "to_samples", None)
    if to_samples is None:
        raise TaskDataError(f"{task.name} generates its samples; adversarial samples need a dataset task "
                            f"({', '.join(sorted(ADV_GLUE))})", setting="adversarial_samples")
    rows: list[tuple[DataRow, str, str]] = []
    if source == HUB:
        for key, config in _keys(task, "the hub's adv_glue"):
            found = load_hf_rows(HUB_DATASET, config, "validation")
            rows += [(r, f"{HUB_DATASET}/{config} row {i + 1}", _tag(task, key)) for i, r in enumerate(found)]
    else:
        path = Path(source).expanduser()
        table = read_rows(path)
        document = table[0].get("__document__") if len(table) == 1 else None
        if isinstance(document, dict):  # AdvGLUE's layout: one list of rows per task
            keys = [(k, c) for k, c in _keys(task, str(path)) if k in document]
            if not keys:
                raise TaskDataError(f"{path} has no rows for {task.name} (AdvGLUE key "
                                    f"{' or '.join(k for k, _ in ADV_GLUE.get(task.name, ()))}); it has "
                                    f"{', '.join(sorted(document)) or 'nothing'}", setting="adversarial_samples")
            for key, _ in keys:
                block = document[key]
                if not isinstance(block, list) or not all(isinstance(r, dict) for r in block):
                    raise TaskDataError(f"{path}: {key!r} must be a list of rows", setting="adversarial_samples")
                rows += [(r, f"{path} {key} row {i + 1}", _tag(task, key)) for i, r in enumerate(block)]
        else:  # rows in the task's own columns
            rows = [(r, f"{path} row {i + 1}", "adv") for i, r in enumerate(table)]
    if not rows:
        raise TaskDataError(f"{source}: no adversarial samples for {task.name}", setting="adversarial_samples")
    samples: list[Sample] = to_samples(rows)
    return samples


def _keys(task: Task, where: str) -> tuple[tuple[str, str], ...]:
    keys = ADV_GLUE.get(task.name)
    if keys is None:
        raise TaskDataError(f"{where}: AdvGLUE has no {task.name} samples (it has {', '.join(sorted(ADV_GLUE))}); "
                            "give a file of adversarial rows in the task's own columns instead",
                            setting="adversarial_samples")
    return keys


def _tag(task: Task, key: str) -> str:
    """The sample id's tag: ``adv`` (``adv-mm`` for MNLI's mismatched half), so adversarial ids never
    collide with the clean samples' ids."""
    return "adv-mm" if key == "mnli-mm" else "adv"
