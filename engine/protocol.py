"""The paper's protocol: score a prompt set, attack the top k.

It sits on ``engine.workbench`` (the one owner of measuring):

- ``rank_prompts``: clean score of every prompt (``Workbench.score_prompts``), best first;
- ``run_protocol``: every requested attack on the top k (``Workbench.attack``), writing
  each record through a callback the moment it exists.

``pre run --attack``, every sweep job and the Python API call these, so a
record means the same thing wherever it was made. The names below from
``engine.workbench`` are re-exported for callers of release 0.1.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from promptrobust.engine import progress
from promptrobust.engine.evaluator import PromptEvaluation
from promptrobust.engine.records import AttackRecord
from promptrobust.engine.run_folder import identity_of
from promptrobust.engine.run_folder import now as now_iso
from promptrobust.engine.run_results import protocol_document
from promptrobust.engine.settings import AttackSettings
from promptrobust.engine.workbench import (  # noqa: F401 - re-exported
    MAX_INPUT_CHARS,
    CleanScore,
    InputTooLongError,
    OWN_SEMANTIC_SET,
    ScoredPrompt,
    SemanticPrompts,
    Workbench,
    attack_one,
    check_input_lengths,
    clean_score,
    decide_mode,
    failed_record,
    few_shot,
    pair_statistics,
    prepare,
    protected_words,
    semantic_prompts_for,
)
from promptrobust.tasks.base import Prompt

__all__ = [
    "MAX_INPUT_CHARS", "OWN_SEMANTIC_SET", "CleanScore", "SemanticPrompts", "InputTooLongError", "ProtocolResult", "RecordSink", "ScoredPrompt", "Workbench",
    "attack_one", "check_input_lengths", "clean_score", "decide_mode", "failed_record", "few_shot", "pair_statistics",
    "prepare", "protected_words", "rank_prompts", "run_protocol", "sample_log", "semantic_prompts_for",
]

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
    progress.phase(f"ranking {len(prompts)} prompts on {len(bench.samples)} samples")
    done = None if on_prompt_done is None else (lambda s: on_prompt_done(s.clean))
    scored = await bench.score_prompts(prompts, keep_records=keep_records, on_done=done)
    if evaluations is not None:
        evaluations.extend(s.evaluation for s in scored)
    return sorted((s.clean for s in scored), key=lambda c: -c.score)


# -- the whole protocol -----------------------------------------------------------------


@dataclass
class ProtocolResult:
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
    """With ``AttackSettings.holdout``: the top-k prompts' held-out clean scores (engine/holdout.py)."""

    @property
    def failures(self) -> list[AttackRecord]:
        return [r for r in self.records if r.status == "failed"]

    @property
    def skipped(self) -> list[AttackRecord]:
        return [r for r in self.records if r.status == "skipped_clean_zero"]

    def to_dict(self, *, argv: Sequence[str] | None = None, configs: Mapping[str, Any] | None = None,
                logged: int = 0, counters: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """This result as ``results.json`` in the one layout (``engine.run_results.protocol_document``)."""
        return protocol_document(argv, result=self, configs=configs, logged=logged, counters=counters)

    summary = to_dict  # release 0.1's name


async def sample_log(bench: Workbench, records: Sequence[AttackRecord]) -> list[dict[str, Any]]:
    """``Workbench.sample_log`` (kept for callers of this module)."""
    return await bench.sample_log(records)


def one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
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
    if settings.holdout:  # search on one part of the samples, re-score on the rest (engine/holdout.py)
        from promptrobust.engine.holdout import SPLIT_RULE, held_out_ranking, split_workbench

        bench, held = split_workbench(bench, settings.holdout)
    if ranked is None:
        on_event(f"scoring {len(prompts)} prompts on {len(bench.samples)} samples")
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
            try:
                record = await bench.attack(clean.prompt, name, settings, clean=clean,
                                            semantic_prompts=semantic_prompts if name == "semantic" else None)
            except fail_fast:
                raise
            except Exception as exc:  # noqa: BLE001 - reported as a failed record, the others go on
                record = failed_record(bench, clean.prompt, name, settings, clean, one_line(exc))
                on_event(f"FAILED {name} on {clean.prompt.id}: {record.error}")
            if held is not None and record.status == "attacked":
                from promptrobust.engine.holdout import held_out_pair

                record.held_out = await held_out_pair(held, record.clean_prompt, record.adversarial_prompt, settings.holdout)
            result.records.append(record)
            if on_record is not None:
                maybe = on_record(record)
                if maybe is not None:
                    await maybe
    result.wall_seconds = time.monotonic() - started
    return result
