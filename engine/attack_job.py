"""One attack on one prompt, as the engine runs it: a fresh evaluator (its own
cost counters) on a shared scheduler, the attack's search, and the record."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from promptrobust.engine.evaluator import Evaluator
from promptrobust.engine.records import AttackRecord
from promptrobust.engine.scheduler import Scheduler
from promptrobust.tasks.base import Prompt, Sample, Task


def protected_words(task: Task) -> frozenset[str]:
    """Words no attack may touch: the task's template words, labels and answer words."""
    words = {w.lower() for w in task.protected_words}
    words |= {str(label).lower() for label in task.labels}
    words |= {str(v).lower() for v in task.verbalizers.values()}
    return frozenset(words)


def semantic_prompts_for(task: Task, attack_name: str) -> list[str]:
    """The Semantic attack's candidates (the task's semantic prompt set); nothing for other attacks."""
    if attack_name != "semantic":
        return []
    from promptrobust.tasks.prompt_sets import load_prompts

    return [p.text for p in load_prompts(task.name, types=["semantic"])]


async def rank_prompts(evaluator: Evaluator, prompts: Sequence[Prompt]) -> list[tuple[Prompt, float]]:
    """Clean score of every prompt of a set, best first (the paper attacks the top k)."""
    scored = [(p, (await evaluator.evaluate(p.text)).score) for p in prompts]
    return sorted(scored, key=lambda pc: -pc[1])


async def attack_prompt(
    *,
    attack_name: str,
    prompt: Prompt,
    scheduler: Scheduler,
    task: Task,
    samples: Sequence[Sample],
    examples: Sequence[Sample],
    model_name: str,
    backend_kind: str,
    mode: str,
    parser: str,
    shots: int,
    seed: int,
    budget: int,
    early_stopping: str = "exact",
    chunk_size: int = 32,
    semantic_prompts: Sequence[str] | None = None,
    attack_options: dict[str, Any] | None = None,
) -> AttackRecord:
    from promptrobust.attacks.registry import get_attack

    evaluator = Evaluator(
        scheduler,
        task,
        samples,
        mode=mode,  # type: ignore[arg-type]
        parser=parser,  # type: ignore[arg-type]
        examples=examples,
        chunk_size=chunk_size,
        early_stopping=early_stopping == "exact",
    )
    attack = get_attack(attack_name, **(attack_options or {}))
    started = time.monotonic()
    outcome = await attack.run(
        prompt.text,
        evaluator,
        protected=protected_words(task),
        seed=seed,
        budget=budget,
        semantic_prompts=semantic_prompts_for(task, attack_name) if semantic_prompts is None else semantic_prompts,
    )
    return AttackRecord(
        model=model_name,
        backend=backend_kind,
        dataset=task.name,
        prompt_id=prompt.id,
        prompt_type=prompt.type,
        shots=shots,
        attack=attack_name,
        clean_prompt=outcome.clean_prompt,
        clean_score=outcome.clean_score,
        adversarial_prompt=outcome.adversarial_prompt,
        adversarial_score=outcome.adversarial_score,
        pdr=outcome.pdr,
        candidate_evaluations=outcome.queries,
        model_requests=evaluator.requests.requests,
        requests_sent=evaluator.requests.sent,
        cache_hits=evaluator.requests.cache_hits,
        deduplicated=evaluator.requests.deduplicated,
        saved_by_early_stopping=evaluator.cost.saved_by_early_stopping,
        pruned_candidates=evaluator.cost.pruned_candidates,
        early_stopping=early_stopping,
        wall_seconds=round(time.monotonic() - started, 3),
        seed=seed,
        samples=len(samples),
        mode=mode,
        parser=parser if mode == "generate" else None,
        input_format="chat" if evaluator.chat else "completion",
        budget=budget,
        metric=task.metric.name,
        samples_evaluated=outcome.samples_evaluated,
        budget_exhausted=outcome.budget_exhausted,
        perturbed_words=outcome.perturbed_words,
        settings=dict(outcome.settings),
    )
