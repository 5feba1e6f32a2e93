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
import time
import hashlib
import os
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any


from promptrobust.engine import progress as progress_events
from promptrobust.engine.records import AttackRecord, read_jsonl
from promptrobust.engine.run_folder import SweepFolder
from promptrobust.engine.run_results import session_facts, sweep_document
from promptrobust.engine import atomic_io
from promptrobust.engine.folder_lock import folder_lock
from promptrobust.engine.redact import redact_text
from promptrobust.engine.settings import (
    AttackSettings,
    EvaluationSettings,
    SchedulerSettings,
    SettingsError,
    parse_budget,
)


class SweepConfigError(ValueError):
    """A config problem; the message names the field."""


_TOP_KEYS = {"sweep", "grid", "models"}
#: [sweep] keys -> which settings value they belong to.
_EVALUATION_KEYS = {"limit", "seed", "mode", "parser", "max_new_tokens", "sample_selection"}
_ATTACK_KEYS = {"top_k", "budget", "early_stopping", "chunk_size", "holdout"}
_SCHEDULER_KEYS = {"concurrency", "batch_size", "rpm", "tpm", "max_retries", "request_timeout"}
_SWEEP_KEYS = {"name", "output_dir", "cache", "max_jobs"} | _EVALUATION_KEYS | _ATTACK_KEYS | _SCHEDULER_KEYS
_GRID_KEYS = {"models", "datasets", "prompt_types", "shots", "attacks"}
_MODEL_KEYS = {"model_args", "rpm", "tpm", "concurrency", "batch_size", "max_retries", "request_timeout"}
_PROMPT_TYPES = ("task", "role")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


@dataclass(frozen=True)
class Job:
    """One cell of the grid with one attack. ``shots`` None = the paper's rule (3 for base models)."""

    model: str
    dataset: str
    shots: int | None
    prompt_type: str
    attack: str

    @property
    def id(self) -> str:
        raw = f"{self.model}|{self.dataset}|{_shots_text(self.shots)}|{self.prompt_type}|{self.attack}"
        return hashlib.sha1(raw.encode()).hexdigest()[:12]

    @property
    def cell(self) -> tuple[str, str, int | None, str]:
        """Jobs of one cell share its clean ranking (and a shard keeps them together)."""
        return (self.model, self.dataset, self.shots, self.prompt_type)

    def label(self) -> str:
        return f"{self.model} / {self.dataset} / {_shots_text(self.shots)}-shot {self.prompt_type} / {self.attack}"


def _shots_text(shots: int | None) -> str:
    return "auto" if shots is None else str(shots)


@dataclass(frozen=True)
class SweepConfig:
    """A grid of models x datasets x shots x prompt types x attacks, with the settings of every job.

    Built by ``load_config`` from TOML or directly in Python; either way the
    settings objects validate every value."""

    name: str
    output_dir: Path
    models: tuple[str, ...]
    datasets: tuple[str, ...]
    attacks: tuple[str, ...]
    prompt_types: tuple[str, ...] = ("task",)
    shots: tuple[int | None, ...] = (None,)
    evaluation: EvaluationSettings = field(default_factory=EvaluationSettings)
    """Evaluation settings of every job (its dataset and shots come from the grid)."""
    attack: AttackSettings = field(default_factory=AttackSettings)
    """Attack settings of every job (its attack comes from the grid)."""
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    """Default scheduler limits; ``model_options`` override them per model."""
    cache: str | None = None
    max_jobs: int = 8
    model_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    source: str = ""

    def __post_init__(self) -> None:
        _expect(bool(_NAME.match(self.name)), f"sweep.name {self.name!r} must be a plain folder name (letters, digits, . _ -), not a path")
        for key in ("models", "datasets", "attacks", "prompt_types", "shots"):
            _expect(isinstance(getattr(self, key), tuple) and len(getattr(self, key)) > 0, f"grid.{key} must be a non-empty list")
        _expect(isinstance(self.max_jobs, int) and self.max_jobs >= 1, "sweep.max_jobs must be a whole number >= 1")

    @property
    def folder(self) -> Path:
        return self.output_dir / self.name

    def with_(self, **changes: Any) -> "SweepConfig":
        return replace(self, **changes)

    def jobs(self) -> list[Job]:
        return [
            Job(m, d, s, t, a)
            for m in self.models
            for d in self.datasets
            for s in self.shots
            for t in self.prompt_types
            for a in self.attacks
        ]

    def job_evaluation(self, job: Job) -> EvaluationSettings:
        return self.evaluation.with_(dataset=job.dataset, shots=job.shots)

    def job_attack(self, job: Job) -> AttackSettings:
        return self.attack.with_(attacks=(job.attack,))


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


