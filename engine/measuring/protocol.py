"""The paper's protocol: score a prompt set, attack the top k.

It sits on ``engine.measuring.workbench`` (the one owner of measuring):

- ``rank_prompts``: clean score of every prompt (``Workbench.score_prompts``), best first;
- ``run_protocol``: every requested attack on the top k (``Workbench.attack``), writing
  each record through a callback the moment it exists.

``pre run --attack``, every sweep job and the Python API call these, so a
record means the same thing wherever it was made.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from promptrobust.attacks.registry import prompt_set_of
from promptrobust.engine import progress
from promptrobust.engine.safe_io.redact import redact_text
from promptrobust.engine.measuring.evaluator import PromptEvaluation
from promptrobust.engine.measuring.records import AttackRecord, records_summary
from promptrobust.engine.serving.scheduler import identity_of
from promptrobust.engine.measuring.records import now as now_iso
from promptrobust.engine.measuring.records import RecordFrames
from promptrobust.engine.measuring.settings import AttackSettings
from promptrobust.engine.measuring.workbench import CleanScore, SemanticPrompts, Workbench, failed_record
from promptrobust.tasks.base import Prompt

__all__ = ["ProtocolResult", "RecordSink", "rank_prompts", "run_protocol"]

RecordSink = Callable[[AttackRecord], Awaitable[None] | None]


async def rank_prompts(
    bench: Workbench,
    prompts: Sequence[Prompt],
    *,
    on_prompt_done: Callable[[CleanScore], None] | None = None,
    keep_records: bool = False,
    evaluations: list[PromptEvaluation] | None = None,
) -> list[CleanScore]:
    """Clean score of every prompt of a set (``Workbench.score_prompts``), best first (the
    paper attacks the top k). ``evaluations``, when given, receives each prompt's full
    evaluation in input order."""
    progress.phase(f"ranking {progress.counted(len(prompts), 'prompt')} on {progress.counted(len(bench.samples), 'sample')}")
    done = None if on_prompt_done is None else (lambda s: on_prompt_done(s.clean))
    scored = await bench.score_prompts(prompts, keep_records=keep_records, on_done=done)
    if evaluations is not None:
        evaluations.extend(s.evaluation for s in scored)
    return sorted((s.clean for s in scored), key=lambda c: -c.score)


# -- the whole protocol -----------------------------------------------------------------


@dataclass
class ProtocolResult(RecordFrames):
    """Clean scores of the prompt set and one record per (attacked prompt, attack)."""

    settings: dict[str, Any]
    clean: list[CleanScore]
    records: list[AttackRecord] = field(default_factory=list)
    wall_seconds: float = 0.0
    attack_settings: AttackSettings | None = None
    measurement: dict[str, Any] = field(default_factory=dict)
    """``MeasurementSettings`` of the attacks (with their budget)."""
    chance_rate: float | None = None
    model_identity: dict[str, Any] = field(default_factory=dict)
    started: str = ""
    held_out_clean: list[dict[str, Any]] | None = None
    """With ``AttackSettings.holdout``: the top-k prompts' held-out clean scores (engine/measuring/holdout.py)."""

    def __repr__(self) -> str:
        return (f"ProtocolResult(model={self.settings.get('model')!r}, dataset={self.settings.get('dataset')!r}, "
                f"prompts={len(self.clean)}, {records_summary(self.records)})")

    @property
    def failures(self) -> list[AttackRecord]:
        return [r for r in self.records if r.status == "failed"]

    @property
    def skipped(self) -> list[AttackRecord]:
        return [r for r in self.records if r.status == "skipped_clean_zero"]



@dataclass(frozen=True)
class AttackBound:
    """The most requests one attack on one prompt can ask (its budget's candidates on every
    sample, plus the clean and the adversarial prompt's scoring), how many of them the cache
    answers (those two, scored before) and how many come after the search (the adversarial
    prompt's). All 0 when the budget is unlimited: unknown. For the progress line's total."""

    requests: int
    cached: int
    after_search: int

    @classmethod
    def of(cls, settings: AttackSettings, samples: int, candidates: int | None = None) -> "AttackBound":
        """``candidates``: what the attack's search will try when known before it runs (a set
        search: ``Attack.planned_candidates``); with an unlimited budget it is the bound."""
        most = settings.budget if candidates is None else (
            candidates if settings.budget is None else min(settings.budget, candidates))
        if most is None:
            return cls(0, 0, 0)
        return cls((most + 2) * samples, 2 * samples, samples)

    @classmethod
    def for_attack(cls, bench: Workbench, name: str, settings: AttackSettings, prompt: str | None,
                   semantic_prompts: SemanticPrompts | None = None) -> "AttackBound":
        """The bound of attack ``name`` on ``prompt`` (None: not known yet, the budget's bound)."""
        candidates = None
        if prompt is not None:
            try:
                from promptrobust.attacks.registry import get_attack
                from promptrobust.engine.measuring.workbench import semantic_prompts_for

                given = semantic_prompts.prompts if semantic_prompts is not None else None
                own = semantic_prompts_for(bench.task, name) if given is None else given
                candidates = get_attack(name, **settings.options.get(name, {})).planned_candidates(prompt, own)
            except Exception:  # noqa: BLE001 - a progress total must never stop the attack (it reports its own errors)
                candidates = None
        return cls.of(settings, len(bench.samples), candidates)


