"""The Python API's centre: a Session holds the score cache and one scheduler
per model, shared by every job (runs, attacks, sweep cells) started from it.

    import asyncio
    from promptrobust import Session, EvaluationSettings, AttackSettings

    async def main():
        async with Session() as session:
            result = await session.evaluate(EvaluationSettings(limit=100))
            print(result.table())
            protocol = await session.attack_top_k(
                EvaluationSettings(limit=100), AttackSettings(attacks=("stresstest",), top_k=1)
            )
            print(protocol.records[0].pdr)

    asyncio.run(main())

The module-level functions in ``promptrobust`` (``evaluate``, ``attack``,
``attack_top_k``, ``sweep``, ``report``) do the same from synchronous code,
inside a running event loop too (Jupyter).
"""

from __future__ import annotations

import importlib
import importlib.util
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from promptrobust.attacks.recipes import DEFAULT_ATTACK
from promptrobust.engine import progress as progress_events
from promptrobust.engine.serving.backends.base import Backend
from promptrobust.engine.serving.cache import ScoreCache, default_cache_path
from promptrobust.engine.measuring.evaluator import PromptEvaluation
from promptrobust.engine.serving.scheduler import identity_of
from promptrobust.engine.runs.run_folder import ResultsDocument, WrittenAsResults, WrittenWith, recorded_command, versions
from promptrobust.engine.measuring.records import now as now_iso
from promptrobust.engine.measuring.target import MeasurementTarget, decide_target
from promptrobust.engine.measuring.workbench import CleanScore, SemanticPrompts, Workbench, few_shot, open_workbench

from promptrobust.engine.measuring.protocol import ProtocolResult, RecordSink, run_protocol
from promptrobust.engine.measuring.records import CLEAN_KIND, AttackRecord, RecordFrames
from promptrobust.engine.runs.prompt_choice import prompt_set
from promptrobust.engine.serving.registry import DEFAULT_MODEL, ModelSpec, build_backend, parse_model_args, resolve_model
from promptrobust.engine.serving.scheduler import Scheduler
from promptrobust.engine.measuring.settings import AttackSettings, EvaluationSettings
from promptrobust.engine.serving.scheduler_settings import SchedulerSettings
from promptrobust.engine.runs.sync import use_uvloop
from promptrobust.tasks.base import Prompt

__all__ = ["EvaluationResult", "SchedulerSettings", "Session", "SessionFacts", "evaluate_prompts", "few_shot", "prompt_set", "use_uvloop"]

BackendFactory = Callable[[ModelSpec], Backend]


class SessionFacts(TypedDict):
    """What a session knows of its models for results.json: their identities and counters."""

    models: list[dict[str, object]]
    counters: dict[str, object]

#: A model's arguments: a mapping, or lm-eval's string form "key=value,..." (``parse_model_args``).
ModelArgs = Mapping[str, Any] | str | None


