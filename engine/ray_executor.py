"""Run a sweep on a Ray cluster (``pre sweep CONFIG --executor ray``; needs ``promptrobust[ray]``).

Roles:

- The driver (this process) is the only writer of the sweep's records: it
  reads ``results.jsonl`` to skip finished (job, prompt) pairs exactly like
  the local executor, sends work out one *unit* (a job: one cell with one
  attack) at a time, and appends the records a unit returns. A record is
  written at most once per (job id, prompt id), so resuming works as today.
- Model workers are Ray actors (``SweepWorker``), each holding a Session
  (scheduler + backend + a node-local SQLite cache) for one model. All units
  of a cell go to the same worker, so the attacks of a cell share its clean
  ranking as in a local run; ``workers_per_model`` > 1 spreads a model's
  cells over several workers (several GPUs or vLLM servers). Each worker has
  at most ``max_in_flight`` units at once.
- Failures: a unit whose worker died (``ActorDiedError``, a lost node, or a
  unit running past ``unit_timeout``) is sent again to a fresh worker
  (actors are created with ``max_restarts=0``, ``max_task_retries=0``: the
  driver, not Ray, decides what runs again, and nothing is recorded twice).
  A unit whose worker dies ``max_attempts`` times fails its job.
- Caches: when a model has no work left its workers send their cache files
  back through the object store and are released (their CPUs/GPUs go to the
  next model); the driver merges them into the sweep's cache with
  ``engine.cache.merge_caches`` (INSERT OR IGNORE on content-addressed
  keys). The cache of a worker that died is merged too when its file can be
  read from the driver (one machine, or a shared folder); else its answers
  are simply computed again on a rerun.

The caches are never shared between processes over a network file system
(SQLite's WAL does not work there): every worker writes a local file.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from promptrobust.engine.cache import default_cache_path, merge_caches
from promptrobust.engine.records import append_jsonl, consolidate_parquet
from promptrobust.engine.sharding import stable_hash
from promptrobust.engine.sweep import (
    Job,
    JobRunner,
    SweepConfig,
    SweepProgress,
    completed_keys,
    config_dict,
    repair_torn_tail,
)

__all__ = ["RayExecutorError", "RayOptions", "RaySweepProgress", "SweepWorker", "run_sweep_ray"]


class RayExecutorError(ValueError):
    """Ray is missing or an option is bad; one line naming the fix."""


@dataclass(frozen=True)
class RayOptions:
    """How the Ray executor places and feeds its model workers."""

    address: str | None = None
    """Ray cluster to join ("auto", "ray://HOST:10001", "HOST:6379"); None starts a local Ray instance."""
    num_cpus: float = 0.5
    """CPUs each worker reserves for its life (fractional: workers mostly wait on I/O or a GPU)."""
    num_gpus: float = 0.0
    """GPUs each worker reserves (1 for an in-process vLLM/HF model on one GPU, N for tensor parallel)."""
    workers_per_model: int = 1
    """Workers per model; the cells of a model are spread over them by a stable hash."""
    max_in_flight: int | None = None
    """Units (jobs) sent to one worker at a time; None: the sweep's max_jobs."""
    unit_timeout: float | None = None
    """Seconds a unit may run before its worker is presumed lost and the unit re-sent; None: no limit."""
    max_attempts: int = 3
    """Times a unit is sent before its job is recorded as failed (a unit that kills every worker)."""
    worker_cache_dir: str | None = None
    """Node-local folder for the workers' caches; None: the node's temp folder."""
    spread: bool = True
    """Place workers on different nodes where possible (Ray's SPREAD), so a lost node takes few of them."""

    def __post_init__(self) -> None:
        def check(cond: bool, message: str) -> None:
            if not cond:
                raise RayExecutorError(message)

        check(isinstance(self.num_cpus, (int, float)) and self.num_cpus > 0 and math.isfinite(self.num_cpus),
              f"--num-cpus must be a positive number, e.g. 0.5 (got {self.num_cpus!r})")
        check(isinstance(self.num_gpus, (int, float)) and self.num_gpus >= 0 and math.isfinite(self.num_gpus),
              f"--num-gpus must be a number >= 0 (got {self.num_gpus!r})")
        check(isinstance(self.workers_per_model, int) and self.workers_per_model >= 1,
              f"--workers-per-model must be a whole number >= 1 (got {self.workers_per_model!r})")
        check(self.max_in_flight is None or (isinstance(self.max_in_flight, int) and self.max_in_flight >= 1),
              f"--max-in-flight must be a whole number >= 1 (got {self.max_in_flight!r})")
        check(self.unit_timeout is None or (isinstance(self.unit_timeout, (int, float)) and self.unit_timeout > 0),
              f"--unit-timeout must be a positive number of seconds (got {self.unit_timeout!r})")
        check(isinstance(self.max_attempts, int) and self.max_attempts >= 1,
              f"max_attempts must be a whole number >= 1 (got {self.max_attempts!r})")