def one_line(exc: BaseException) -> str:
    text = redact_text(str(exc).strip()) or type(exc).__name__  # a record keeps no credential, in any form
    return " ".join(text.split())


async def run_protocol(
    bench: Workbench,
    prompts: Sequence[Prompt],
    settings: AttackSettings,
    *,
    ranked: list[CleanScore] | None = None,
    on_record: RecordSink | None = None,
    on_event: Callable[[str], None] = lambda message: None,
    skip: Callable[[Prompt, str], bool] = lambda prompt, attack: False,
    fail_fast: tuple[type[BaseException], ...] = (),
    semantic_prompts: SemanticPrompts | None = None,
) -> ProtocolResult:
    """Rank ``prompts`` (unless ``ranked`` is given: a sweep shares one ranking per
    cell), then run every attack of ``settings`` on the top k. A failing attack
    becomes a ``failed`` record and the others go on; exception types in
    ``fail_fast`` (e.g. interrupts) propagate."""
    started, began = time.monotonic(), now_iso()
    held = None
    if settings.holdout:  # search on one part of the samples, re-score on the rest (engine/measuring/holdout.py)
        from promptrobust.engine.measuring.holdout import SPLIT_RULE, held_out_ranking, split_workbench

        bench, held = split_workbench(bench, settings.holdout)
    # progress: every attack's bound, known before the ranking (a set search's candidates, else its budget)
    first = (ranked[0].prompt if ranked else prompts[0] if prompts else None)
    bounds = {name: AttackBound.for_attack(bench, name, settings, first.text if first is not None else None,
                                           semantic_prompts) for name in settings.attacks}
    pairs = {name: (sum(not skip(c.prompt, name) for c in ranked[: settings.top_k]) if ranked is not None
                    else min(settings.top_k, len(prompts))) for name in settings.attacks}
    with progress.reserve_pool("attack", sum(bounds[n].requests * pairs[n] for n in settings.attacks),
                               cached=sum(bounds[n].cached * pairs[n] for n in settings.attacks)):
        if ranked is None:
            on_event(f"scoring {progress.counted(len(prompts), 'prompt')} on {progress.counted(len(bench.samples), 'sample')}")
            ranked = await rank_prompts(bench, prompts)
        result = ProtocolResult(
            settings=bench.describe(), clean=ranked, attack_settings=settings, chance_rate=bench.chance_rate,
            measurement=bench.measurement_facts(replace(bench.measurement(), budget=settings.budget, searched=True)),
            model_identity=identity_of(bench.scheduler), started=began,
        )
        if held is not None:
            result.settings.update(holdout=settings.holdout, held_out_samples=len(held.samples), holdout_split=SPLIT_RULE)
            on_event(f"scoring the top {settings.top_k} prompts on {len(held.samples)} held-out samples")
            result.held_out_clean = await held_out_ranking(held, ranked, settings.top_k)
        for clean in ranked[: settings.top_k]:
            for name in settings.attacks:
                if skip(clean.prompt, name):
                    continue
                on_event(f"{name} on {clean.prompt.id} (clean {clean.score:.4f})")
                progress.phase(f"attack {name} on prompt {clean.prompt.id} (clean {clean.score:.4f})")
                bound = AttackBound.for_attack(bench, name, settings, clean.prompt.text, semantic_prompts)
                try:
                    with progress.reserve(bound.requests, kind="attack", cached=bound.cached,
                                          after_search=bound.after_search):  # progress: its budget bounds what it asks
                        record = await bench.attack(clean.prompt, name, settings, clean=clean,
                                                    semantic_prompts=semantic_prompts if prompt_set_of(name) else None)
                except fail_fast:
                    raise
                except Exception as exc:  # noqa: BLE001 - reported as a failed record, the others go on
                    record = failed_record(bench, clean.prompt, name, settings, clean, one_line(exc))
                    on_event(f"FAILED {name} on {clean.prompt.id}: {record.error}")
                progress.phase_done()  # progress: the search's projection ends with the attack
                if held is not None and settings.holdout and record.status == "attacked":
                    from promptrobust.engine.measuring.holdout import held_out_pair

                    record.held_out = await held_out_pair(held, record.clean_prompt, record.adversarial_prompt, settings.holdout)
                result.records.append(record)
                if on_record is not None:
                    maybe = on_record(record)
                    if maybe is not None:
                        await maybe
    result.wall_seconds = time.monotonic() - started
    return result