@dataclass
class EvaluationResult(RecordFrames, WrittenAsResults):
    """Clean scores of several prompts on one model and dataset, with their intervals."""

    model: str
    dataset: str
    settings: dict[str, Any]
    clean: list[CleanScore]  # in the order the prompts were given
    evaluations: list[PromptEvaluation]
    scheduler: dict[str, float] = field(default_factory=dict)
    wall_seconds: float = 0.0
    measurement: dict[str, object] = field(default_factory=dict)
    """``MeasurementSettings`` of every score here."""
    chance_rate: float | None = None
    model_identity: dict[str, object] = field(default_factory=dict)
    started: str = ""
    tasks: list[dict[str, object]] = field(default_factory=list)
    """A user's own task: its provenance (``Task.provenance``), for results.json; empty for built-in datasets."""

    def __repr__(self) -> str:
        mean = f"{sum(c.score for c in self.clean) / len(self.clean):.3f}" if self.clean else "none"
        return (f"EvaluationResult(model={self.model!r}, dataset={self.dataset!r}, prompts={len(self.clean)}, "
                f"samples={self.settings.get('samples')}, mode={self.settings.get('mode')!r}, mean_score={mean})")

    @property
    def scores(self) -> dict[str, float]:
        return {c.prompt.id: c.score for c in self.clean}

    @property
    def mode(self) -> str:
        return str(self.settings["mode"])

    @property
    def shots(self) -> int:
        return int(self.settings["shots"])

    @property
    def samples(self) -> int:
        return int(self.settings["samples"])

    @property
    def prompts(self) -> list[Prompt]:
        return [c.prompt for c in self.clean]

    def frame_rows(self) -> list[dict[str, object]]:
        """``to_polars()``/``to_pandas()`` rows: one per prompt, its clean score as results.json holds it."""
        return [{"model": self.model, "dataset": self.dataset, **c.to_dict()} for c in self.clean]

    def sample_log(self) -> Iterator[dict[str, object]]:
        """samples.jsonl rows: every prompt's per-sample answers (held when evaluated with ``keep_records``)."""
        for c, ev in zip(self.clean, self.evaluations):
            for rec in ev.records:
                yield {"prompt_id": c.prompt.id, "role": "clean", **vars(rec)}

    def rows(self) -> list[dict[str, object]]:
        """``results.jsonl`` of a clean-only run: one row per prompt, kind ``clean`` (``CLEAN_KIND``):
        its entry of results.json's ``results.clean``, with what a row read alone needs: the model,
        the dataset, the settings it was measured under, the majority-class rate and its per-sample scores."""
        base = {"kind": CLEAN_KIND, "model": self.model, "dataset": self.dataset, **self.measurement,
                "chance_rate": self.chance_rate}
        return [{**base, **c.to_dict(), "sample_scores": list(c.sample_scores)} for c in self.clean]

    def table(self) -> str:
        """A plain-text table: prompt, score, 95% interval, at-chance flag; best first, as `pre run`
        prints it (ties in the order the prompts were given)."""
        width = max([len(c.prompt.id) for c in self.clean] + [6])
        lines = [f"{'prompt':<{width}}  score   95% interval     unparseable"]
        for c in sorted(self.clean, key=lambda c: -c.score):
            flag = "  at chance" if c.at_chance else ""
            lines.append(f"{c.prompt.id:<{width}}  {c.score:.4f}  [{c.ci95[0]:.3f}, {c.ci95[1]:.3f}]  {c.unparseable:>5}{flag}")
        return "\n".join(lines)

    def document(self, run: WrittenWith = WrittenWith()) -> ResultsDocument:
        """Clean scores of a prompt set (``pre run`` without an attack); ``counters`` default to the
        result's own scheduler's."""
        return ResultsDocument(
            command=recorded_command(run.argv), model=self.model,
            models=[self.model_identity] if self.model_identity else [],
            dataset=self.dataset, measurement=self.measurement or None, configs=dict(run.configs),
            clean=[c.to_dict() for c in self.clean],
            extra_results={"mean_score": sum(c.score for c in self.clean) / len(self.clean) if self.clean else None},
            samples=self.samples, logged_samples=run.logged, started=self.started or now_iso(),
            wall_seconds=self.wall_seconds, chance_rate=self.chance_rate,
            counters=dict(run.counters) if run.counters is not None else {"scheduler": {self.model: self.scheduler}},
            tasks=self.tasks,
        )


