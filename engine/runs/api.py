"""Synchronous one-call API (``promptrobust.evaluate`` ...), usable in scripts and notebooks.

Each call opens a ``Session`` (the score cache, one scheduler per model),
runs one library coroutine and closes it. Inside a running event loop
(Jupyter) the work runs on a worker thread (``engine.sync.run_sync``). Use
``Session`` directly to share schedulers between several calls.

    import promptrobust as pr

    clean = pr.evaluate(dataset="rotten_tomatoes", limit=100)
    record = pr.attack("Classify the sentiment of this review.", "stresstest", limit=100)
    print(record.pdr, record.pdr_ci95)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from promptrobust.attacks.recipes import DEFAULT_ATTACK
from promptrobust.engine.serving.registry import DEFAULT_MODEL
from promptrobust.engine.measuring.settings import AttackSettings, EvaluationSettings
from promptrobust.engine.serving.scheduler_settings import SchedulerSettings
from promptrobust.engine.runs.sync import run_sync

if TYPE_CHECKING:
    from promptrobust.engine.measuring.protocol import ProtocolResult
    from promptrobust.engine.runs.execute import RunOutcome, TargetOutcome
    from promptrobust.engine.runs.plan import Note, RunPlan
    from promptrobust.engine.measuring.records import AttackRecord
    from promptrobust.engine.progress import Reporter
    from promptrobust.engine.runs.session import BackendFactory, EvaluationResult, ModelArgs, Session
    from promptrobust.engine.runs.sweep.config import SweepConfig
    from promptrobust.tasks.base import Prompt

    #: ``progress``: True = phase lines and a status line on stderr, False = none, None = whatever
    #: reporter already listens (the CLI's), a reporter = that one.
    Progress = bool | Reporter | None
    from promptrobust.engine.runs.sweep.runner import SweepProgress

__all__ = ["attack", "attack_top_k", "evaluate", "run_plan", "sweep"]


def _session(cache: str | Path | None, scheduler: SchedulerSettings | None, use_cache: bool,
             backend_factory: BackendFactory | None) -> Session:
    from promptrobust.engine.runs.session import Session

    return Session(cache=cache, settings=scheduler, use_cache=use_cache, backend_factory=backend_factory)


def _in_session(call: Any, cache: str | Path | None, scheduler: SchedulerSettings | None, use_cache: bool,
                backend_factory: BackendFactory | None, progress: Progress = True) -> Any:
    """``await call(session)`` on a fresh Session that is closed afterwards, from sync code.
    ``progress``: True = phase lines and a status line on stderr (``engine.progress``), False = none,
    None = whatever reporter already listens (the CLI's), a reporter = that one."""
    import contextlib

    from promptrobust.engine import progress as events

    async def go() -> Any:
        reporting = contextlib.nullcontext() if progress is None else events.reporting(events.api_reporter(progress))
        with reporting:
            async with _session(cache, scheduler, use_cache, backend_factory) as session:
                return await call(session)

    return run_sync(go)


def run_plan(plan: RunPlan, *, backend_factory: BackendFactory | None = None, progress: Progress = True,
             on_event: Callable[[str], None] | None = None, on_note: Callable[[Note], None] | None = None,
             on_target: Callable[[TargetOutcome], None] | None = None) -> RunOutcome:
    """Run a ``RunPlan`` (``engine.runs.plan.build_plan``) on a Session of its own, with the plan's
    cache and scheduler settings: one run folder per target (``Session.run``)."""
    return _in_session(
        lambda session: session.run(plan, on_event=on_event, on_note=on_note, on_target=on_target),
        plan.output.cache, plan.scheduler, plan.output.use_cache, backend_factory, progress,
    )


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
    return _in_session(
        lambda session: session.evaluate(
            evaluation, model=model, model_args=model_args, prompts=prompts, prompt_type=prompt_type, **evaluation_fields
        ),
        cache, scheduler, use_cache, backend_factory, progress,
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
    return _in_session(
        lambda session: session.attack(prompt, attack, evaluation, settings, model=model, model_args=model_args, **evaluation_fields),
        cache, scheduler, use_cache, backend_factory, progress,
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
    """The paper's protocol on one model and dataset (``engine.protocol.ProtocolResult``)."""
    return _in_session(
        lambda session: session.attack_top_k(
            evaluation, settings, model=model, model_args=model_args, prompt_type=prompt_type, **evaluation_fields
        ),
        cache, scheduler, use_cache, backend_factory, progress,
    )


def sweep(config: SweepConfig | str | os.PathLike[str], *, backend_factory: BackendFactory | None = None,
          progress: Progress = True) -> SweepProgress:
    """Run or resume a sweep from a ``SweepConfig`` or a TOML path (``engine.sweep.SweepProgress``)."""
    from promptrobust.engine.runs.sweep.config import SweepConfig, load_config
    from promptrobust.engine.runs.sweep.runner import run_sweep

    cfg = config if isinstance(config, SweepConfig) else load_config(config)

    from promptrobust.engine import progress as events

    async def go() -> Any:
        session = None
        if backend_factory is not None:
            session = _session(cfg.cache, cfg.scheduler, True, backend_factory)
        try:
            with events.reporting(events.api_reporter(progress)):
                return await run_sweep(cfg, session=session)
        finally:
            if session is not None:
                await session.close()

    return run_sync(go)
