"""The paper's protocol, in one place: score a prompt set, attack the top k.

``prepare`` turns (session, model, EvaluationSettings) into a ``Workbench``:
the task, its samples, the few-shot examples (the base-model rule applied
once, by ``EvaluationSettings.shots_for``), the mode the task allows, and an
evaluator on the model's shared scheduler. Then:

- ``rank_prompts``: clean score of every prompt, best first, each with its 95%
  interval and the at-chance flag;
- ``attack_one``: one attack on one prompt -> one ``AttackRecord`` (a clean
  score of 0 is skipped, as promptbench does; the PDR may be negative);
- ``run_protocol``: both, for every requested attack on the top k, writing each
  record through a callback the moment it exists.

``pre run --attack``, every sweep job and the Python API call these, so a
record means the same thing wherever it was made.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from promptrobust.engine import progress
from promptrobust.engine.evaluator import Evaluator, PromptEvaluation
from promptrobust.engine.records import AttackRecord, Cost
from promptrobust.engine.settings import AttackSettings, EvaluationSettings
from promptrobust.tasks.base import Prompt, Sample, Task

RecordSink = Callable[[AttackRecord], Awaitable[None] | None]


@dataclass
class Workbench:
    """Everything one (model, dataset, settings) evaluation needs, built once."""

    spec: Any  # engine.registry.ModelSpec
    task: Task
    samples: list[Sample]
    examples: list[Sample]
    evaluation: EvaluationSettings
    shots: int
    mode: str
    scheduler: Any  # engine.scheduler.Scheduler
    chance_rate: float | None

    def evaluator(self, *, chunk_size: int = 32, early_stopping: bool = True) -> Evaluator:
        """A fresh evaluator (its own cost counters) on the shared scheduler."""
        return Evaluator(
            self.scheduler,
            self.task,
            self.samples,
            mode=self.mode,  # type: ignore[arg-type]
            parser=self.evaluation.parser,
            examples=self.examples,
            chunk_size=chunk_size,
            early_stopping=early_stopping,
            max_tokens=self.evaluation.max_new_tokens,
            stop=self.evaluation.stop,
            system_instruction=self.evaluation.system_instruction,
        )

    @property
    def binary(self) -> bool:
        """Per-sample scores are 0/1 (accuracy-like), so Wilson and McNemar apply."""
        return self.task.supports_choices

    def describe(self) -> dict[str, Any]:
        """The settings a number was made under (written into results and records)."""
        ev = self.evaluator()
        return {
            "model": self.spec.name,
            "backend": self.spec.backend,
            "dataset": self.task.name,
            "metric": self.task.metric.name,
            "samples": len(self.samples),
            "seed": self.evaluation.seed,
            "shots": self.shots,
            "mode": ev.mode,
            "parser": self.evaluation.parser if ev.mode == "generate" else None,
            "max_new_tokens": ev.builder.decoding.max_tokens if ev.mode == "generate" else None,
            "input_format": "chat" if ev.chat else "completion",
            **({"stop": list(ev.builder.decoding.stop)} if ev.mode == "generate" and self.evaluation.stop is not None else {}),
            **({"system_instruction": self.evaluation.system_instruction} if self.evaluation.system_instruction else {}),
        }


async def prepare(session: Any, spec: Any, evaluation: EvaluationSettings, *, scheduler_settings: Any = None) -> Workbench:
    """Load the task's samples and examples and start the model's shared scheduler."""
    from promptrobust.tasks.registry import get_task

    task = get_task(evaluation.dataset)
    samples = task.load(
        limit=evaluation.limit, seed=evaluation.seed, data_dir=evaluation.data_dir, data_file=evaluation.data_file
    )
    shots = evaluation.shots_for(bool(getattr(spec, "base_model", False)))
    examples = few_shot(task, shots, seed=evaluation.seed, data_dir=evaluation.data_dir)
    check_input_lengths(task, samples, examples)
    scheduler = await session.scheduler(spec, settings=scheduler_settings)
    progress.watch(scheduler.stats)  # progress: requests done / cache hits / sent come from here
    return Workbench(
        spec=spec,
        task=task,
        samples=list(samples),
        examples=examples,
        evaluation=evaluation,
        shots=shots,
        mode=evaluation.mode_for(task.supports_choices),
        scheduler=scheduler,
        chance_rate=_chance_rate(task, samples),
    )


#: No model's context holds an input longer than this (about 250k tokens): such a
#: sample is a data problem, and is reported before any model loads.
MAX_INPUT_CHARS = 1_000_000


class InputTooLongError(ValueError):
    """A sample that no model could read; the message names it and the fix."""


def check_input_lengths(task: Task, samples: Sequence[Sample], examples: Sequence[Sample]) -> None:
    """Fail up front (not after minutes of scoring) on an input no context can hold."""
    for sample in samples:
        size = len(task.render("", sample, examples))
        if size > MAX_INPUT_CHARS:
            raise InputTooLongError(
                f"sample {sample.id} renders to {size:,} characters, more than any model's context "
                f"(~{MAX_INPUT_CHARS:,}); fix or drop it in the data file"
            )


def few_shot(task: Task, shots: int, *, seed: int = 0, data_dir: str | None = None) -> list[Sample]:
    """``shots`` worked examples from the task's fixed few-shot set (none for 0)."""
    if shots <= 0:
        return []
    from promptrobust.tasks.common import few_shot_examples

    return list(few_shot_examples(task, seed, k=shots, data_dir=data_dir))