def _settings(kind: Any, values: dict[str, Any], where: str) -> Any:
    try:
        return kind(**values)
    except SettingsError as exc:
        raise SweepConfigError(f"{where}.{exc}") from None
    except TypeError as exc:
        raise SweepConfigError(f"{where}: {exc}") from None


def _one_batch_size(model: str, opts: dict[str, Any], sweep_batch: Any) -> None:
    """Batch size is set in one place: ``batch_size`` (sweep or model) and ``model_args = "batch_size=N"``
    may not disagree."""
    from promptrobust.engine.registry import ModelArgsError, parse_model_args

    try:
        in_args = parse_model_args(str(opts.get("model_args", ""))).get("batch_size")
    except ModelArgsError:
        return  # the model args' own check names the problem
    given = opts.get("batch_size", sweep_batch)
    if in_args is not None and given is not None and str(in_args) != str(given):
        raise SweepConfigError(
            f"models.{model}: batch_size {given} and model_args batch_size={in_args} disagree; set it in one place (batch_size)"
        )


def load_config(path: str | os.PathLike[str]) -> SweepConfig:
    """Parse and validate a sweep TOML file (every problem names its field)."""
    p = Path(path)
    if not p.is_file():
        raise SweepConfigError(f"sweep config {p} does not exist")
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise SweepConfigError(f"{p} is not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise SweepConfigError(f"{p} is not a UTF-8 text file") from None
    _reject_unknown(data, _TOP_KEYS, f"{p}: unknown section or key ", "")
    sweep = data.get("sweep", {})
    grid = data.get("grid")
    _expect(isinstance(sweep, dict), f"{p}: [sweep] must be a table")
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
    shots = grid.get("shots", ["auto"])
    shots = [shots] if isinstance(shots, (int, str)) else shots
    _expect(
        isinstance(shots, list) and shots and all((isinstance(s, int) and s >= 0) or s == "auto" for s in shots),
        'grid.shots must be a non-empty list of numbers of examples or "auto", e.g. [0, 3]',
    )
    shots_values = tuple(dict.fromkeys(None if s == "auto" else s for s in shots))

    options = data.get("models", {})
    _expect(isinstance(options, dict), "[models] must be a table of per-model options")
    for name, opts in options.items():
        _expect(name in models, f"models.{name}: not in grid.models")
        _expect(isinstance(opts, dict), f"models.{name} must be a table of options")
        _reject_unknown(opts, _MODEL_KEYS, "unknown key ", f"models.{name}.")
        scheduler_part = {k: v for k, v in opts.items() if k != "model_args"}
        _settings(SchedulerSettings, scheduler_part, f"models.{name}")
        _one_batch_size(name, opts, sweep.get("batch_size"))

    pick = lambda keys: {k: sweep[k] for k in keys if k in sweep}  # noqa: E731
    attack_values = pick(_ATTACK_KEYS)
    if "budget" in attack_values:
        try:
            attack_values["budget"] = parse_budget(attack_values["budget"])
        except SettingsError as exc:
            raise SweepConfigError(f"sweep.{exc}") from None
    return SweepConfig(
        name=str(sweep.get("name") or p.stem),
        output_dir=Path(sweep.get("output_dir", "runs/sweeps")),
        models=tuple(models),
        datasets=tuple(canonical),
        prompt_types=tuple(prompt_types),
        shots=shots_values,
        attacks=tuple(attacks),
        evaluation=_settings(EvaluationSettings, {"dataset": canonical[0], **pick(_EVALUATION_KEYS)}, "sweep"),
        attack=_settings(AttackSettings, {"attacks": tuple(attacks), **attack_values}, "sweep"),
        scheduler=_settings(SchedulerSettings, pick(_SCHEDULER_KEYS), "sweep"),
        cache=sweep.get("cache"),
        max_jobs=sweep.get("max_jobs", 8),
        model_options={k: dict(v) for k, v in options.items()},
        source=str(p),
    )


def estimate_requests(cfg: SweepConfig, samples: int, prompts: int, words: int = 30,
                      attack_name: str | None = None) -> dict[str, int | None]:
    """Upper bounds on model requests for a job, before cache and early stopping.
    With an unlimited budget a word attack tries about ``words`` candidates per
    word of the prompt (an estimate; None means unbounded); given ``attack_name``
    and the prompts' mean word count, the recipe's own worst case (sweep_estimate)."""
    clean = prompts * samples
    if attack_name is not None:
        from promptrobust.engine.sweep_estimate import attack_candidates

        budget = attack_candidates(attack_name, words, cfg.attack.budget)
    else:
        budget = cfg.attack.budget if cfg.attack.budget is not None else words * 20
    attack = cfg.attack.top_k * (budget + 1) * samples
    return {"clean": clean, "attack_max": attack}


def completed_keys(results_file: Path) -> set[tuple[str, str]]:
    """(job id, prompt id) pairs already recorded by an earlier (possibly killed) run.
    Failed records do not count: a rerun tries them again."""
    if not results_file.exists():
        return set()
    return {
        (r.get("job_id", ""), r.get("prompt_id", ""))
        for r in read_jsonl(results_file)
        if r.get("status", "attacked") != "failed"
    }


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


class JobRunner:
    """Runs jobs of one sweep on one session: cells share their clean ranking,
    records go to ``on_record`` with the job's id. The local executor and the
    Ray workers both use it."""

    def __init__(self, cfg: SweepConfig, session: Any) -> None:
        from promptrobust.engine.registry import parse_model_args, resolve_model

        self.cfg = cfg
        self.session = session
        self.specs = {
            m: resolve_model(m, parse_model_args(cfg.model_options.get(m, {}).get("model_args", "")))
            for m in cfg.models
        }
        self._benches: dict[tuple[Any, ...], asyncio.Task[Any]] = {}
        self._ranked: dict[tuple[Any, ...], asyncio.Task[Any]] = {}

    async def _bench(self, job: Job) -> Any:
        from promptrobust.engine.workbench import prepare

        key = (job.model, job.dataset, job.shots)
        if key not in self._benches:
            self._benches[key] = asyncio.ensure_future(
                prepare(self.session, self.specs[job.model], self.cfg.job_evaluation(job),
                        scheduler_settings=model_settings(self.cfg, job.model))
            )
        return await self._benches[key]

    async def _ranking(self, job: Job, bench: Any) -> Any:
        from promptrobust.engine.protocol import rank_prompts
        from promptrobust.engine.session import prompt_set

        if job.cell not in self._ranked:
            if self.cfg.attack.holdout:  # rank on the searched part only (run_protocol splits the same way)
                from promptrobust.engine.holdout import split_workbench

                bench, _ = split_workbench(bench, self.cfg.attack.holdout)
            self._ranked[job.cell] = asyncio.ensure_future(rank_prompts(bench, prompt_set(bench.task, job.prompt_type)))
        return await self._ranked[job.cell]

    async def run(
        self,
        job: Job,
        *,
        done: set[tuple[str, str]] = frozenset(),  # type: ignore[assignment]
        on_record: Callable[[AttackRecord], Any] = lambda record: None,
        on_event: Callable[[str], None] = lambda message: None,
    ) -> list[AttackRecord]:
        """Attack the top k of the job's cell with its attack; returns the new records."""
        from promptrobust.engine.protocol import run_protocol

        bench = await self._bench(job)
        ranked = await self._ranking(job, bench)
        clean_scores = {c.prompt.id: c.score for c in ranked}

        async def stamp(record: AttackRecord) -> None:
            record.job_id = job.id
            record.extra["clean_scores"] = clean_scores
            result = on_record(record)
            if asyncio.iscoroutine(result):
                await result

        result = await run_protocol(
            bench,
            [c.prompt for c in ranked],
            self.cfg.job_attack(job),
            ranked=ranked,
            on_record=stamp,
            on_event=lambda m: on_event(f"{job.label()}: {m}"),
            skip=lambda prompt, attack: (job.id, prompt.id) in done,
            fail_fast=(asyncio.CancelledError, KeyboardInterrupt),
        )
        return result.records


#: Seconds a sweep waits for another process writing the same folder before it refuses.
LOCK_WAIT = 10.0


async def run_sweep(
    cfg: SweepConfig,
    *,
    on_event: Callable[[str], None] = lambda message: None,
    session: Any = None,
    jobs: Sequence[Job] | None = None,
    lock_wait: float = LOCK_WAIT,
) -> SweepProgress:
    """Run (or resume) every job of the grid (or ``jobs``) concurrently; returns counters.

    One sweep folder, one writer: a second process sweeping the same folder waits up
    to ``lock_wait`` seconds (saying so), then refuses with one line naming the holder
    (``folder_lock.LockHeld``). What is already recorded is read only once the lock is
    held, so a sweep that waited resumes instead of repeating records."""
    folder = cfg.folder
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder_lock(folder, f"sweep folder {folder}")
    await lock.ahold(wait=lock_wait, say=on_event)
    try:
        return await _run_sweep_locked(cfg, folder, on_event=on_event, session=session, jobs=jobs)
    finally:
        lock.release()


async def _run_sweep_locked(
    cfg: SweepConfig, folder: Path, *, on_event: Callable[[str], None], session: Any, jobs: Sequence[Job] | None,
) -> SweepProgress:
    from promptrobust.engine.session import Session

    out = SweepFolder(folder)
    out.write_config(config_dict(cfg), resume_key=resume_key)
    results = out.results
    repair_torn_tail(results)
    done = completed_keys(results)
    jobs = list(jobs) if jobs is not None else cfg.jobs()
    progress = SweepProgress(jobs_total=len(jobs))
    own_session = session is None
    if own_session:
        session = Session(cache=cfg.cache, settings=cfg.scheduler)
    runner = JobRunner(cfg, session)
    limit = asyncio.Semaphore(cfg.max_jobs)
    write_lock = asyncio.Lock()

    async def write(record: AttackRecord) -> None:
        async with write_lock:
            out.append_records([record])
        if record.status == "failed":
            return
        progress.records += 1
        pdr = "skipped (clean score 0)" if record.pdr is None else f"PDR {record.pdr:.3f}"
        on_event(f"{record.model} / {record.dataset} / {record.attack} / {record.prompt_id}: {pdr}")

    async def guarded(job: Job) -> None:
        """A failing job (a missing resource, a dead endpoint) must not take the others down."""
        async with limit:
            try:
                before = sum(1 for k in done if k[0] == job.id)
                with progress_events.scope(job.label()):  # progress: this job's phases carry its label
                    records = await runner.run(job, done=done, on_record=write, on_event=on_event)
                progress.skipped += before
                failed = [r for r in records if r.status == "failed"]
                if failed:
                    raise _AlreadySaid(failed[0].error or "failed")
            except (asyncio.CancelledError, KeyboardInterrupt, atomic_io.OutputWriteError):
                raise  # a full disk stops the sweep (one line from the CLI), it is no job's failure
            except Exception as exc:  # noqa: BLE001 - reported per job, the sweep goes on
                reason = " ".join(redact_text(str(exc)).split()) or type(exc).__name__
                progress.failed.append((job.label(), reason))
                async with write_lock:  # one line per job: a rerun's failure replaces the last one
                    out.record_error(job.id, {"job_id": job.id, "job": job.label(), "error": reason})
                if not isinstance(exc, _AlreadySaid):  # the protocol said a failed record already
                    on_event(f"FAILED {job.label()}: {reason}")
                progress_events.jobs(progress.jobs_done + len(progress.failed), progress.jobs_total)
                return
            progress.jobs_done += 1
            async with write_lock:
                out.record_error(job.id, None)
            progress_events.jobs(progress.jobs_done + len(progress.failed), progress.jobs_total)

    began = time.monotonic()
    progress_events.jobs(0, len(jobs))
    try:
        with progress_events.reserve(clean_requests(cfg, jobs)):  # progress: every cell's ranking, known up front
            await asyncio.gather(*(guarded(j) for j in jobs))
        out.write_results(sweep_document(out, facts=session_facts(session), configs={"sweep": config_dict(cfg)},
                                         started=out.started, wall_seconds=time.monotonic() - began))
    except atomic_io.OutputWriteError:
        if own_session:
            await session.close()
        raise  # results.jsonl holds every whole record written; the parquet stays as it was
    except BaseException:
        if own_session:
            await session.close()
        _consolidate_quietly(out)
        raise
    if own_session:
        await session.close()
    out.consolidate()
    return progress


def _consolidate_quietly(out: SweepFolder) -> None:
    """Refresh the parquet on the way out of an interrupted sweep; a failure here must not
    hide the interruption's own cause (the next run writes it again)."""
    try:
        out.consolidate()
    except Exception:  # noqa: BLE001 - secondary to the error being raised
        pass


class _AlreadySaid(RuntimeError):
    """A job whose failure the protocol has already reported as a failed record."""


def clean_requests(cfg: SweepConfig, jobs: Sequence[Job]) -> int:
    """Requests that ranking every cell of ``jobs`` takes (prompts x samples, once per cell; a
    dataset whose size is not known ahead counts 0 until it is loaded)."""
    from promptrobust.tasks.prompt_sets import load_prompts
    from promptrobust.tasks.registry import get_task

    total = 0
    for model, dataset, shots, prompt_type in dict.fromkeys(j.cell for j in jobs):
        task = get_task(dataset)
        size = getattr(task, "sample_size", None)
        limit = cfg.evaluation.limit
        samples = min(limit, size) if (limit and size) else (limit or size or 0)
        total += samples * len(load_prompts(task.name, types=[prompt_type]))
    return total


def model_settings(cfg: SweepConfig, model: str) -> SchedulerSettings:
    """Scheduler settings for one model: the sweep's, overridden by [models.NAME]."""
    opts = {k: v for k, v in cfg.model_options.get(model, {}).items() if k != "model_args"}
    return replace(cfg.scheduler, **opts)


def resume_key(config: Mapping[str, Any]) -> dict[str, Any]:
    """What every record of a sweep folder depends on (from its config.json): the evaluation
    settings (the dataset is per job) and the attack's top k, budget and options. A folder is
    resumed only under the same key; growing the grid (models, datasets, attacks) is fine."""
    evaluation = {f"evaluation.{k}": v for k, v in dict(config.get("evaluation") or {}).items() if k != "dataset"}
    attack = dict(config.get("attack") or {})
    return {**evaluation, **{f"attack.{k}": attack.get(k) for k in ("top_k", "budget", "options")}}


def config_dict(cfg: SweepConfig) -> dict[str, Any]:
    from promptrobust.engine.redact import scrub

    out = asdict(cfg)
    out["output_dir"] = str(cfg.output_dir)
    return scrub(out)  # no credentials from base URLs in config.json


def describe_plan(cfg: SweepConfig) -> list[dict[str, Any]]:
    """The job list with request estimates (``pre sweep --dry-run``)."""
    from promptrobust.tasks.prompt_sets import load_prompts
    from promptrobust.tasks.registry import get_task

    out = []
    done = completed_keys(cfg.folder / "results.jsonl")
    limit = cfg.evaluation.limit
    for job in cfg.jobs():
        task = get_task(job.dataset)
        size = getattr(task, "sample_size", None)  # the paper size of dataset tasks
        samples = min(limit, size) if (limit and size) else (limit or size or 0)
        texts = [p.text for p in load_prompts(task.name, types=[job.prompt_type])]
        prompts = len(texts)
        words = sum(len(t.split()) for t in texts) / max(1, prompts)
        est = estimate_requests(cfg, int(samples), prompts, words=words, attack_name=job.attack)
        finished = sum(1 for k in done if k[0] == job.id)
        out.append({"job": job, "samples": samples, "prompts": prompts, "finished_prompts": finished, **est})
    return out


__all__: Sequence[str] = (
    "Job", "JobRunner", "SweepConfig", "SweepConfigError", "load_config", "run_sweep", "describe_plan",
)