@dataclass
class RaySweepProgress(SweepProgress):
    """The local executor's counters, plus what the cluster did."""

    workers_started: int = 0
    units_requeued: int = 0
    caches_merged: int = 0
    cache_rows_added: int = 0
    caches_lost: list[str] = field(default_factory=list)
    """Cache files of dead workers the driver could not read (their answers are recomputed on a rerun)."""


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:80]


class SweepWorker:
    """One model's worker: a Session (scheduler + backend + node-local cache) and a JobRunner.

    Created as a Ray actor by ``run_sweep_ray``; plain Python otherwise (tests call it directly)."""

    def __init__(self, cfg: SweepConfig, model: str, cache_name: str, cache_dir: str | None = None,
                 backend_factory: Callable[[Any], Any] | None = None) -> None:
        from promptrobust.engine.session import Session

        folder = Path(cache_dir or os.path.join(tempfile.gettempdir(), "promptrobust-ray")) / _slug(cfg.name)
        folder.mkdir(parents=True, exist_ok=True)
        self.cache_path = folder / cache_name
        self.model = model
        self.session = Session(cache=self.cache_path, settings=cfg.scheduler, backend_factory=backend_factory)
        self.runner = JobRunner(cfg, self.session)

    def where(self) -> dict[str, Any]:
        """Where this worker runs and keeps its cache (for the driver's log and merge)."""
        node = ""
        try:
            import ray

            node = ray.get_runtime_context().get_node_id()
        except Exception:  # noqa: BLE001 - outside Ray
            pass
        return {"pid": os.getpid(), "node": node, "cache": str(self.cache_path)}

    async def run_unit(self, job: Job, done_prompts: Sequence[str]) -> dict[str, Any]:
        """Run one job, skipping ``done_prompts``; returns its records (as dicts) and its error, if any."""
        done = {(job.id, p) for p in done_prompts}
        try:
            records = await self.runner.run(job, done=done)
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - a job's own failure goes back to the driver
            return {"records": [], "error": " ".join(str(exc).split()) or type(exc).__name__}
        failed = [r for r in records if r.status == "failed"]
        return {"records": [r.to_dict() for r in records], "error": failed[0].error if failed else None}

    async def export_cache(self) -> bytes:
        """Close the session and return the cache file's bytes (closing checkpoints the WAL into it)."""
        await self.session.close()
        return self.cache_path.read_bytes()


@dataclass
class _Slot:
    """One worker position: a model and a cell partition; its actor is replaced when it dies."""

    model: str
    index: int
    queue: deque[tuple[Job, int]] = field(default_factory=deque)
    actor: Any = None
    attempt: int = 0
    cache_name: str = ""
    in_flight: dict[Any, tuple[Job, int, float]] = field(default_factory=dict)
    dead_caches: list[str] = field(default_factory=list)
    released: bool = False

    @property
    def label(self) -> str:
        return f"{self.model} worker {self.index}"


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayExecutorError("--executor ray needs Ray: pip install 'promptrobust[ray]'") from None
    return ray


#: Ray errors that mean "the worker (or its node) is gone", not "the job failed".
def _lost_worker_errors(ray: Any) -> tuple[type[BaseException], ...]:
    e = ray.exceptions
    return (e.RayActorError, e.WorkerCrashedError, e.ObjectLostError, e.NodeDiedError, e.OutOfMemoryError,
            e.GetTimeoutError, e.LocalRayletDiedError, e.ActorUnschedulableError)


