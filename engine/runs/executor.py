"""The one executor: every command's plan runs here, on one session, through one protocol (``Plan``).

A plan (``RunPlan`` for ``pre run``, ``EvalPlan``, ``TransferPlan``, ``DefensePlan``,
``AttentionPlan``, ``SweepPlan``) decides everything before any model loads; it says which
session it needs (``session_options``: the score cache and the schedulers' limits) and runs itself
on a ``Context`` (that session, the workbench of a decided target, the hooks that carry what it
says). ``execute`` runs any plan on a session (the caller's, or one opened and closed for it),
``run_plan`` does the same from synchronous code (a Jupyter cell too), and ``in_session`` is the
one session wrapper the Python API's one-call functions share.

    plan = build_plan("gemma3-270m", ["rotten_tomatoes"], evaluation=EvaluationSettings(limit=50))
    outcome = run_plan(plan)                     # or: await execute(plan, session=session)
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from promptrobust.engine import progress as events
from promptrobust.engine.errors import SettingsError
from promptrobust.engine.measuring.target import MeasurementTarget
from promptrobust.engine.measuring.workbench import Workbench
from promptrobust.engine.runs.notes import Note
from promptrobust.engine.runs.session import BackendFactory, Session, SessionFacts
from promptrobust.engine.runs.sync import run_sync
from promptrobust.engine.serving.registry import ModelSpec
from promptrobust.engine.serving.scheduler_settings import SchedulerSettings

__all__ = ["Context", "Hooks", "Plan", "OutputOptions", "Progress", "SessionOptions", "execute", "in_session",
           "run_plan"]

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)

#: ``progress``: True = phase lines and a status line on stderr, False = none, None = whatever
#: reporter already listens (the CLI's), a reporter = that one.
Progress = bool | events.Reporter | None


@dataclass(frozen=True)
class OutputOptions:
    """Where a command's answers and folders go, and what its folder records."""

    output_dir: str = "runs"
    """Folder that receives one run folder per target."""
    cache: str | None = None
    """Score cache file; None: the default cache (``engine.serving.cache.default_cache_path``)."""
    use_cache: bool = True
    """Read and write the score cache."""
    log_samples: bool = False
    """Write samples.jsonl: every input, answer and score (with attacks: the clean and final prompt of each record)."""
    command: tuple[str, ...] | None = None
    """The command recorded in results.json (secrets redacted); None: this process's command line."""
    config: Mapping[str, Any] = field(default_factory=dict)
    """config.json: the caller's own options (the CLI's parsed flags); empty: the plan's settings."""
    results_file: str | None = None
    """Also one JSON file with every target's results (lm-eval's ``--output_path FILE.json``), written
    when the run ends (``engine.runs.run_results.results_file_document``); None: none."""

    def __post_init__(self) -> None:
        if not (isinstance(self.output_dir, str) and self.output_dir.strip()):
            raise SettingsError("output_dir must be a folder name")
        if self.results_file is not None and not str(self.results_file).endswith(".json"):
            raise SettingsError(f"results_file {self.results_file} must end in .json", setting="output_dir")

    @property
    def argv(self) -> list[str] | None:
        """The command to record, or None for this process's own command line."""
        return list(self.command) if self.command is not None else None


@dataclass(frozen=True)
class SessionOptions:
    """The session a plan runs in: its score cache and the schedulers' limits."""

    cache: str | Path | None = None
    """Score cache file; None: the default cache."""
    use_cache: bool = True
    """Read and write the score cache."""
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    """Limits of every model's scheduler."""

    @classmethod
    def of(cls, output: OutputOptions, scheduler: SchedulerSettings) -> "SessionOptions":
        return cls(cache=output.cache, use_cache=output.use_cache, scheduler=scheduler)


def _ignore(_: object) -> None:
    return None


@dataclass(frozen=True)
class Hooks:
    """What a running plan tells its caller, as it happens (the CLI prints; the API may listen)."""

    on_event: Callable[[str], None] = _ignore
    """The protocol's messages (a record's PDR, a failed attack)."""
    on_note: Callable[[Note], None] = _ignore
    """What the plan says beside its results (the plan's notes first, once its model is up)."""
    on_part: Callable[[Any], None] = _ignore
    """A part of the plan is finished and written (``pre run``: each target's ``TargetOutcome``)."""


@dataclass(frozen=True)
class Context:
    """Where a plan runs: the session (cache and shared schedulers) and the hooks."""

    session: Session
    hooks: Hooks = field(default_factory=Hooks)

    async def workbench(self, model: ModelSpec, target: MeasurementTarget,
                        scheduler: SchedulerSettings | None = None) -> Workbench:
        """The workbench of a decided target on the model's shared scheduler (taken as given)."""
        return await self.session.workbench_for(model, target, scheduler)

    def facts(self) -> SessionFacts:
        """Identity of every model queried so far and the counters (for results.json)."""
        return self.session.facts()


class Plan(Protocol[R_co]):
    """A command's plan: everything decided, nothing run. The executor opens its session and runs it."""

    def session_options(self) -> SessionOptions:
        """The session the plan needs."""
        ...

    def run(self, context: Context) -> Awaitable[R_co]:
        """Run on ``context`` (its session is open); write what the command writes; return its result."""
        ...


async def execute(plan: Plan[R], *, session: Session | None = None, hooks: Hooks | None = None,
                  backend_factory: BackendFactory | None = None) -> R:
    """Run ``plan`` on ``session``, or on a session of its own (its ``session_options``) closed afterwards."""
    if session is not None:
        return await plan.run(Context(session, hooks or Hooks()))
    options = plan.session_options()
    async with Session(cache=options.cache, settings=options.scheduler, use_cache=options.use_cache,
                       backend_factory=backend_factory) as own:
        return await plan.run(Context(own, hooks or Hooks()))


def run_plan(plan: Plan[R], *, hooks: Hooks | None = None, backend_factory: BackendFactory | None = None,
            progress: Progress = True) -> R:
    """``execute`` from synchronous code (inside a running event loop too: Jupyter). ``progress``:
    True = phase lines and a status line on stderr, False = none, None = the reporter already listening."""
    return in_session(lambda session: plan.run(Context(session, hooks or Hooks())), plan.session_options(),
                      backend_factory=backend_factory, progress=progress)


def in_session(call: Callable[[Session], Awaitable[R]], options: SessionOptions, *,
               backend_factory: BackendFactory | None = None, progress: Progress = True) -> R:
    """THE session wrapper: ``await call(session)`` on a fresh Session of ``options``, closed
    afterwards, from synchronous code, with ``progress`` reported as ``run_plan`` says."""

    async def go() -> R:
        reporting = contextlib.nullcontext() if progress is None else events.reporting(events.api_reporter(progress))
        with reporting:
            async with Session(cache=options.cache, settings=options.scheduler, use_cache=options.use_cache,
                               backend_factory=backend_factory) as session:
                return await call(session)

    return run_sync(go)
