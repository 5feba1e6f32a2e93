"""Running a sweep: every job of the grid concurrently on one shared Session.

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
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from promptrobust.engine import progress as progress_events
from promptrobust.engine.measuring.records import AttackRecord
from promptrobust.engine.measuring.target import MeasurementTarget, decide_target
from promptrobust.engine.measuring.workbench import CleanScore, Workbench, load_meaning_judge
from promptrobust.engine.runs.run_folder import SweepFolder, completed_keys, repair_torn_tail
from promptrobust.engine.runs.run_results import sweep_document
from promptrobust.engine.runs.sweep.config import Job, SweepConfig, check_tasks_unchanged, config_dict, model_settings, resume_key
from promptrobust.engine.runs.sweep.estimate import clean_requests
from promptrobust.engine.safe_io import atomic_io
from promptrobust.engine.safe_io.folder_lock import folder_lock
from promptrobust.engine.safe_io.redact import redact_text

from promptrobust.engine.runs.session import Session

__all__ = ["JobRunner", "SweepProgress", "run_sweep"]


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

    def __init__(self, cfg: SweepConfig, session: Session) -> None:
        from promptrobust.engine.serving.registry import parse_model_args, resolve_model

        self.cfg = cfg
        self.session = session
        self.specs = {
            m: resolve_model(m, parse_model_args(cfg.model_options.get(m, {}).get("model_args", "")))
            for m in cfg.models
        }
        self._benches: dict[tuple[str, str, int | None], _SharedWork[Workbench]] = {}
        self._ranked: dict[tuple[object, ...], _SharedWork[list[CleanScore]]] = {}

    def target(self, job: Job) -> MeasurementTarget:
        """The job's cell as decided: its task, mode and shots (a grid is not strict: a free-text
        task in a grid of label-scoring generates), decided once per cell."""
        return decide_target(self.cfg.job_evaluation(job), base_model=self.specs[job.model].base_model)

    async def _bench(self, job: Job) -> Workbench:
        return await _shared(self._benches, (job.model, job.dataset, job.shots), lambda: self.session.workbench_for(
            self.specs[job.model], self.target(job), model_settings(self.cfg, job.model)))

    async def _ranking(self, job: Job, bench: Workbench) -> list[CleanScore]:
        from promptrobust.engine.measuring.protocol import rank_prompts
        from promptrobust.engine.runs.prompt_choice import prompt_set

        def rank() -> Awaitable[list[CleanScore]]:
            searched = bench
            if self.cfg.attack.holdout:  # rank on the searched part only (run_protocol splits the same way)
                from promptrobust.engine.measuring.holdout import split_workbench

                searched, _ = split_workbench(bench, self.cfg.attack.holdout)
            return rank_prompts(searched, prompt_set(searched.task, job.prompt_type))

        return await _shared(self._ranked, job.cell, rank)

    async def run(
        self,
        job: Job,
        *,
        done: set[tuple[str, str]] = frozenset(),  # type: ignore[assignment]
        on_record: Callable[[AttackRecord], object] = lambda record: None,
        on_event: Callable[[str], None] = lambda message: None,
    ) -> list[AttackRecord]:
        """Attack the top k of the job's cell with its attack; returns the new records."""
        from promptrobust.engine.measuring.protocol import run_protocol

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
    session: Session,
    on_event: Callable[[str], None] = lambda message: None,
    jobs: Sequence[Job] | None = None,
    lock_wait: float = LOCK_WAIT,
) -> SweepProgress:
    """Run (or resume) every job of the grid (or ``jobs``) concurrently on ``session`` (the
    executor's: ``SweepPlan`` is a job of ``engine.runs.executor``); returns counters.

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
    cfg: SweepConfig, folder: Path, *, on_event: Callable[[str], None], session: Session, jobs: Sequence[Job] | None,
) -> SweepProgress:
    out = SweepFolder(folder)
    check_tasks_unchanged(folder, cfg)
    await load_meaning_judge(cfg.attack)
    out.write_config(config_dict(cfg), resume_key=resume_key)
    results = out.results
    repair_torn_tail(results)
    done = completed_keys(results)
    jobs = list(jobs) if jobs is not None else cfg.jobs()
    progress = SweepProgress(jobs_total=len(jobs))
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
                with progress_events.job(job.label(), _shape(job)):  # progress: this job's events carry its label
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
    progress_events.jobs(0, len(jobs), shapes=[_shape(j) for j in jobs])
    try:
        with progress_events.reserve_pool("ranking", clean_requests(cfg, jobs)):  # progress: every cell's ranking, known up front
            await asyncio.gather(*(guarded(j) for j in jobs))
        out.write_results(sweep_document(out, facts=session.facts(), configs={"sweep": config_dict(cfg)},
                                         started=out.started, wall_seconds=time.monotonic() - began,
                                         tasks=cfg.task_provenances()))
    except atomic_io.OutputWriteError:
        raise  # results.jsonl holds every whole record written; the parquet stays as it was
    except BaseException:
        _consolidate_quietly(out)
        raise
    out.consolidate()
    return progress


_Shared = TypeVar("_Shared")


@dataclass
class _SharedWork(Generic[_Shared]):
    """Work a cell's jobs share (its workbench, its ranking), and how many of them wait for it."""

    task: asyncio.Task[_Shared]
    waiting: int = 0


async def _shared(table: dict[Any, _SharedWork[_Shared]], key: object, make: Callable[[], Awaitable[_Shared]]) -> _Shared:
    """The result of the work ``table`` holds under ``key``, started by the first job that needs it
    and awaited by every job of the cell. One job cancelled does not cancel the others' wait (the
    work is shielded); the last one cancelled stops it. Work that failed is started again by the next
    job that needs it (a ranking cut short by an outage must not fail every later job of its cell)."""
    work = table.get(key)
    if work is None or (work.task.done() and (work.task.cancelled() or work.task.exception() is not None)):
        work = table[key] = _SharedWork(asyncio.ensure_future(make()))
    work.waiting += 1
    try:
        return await asyncio.shield(work.task)
    except asyncio.CancelledError:
        if work.waiting == 1 and not work.task.done():
            work.task.cancel()  # no job waits for it any more
            if table.get(key) is work:
                del table[key]
        raise
    finally:
        work.waiting -= 1


def _shape(job: Job) -> tuple[str, ...]:
    """What makes jobs alike for the progress ETA: finished jobs of one shape predict the rest."""
    return (job.attack, job.model, job.dataset, str(job.shots))


def _consolidate_quietly(out: SweepFolder) -> None:
    """Refresh the parquet on the way out of an interrupted sweep; a failure here must not
    hide the interruption's own cause (the next run writes it again)."""
    try:
        out.consolidate()
    except Exception:  # noqa: BLE001 - secondary to the error being raised
        pass


class _AlreadySaid(RuntimeError):
    """A job whose failure the protocol has already reported as a failed record."""
