"""Running a ``RunPlan`` (``engine.runs.plan``) in a session: per target, the workbench, then
the clean scores or the paper's protocol, written through the run-folder writer as they exist.

Each target gets its own run folder (``engine.runs.run_folder``): config.json, records appended
the moment each exists, samples.jsonl with ``log_samples``, and results.json in the one layout
(``engine.runs.run_results``) with this target's own request counters. ``run_plan`` returns one
typed ``TargetOutcome`` per target; ``Session.run`` and ``engine.runs.api.run_plan`` call it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from promptrobust.engine.measuring.holdout import split_samples
from promptrobust.engine.measuring.protocol import ProtocolResult
from promptrobust.engine.measuring.records import AttackRecord
from promptrobust.engine.measuring.workbench import CleanScore, Workbench
from promptrobust.engine.runs.plan import Note, RunPlan, RunTarget
from promptrobust.engine.runs.run_folder import RunFolder
from promptrobust.engine.runs.run_results import clean_document, protocol_document, results_file_document, session_facts
from promptrobust.engine.safe_io import atomic_io
from promptrobust.engine.safe_io.redact import scrub

if TYPE_CHECKING:  # session.py imports this module
    from promptrobust.engine.runs.session import EvaluationResult, Session

__all__ = ["RunOutcome", "TargetOutcome", "run_plan"]


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


async def run_plan(plan: RunPlan, session: Session, *, on_event: Callable[[str], None] | None = None,
                   on_note: Callable[[Note], None] | None = None,
                   on_target: Callable[[TargetOutcome], None] | None = None) -> RunOutcome:
    """Run every target of ``plan`` in ``session`` (its schedulers shared across targets).
    ``on_event``: the protocol's messages (a record's PDR, a failed attack); ``on_note``: what a
    target says beside its results (the plan's notes first, once its model is up); ``on_target``: each outcome once its folder is committed."""
    outcomes = []
    note = on_note or (lambda note: None)
    for n, target in enumerate(plan.targets):
        outcome = await _run_target(plan, target, session, on_event or (lambda message: None), note,
                                    plan.notes if n == 0 else ())
        outcomes.append(outcome)
        if on_target is not None:
            on_target(outcome)
    if plan.output.results_file:  # lm-eval's --output_path FILE.json: every target's results in one file
        folders = {o.target.task.name: o.folder for o in outcomes}
        command = list(plan.output.command) if plan.output.command is not None else None
        atomic_io.write_json(plan.output.results_file, results_file_document(command, folders))
        note(Note(f"results of {', '.join(folders)} in {plan.output.results_file}"))
    return RunOutcome(plan, tuple(outcomes))


async def _clean_sample_scores(session: Session, plan: RunPlan, target: RunTarget) -> dict[str, dict[str, Any]] | None:
    """The joint attack on prompt and sample (``EvaluationSettings.adversarial_samples``): every prompt of
    the target scored on the dataset's own, clean samples, by prompt text; None for any other run."""
    if not target.evaluation.adversarial_samples:
        return None
    evaluation = await session.evaluate(target.evaluation.with_(adversarial_samples=None), model=plan.model,
                                        prompts=target.prompts)
    return {c.prompt.text: {"score": c.score, "ci95": list(c.ci95), "samples": len(c.sample_scores),
                            "sample_selection": target.evaluation.sample_selection} for c in evaluation.clean}


def with_clean_samples(record: AttackRecord, clean_samples: dict[str, dict[str, Any]] | None) -> AttackRecord:
    """``record`` with its clean prompt's score on the clean samples (the joint attack), else as it is."""
    if clean_samples is None or record.clean_prompt not in clean_samples:
        return record
    found = clean_samples[record.clean_prompt]
    pdr = (None if record.adversarial_score is None or not found["score"]
           else 1.0 - record.adversarial_score / found["score"])
    return dataclasses.replace(record, clean_samples={**found, "pdr_both_adversarial": pdr})


async def _run_target(plan: RunPlan, target: RunTarget, session: Session, on_event: Callable[[str], None],
                      on_note: Callable[[Note], None], plan_notes: tuple[Note, ...]) -> TargetOutcome:
    before = session_facts(session)["counters"]
    started = time.monotonic()
    output = plan.output
    with RunFolder(output.output_dir, [plan.model.name, target.task.name]) as folder:
        bench = await session.workbench(plan.model, target.evaluation)
        for note in plan_notes:  # said once the model is up (a model that fails to start makes them moot)
            on_note(note)
        limit = target.evaluation.limit
        if isinstance(limit, int) and len(bench.samples) < limit:
            on_note(Note(f"limit {limit} is more than {bench.task.name} has: using all {len(bench.samples)} samples",
                         setting="limit"))
        folder.write_json("config.json", scrub(dict(output.config) or plan.describe()))  # no credentials
        configs = {"evaluation": target.evaluation.config(), "scheduler": plan.scheduler}
        command = list(output.command) if output.command is not None else None
        evaluation, protocol = None, None
        if plan.attacks is None:
            evaluation = await session.evaluate(target.evaluation, model=plan.model, prompts=target.prompts,
                                                keep_records=output.log_samples)
            folder.write_records(evaluation.rows())  # results.jsonl + .parquet: every run has them
            logged = folder.write_jsonl("samples.jsonl", evaluation.sample_log()) if output.log_samples else 0
            facts = {**session_facts(session), "counters": _since(before, session_facts(session)["counters"])}
            folder.write_results(clean_document(command, result=evaluation, facts=facts, configs=configs, logged=logged,
                                                tasks=evaluation.tasks))
        else:
            clean_samples = await _clean_sample_scores(session, plan, target)
            protocol = await session.attack_top_k(
                target.evaluation, plan.attacks, model=plan.model, prompts=target.prompts,
                on_record=lambda record: folder.append_records([with_clean_samples(record, clean_samples)]),
                on_event=on_event,
                fail_fast=(KeyboardInterrupt,), semantic_prompts=target.semantic_prompts,
            )
            if clean_samples is not None:  # the records written carry it; the result returned and printed too
                protocol.records = [with_clean_samples(r, clean_samples) for r in protocol.records]
            folder.consolidate()
            held = plan.attacks.holdout
            held_ids = {s.id for s in split_samples(bench.samples, held)[1]} if held else None
            logged = (folder.write_jsonl("samples.jsonl", await bench.sample_log(protocol.records, held_out_ids=held_ids))
                      if output.log_samples else 0)
            counters = _since(before, session_facts(session)["counters"])
            folder.write_results(protocol_document(command, result=protocol, configs=configs, logged=logged, counters=counters,
                                                   tasks=bench.task_provenance()))
    return TargetOutcome(
        target=target, folder=folder.final, settings=bench.describe(), chance_rate=bench.chance_rate,
        samples=len(bench.samples), counters=_scheduler_counters(before, session, bench),
        wall_seconds=round(time.monotonic() - started, 3), evaluation=evaluation, protocol=protocol,
    )


def _scheduler_counters(before: Mapping[str, Any], session: Session, bench: Workbench) -> dict[str, float]:
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