def _chance_rate(task: Task, samples: Sequence[Sample]) -> float | None:
    if not task.supports_choices or not samples:
        return None
    from promptrobust.engine.analysis.statistics import majority_rate

    return majority_rate([s.target for s in samples])


# -- clean scores -----------------------------------------------------------------------


@dataclass(frozen=True)
class CleanScore:
    """One prompt's clean score with its uncertainty."""

    prompt: Prompt
    score: float
    ci95: tuple[float, float]
    at_chance: bool
    sample_scores: tuple[float, ...]
    unparseable: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt_id": self.prompt.id,
            "prompt_type": self.prompt.type,
            "language": self.prompt.language,
            "prompt": self.prompt.text,
            "score": self.score,
            "ci95": list(self.ci95),
            "at_chance": self.at_chance,
            "unparseable": self.unparseable,
        }


def clean_score(bench: Workbench, prompt: Prompt, evaluation: PromptEvaluation) -> CleanScore:
    from promptrobust.engine.analysis.statistics import is_at_chance, score_interval

    scores = tuple(evaluation.sample_scores)
    ci = tuple(score_interval(scores, binary=bench.binary)) if scores else (evaluation.score, evaluation.score)
    return CleanScore(
        prompt=prompt,
        score=evaluation.score,
        ci95=(float(ci[0]), float(ci[1])),
        at_chance=is_at_chance(ci, bench.chance_rate),  # type: ignore[arg-type]
        sample_scores=scores,
        unparseable=evaluation.unparseable,
    )


async def rank_prompts(
    bench: Workbench,
    prompts: Sequence[Prompt],
    *,
    on_prompt_done: Callable[[CleanScore], None] | None = None,
    keep_records: bool = False,
    evaluations: list[PromptEvaluation] | None = None,
) -> list[CleanScore]:
    """Clean score of every prompt of a set, best first (the paper attacks the top k).
    ``evaluations``, when given, receives each prompt's full evaluation in input order."""
    evaluator = bench.evaluator()
    scored: list[CleanScore] = []
    progress.phase(f"ranking {len(prompts)} prompts on {len(bench.samples)} samples")
    with progress.reserve(len(prompts) * len(bench.samples)):  # the whole phase's requests, known now
        for prompt in prompts:
            ev = await evaluator.evaluate(prompt.text, keep_records=keep_records)
            if evaluations is not None:
                evaluations.append(ev)
            scored.append(clean_score(bench, prompt, ev))
            if on_prompt_done is not None:
                on_prompt_done(scored[-1])
    return sorted(scored, key=lambda c: -c.score)


# -- one attack ----------------------------------------------------------------------


