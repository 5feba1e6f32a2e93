"""Synchronous one-call API (``promptrobust.evaluate`` ...), usable in scripts and notebooks.

Each call opens a ``Session`` (the score cache, one scheduler per model) through the executor's one
session wrapper (``engine.runs.executor.in_session``), runs one library coroutine and closes it.
Inside a running event loop (Jupyter) the work runs on a worker thread (``engine.runs.sync.run_sync``).
Use ``Session`` directly to share schedulers between several calls; any command's plan runs with
``run_plan`` (``pre run``'s: ``run_plan(build_plan(...))``).

    import promptrobust as pr

    clean = pr.evaluate(dataset="rotten_tomatoes", limit=100)
    record = pr.attack("Classify the sentiment of this review.", "stresstest", limit=100)
    print(record.pdr, record.pdr_ci95)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from promptrobust.attacks.recipes import DEFAULT_ATTACK
from promptrobust.engine.serving.registry import DEFAULT_MODEL
from promptrobust.engine.measuring.settings import AttackSettings, EvaluationSettings
from promptrobust.engine.serving.scheduler_settings import SchedulerSettings
from promptrobust.engine.runs.executor import Progress, SessionOptions, in_session, run_plan

if TYPE_CHECKING:
    from promptrobust.engine.measuring.protocol import ProtocolResult
    from promptrobust.engine.measuring.records import AttackRecord
    from promptrobust.engine.runs.session import BackendFactory, EvaluationResult, ModelArgs
    from promptrobust.engine.runs.sweep.config import SweepConfig
    from promptrobust.engine.runs.sweep.runner import SweepProgress
    from promptrobust.tasks.base import Prompt

__all__ = ["attack", "attack_top_k", "evaluate", "run_plan", "sweep"]


def _options(cache: str | Path | None, scheduler: SchedulerSettings | None, use_cache: bool) -> SessionOptions:
    return SessionOptions(cache=cache, use_cache=use_cache, scheduler=scheduler or SchedulerSettings())


def evaluate(
    evaluation: EvaluationSettings | None = None,
    *,
    model: str = DEFAULT_MODEL,
    model_args: ModelArgs = None,
    prompts: Sequence[Prompt] | None = None,
    prompt_type: str = "task",
    cache: str | Path | None = None,
    use_cache: bool = True,
    scheduler: SchedulerSettings | None = None,
    backend_factory: BackendFactory | None = None,
    progress: Progress = True,
    **evaluation_fields: Any,
) -> EvaluationResult:
    """Clean scores (with 95% intervals) of a prompt set; see ``Session.evaluate``."""
    return in_session(
        lambda session: session.evaluate(
            evaluation, model=model, model_args=model_args, prompts=prompts, prompt_type=prompt_type, **evaluation_fields
        ),
        _options(cache, scheduler, use_cache), backend_factory=backend_factory, progress=progress,
    )


def attack(
    prompt: str,
    attack: str = DEFAULT_ATTACK,
    evaluation: EvaluationSettings | None = None,
    settings: AttackSettings | None = None,
    *,
    model: str = DEFAULT_MODEL,
    model_args: ModelArgs = None,
    cache: str | Path | None = None,
    use_cache: bool = True,
    scheduler: SchedulerSettings | None = None,
    backend_factory: BackendFactory | None = None,
    progress: Progress = True,
    **evaluation_fields: Any,
) -> AttackRecord:
    """Attack one prompt; returns its ``AttackRecord`` (``.pdr``, ``.pdr_ci95``, ``.adversarial_prompt``)."""
    return in_session(
        lambda session: session.attack(prompt, attack, evaluation, settings, model=model, model_args=model_args, **evaluation_fields),
        _options(cache, scheduler, use_cache), backend_factory=backend_factory, progress=progress,
    )


def attack_top_k(
    evaluation: EvaluationSettings | None = None,
    settings: AttackSettings | None = None,
    *,
    model: str = DEFAULT_MODEL,
    model_args: ModelArgs = None,
    prompt_type: str = "task",
    cache: str | Path | None = None,
    use_cache: bool = True,
    scheduler: SchedulerSettings | None = None,
    backend_factory: BackendFactory | None = None,
    progress: Progress = True,
    **evaluation_fields: Any,
) -> ProtocolResult:
    """The paper's protocol on one model and dataset (``engine.measuring.protocol.ProtocolResult``)."""
    return in_session(
        lambda session: session.attack_top_k(
            evaluation, settings, model=model, model_args=model_args, prompt_type=prompt_type, **evaluation_fields
        ),
        _options(cache, scheduler, use_cache), backend_factory=backend_factory, progress=progress,
    )


def sweep(config: SweepConfig | str | os.PathLike[str], *, backend_factory: BackendFactory | None = None,
          progress: Progress = True) -> SweepProgress:
    """Run or resume a sweep from a ``SweepConfig`` or a TOML path (``engine.runs.sweep.runner.SweepProgress``)."""
    from promptrobust.engine.runs.sweep.config import SweepConfig, load_config
    from promptrobust.engine.runs.sweep.plan import SweepPlan

    cfg = config if isinstance(config, SweepConfig) else load_config(config)
    return run_plan(SweepPlan(config=cfg, jobs=tuple(cfg.jobs())), backend_factory=backend_factory, progress=progress)
