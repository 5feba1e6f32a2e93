"""Sweeps: a grid of models x datasets x prompt types x attacks, run as
concurrent jobs in one process.

A job is one cell of the grid with one attack: (model, dataset, shots, prompt
type, attack). It scores the cell's prompt set, attacks the top k prompts and
appends one record per attacked prompt to ``<sweep>/results.jsonl`` the moment
it exists. All jobs share one Session: one cache and one scheduler per model,
so identical requests from different jobs (every attack of a cell scores the
same clean prompts) are computed once, and the backend always has work.

Resuming: a rerun of the same config reads ``results.jsonl`` and skips every
(job, prompt) already recorded; everything else is answered from the cache.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from promptrobust.engine.records import append_jsonl, consolidate_parquet, read_jsonl


class SweepConfigError(ValueError):
    """A config problem; the message names the field."""


_TOP_KEYS = {"sweep", "grid", "models"}
_SWEEP_KEYS = {
    "name", "output_dir", "limit", "seed", "mode", "parser", "top_k", "budget", "early_stopping",
    "chunk_size", "concurrency", "batch_size", "rpm", "tpm", "cache", "max_jobs",
}
_GRID_KEYS = {"models", "datasets", "prompt_types", "shots", "attacks"}
_MODEL_KEYS = {"model_args", "rpm", "tpm", "concurrency", "batch_size"}
_PROMPT_TYPES = ("task", "role")


@dataclass(frozen=True)
class Job:
    model: str
    dataset: str
    shots: int
    prompt_type: str
    attack: str

    @property
    def id(self) -> str:
        raw = f"{self.model}|{self.dataset}|{self.shots}|{self.prompt_type}|{self.attack}"
        return hashlib.sha1(raw.encode()).hexdigest()[:12]

    def label(self) -> str:
        return f"{self.model} / {self.dataset} / {self.shots}-shot {self.prompt_type} / {self.attack}"


@dataclass
class SweepConfig:
    name: str
    output_dir: Path
    models: list[str]
    datasets: list[str]
    prompt_types: list[str]
    shots: list[int]
    attacks: list[str]
    limit: int | None = None
    seed: int = 0
    mode: str = "choices"
    parser: str = "last_word"
    top_k: int = 3
    budget: int = 100
    early_stopping: str = "exact"
    chunk_size: int = 32
    concurrency: int = 64
    batch_size: int | None = None
    rpm: float | None = None
    tpm: float | None = None
    cache: str | None = None
    max_jobs: int = 8
    model_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    source: str = ""

    @property
    def folder(self) -> Path:
        return self.output_dir / self.name

    def jobs(self) -> list[Job]:
        return [
            Job(m, d, s, t, a)
            for m in self.models
            for d in self.datasets
            for s in self.shots
            for t in self.prompt_types
            for a in self.attacks
        ]


def _expect(cond: bool, message: str) -> None:
    if not cond:
        raise SweepConfigError(message)


def _reject_unknown(table: dict[str, Any], allowed: set[str], message: str, prefix: str) -> None:
    bad = sorted(set(table) - allowed)
    if bad:
        raise SweepConfigError(f"{message}{prefix}{bad[0]} (allowed: {', '.join(sorted(allowed))})")


def _names(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    _expect(isinstance(value, list) and all(isinstance(v, str) for v in value), f"{where} must be a list of names")
    _expect(len(value) > 0, f"{where} is empty: the grid needs at least one entry")
    return list(dict.fromkeys(value))


def load_config(path: str | os.PathLike[str]) -> SweepConfig:
    """Parse and validate a sweep TOML file (every problem names its field)."""
    p = Path(path)
    if not p.is_file():
        raise SweepConfigError(f"sweep config {p} does not exist")
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise SweepConfigError(f"{p} is not valid TOML: {exc}") from None
    _reject_unknown(data, _TOP_KEYS, f"{p}: unknown section or key ", "")
    sweep = data.get("sweep", {})
    grid = data.get("grid")
    _expect(isinstance(grid, dict), f"{p}: missing [grid] section with models, datasets and attacks")
    for section, allowed, table in (("sweep", _SWEEP_KEYS, sweep), ("grid", _GRID_KEYS, grid)):
        _reject_unknown(table, allowed, f"{p}: unknown key ", f"{section}.")
    for key in ("models", "datasets", "attacks"):
        _expect(key in grid, f"{p}: grid.{key} is missing")

    from promptrobust.engine.registry import resolve_model

    models = _names(grid["models"], "grid.models")
    for m in models:
        try:
            resolve_model(m)
        except ValueError as exc:
            raise SweepConfigError(f"grid.models: {exc}") from None

    from promptrobust.tasks.registry import get_task

    datasets = _names(grid["datasets"], "grid.datasets")
    canonical = []
    for d in datasets:
        try:
            canonical.append(get_task(d).name)
        except ValueError as exc:
            raise SweepConfigError(f"grid.datasets: {exc}") from None

    from promptrobust.attacks.registry import list_attacks

    known_attacks = [name for name, _ in list_attacks()]
    attacks_raw = grid["attacks"]
    attacks = known_attacks if attacks_raw == "all" else _names(attacks_raw, "grid.attacks")
    for a in attacks:
        _expect(a in known_attacks, f"grid.attacks: unknown attack {a!r} (known: {', '.join(known_attacks)}, or \"all\")")

    prompt_types = _names(grid.get("prompt_types", ["task"]), "grid.prompt_types")
    for t in prompt_types:
        _expect(t in _PROMPT_TYPES, f"grid.prompt_types: {t!r} is not one of {', '.join(_PROMPT_TYPES)}")
    shots = grid.get("shots", [0])
    shots = [shots] if isinstance(shots, int) else shots
    _expect(
        isinstance(shots, list) and shots and all(isinstance(s, int) and s >= 0 for s in shots),
        "grid.shots must be a non-empty list of numbers of examples, e.g. [0, 3]",
    )

    options = data.get("models", {})
    _expect(isinstance(options, dict), "[models] must be a table of per-model options")
    for name, opts in options.items():
        _expect(name in models, f"models.{name}: not in grid.models")
        _expect(isinstance(opts, dict), f"models.{name} must be a table of options")
        _reject_unknown(opts, _MODEL_KEYS, "unknown key ", f"models.{name}.")

    cfg = SweepConfig(
        name=str(sweep.get("name") or p.stem),
        output_dir=Path(sweep.get("output_dir", "runs/sweeps")),
        models=models,
        datasets=canonical,
        prompt_types=prompt_types,
        shots=list(dict.fromkeys(shots)),
        attacks=attacks,
        model_options={k: dict(v) for k, v in options.items()},
        source=str(p),
    )
    for key in _SWEEP_KEYS - {"name", "output_dir"}:
        if key in sweep:
            setattr(cfg, key, sweep[key])
    _expect(cfg.mode in ("choices", "generate"), "sweep.mode must be \"choices\" or \"generate\"")
    _expect(cfg.early_stopping in ("exact", "off"), "sweep.early_stopping must be \"exact\" or \"off\"")
    for key in ("top_k", "budget", "chunk_size", "concurrency", "max_jobs"):
        _expect(isinstance(getattr(cfg, key), int) and getattr(cfg, key) >= 1, f"sweep.{key} must be a whole number >= 1")
    _expect(cfg.limit is None or (isinstance(cfg.limit, int) and cfg.limit >= 1), "sweep.limit must be a whole number >= 1")
    return cfg


def estimate_requests(cfg: SweepConfig, samples: int, prompts: int) -> dict[str, int]:
    """Upper bounds on model requests for a job, before cache and early stopping."""
    clean = prompts * samples
    attack = cfg.top_k * (cfg.budget + 1) * samples
    return {"clean": clean, "attack_max": attack}


def completed_keys(results_file: Path) -> set[tuple[str, str]]:
    """(job id, prompt id) pairs already recorded by an earlier (possibly killed) run."""
    if not results_file.exists():
        return set()
    return {(r.get("job_id", ""), r.get("prompt_id", "")) for r in read_jsonl(results_file)}


def repair_torn_tail(results_file: Path) -> None:
    """Drop a half-written last line left by a crash, so appends start on a fresh line."""
    if not results_file.exists():
        return
    raw = results_file.read_bytes()
    if raw and not raw.endswith(b"\n"):
        cut = raw.rfind(b"\n") + 1
        with open(results_file, "r+b") as fh:
            fh.truncate(cut)


@dataclass
class SweepProgress:
    jobs_total: int = 0
    jobs_done: int = 0
    records: int = 0
    skipped: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (job label, one-line reason)


async def run_sweep(
    cfg: SweepConfig,
    *,
    on_event: Callable[[str], None] = lambda message: None,
    session: Any = None,
) -> SweepProgress:
    """Run (or resume) every job of the grid concurrently; returns counters."""
    from promptrobust.engine.attack_job import attack_prompt, rank_prompts
    from promptrobust.engine.evaluator import Evaluator
    from promptrobust.engine.registry import parse_model_args, resolve_model
    from promptrobust.engine.session import SchedulerSettings, Session, few_shot
    from promptrobust.tasks.prompt_sets import load_prompts
    from promptrobust.tasks.registry import get_task

    folder = cfg.folder
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_bytes(orjson.dumps(_config_dict(cfg), option=orjson.OPT_INDENT_2, default=str))
    results = folder / "results.jsonl"
    repair_torn_tail(results)
    done = completed_keys(results)
    jobs = cfg.jobs()
    progress = SweepProgress(jobs_total=len(jobs))
    own_session = session is None
    if own_session:
        session = Session(
            cache=cfg.cache,
            settings=SchedulerSettings(
                concurrency=cfg.concurrency, batch_size=cfg.batch_size, rpm=cfg.rpm, tpm=cfg.tpm
            ),
        )
    limit = asyncio.Semaphore(cfg.max_jobs)
    write_lock = asyncio.Lock()
    clean_cache: dict[tuple[str, str, int, str], asyncio.Task[list[tuple[Any, float]]]] = {}
    specs = {
        m: resolve_model(m, parse_model_args(cfg.model_options.get(m, {}).get("model_args", "")))
        for m in cfg.models
    }

    async def run_job(job: Job) -> None:
        async with limit:
            spec = specs[job.model]
            task = get_task(job.dataset)
            shots = job.shots
            if spec.base_model and shots == 0:
                shots = 3  # base models only make sense few-shot (the paper's protocol)
            samples = task.load(limit=cfg.limit, seed=cfg.seed)
            examples = few_shot(task, shots, seed=cfg.seed)
            prompts = load_prompts(task.name, types=[job.prompt_type])
            scheduler = await session.scheduler(spec, settings=model_settings(cfg, job.model))
            mode = cfg.mode if task.supports_choices else "generate"

            # Every attack of a cell ranks the same prompts: score them once.
            cell = (job.model, job.dataset, job.shots, job.prompt_type)
            if cell not in clean_cache:
                ranker = Evaluator(scheduler, task, samples, mode=mode, parser=cfg.parser, examples=examples)
                clean_cache[cell] = asyncio.ensure_future(rank_prompts(ranker, prompts))
            clean = await clean_cache[cell]
            for prompt, _ in clean[: cfg.top_k]:
                if (job.id, prompt.id) in done:
                    progress.skipped += 1
                    continue
                rec = await attack_prompt(
                    attack_name=job.attack, prompt=prompt, scheduler=scheduler, task=task, samples=samples,
                    examples=examples, model_name=spec.name, backend_kind=spec.backend, mode=mode,
                    parser=cfg.parser, shots=shots, seed=cfg.seed, budget=cfg.budget,
                    early_stopping=cfg.early_stopping, chunk_size=cfg.chunk_size,
                )
                record = rec.to_dict()
                record["prompt_type"] = job.prompt_type
                record["job_id"] = job.id
                record["clean_scores"] = {p.id: s for p, s in clean}
                async with write_lock:
                    append_jsonl(results, [record])
                progress.records += 1
                on_event(f"{job.label()} / {prompt.id}: PDR {rec.pdr:.3f}")
            progress.jobs_done += 1

    async def guarded(job: Job) -> None:
        """A failing job (a missing resource, a dead endpoint) must not take the others down."""
        try:
            await run_job(job)
        except Exception as exc:  # noqa: BLE001 - reported per job, the sweep goes on
            reason = " ".join(str(exc).split()) or type(exc).__name__
            progress.failed.append((job.label(), reason))
            async with write_lock:
                append_jsonl(folder / "errors.jsonl", [{"job_id": job.id, "job": job.label(), "error": reason}])
            on_event(f"FAILED {job.label()}: {reason}")

    try:
        await asyncio.gather(*(guarded(j) for j in jobs))
    finally:
        if own_session:
            await session.close()
    consolidate_parquet(results, folder / "results.parquet")
    return progress


def model_settings(cfg: SweepConfig, model: str) -> Any:
    """Scheduler settings for one model: the sweep's, overridden by [models.NAME]."""
    from promptrobust.engine.session import SchedulerSettings

    opts = cfg.model_options.get(model, {})
    return SchedulerSettings(
        concurrency=opts.get("concurrency", cfg.concurrency),
        batch_size=opts.get("batch_size", cfg.batch_size),
        rpm=opts.get("rpm", cfg.rpm),
        tpm=opts.get("tpm", cfg.tpm),
    )


def _config_dict(cfg: SweepConfig) -> dict[str, Any]:
    out = {k: v for k, v in cfg.__dict__.items()}
    out["output_dir"] = str(cfg.output_dir)
    return out


def describe_plan(cfg: SweepConfig) -> list[dict[str, Any]]:
    """The job list with request estimates (``pre sweep --dry-run``)."""
    from promptrobust.tasks.prompt_sets import load_prompts
    from promptrobust.tasks.registry import get_task

    out = []
    done = completed_keys(cfg.folder / "results.jsonl")
    for job in cfg.jobs():
        task = get_task(job.dataset)
        size = getattr(task, "sample_size", None)  # the paper size of dataset tasks
        samples = min(cfg.limit, size) if (cfg.limit and size) else (cfg.limit or size or 0)
        prompts = len(load_prompts(task.name, types=[job.prompt_type]))
        est = estimate_requests(cfg, int(samples), prompts)
        finished = sum(1 for k in done if k[0] == job.id)
        out.append({"job": job, "samples": samples, "prompts": prompts, "finished_prompts": finished, **est})
    return out


__all__: Sequence[str] = ("Job", "SweepConfig", "SweepConfigError", "load_config", "run_sweep", "describe_plan")