def protected_words(task: Task) -> frozenset[str]:
    """Words no attack may touch: the labels, their verbalizers and the task's special words."""
    words = {w.lower() for w in task.protected_words}
    words |= {str(label).lower() for label in task.labels}
    words |= {str(v).lower() for v in task.verbalizers.values()}
    return frozenset(words)


def semantic_prompts_for(task: Task, attack_name: str) -> list[tuple[str, str]]:
    """The Semantic attack's candidates as (language, prompt); nothing for other attacks."""
    if attack_name != "semantic":
        return []
    from promptrobust.tasks.prompt_sets import load_prompts

    return [(p.language, p.text) for p in load_prompts(task.name, types=["semantic"])]


def pair_statistics(clean: Sequence[float], adversarial: Sequence[float], *, binary: bool, chance: float | None) -> dict[str, Any]:
    """Intervals, paired test and chance flag of a clean/adversarial pair on the same samples."""
    from promptrobust.engine.analysis.statistics import is_at_chance, mcnemar_p, pdr_interval, score_interval

    clean_ci = score_interval(clean, binary=binary)
    pdr_ci = pdr_interval(clean, adversarial)
    return {
        "clean_ci95": [float(clean_ci[0]), float(clean_ci[1])],
        "adversarial_ci95": [float(x) for x in score_interval(adversarial, binary=binary)],
        "pdr_ci95": [float(pdr_ci[0]), float(pdr_ci[1])] if pdr_ci is not None else None,
        "mcnemar_p": mcnemar_p(clean, adversarial) if binary else None,
        "chance_rate": chance,
        "at_chance": is_at_chance(clean_ci, chance),
    }


def _record_base(bench: Workbench, prompt: Prompt, attack: str, settings: AttackSettings) -> dict[str, Any]:
    described = bench.describe()
    return {
        **described,
        "prompt_id": prompt.id,
        "prompt_type": prompt.type,
        "attack": attack,
        "clean_prompt": prompt.text,
        "budget": settings.budget,
        "early_stopping": settings.early_stopping,
        "chance_rate": bench.chance_rate,
    }


async def attack_one(
    bench: Workbench,
    prompt: Prompt,
    attack_name: str,
    settings: AttackSettings,
    *,
    clean: CleanScore | None = None,
    semantic_prompts: Sequence[str] | None = None,
) -> AttackRecord:
    """Attack one prompt; the record carries both scores, their intervals and the PDR."""
    from promptrobust.attacks.registry import get_attack

    started = time.monotonic()
    if clean is None:
        clean = clean_score(bench, prompt, await bench.evaluator().evaluate(prompt.text))
    base = _record_base(bench, prompt, attack_name, settings)
    if clean.score == 0:
        # promptbench skips prompts whose clean score is 0: there is nothing to drop.
        return AttackRecord(
            **base, clean_score=0.0, status="skipped_clean_zero", clean_ci95=list(clean.ci95),
            at_chance=clean.at_chance, clean_sample_scores=list(clean.sample_scores),
            cost=Cost(wall_seconds=round(time.monotonic() - started, 3)),
        )
    evaluator = bench.evaluator(chunk_size=settings.chunk_size, early_stopping=settings.early_stopping == "exact")
    attack = get_attack(attack_name, **settings.options.get(attack_name, {}))
    outcome = await attack.run(
        prompt.text,
        evaluator,
        protected=protected_words(bench.task),
        seed=bench.evaluation.seed,
        budget=settings.budget,
        semantic_prompts=semantic_prompts_for(bench.task, attack_name) if semantic_prompts is None else semantic_prompts,
    )
    cost = Cost(
        candidate_evaluations=outcome.queries,
        model_requests=evaluator.requests.requests,
        requests_sent=evaluator.requests.sent,
        cache_hits=evaluator.requests.cache_hits,
        deduplicated=evaluator.requests.deduplicated,
        saved_by_early_stopping=evaluator.cost.saved_by_early_stopping,
        pruned_candidates=evaluator.cost.pruned_candidates,
        samples_evaluated=outcome.samples_evaluated,
        wall_seconds=round(time.monotonic() - started, 3),
    )
    # Per-sample scores of the winner for the paired statistics: a separate evaluator
    # (its requests are cache hits or in flight, and do not count as the attack's cost).
    adversarial = await bench.evaluator().evaluate(outcome.adversarial_prompt)
    stats = pair_statistics(clean.sample_scores, adversarial.sample_scores, binary=bench.binary, chance=bench.chance_rate)
    return AttackRecord(
        **{**base, "chance_rate": stats.pop("chance_rate")},
        clean_score=outcome.clean_score,
        adversarial_prompt=outcome.adversarial_prompt,
        adversarial_score=outcome.adversarial_score,
        pdr=outcome.pdr,
        **stats,
        clean_sample_scores=list(clean.sample_scores),
        adversarial_sample_scores=list(adversarial.sample_scores),
        cost=cost,
        budget_exhausted=outcome.budget_exhausted,
        perturbed_words=outcome.perturbed_words,
        settings=dict(outcome.settings),
        prompt_scores=[list(x) for x in getattr(outcome, "prompt_scores", ())],
    )


