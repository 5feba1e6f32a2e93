"""The Python API: one Session per process holds the cache and one scheduler
per model, shared by every job (runs, attacks, sweep cells) started from it.

    import asyncio
    from promptrobust.engine.session import Session

    async def main():
        async with Session() as session:
            result = await session.evaluate(dataset="rotten_tomatoes", limit=100)
            print(result.scores)

    asyncio.run(main())

``evaluate_sync(...)`` does the same from a notebook cell without asyncio.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from promptrobust.engine.cache import ScoreCache, default_cache_path
from promptrobust.engine.evaluator import Evaluator, Mode, PromptEvaluation
from promptrobust.engine.registry import DEFAULT_MODEL, ModelSpec, build_backend, resolve_model
from promptrobust.engine.scheduler import Scheduler
from promptrobust.tasks.base import ParserName, Prompt, Sample, Task


@dataclass(frozen=True)
class SchedulerSettings:
    concurrency: int = 64
    batch_size: int | None = None
    rpm: float | None = None
    tpm: float | None = None
    max_wait_ms: float = 5.0


@dataclass
class EvaluationResult:
    """Clean scores of several prompts on one model and dataset."""

    model: str
    dataset: str
    mode: str
    parser: str
    chat: bool
    shots: int
    samples: int
    prompts: list[Prompt]
    evaluations: list[PromptEvaluation]
    scheduler: dict[str, float] = field(default_factory=dict)
    wall_seconds: float = 0.0

    @property
    def scores(self) -> dict[str, float]:
        return {p.id: e.score for p, e in zip(self.prompts, self.evaluations)}


def use_uvloop() -> None:
    """Use uvloop when installed (faster event loop); harmless without."""
    try:
        import uvloop
    except ImportError:
        return
    if not isinstance(asyncio.get_event_loop_policy(), uvloop.EventLoopPolicy):
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


class Session:
    """Cache + shared schedulers; the entry point of the Python API."""

    def __init__(
        self,
        *,
        cache: str | Path | ScoreCache | None = None,
        settings: SchedulerSettings | None = None,
        use_cache: bool = True,
    ) -> None:
        if isinstance(cache, ScoreCache):
            self.cache: ScoreCache | None = cache
        elif use_cache:
            self.cache = ScoreCache(cache or default_cache_path())
        else:
            self.cache = None
        self.settings = settings or SchedulerSettings()
        self._schedulers: dict[str, Scheduler] = {}

    async def scheduler(
        self,
        model: str | ModelSpec = DEFAULT_MODEL,
        model_args: Mapping[str, Any] | None = None,
        *,
        settings: SchedulerSettings | None = None,
    ) -> Scheduler:
        """The (started) scheduler for a model; created on first use, then shared.
        ``settings`` (limits for this model) only apply when it is created."""
        spec = model if isinstance(model, ModelSpec) else resolve_model(model, model_args)
        key = f"{spec.name}|{sorted(spec.args.items())}|{spec.backend}"
        sched = self._schedulers.get(key)
        if sched is None:
            s = settings or self.settings
            sched = Scheduler(
                build_backend(spec),
                cache=self.cache,
                batch_size=s.batch_size,
                concurrency=s.concurrency,
                rpm=s.rpm,
                tpm=s.tpm,
                max_wait_ms=s.max_wait_ms,
            )
            self._schedulers[key] = sched
        await sched.start()
        return sched

    async def evaluate(
        self,
        *,
        model: str = DEFAULT_MODEL,
        model_args: Mapping[str, Any] | None = None,
        dataset: str = "rotten_tomatoes",
        prompts: Sequence[Prompt] | None = None,
        prompt_type: str = "task",
        limit: int | None = None,
        seed: int = 0,
        mode: Mode = "choices",
        parser: ParserName = "last_word",
        shots: int = 0,
        keep_records: bool = False,
        data_dir: str | None = None,
        data_file: str | None = None,
        on_prompt_done: Any = None,
    ) -> EvaluationResult:
        """Score prompts (default: the dataset's task-oriented set) on a model."""
        from promptrobust.tasks.prompt_sets import load_prompts
        from promptrobust.tasks.registry import get_task

        task = get_task(dataset)
        samples = task.load(limit=limit, seed=seed, data_dir=data_dir, data_file=data_file)
        if prompts is None:
            prompts = load_prompts(task.name, types=[prompt_type])
        examples = few_shot(task, shots, seed=seed, data_dir=data_dir)
        sched = await self.scheduler(model, model_args)
        evaluator = Evaluator(sched, task, samples, mode=mode, parser=parser, examples=examples)
        started = time.monotonic()
        evaluations = []
        for prompt in prompts:
            evaluations.append(await evaluator.evaluate(prompt.text, keep_records=keep_records))
            if on_prompt_done is not None:
                on_prompt_done(prompt, evaluations[-1])
        return EvaluationResult(
            model=model,
            dataset=task.name,
            mode=mode,
            parser=parser,
            chat=evaluator.chat,
            shots=shots,
            samples=len(samples),
            prompts=list(prompts),
            evaluations=evaluations,
            scheduler=sched.stats.snapshot(),
            wall_seconds=time.monotonic() - started,
        )

    async def close(self) -> None:
        for sched in self._schedulers.values():
            await sched.close()
        self._schedulers.clear()
        if self.cache is not None:
            self.cache.close()

    async def __aenter__(self) -> "Session":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def few_shot(task: Task, shots: int, *, seed: int = 0, data_dir: str | None = None) -> list[Sample]:
    """``shots`` worked examples from the task's few-shot pool (fixed seed)."""
    if shots <= 0:
        return []
    from promptrobust.tasks import few_shot_examples

    return list(few_shot_examples(task, seed, k=shots, data_dir=data_dir))


def evaluate_sync(**kwargs: Any) -> EvaluationResult:
    """``Session().evaluate(**kwargs)`` for code that is not async (notebooks)."""
    cache = kwargs.pop("cache", None)

    async def go() -> EvaluationResult:
        async with Session(cache=cache) as session:
            return await session.evaluate(**kwargs)

    use_uvloop()
    return asyncio.run(go())