class Session:
    """Cache + shared schedulers; the entry point of the Python API.

    ``backend_factory(spec)`` replaces how backends are built (tests inject
    ``promptrobust.testing.CountingBackend`` this way, no monkeypatching).
    """

    def __init__(
        self,
        *,
        cache: str | Path | ScoreCache | None = None,
        settings: SchedulerSettings | None = None,
        use_cache: bool = True,
        backend_factory: BackendFactory | None = None,
    ) -> None:
        if isinstance(cache, ScoreCache):
            self.cache: ScoreCache | None = cache
        elif use_cache:
            self.cache = ScoreCache(cache or default_cache_path())
        else:
            self.cache = None
        self.settings = settings or SchedulerSettings()
        self.backend_factory = backend_factory or build_backend
        self._schedulers: dict[str, Scheduler] = {}
        self._workbenches: dict[tuple[Any, ...], Workbench] = {}
        # The versions results say they were made with, read now, while the code that runs is the
        # checkout's: a long run's checkout may have moved to another commit by the time it writes.
        versions()
        # httpx imported here, in the thread that opens the session, before any job starts: an API
        # backend imports it lazily in the event loop's thread while a worker thread (an attack's
        # meaning check: transformers -> huggingface_hub) may be importing it too, and one of them
        # then sees it half initialised ("module 'httpx' has no attribute 'Timeout'", a sweep job
        # failed so under load). A lean install may have no httpx (the openai SDK can be built on
        # httpx2): then neither side imports it.
        if importlib.util.find_spec("httpx") is not None:
            importlib.import_module("httpx")

    def resolve(self, model: str | ModelSpec = DEFAULT_MODEL, model_args: ModelArgs = None) -> ModelSpec:
        """The model's spec; ``model_args`` as a mapping or as lm-eval's string ``"key=value,..."``."""
        if isinstance(model, ModelSpec):
            return model
        return resolve_model(model, parse_model_args(model_args) if isinstance(model_args, str) else model_args)

    async def scheduler(
        self,
        model: str | ModelSpec = DEFAULT_MODEL,
        model_args: ModelArgs = None,
        *,
        settings: SchedulerSettings | None = None,
    ) -> Scheduler:
        """The (started) scheduler for a model; created on first use, then shared.
        ``settings`` (limits for this model) only apply when it is created."""
        spec = self.resolve(model, model_args)
        key = f"{spec.name}|{sorted(spec.args.items())}|{spec.backend}"
        sched = self._schedulers.get(key)
        if sched is None:
            sched = Scheduler(self.backend_factory(spec), cache=self.cache, settings=settings or self.settings)
            self._schedulers[key] = sched
        await sched.start()
        return sched

    async def workbench(self, model: str | ModelSpec = DEFAULT_MODEL, evaluation: EvaluationSettings | None = None,
                        *, model_args: ModelArgs = None,
                        scheduler_settings: SchedulerSettings | None = None) -> Workbench:
        """Task, samples, examples, the mode and the model's scheduler for one evaluation
        (``engine.measuring.workbench.Workbench``), prepared once per session and reused. The task,
        shots and mode are decided here as the Python API asks (``decide_target``, not strict: a
        free-text task generates); a plan decides its own targets and calls ``workbench_for``. A
        user's own task rides in ``evaluation.task`` (``EvaluationSettings``)."""
        spec = self.resolve(model, model_args)
        target = decide_target(evaluation or EvaluationSettings(), base_model=spec.base_model)
        return await self.workbench_for(spec, target, scheduler_settings)

    async def workbench_for(self, spec: ModelSpec, target: MeasurementTarget,
                            scheduler_settings: SchedulerSettings | None = None) -> Workbench:
        """The workbench of a decided ``target`` on ``spec``'s shared scheduler (``open_workbench``:
        the target taken as given), made once per (model, target) in this session."""
        key = (spec.name, spec.backend, tuple(sorted((str(k), str(v)) for k, v in spec.args.items())), target,
               scheduler_settings)
        bench = self._workbenches.get(key)
        if bench is None:
            bench = await open_workbench(target, spec, lambda: self.scheduler(spec, settings=scheduler_settings))
            self._workbenches[key] = bench
        return bench

    async def evaluate(
        self,
        evaluation: EvaluationSettings | None = None,
        *,
        model: str | ModelSpec = DEFAULT_MODEL,
        model_args: ModelArgs = None,
        prompts: Sequence[Prompt] | None = None,
        prompt_type: str = "task",
        keep_records: bool = False,
        on_prompt_done: Callable[[CleanScore], None] | None = None,
        **evaluation_fields: Any,
    ) -> EvaluationResult:
        """Clean scores of prompts (default: the dataset's ``prompt_type`` set).

        Settings come as an ``EvaluationSettings`` or as its fields by keyword
        (``session.evaluate(dataset="sst2", limit=100)``); both are validated alike.
        """
        evaluation = _evaluation(evaluation, evaluation_fields)
        bench = await self.workbench(model, evaluation, model_args=model_args)
        prompts = list(prompts) if prompts is not None else prompt_set(bench.task, prompt_type)
        return await evaluate_prompts(bench, prompts, keep_records=keep_records, on_prompt_done=on_prompt_done)

    async def attack(
        self,
        prompt: str | Prompt,
        attack: str = DEFAULT_ATTACK,
        evaluation: EvaluationSettings | None = None,
        settings: AttackSettings | None = None,
        *,
        model: str | ModelSpec = DEFAULT_MODEL,
        model_args: ModelArgs = None,
        **evaluation_fields: Any,
    ) -> AttackRecord:
        """Attack one prompt with one attack; returns its ``AttackRecord`` (PDR with its interval)."""
        evaluation = _evaluation(evaluation, evaluation_fields)
        settings = (settings or AttackSettings()).with_(attacks=(attack,))
        bench = await self.workbench(model, evaluation, model_args=model_args)
        if isinstance(prompt, str):
            prompt = Prompt(id="custom", dataset=bench.task.name, type="task", text=prompt)
        progress_events.phase(f"attack {attack} on prompt {prompt.id}")  # what the progress lines are about
        return await bench.attack(prompt, attack, settings)

    async def attack_top_k(
        self,
        evaluation: EvaluationSettings | None = None,
        settings: AttackSettings | None = None,
        *,
        model: str | ModelSpec = DEFAULT_MODEL,
        model_args: ModelArgs = None,
        prompts: Sequence[Prompt] | None = None,
        prompt_type: str = "task",
        on_record: RecordSink | None = None,
        on_event: Callable[[str], None] = lambda message: None,
        fail_fast: tuple[type[BaseException], ...] = (),
        semantic_prompts: SemanticPrompts | None = None,
        **evaluation_fields: Any,
    ) -> ProtocolResult:
        """The paper's protocol: rank the prompt set, attack the top k (engine.measuring.protocol.ProtocolResult).
        Exception types in ``fail_fast`` (e.g. KeyboardInterrupt) stop it; any other failure of an
        attack becomes a ``failed`` record. ``semantic_prompts``: the Semantic attack's prompts
        from a promptbench checkout instead of the built-in set."""
        evaluation = _evaluation(evaluation, evaluation_fields)
        settings = settings or AttackSettings(attacks=(DEFAULT_ATTACK,))
        bench = await self.workbench(model, evaluation, model_args=model_args)
        prompts = list(prompts) if prompts is not None else prompt_set(bench.task, prompt_type)
        return await run_protocol(
            bench, prompts, settings, on_record=on_record, on_event=on_event, fail_fast=fail_fast,
            semantic_prompts=semantic_prompts,
        )

    def facts(self) -> SessionFacts:
        """Identity of every model this session queried and the counters, for results.json (read before it closes)."""
        schedulers = list(self._schedulers.values())
        return {
            "models": [identity_of(s) for s in schedulers],
            "counters": {
                "scheduler": {identity_of(s)["name"]: _counted(s) for s in schedulers},
                "cache": self.cache.summary() if self.cache is not None else None,
            },
        }

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


