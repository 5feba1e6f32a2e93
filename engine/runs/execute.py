"""What ``pre run`` runs: a ``RunPlan`` (the model, one ``RunTarget`` per dataset, the attacks, the
limits and outputs, all decided by ``engine.runs.plan.build_plan``) and running it.

A plan is a ``Plan`` of the one executor (``engine.runs.executor``): ``run_plan(plan)`` or
``await execute(plan, session=...)``. Per target it opens the workbench of the decided target
(taken as given), then scores the clean prompts or runs the paper's protocol, written through the
run-folder writer as it goes: config.json, records appended the moment each exists, samples.jsonl
with ``log_samples``, and results.json in the one layout (``engine.runs.run_results``) with this
target's own request counters. It returns one typed ``TargetOutcome`` per target.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from promptrobust.engine.errors import SettingsError
from promptrobust.engine.measuring.holdout import split_samples
from promptrobust.engine.measuring.protocol import ProtocolResult, run_protocol
from promptrobust.engine.measuring.records import AttackRecord, CleanSamplesScore
from promptrobust.engine.measuring.settings import AttackSettings, EvaluationSettings, Mode
from promptrobust.engine.measuring.target import MeasurementTarget
from promptrobust.engine.measuring.workbench import CleanScore, SemanticPrompts, Workbench, load_meaning_judge
from promptrobust.engine.runs.executor import Context, OutputOptions, SessionOptions
from promptrobust.engine.runs.notes import Note
from promptrobust.engine.runs.run_folder import RunFolder, WrittenWith
from promptrobust.engine.runs.run_results import protocol_document, results_file_document
from promptrobust.engine.runs.session import EvaluationResult, evaluate_prompts
from promptrobust.engine.safe_io import atomic_io
from promptrobust.engine.safe_io.redact import scrub
from promptrobust.engine.serving.registry import ModelSpec
from promptrobust.engine.serving.scheduler_settings import SchedulerSettings
from promptrobust.tasks.base import Prompt, Task

__all__ = ["RunOutcome", "RunPlan", "RunTarget", "TargetOutcome"]


@dataclass(frozen=True)
class RunTarget:
    """One dataset (or a user's task) of a plan: one run folder, one result."""

    measured: MeasurementTarget
    """The task, its settings, the mode and the shots, decided (``decide_target``); the workbench takes them as given."""
    prompts: tuple[Prompt, ...]
    """The prompts scored (and, with attacks, ranked)."""
    semantic_prompts: SemanticPrompts | None = None
    """The Semantic attack's prompts from a promptbench checkout; None: the built-in set."""

    def __post_init__(self) -> None:
        if not self.prompts:
            raise SettingsError(f"no prompts to score on {self.task.name}", setting="prompt_type")

    @property
    def task(self) -> Task:
        """The task measured; ``evaluation.dataset`` is its name, the name records carry."""
        return self.measured.task

    @property
    def evaluation(self) -> EvaluationSettings:
        """The plan's evaluation settings with this target's dataset."""
        return self.measured.evaluation

    @property
    def mode(self) -> Mode:
        return self.measured.mode

    @property
    def shots(self) -> int:
        return self.measured.shots

    @property
    def label_scoring(self) -> bool:
        """Whether mode choices (label log-probs) can score this target (a task with free-text answers cannot)."""
        return self.task.supports_choices


@dataclass(frozen=True)
class RunPlan:
    """What a run does, decided: the model, one target per dataset, the attacks, the limits and outputs."""

    model: ModelSpec
    """The resolved model (arguments checked, chat input and batch size applied)."""
    targets: tuple[RunTarget, ...]
    """One per dataset, in the order given."""
    scheduler: SchedulerSettings
    """Limits of the model's scheduler (its batch size agreeing with the model's arguments)."""
    attacks: AttackSettings | None = None
    """The protocol's attacks (rank the prompts, attack the top k); None: clean scores only."""
    output: OutputOptions = field(default_factory=OutputOptions)
    """Where answers and folders go."""
    notes: tuple[Note, ...] = ()
    """What the plan decided that a user should hear (the base-model rule); a run says them once its model is up."""

    def __post_init__(self) -> None:
        if not self.targets:
            raise SettingsError("a run plan needs at least one dataset", setting="dataset")
        if self.attacks is not None and not self.attacks.attacks:
            raise SettingsError("attacks is empty: give attack names, or no attack settings for clean scores")

    def session_options(self) -> SessionOptions:
        """The session it runs in: the output's score cache and the scheduler's limits."""
        return SessionOptions.of(self.output, self.scheduler)

    async def run(self, context: Context) -> RunOutcome:
        """Every target in turn, on the context's session (its schedulers shared across targets):
        one committed run folder each; ``context.hooks.on_part`` gets each ``TargetOutcome``."""
        await load_meaning_judge(self.attacks)
        outcomes = []
        for n, target in enumerate(self.targets):
            outcome = await _run_target(self, target, context, self.notes if n == 0 else ())
            outcomes.append(outcome)
            context.hooks.on_part(outcome)
        if self.output.results_file:  # lm-eval's --output_path FILE.json: every target's results in one file
            folders = {o.target.task.name: o.folder for o in outcomes}
            atomic_io.write_json(self.output.results_file, results_file_document(self.output.argv, folders))
            context.hooks.on_note(Note(f"results of {', '.join(folders)} in {self.output.results_file}"))
        return RunOutcome(self, tuple(outcomes))

    def describe(self) -> dict[str, Any]:
        """The plan's settings as config.json holds them when no caller options are given."""
        return {
            "model": self.model.name, "backend": self.model.backend, "model_args": dict(self.model.args),
            "datasets": [t.task.name for t in self.targets], "evaluation": self.targets[0].evaluation.config(),
            "scheduler": self.scheduler, "attack": self.attacks, "prompts": {t.task.name: [p.id for p in t.prompts] for t in self.targets},
            "output": {"output_dir": self.output.output_dir, "cache": self.output.cache, "use_cache": self.output.use_cache,
                       "log_samples": self.output.log_samples},
        }


@dataclass(frozen=True)
class TargetOutcome:
    """What one target of a plan measured, and where it was written."""

    target: RunTarget
    folder: Path
    """The committed run folder."""
    settings: dict[str, Any]
    """What was measured and under which settings (``Workbench.describe``)."""
    chance_rate: float | None
    """The majority-class rate of the samples (None for free-text tasks)."""
    samples: int
    """Samples each prompt was scored on."""
    counters: dict[str, float]
    """This target's scheduler counters (requests, cache hits, sent, deduplicated, ...)."""
    wall_seconds: float
    evaluation: EvaluationResult | None = None
    """Clean scores of the prompts (a plan without attacks)."""
    protocol: ProtocolResult | None = None
    """The ranking and the attack records (a plan with attacks)."""

    @property
    def clean(self) -> list[CleanScore]:
        """Every prompt's clean score with its interval (ranked, best first, under attacks)."""
        if self.protocol is not None:
            return list(self.protocol.clean)
        return list(self.evaluation.clean) if self.evaluation is not None else []

    @property
    def exit_status(self) -> int:
        """0, or 1 when an attack run failed (its record says why; the others are written)."""
        return 1 if self.protocol is not None and self.protocol.failures else 0


@dataclass(frozen=True)
class RunOutcome:
    """Every target's outcome, in the plan's order."""

    plan: RunPlan
    targets: tuple[TargetOutcome, ...]

    @property
    def exit_status(self) -> int:
        return max((t.exit_status for t in self.targets), default=0)


async def _clean_sample_scores(context: Context, plan: RunPlan, target: RunTarget) -> dict[str, CleanSamplesScore] | None:
    """The joint attack on prompt and sample (``EvaluationSettings.adversarial_samples``): every prompt of
    the target scored on the dataset's own, clean samples, by prompt text; None for any other run."""
    if not target.evaluation.adversarial_samples:
        return None
    clean_target = dataclasses.replace(target.measured, evaluation=target.evaluation.with_(adversarial_samples=None))
    bench = await context.workbench(plan.model, clean_target, plan.scheduler)
    evaluation = await evaluate_prompts(bench, target.prompts)
    return {c.prompt.text: {"score": c.score, "ci95": list(c.ci95), "samples": len(c.sample_scores),
                            "sample_selection": target.evaluation.sample_selection} for c in evaluation.clean}


def with_clean_samples(record: AttackRecord, clean_samples: dict[str, CleanSamplesScore] | None) -> AttackRecord:
    """``record`` with its clean prompt's score on the clean samples (the joint attack), else as it is."""
    if clean_samples is None or record.clean_prompt not in clean_samples:
        return record
    found = clean_samples[record.clean_prompt]
    pdr = (None if record.adversarial_score is None or not found["score"]
           else 1.0 - record.adversarial_score / found["score"])
    return dataclasses.replace(record, clean_samples={**found, "pdr_both_adversarial": pdr})


async def _run_target(plan: RunPlan, target: RunTarget, context: Context, plan_notes: tuple[Note, ...]) -> TargetOutcome:
    hooks = context.hooks
    before = context.facts()["counters"]
    started = time.monotonic()
    output = plan.output
    with RunFolder(output.output_dir, [plan.model.name, target.task.name]) as folder:
        bench = await context.workbench(plan.model, target.measured, plan.scheduler)
        for note in plan_notes:  # said once the model is up (a model that fails to start makes them moot)
            hooks.on_note(note)
        limit = target.evaluation.limit
        if isinstance(limit, int) and len(bench.samples) < limit:
            hooks.on_note(Note(f"limit {limit} is more than {bench.task.name} has: using all {len(bench.samples)} samples",
                               setting="limit"))
        folder.write_json("config.json", scrub(dict(output.config) or plan.describe()))  # no credentials
        configs = {"evaluation": target.evaluation.config(), "scheduler": plan.scheduler}
        evaluation, protocol = None, None
        if plan.attacks is None:
            evaluation = await evaluate_prompts(bench, target.prompts, keep_records=output.log_samples)
            folder.write_records(evaluation.rows())  # results.jsonl + .parquet: every run has them
            logged = folder.write_jsonl("samples.jsonl", evaluation.sample_log()) if output.log_samples else 0
            folder.write_results(evaluation.document(WrittenWith(
                argv=output.argv, configs=configs, logged=logged, counters=_since(before, context.facts()["counters"]))))
        else:
            clean_samples = await _clean_sample_scores(context, plan, target)
            protocol = await run_protocol(
                bench, target.prompts, plan.attacks,
                on_record=lambda record: folder.append_records([with_clean_samples(record, clean_samples)]),
                on_event=hooks.on_event, fail_fast=(KeyboardInterrupt,), semantic_prompts=target.semantic_prompts,
            )
            if clean_samples is not None:  # the records written carry it; the result returned and printed too
                protocol.records = [with_clean_samples(r, clean_samples) for r in protocol.records]
            folder.consolidate()
            held = plan.attacks.holdout
            held_ids = {s.id for s in split_samples(bench.samples, held)[1]} if held else None
            logged = (folder.write_jsonl("samples.jsonl", await bench.sample_log(protocol.records, held_out_ids=held_ids))
                      if output.log_samples else 0)
            counters = _since(before, context.facts()["counters"])
            written = WrittenWith(argv=output.argv, configs=configs, logged=logged, counters=counters)
            folder.write_results(protocol_document(written, result=protocol, tasks=bench.task_provenance()))
    return TargetOutcome(
        target=target, folder=folder.final, settings=bench.describe(), chance_rate=bench.chance_rate,
        samples=len(bench.samples), counters=_scheduler_counters(before, bench),
        wall_seconds=round(time.monotonic() - started, 3), evaluation=evaluation, protocol=protocol,
    )


def _scheduler_counters(before: Mapping[str, Any], bench: Workbench) -> dict[str, float]:
    """The model's scheduler counters of this target alone (the scheduler is shared across targets)."""
    earlier = before.get("scheduler", {})
    name = next(iter(earlier), None)
    now = bench.scheduler.stats.snapshot()
    return _since(earlier.get(name, {}) if name is not None else {}, now)


def _since(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """Counters of ``after`` less those of ``before`` (nested; what is not a number is kept)."""
    out: dict[str, Any] = {}
    for key, value in after.items():
        old = before.get(key)
        if isinstance(value, Mapping):
            out[key] = _since(old if isinstance(old, Mapping) else {}, value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and isinstance(old, (int, float)):
            out[key] = round(value - old, 3) if isinstance(value, float) or isinstance(old, float) else value - old
        else:
            out[key] = value
    return out
