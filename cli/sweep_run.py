"""Running a sweep (in this process or on Ray), its summary, and what Ctrl-C kept."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from promptrobust.cli.errors import UserError


def run(args: argparse.Namespace, cfg: Any, jobs: list[Any], ray_options: Any) -> int:
    """Run ``jobs`` of ``cfg`` into its folder; 1 when a job failed (said on stderr)."""
    from promptrobust.engine.runs.sweep.runner import run_sweep  # looked up here, so tests can stand in for it
    from promptrobust.engine.runs.sync import use_uvloop

    use_uvloop()
    try:
        cfg.folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create {cfg.folder} ({exc.strerror}); set sweep.output_dir or --output-dir") from None
    from promptrobust.cli.printing import event_printer

    say = event_printer(quiet=args.quiet)
    from promptrobust.cli.sweep_checks import findings, print_findings  # said before anything runs

    print_findings(cfg, jobs, findings(cfg), out=sys.stderr)
    try:
        if ray_options is not None:
            progress = _run_ray(cfg, ray_options, jobs, say)
        else:
            progress = asyncio.run(run_sweep(cfg, on_event=say, jobs=jobs))
    except KeyboardInterrupt as exc:
        exc.pre_message = interrupted_message(args, cfg)  # type: ignore[attr-defined]  # main() prints it
        raise
    print(
        f"sweep {cfg.name}: {progress.jobs_done}/{progress.jobs_total} jobs, {progress.records} new records, "
        f"{progress.skipped} already done -> {cfg.folder}"
    )
    for label, reason in progress.failed:
        print(f"pre: job failed: {label}: {reason}", file=sys.stderr)
    if progress.failed:
        print(f"pre: {len(progress.failed)} jobs failed (see errors.jsonl); rerun the sweep after fixing them", file=sys.stderr)
        return 1
    return 0


def interrupted_message(args: argparse.Namespace, cfg: Any) -> str:
    """What an interrupted sweep kept, and the command that resumes it."""
    import shlex

    from promptrobust.engine.runs.run_folder import completed_keys

    kept = len(completed_keys(cfg.folder / "results.jsonl"))
    resume = ["pre", "sweep", *(["--preset", args.preset] if getattr(args, "preset", None) else [args.config])]
    if args.output_dir:
        resume += ["--output-dir", args.output_dir]
    if args.shard:
        resume += ["--shard", args.shard]
    return (f"{kept} finished records are kept in {cfg.folder / 'results.jsonl'} and every answer is in the cache; "
            f"resume with: {shlex.join(resume)}")


def _run_ray(cfg: Any, options: Any, jobs: list[Any], say: Any) -> Any:
    from promptrobust.engine.runs.sweep.ray_executor import RayExecutorError, run_sweep_ray

    try:
        progress = run_sweep_ray(cfg, options, jobs=jobs, on_event=say)
    except RayExecutorError as exc:
        raise UserError(str(exc)) from None
    print(
        f"ray: {progress.workers_started} workers started, {progress.units_requeued} jobs re-sent after lost workers, "
        f"{progress.caches_merged} worker caches merged ({progress.cache_rows_added} new answers)"
    )
    if progress.caches_lost:
        print(f"pre: {len(progress.caches_lost)} worker caches were on lost nodes; a rerun recomputes what they held", file=sys.stderr)
    return progress
