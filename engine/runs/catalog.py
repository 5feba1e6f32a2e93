"""What a run can use, as rows: models, datasets, prompts and attacks (``pre list``), and the
default model. The registries own each list (``engine.serving.registry``, ``tasks.registry``,
``tasks.prompt_sets``, ``attacks.registry``); this module puts them side by side. The default
model costs nothing to read (every command line's ``--model`` default); the lists load their
registries when asked."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from typing import TYPE_CHECKING

from promptrobust.engine.measuring.settings import DEFAULT_DATASET
from promptrobust.engine.serving.model_args import ArgumentRow, argument_rows
from promptrobust.engine.serving.registry import BUILT_IN, DEFAULT_MODEL, REGISTRY, backend_names, backend_registration
from promptrobust.tasks.base import PROMPT_TYPES

if TYPE_CHECKING:
    from promptrobust.tasks.base import Prompt, Task

__all__ = ["BUILT_IN_BACKENDS", "DEFAULT_DATASET", "DEFAULT_MODEL", "PROMPT_TYPES", "ArgumentRow", "AttackRow", "BackendRow",
           "DatasetRow", "ModelRow", "attack_runs_here", "attacks", "backends", "datasets", "default_attack", "have_hub",
           "is_offline", "models", "prompts", "suggested_attacks"]

#: The backends that come with pre (a plugin's package may add more: ``pre list backends``).
BUILT_IN_BACKENDS: tuple[str, ...] = tuple(BUILT_IN)


@dataclass(frozen=True)
class ModelRow:
    name: str
    backend: str
    model: str
    tags: tuple[str, ...]
    """embedded, paper, base (few-shot only), bench (random weights)."""
    description: str


@dataclass(frozen=True)
class BackendRow:
    name: str
    description: str
    extra: str
    """The extra it needs ("" for none)."""
    arguments: tuple[ArgumentRow, ...]
    """Its model arguments (``--model-args KEY=VALUE``), from its options value."""


@dataclass(frozen=True)
class DatasetRow:
    name: str
    samples: int | None
    """The paper's sample size."""
    metric: str
    labels: tuple[str, ...]
    offline: bool
    """Its evaluation samples come with pre (no hub download)."""
    description: str


@dataclass(frozen=True)
class AttackRow:
    name: str
    description: str
    options: dict[str, object]
    """Options settable as KEY=VALUE, with their defaults."""
    needs: str
    """What it needs beyond the install, and how to get it ("" for nothing)."""


def models() -> list[ModelRow]:
    """Every registered model, then the random-weight architectures (benchmarks only)."""
    from promptrobust.engine.serving.backends.random_model import RANDOM_CONFIGS

    rows = []
    for spec in REGISTRY.values():
        tags = tuple(t for t, on in (("embedded", spec.embedded), ("paper", spec.paper), ("base", spec.base_model)) if on)
        rows.append(ModelRow(spec.name, spec.backend, "(bundled)" if spec.embedded else spec.model, tags, spec.description))
    for name in RANDOM_CONFIGS:
        rows.append(ModelRow(f"random:{name}", "hf", "(random weights)", ("bench",),
                             f"{name} architecture, random weights: benchmarks only"))
    return rows


def backends() -> list[BackendRow]:
    """Every backend here (built in, then plugins'), with the model arguments its options value declares."""
    rows = []
    for name in backend_names():
        registration = backend_registration(name)
        rows.append(BackendRow(name, registration.description, registration.extra or "",
                               tuple(argument_rows(registration.options))))
    return rows


def is_offline(task: Task) -> bool:
    """Whether a dataset's evaluation samples come with pre (no hub download, no `datasets` package)."""
    source = getattr(task, "source", None)
    if source is None or not getattr(source, "hf_eval", ()):
        return True
    return getattr(task, "math_source", None) == "generate"  # DeepMind Mathematics: generated locally


def have_hub() -> bool:
    """Whether the `datasets` package (the [hub] extra) is installed."""
    return importlib.util.find_spec("datasets") is not None


def datasets() -> list[DatasetRow]:
    from promptrobust.tasks.registry import get_task, task_info

    return [DatasetRow(t.name, t.sample_size, t.metric, t.labels, is_offline(get_task(t.name)), t.description)
            for t in task_info()]


def prompts(dataset: str | Task | None = None, *, task_file: str | None = None, prompt_type: str | None = None,
            promptbench: str | None = None, shots: int = 0) -> list[Prompt]:
    """A dataset's stored prompts (of one type), a user's own task's prompts (``task_file``, or a
    task value as ``dataset``), or the paper's own from a promptbench checkout (its few-shot files
    when ``shots`` > 0)."""
    from promptrobust.engine.errors import SettingsError
    from promptrobust.tasks.own import load_task_file, resolve_task
    from promptrobust.tasks.prompt_sets import load_prompts
    from promptrobust.tasks.promptbench_import import load_promptbench_prompts

    if (dataset is None) == (task_file is None):
        raise SettingsError("name a dataset or a task file, one of them", setting="dataset")
    task = load_task_file(task_file) if task_file is not None else resolve_task(dataset)  # type: ignore[arg-type]
    if promptbench:
        if task.own_prompts() is not None:
            raise SettingsError(f"promptbench holds the paper's prompts of its datasets, not of your task {task.name}",
                                setting="promptbench")
        types = [prompt_type] if prompt_type else list(PROMPT_TYPES)
        return list(load_promptbench_prompts(promptbench, task.name, types=types, shot="few" if shots > 0 else "zero"))
    return load_prompts(task, types=[prompt_type] if prompt_type else None)


def attacks() -> list[AttackRow]:
    from promptrobust.attacks.registry import attack_options, attack_requirements, list_attacks

    needs = dict(attack_requirements())
    return [AttackRow(name, description, attack_options(name, cli_only=True), needs.get(name, ""))
            for name, description in list_attacks()]


def default_attack() -> str:
    """The attack the Python API runs when none is named, and `pre run` suggests first (``attacks.recipes``)."""
    from promptrobust.attacks.recipes import DEFAULT_ATTACK

    return DEFAULT_ATTACK


def suggested_attacks() -> tuple[str, ...]:
    """The attacks `pre run` suggests after one has run, in order (``attacks.recipes``)."""
    from promptrobust.attacks.recipes import SUGGESTED_NEXT

    return SUGGESTED_NEXT


def attack_runs_here(name: str) -> bool:
    """Whether the extras an attack's default resources come from are installed (``attacks.needs``):
    what a suggestion may offer on this install."""
    from promptrobust.attacks.errors import AttackResourceError
    from promptrobust.attacks.needs import check_attack_extras

    try:
        check_attack_extras([name])
    except AttackResourceError:
        return False
    return True