def failed_record(bench: Workbench, prompt: Prompt, attack_name: str, settings: AttackSettings,
                  clean: CleanScore | None, reason: str) -> AttackRecord:
    """The record of an attack that could not run (a missing resource, a dead endpoint)."""
    base = _record_base(bench, prompt, attack_name, settings)
    return AttackRecord(
        **base,
        clean_score=clean.score if clean else 0.0,
        clean_ci95=list(clean.ci95) if clean else None,
        at_chance=clean.at_chance if clean else False,
        status="failed",
        error=reason,
    )


# -- the whole protocol -----------------------------------------------------------------


@dataclass
class ProtocolResult:
    """Clean scores of the prompt set and one record per (attacked prompt, attack)."""

    settings: dict[str, Any]
    clean: list[CleanScore]
    records: list[AttackRecord] = field(default_factory=list)
    wall_seconds: float = 0.0

    @property
    def failures(self) -> list[AttackRecord]:
        return [r for r in self.records if r.status == "failed"]

    @property
    def skipped(self) -> list[AttackRecord]:
        return [r for r in self.records if r.status == "skipped_clean_zero"]

    def summary(self) -> dict[str, Any]:
        return {
            **self.settings,
            "clean_scores": {c.prompt.id: c.score for c in self.clean},
            "clean": [c.to_dict() for c in self.clean],
            "attacked": [r.to_dict() for r in self.records if r.status == "attacked"],
            "skipped_clean_zero": [f"{r.attack} on {r.prompt_id}" for r in self.skipped],
            "failures": [f"{r.attack} on {r.prompt_id}: {r.error}" for r in self.failures],
            "wall_seconds": round(self.wall_seconds, 3),
        }


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
) -> ProtocolResult:
    """Rank ``prompts`` (unless ``ranked`` is given: a sweep shares one ranking per
    cell), then run every attack of ``settings`` on the top k. A failing attack
    becomes a ``failed`` record and the others go on; exception types in
    ``fail_fast`` (e.g. interrupts) propagate."""
    started = time.monotonic()
    if ranked is None:
        on_event(f"scoring {len(prompts)} prompts on {len(bench.samples)} samples")
        ranked = await rank_prompts(bench, prompts)
    result = ProtocolResult(settings=bench.describe(), clean=ranked)
    for clean in ranked[: settings.top_k]:
        for name in settings.attacks:
            if skip(clean.prompt, name):
                continue
            on_event(f"{name} on {clean.prompt.id} (clean {clean.score:.4f})")
            progress.phase(f"attack {name} on prompt {clean.prompt.id} (clean {clean.score:.4f})")
            try:
                record = await attack_one(bench, clean.prompt, name, settings, clean=clean)
            except fail_fast:
                raise
            except Exception as exc:  # noqa: BLE001 - reported as a failed record, the others go on
                record = failed_record(bench, clean.prompt, name, settings, clean, one_line(exc))
                on_event(f"FAILED {name} on {clean.prompt.id}: {record.error}")
            result.records.append(record)
            if on_record is not None:
                maybe = on_record(record)
                if maybe is not None:
                    await maybe
    result.wall_seconds = time.monotonic() - started
    return result
