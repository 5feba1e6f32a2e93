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
  ``engine.serving.cache.merge_caches`` (INSERT OR IGNORE on content-addressed
  keys). The cache of a worker that died is merged too when its file can be
  read from the driver (one machine, or a shared folder); else its answers
  are simply computed again on a rerun.

The caches are never shared between processes over a network file system
(SQLite's WAL does not work there): every worker writes a local file.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any


from promptrobust.engine.serving.cache import default_cache_path, merge_caches
from promptrobust.engine.runs.run_folder import SweepFolder
from promptrobust.engine.runs.run_results import sweep_document
from promptrobust.engine.runs.sweep.sharding import stable_hash
from promptrobust.engine.runs.sweep.config import Job, SweepConfig, check_tasks_unchanged, config_dict, resume_key
from promptrobust.engine.runs.sweep.runner import JobRunner, SweepProgress
from promptrobust.engine.runs.run_folder import completed_keys, repair_torn_tail
from promptrobust.engine.runs.sweep.ray_options import RayExecutorError, RayOptions

if TYPE_CHECKING:
    from promptrobust.engine.runs.session import BackendFactory

__all__ = ["RayExecutorError", "RayOptions", "RaySweepProgress", "SweepWorker", "run_sweep_ray"]


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
                 backend_factory: BackendFactory | None = None) -> None:
        from promptrobust.engine.runs.session import Session

        folder = _worker_cache_folder(RayOptions(worker_cache_dir=cache_dir), cfg)
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
    ready_ref: Any = None
    """Answers once the actor is placed and built (it may wait for a GPU another model still holds)."""
    ready_since: float | None = None

    @property
    def label(self) -> str:
        return f"{self.model} worker {self.index}"


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayExecutorError("the ray executor needs Ray: pip install 'promptrobust[ray]'", setting="executor") from None
    return ray


#: Ray errors that mean "the worker (or its node) is gone", not "the job failed".
def _lost_worker_errors(ray: Any) -> tuple[type[BaseException], ...]:
    e = ray.exceptions
    return (e.RayActorError, e.WorkerCrashedError, e.ObjectLostError, e.NodeDiedError, e.OutOfMemoryError,
            e.GetTimeoutError, e.LocalRayletDiedError, e.ActorUnschedulableError)


def _start_ray(ray: Any, options: RayOptions) -> None:
    """Join the cluster at ``options.address`` (None: start a local one); a Ray that does not come
    up ("node timed out during startup", no head at the address) is one line with the fix."""
    try:
        ray.init(address=options.address, include_dashboard=False, logging_level="WARNING")
    except Exception as exc:  # noqa: BLE001 - Ray raises plain Exception, ConnectionError, RuntimeError...
        with contextlib.suppress(Exception):  # a half-started local Ray is taken down again
            ray.shutdown()
        if options.address:
            fix = (f"check that a Ray head runs there (`ray status --address {options.address}`), "
                   "or drop --address to start a local one")
        else:
            fix = ("a local Ray needs free memory and room in its temp folder (RAY_TMPDIR); "
                   "check that `ray start --head` works here, or run with --executor local")
        where = f"at {options.address}" if options.address else "locally"
        raise RayExecutorError(f"Ray did not start {where} ({_why(exc)}); {fix}") from None


def _why(exc: BaseException) -> str:
    """A Ray error as one short line: its type and the first line of its message."""
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {first[:160]}" if first else type(exc).__name__


def _check_resources(ray: Any, options: RayOptions) -> None:
    """Refuse worker sizes no node of the cluster can ever hold (Ray would wait forever)."""
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    fits = [n for n in nodes if n.get("CPU", 0) >= options.num_cpus and n.get("GPU", 0) >= options.num_gpus]
    if not fits:
        most_gpus = max((n.get("GPU", 0) for n in nodes), default=0)
        most_cpus = max((n.get("CPU", 0) for n in nodes), default=0)
        raise RayExecutorError(
            f"no node of the Ray cluster has {options.num_cpus:g} CPUs and {options.num_gpus:g} GPUs for a worker "
            f"(largest: {most_cpus:g} CPUs, {most_gpus:g} GPUs); reserve fewer CPUs or GPUs per worker, or add nodes",
            setting="num_gpus" if options.num_gpus > most_gpus else "num_cpus",
        )


def _worker_cache_folder(options: RayOptions, cfg: SweepConfig) -> Path:
    """Where a worker keeps its cache: the same rule on every node (the node's own temp folder by default)."""
    return Path(options.worker_cache_dir or os.path.join(tempfile.gettempdir(), "promptrobust-ray")) / _slug(cfg.name)