def _counted(scheduler: Scheduler) -> dict[str, object]:
    """A scheduler's counters, with what its tokens cost where the model is priced (and the price's source)."""
    counts: dict[str, object] = dict(scheduler.stats.snapshot())
    price = scheduler.settings.token_price
    if price is not None:
        counts["usd"] = round(price.usd(scheduler.stats.input_tokens, scheduler.stats.output_tokens), 6)
        counts["price_per_mtok"] = {"input": price.input, "output": price.output, "source": price.source}
    return counts


async def evaluate_prompts(bench: Workbench, prompts: Sequence[Prompt], *, keep_records: bool = False,
                           on_prompt_done: Callable[[CleanScore], None] | None = None) -> EvaluationResult:
    """Clean scores of ``prompts`` on a workbench (``Workbench.score_prompts``), as an ``EvaluationResult``."""
    started, began = time.monotonic(), now_iso()
    progress_events.phase(f"scoring {progress_events.counted(len(prompts), 'prompt')} on "
                          f"{progress_events.counted(len(bench.samples), 'sample')}")
    done = None if on_prompt_done is None else (lambda s: on_prompt_done(s.clean))
    scored = await bench.score_prompts(prompts, keep_records=keep_records, on_done=done)
    return EvaluationResult(
        model=bench.spec.name,
        dataset=bench.task.name,
        settings=bench.describe(),
        clean=[s.clean for s in scored],
        evaluations=[s.evaluation for s in scored],
        scheduler=bench.scheduler.stats.snapshot(),
        wall_seconds=time.monotonic() - started,
        measurement=bench.measurement_facts(),
        chance_rate=bench.chance_rate,
        model_identity=identity_of(bench.scheduler),
        started=began,
        tasks=bench.task_provenance(),
    )


def _evaluation(evaluation: EvaluationSettings | None, fields: Mapping[str, Any]) -> EvaluationSettings:
    if evaluation is not None and fields:
        return evaluation.with_(**fields)
    return evaluation or EvaluationSettings(**fields)