def run_sweep_ray(
    cfg: SweepConfig,
    options: RayOptions | None = None,
    *,
    jobs: Sequence[Job] | None = None,
    on_event: Callable[[str], None] = lambda message: None,
    backend_factory: Callable[[Any], Any] | None = None,
    after_submit: Callable[[dict[str, Any]], None] | None = None,
) -> RaySweepProgress:
    """Run (or resume) a sweep's jobs on Ray model workers; the driver writes every record.

    ``backend_factory`` (pickled to the workers) replaces how backends are
    built, as in ``Session``. ``after_submit`` is called with the driver's
    state after each round of submissions (tests use it to kill a worker or
    remove a node mid-sweep)."""
    ray = _import_ray()
    options = options or RayOptions()
    folder = cfg.folder
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_bytes(orjson.dumps(config_dict(cfg), option=orjson.OPT_INDENT_2, default=str))
    results = folder / "results.jsonl"
    repair_torn_tail(results)
    done = completed_keys(results)
    jobs = list(jobs) if jobs is not None else cfg.jobs()
    progress = RaySweepProgress(jobs_total=len(jobs))
    per_worker = options.max_in_flight or cfg.max_jobs
    cache_target = Path(cfg.cache) if cfg.cache else default_cache_path()

    owns_ray = not ray.is_initialized()
    if owns_ray:
        ray.init(address=options.address, include_dashboard=False, logging_level="WARNING")
    remote_worker = ray.remote(SweepWorker)
    lost_errors = _lost_worker_errors(ray)

    slots: dict[tuple[str, int], _Slot] = {}
    for job in jobs:
        index = stable_hash(*job.cell) % options.workers_per_model
        slot = slots.setdefault((job.model, index), _Slot(job.model, index))
        finished = [p for (j, p) in done if j == job.id]
        if len(finished) >= cfg.attack.top_k:  # every attacked prompt of the job is recorded
            progress.skipped += len(finished)
            progress.jobs_done += 1
            continue
        slot.queue.append((job, 0))

    def write_unit(slot: _Slot, job: Job, result: dict[str, Any]) -> None:
        rows = []
        for row in result["records"]:
            key = (row.get("job_id") or job.id, row.get("prompt_id", ""))
            if key in done:  # never twice, whatever a worker sends
                continue
            rows.append(row)
            if row.get("status") != "failed":
                done.add(key)
        if rows:
            append_jsonl(results, rows)
        for row in rows:
            if row.get("status") == "failed":
                continue
            progress.records += 1
            pdr = "skipped (clean score 0)" if row.get("pdr") is None else f"PDR {row['pdr']:.3f}"
            on_event(f"{row.get('model')} / {row.get('dataset')} / {row.get('attack')} / {row.get('prompt_id')}: {pdr}")
        if result.get("error"):
            fail_job(job, result["error"])
        else:
            progress.jobs_done += 1

    def fail_job(job: Job, reason: str) -> None:
        progress.failed.append((job.label(), reason))
        append_jsonl(folder / "errors.jsonl", [{"job_id": job.id, "job": job.label(), "error": reason}])
        on_event(f"FAILED {job.label()}: {reason}")

    def start(slot: _Slot) -> None:
        slot.cache_name = f"{_slug(slot.model)}.w{slot.index}.a{slot.attempt}.sqlite"
        placement = {"scheduling_strategy": "SPREAD"} if options.spread else {}
        slot.actor = remote_worker.options(
            num_cpus=options.num_cpus, num_gpus=options.num_gpus, max_restarts=0, max_task_retries=0, **placement,
        ).remote(cfg, slot.model, slot.cache_name, options.worker_cache_dir, backend_factory)
        progress.workers_started += 1
        on_event(f"started {slot.label} (attempt {slot.attempt + 1})")

    def lose(slot: _Slot, why: str) -> None:
        """The slot's worker is gone: re-queue its units (front, in order) and start afresh later."""
        on_event(f"{slot.label} lost ({why}); re-sending {len(slot.in_flight)} units")
        if slot.actor is not None:
            try:
                ray.kill(slot.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already dead
                pass
        slot.dead_caches.append(slot.cache_name)
        for job, attempts, _ in sorted(slot.in_flight.values(), key=lambda u: u[2], reverse=True):
            if attempts + 1 >= options.max_attempts:
                fail_job(job, f"its worker died {attempts + 1} times ({why}); see the Ray logs")
            else:
                slot.queue.appendleft((job, attempts + 1))
                progress.units_requeued += 1
        slot.in_flight.clear()
        slot.actor = None
        slot.attempt += 1

    def release(slot: _Slot) -> None:
        """A slot with no work left: bring its cache home and free its resources."""
        slot.released = True
        if slot.actor is not None:
            try:
                data = ray.get(slot.actor.export_cache.remote(), timeout=options.unit_timeout or 600)
                merge_bytes(data, slot)
            except lost_errors as exc:
                slot.dead_caches.append(slot.cache_name)
                on_event(f"{slot.label}: cache not exported ({type(exc).__name__})")
            ray.kill(slot.actor, no_restart=True)
            slot.actor = None
        for name in slot.dead_caches:
            merge_dead(name)

    def merge_bytes(data: bytes, slot: _Slot) -> None:
        fd, tmp = tempfile.mkstemp(prefix=".worker-cache-", suffix=".sqlite", dir=folder)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            added = merge_caches(cache_target, [tmp]).added[0]
        finally:
            os.unlink(tmp)
        progress.caches_merged += 1
        progress.cache_rows_added += added

    def merge_dead(name: str) -> None:
        local = Path(options.worker_cache_dir or os.path.join(tempfile.gettempdir(), "promptrobust-ray"))
        path = local / _slug(cfg.name) / name
        if not path.is_file():
            progress.caches_lost.append(name)
            return
        progress.caches_merged += 1
        progress.cache_rows_added += merge_caches(cache_target, [path]).added[0]

    started = time.monotonic()
    try:
        while True:
            for slot in slots.values():
                while slot.queue and len(slot.in_flight) < per_worker:
                    if slot.actor is None:
                        start(slot)
                    job, attempts = slot.queue.popleft()
                    finished = sorted(p for (j, p) in done if j == job.id)
                    ref = slot.actor.run_unit.remote(job, finished)
                    slot.in_flight[ref] = (job, attempts, time.monotonic())
            if after_submit is not None:
                after_submit({"slots": slots, "progress": progress, "elapsed": time.monotonic() - started})
            owner = {ref: slot for slot in slots.values() for ref in slot.in_flight}
            if not owner:
                break
            ready, _ = ray.wait(list(owner), num_returns=1, timeout=1.0)
            for ref in ready:
                slot = owner[ref]
                if ref not in slot.in_flight:  # its worker was declared lost in this round
                    continue
                job, attempts, _ = slot.in_flight[ref]
                try:
                    result = ray.get(ref)
                except lost_errors as exc:
                    lose(slot, type(exc).__name__)
                    continue
                except ray.exceptions.RayTaskError as exc:
                    del slot.in_flight[ref]
                    fail_job(job, " ".join(str(exc.cause if exc.cause else exc).split())[:300])
                    continue
                del slot.in_flight[ref]
                write_unit(slot, job, result)
            if options.unit_timeout is not None:
                now = time.monotonic()
                for slot in slots.values():
                    if any(now - t > options.unit_timeout for _, _, t in slot.in_flight.values()):
                        lose(slot, f"a unit ran past --unit-timeout {options.unit_timeout:g}s")
            for slot in slots.values():  # models with no work left give their resources back
                if not slot.released and not slot.queue and not slot.in_flight:
                    release(slot)
        for slot in slots.values():
            if not slot.released:
                release(slot)
    finally:
        for slot in slots.values():
            if slot.actor is not None:
                try:
                    ray.kill(slot.actor, no_restart=True)
                except Exception:  # noqa: BLE001
                    pass
        if owns_ray:
            ray.shutdown()
        consolidate_parquet(results, folder / "results.parquet")
    return progress