class _Driver:
    """The Ray executor's driver loop: routes units to worker slots, writes records, replaces lost workers."""

    def __init__(self, ray: Any, cfg: SweepConfig, options: RayOptions, jobs: Sequence[Job],
                 on_event: Callable[[str], None], backend_factory: BackendFactory | None) -> None:
        self.ray, self.cfg, self.options, self.on_event = ray, cfg, options, on_event
        self.backend_factory = backend_factory
        self.folder = cfg.folder
        self.out = SweepFolder(self.folder)
        self.results = self.out.results
        repair_torn_tail(self.results)
        self.done = completed_keys(self.results)
        self.progress = RaySweepProgress(jobs_total=len(jobs))
        self.per_worker = options.max_in_flight or cfg.max_jobs
        self.cache_target = Path(cfg.cache) if cfg.cache else default_cache_path()
        self.remote_worker = ray.remote(SweepWorker)
        self.lost_errors = _lost_worker_errors(ray)
        self.slots: dict[tuple[str, int], _Slot] = {}
        for job in jobs:
            index = stable_hash(*job.cell) % options.workers_per_model
            slot = self.slots.setdefault((job.model, index), _Slot(job.model, index))
            finished = self._finished(job)
            if len(finished) >= cfg.attack.top_k:  # every attacked prompt of the job is recorded
                self.progress.skipped += len(finished)
                self.progress.jobs_done += 1
            else:
                slot.queue.append((job, 0))

    def _finished(self, job: Job) -> list[str]:
        return sorted(p for (j, p) in self.done if j == job.id)

    # -- the loop --------------------------------------------------------------------
    def run(self, after_submit: Callable[[dict[str, Any]], None] | None) -> RaySweepProgress:
        started = time.monotonic()
        try:
            while True:
                self._submit()
                if after_submit is not None:
                    after_submit({"slots": self.slots, "progress": self.progress, "elapsed": time.monotonic() - started})
                owner = {ref: slot for slot in self.slots.values() for ref in slot.in_flight}
                if not owner:
                    break
                ready, _ = self.ray.wait(list(owner), num_returns=1, timeout=1.0)
                for ref in ready:
                    self._collect(owner[ref], ref)
                self._expire()
                for slot in self.slots.values():  # models with no work left give their resources back
                    if not slot.released and not slot.queue and not slot.in_flight:
                        self._release(slot)
        finally:
            for slot in self.slots.values():
                self._kill(slot)
        return self.progress

    def _submit(self) -> None:
        for slot in self.slots.values():
            while slot.queue and len(slot.in_flight) < self.per_worker:
                if slot.actor is None:
                    self._start(slot)
                job, attempts = slot.queue.popleft()
                ref = slot.actor.run_unit.remote(job, self._finished(job))
                slot.in_flight[ref] = (job, attempts, time.monotonic())

    def _collect(self, slot: _Slot, ref: Any) -> None:
        if ref not in slot.in_flight:  # its worker was declared lost earlier in this round
            return
        job = slot.in_flight[ref][0]
        try:
            result = self.ray.get(ref)
        except self.lost_errors as exc:
            self._lose(slot, _why(exc))
            return
        except self.ray.exceptions.RayTaskError as exc:  # run_unit catches job errors: this is a bug or bad pickle
            del slot.in_flight[ref]
            self._fail(job, " ".join(str(exc.cause or exc).split())[:300])
            return
        del slot.in_flight[ref]
        self._write(job, result)

    def _expire(self) -> None:
        """Units past --unit-timeout mean a hung or unreachable worker; the clock starts once the
        worker is placed, so waiting for resources another model still holds does not count."""
        timeout = self.options.unit_timeout
        if timeout is None:
            return
        now = time.monotonic()
        for slot in self.slots.values():
            if not slot.in_flight or slot.ready_ref is None:
                continue
            if slot.ready_since is None:
                ready, _ = self.ray.wait([slot.ready_ref], timeout=0)
                if not ready:
                    continue
                slot.ready_since = now
            if any(now - max(t, slot.ready_since) > timeout for _, _, t in slot.in_flight.values()):
                self._lose(slot, f"a unit ran past the unit timeout of {timeout:g}s")

    # -- records -----------------------------------------------------------------------
    def _write(self, job: Job, result: dict[str, Any]) -> None:
        rows = []
        for row in result["records"]:
            key = (row.get("job_id") or job.id, row.get("prompt_id", ""))
            if key in self.done:  # never twice, whatever a worker sends
                continue
            rows.append(row)
            if row.get("status") != "failed":
                self.done.add(key)
        if rows:
            self.out.append_records(rows)
        for row in rows:
            if row.get("status") == "failed":
                continue
            self.progress.records += 1
            pdr = "skipped (clean score 0)" if row.get("pdr") is None else f"PDR {row['pdr']:.3f}"
            self.on_event(f"{row.get('model')} / {row.get('dataset')} / {row.get('attack')} / {row.get('prompt_id')}: {pdr}")
        if result.get("error"):
            self._fail(job, result["error"])
        else:
            self.progress.jobs_done += 1

    def _fail(self, job: Job, reason: str) -> None:
        self.progress.failed.append((job.label(), reason))
        self.out.record_error(job.id, {"job_id": job.id, "job": job.label(), "error": reason})
        self.on_event(f"FAILED {job.label()}: {reason}")

    # -- workers ------------------------------------------------------------------------
    def _start(self, slot: _Slot) -> None:
        slot.cache_name = f"{_slug(slot.model)}.w{slot.index}.a{slot.attempt}.sqlite"
        placement = {"scheduling_strategy": "SPREAD"} if self.options.spread else {}
        slot.actor = self.remote_worker.options(
            num_cpus=self.options.num_cpus, num_gpus=self.options.num_gpus, max_restarts=0, max_task_retries=0, **placement,
        ).remote(self.cfg, slot.model, slot.cache_name, self.options.worker_cache_dir, self.backend_factory)
        slot.ready_ref, slot.ready_since = slot.actor.where.remote(), None
        self.progress.workers_started += 1
        self.on_event(f"started {slot.label} (attempt {slot.attempt + 1})")

    def _kill(self, slot: _Slot) -> None:
        if slot.actor is not None:
            try:
                self.ray.kill(slot.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
            slot.actor = None

    def _lose(self, slot: _Slot, why: str) -> None:
        """The slot's worker is gone: re-queue its units (at the front, in order) for a fresh worker."""
        self.on_event(f"{slot.label} lost ({why}); re-sending {len(slot.in_flight)} units")
        self._kill(slot)
        slot.dead_caches.append(slot.cache_name)
        for job, attempts, _ in sorted(slot.in_flight.values(), key=lambda u: u[2], reverse=True):
            if attempts + 1 >= self.options.max_attempts:
                self._fail(job, f"its worker died {attempts + 1} times (last: {why}); see the Ray logs")
            else:
                slot.queue.appendleft((job, attempts + 1))
                self.progress.units_requeued += 1
        slot.in_flight.clear()
        slot.attempt += 1

    def _release(self, slot: _Slot) -> None:
        """A slot with no work left: bring its cache home and free its CPUs/GPUs."""
        slot.released = True
        if slot.actor is not None:
            try:
                data = self.ray.get(slot.actor.export_cache.remote(), timeout=self.options.unit_timeout or 600)
                self._merge_bytes(data)
            except self.lost_errors as exc:
                slot.dead_caches.append(slot.cache_name)
                self.on_event(f"{slot.label}: cache not exported ({_why(exc)})")
            self._kill(slot)
        for name in slot.dead_caches:
            self._merge_dead(name)

    # -- caches -------------------------------------------------------------------------
    def _merge_bytes(self, data: bytes) -> None:
        fd, tmp = tempfile.mkstemp(prefix=".worker-cache-", suffix=".sqlite", dir=self.folder)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            added = merge_caches(self.cache_target, [tmp]).added[0]
        finally:
            os.unlink(tmp)
        self.progress.caches_merged += 1
        self.progress.cache_rows_added += added

    def _merge_dead(self, name: str) -> None:
        path = _worker_cache_folder(self.options, self.cfg) / name
        if not path.is_file():  # it was on a lost node
            self.progress.caches_lost.append(name)
            return
        self.progress.caches_merged += 1
        self.progress.cache_rows_added += merge_caches(self.cache_target, [path]).added[0]


def _driver_facts(cfg: SweepConfig) -> dict[str, Any]:
    """What the driver knows of the models (the workers hold the backends, so no revision or weights hash)."""
    from promptrobust.engine.serving.registry import parse_model_args, resolve_model

    specs = [resolve_model(m, parse_model_args(cfg.model_options.get(m, {}).get("model_args", ""))) for m in cfg.models]
    return {"models": [{"backend": s.backend, "name": s.name, "revision": None, "extra": {}} for s in specs], "counters": {}}


def run_sweep_ray(
    cfg: SweepConfig,
    options: RayOptions | None = None,
    *,
    jobs: Sequence[Job] | None = None,
    on_event: Callable[[str], None] = lambda message: None,
    backend_factory: BackendFactory | None = None,
    after_submit: Callable[[dict[str, Any]], None] | None = None,
) -> RaySweepProgress:
    """Run (or resume) a sweep's jobs on Ray model workers; the driver writes every record.

    ``backend_factory`` (pickled to the workers) replaces how backends are
    built, as in ``Session``. ``after_submit`` is called with the driver's
    state after each round of submissions (tests use it to kill a worker or
    remove a node mid-sweep)."""
    ray = _import_ray()
    options = options or RayOptions()
    out = SweepFolder(cfg.folder)
    check_tasks_unchanged(cfg.folder, cfg)
    out.write_config(config_dict(cfg), resume_key=resume_key)
    owns_ray = not ray.is_initialized()
    if owns_ray:
        _start_ray(ray, options)
    try:
        _check_resources(ray, options)
        driver = _Driver(ray, cfg, options, list(jobs) if jobs is not None else cfg.jobs(), on_event, backend_factory)
        began = time.monotonic()
        progress = driver.run(after_submit)
        out.write_results(sweep_document(out, facts=_driver_facts(cfg), configs={"sweep": config_dict(cfg)},
                                         started=out.started, wall_seconds=time.monotonic() - began,
                                         tasks=cfg.task_provenances()))
        return progress
    finally:
        if owns_ray:
            ray.shutdown()
        out.consolidate()
