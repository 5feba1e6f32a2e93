"""A sweep plan: which config (a file or a shipped preset), which folder, which shard, which
executor, and what cannot run here, decided before anything runs; then running it, its
dry-run estimates, and merging shards (records and caches) back.

    plan = plan_sweep("grid.toml", shard="2/4")
    for line in finding_lines(plan.jobs, plan.findings): print(line)
    progress = run_planned_sweep(plan)

``pre sweep`` is arguments -> ``plan_sweep`` -> ``run_planned_sweep`` (or ``dry_run``) -> print.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from promptrobust.engine.errors import SettingsError
from promptrobust.engine.runs.run_folder import completed_keys, recorded_cache
from promptrobust.engine.runs.sweep import runner
from promptrobust.engine.runs.sweep.checks import Finding, finding_lines, findings
from promptrobust.engine.runs.sweep.config import Job, SweepConfig, load_config
from promptrobust.engine.runs.sweep.estimate import (
    ModelEstimate,
    PlanTotals,
    describe_plan,
    format_estimates,
    load_prices,
    model_estimates,
    plan_totals,
    preset_path,
)
from promptrobust.engine.runs.sweep.ray_executor import RayOptions, RaySweepProgress, run_sweep_ray
from promptrobust.engine.runs.sweep.sharding import MergeResult, Shard, merge_runs, parse_shard, select_jobs, shard_config
from promptrobust.engine.runs.sync import use_uvloop
from promptrobust.engine.serving.cache import merge_caches

#: Also part of this surface: ``merge_caches`` (engine.serving.cache; ``pre cache merge`` combines
#: the caches of shards, Ray workers and machines, as ``merge_shards`` combines their records), the
#: Ray executor's options and progress, ``finding_lines`` and ``format_estimates`` (how the checks
#: and the estimates read).
__all__ = ["DryRun", "RayOptions", "RaySweepProgress", "SweepPlan", "dry_run", "finding_lines", "format_estimates",
           "kept_records", "merge_caches", "merge_shards", "plan_sweep", "run_planned_sweep"]


@dataclass(frozen=True)
class SweepPlan:
    """A sweep, decided: its config (with the folder and shard applied), its jobs, how it runs."""

    config: SweepConfig
    """The grid and settings; ``config.folder`` is where records go (a shard's own folder)."""
    jobs: tuple[Job, ...]
    """The jobs this process runs (a shard's share of the grid)."""
    shard: Shard | None = None
    ray: RayOptions | None = None
    """Run model workers as Ray actors with these options; None: every job in this process."""
    findings: tuple[Finding, ...] = ()
    """What cannot run here, or runs with a substitute (said before anything runs)."""


def plan_sweep(config: str | os.PathLike[str] | SweepConfig | None = None, *, preset: str | None = None,
               output_dir: str | None = None, shard: str | None = None, executor: str = "local",
               ray_options: Mapping[str, Any] | None = None) -> SweepPlan:
    """A sweep from a config file, a ``SweepConfig`` or a shipped ``preset`` (exactly one);
    ``output_dir`` replaces the config's; ``shard`` ("I/N") keeps that shard's cells, in a folder
    and cache of its own; ``executor`` "ray" runs on Ray with ``ray_options`` (``RayOptions``
    fields), which mean nothing to the local executor."""
    if (config is None) == (preset is None):
        raise SettingsError("give a sweep config or a preset (e.g. paper), one of them")
    if executor not in ("local", "ray"):
        raise SettingsError(f"executor must be 'local' or 'ray' (got {executor!r})", setting="executor")
    given = dict(ray_options or {})
    if executor != "ray" and given:
        name = next(iter(given))
        raise SettingsError(f"{name} only applies to the ray executor", setting=name)
    cfg = config if isinstance(config, SweepConfig) else load_config(config if config is not None else preset_path(str(preset)))
    if output_dir:
        cfg = cfg.with_(output_dir=Path(output_dir))
    jobs = cfg.jobs()
    parsed = parse_shard(shard) if shard else None
    if parsed is not None:
        jobs, cfg = select_jobs(jobs, parsed), shard_config(cfg, parsed)
    return SweepPlan(config=cfg, jobs=tuple(jobs), shard=parsed, ray=RayOptions(**given) if executor == "ray" else None,
                     findings=tuple(findings(cfg)))


def run_planned_sweep(plan: SweepPlan, *, on_event: Callable[[str], None] = lambda message: None) -> runner.SweepProgress:
    """Run (or resume) the plan's jobs into its folder, in this process or on Ray."""
    use_uvloop()
    folder = plan.config.folder
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SettingsError(f"cannot create {folder} ({exc.strerror}); set the sweep's output_dir", setting="output_dir") from None
    if plan.ray is not None:
        progress: runner.SweepProgress | RaySweepProgress = run_sweep_ray(plan.config, plan.ray, jobs=plan.jobs, on_event=on_event)
        return progress
    return asyncio.run(runner.run_sweep(plan.config, on_event=on_event, jobs=plan.jobs))


def kept_records(plan: SweepPlan) -> int:
    """Finished records in the plan's folder (what an interrupted sweep kept)."""
    return len(completed_keys(plan.config.folder / "results.jsonl"))


@dataclass(frozen=True)
class DryRun:
    """What a sweep would do: its jobs with request estimates, totals, and per model a cost."""

    rows: list[dict[str, Any]]
    """Per job: "job", "samples", "prompts", "finished_prompts", "clean", "attack_max" (``describe_plan``)."""
    totals: PlanTotals
    models: list[ModelEstimate]
    """Per model: jobs, requests, tokens and (API models in the price table) a cost (``format_estimates``)."""
    prices: str | None = None
    """The price table read; None: the shipped one."""


def dry_run(plan: SweepPlan, prices: str | None = None) -> DryRun:
    """The plan's jobs with their request estimates; API costs from ``prices`` (default: the shipped table)."""
    ids = {j.id for j in plan.jobs}
    rows = [row for row in describe_plan(plan.config) if row["job"].id in ids]
    return DryRun(rows, plan_totals(rows), model_estimates(plan.config, rows, load_prices(prices)), prices)


def merge_shards(out: str, shards: Sequence[str]) -> tuple[MergeResult, list[str], str]:
    """Every shard's records in ``out``, exactly once each; also the caches the shards recorded
    and the cache ``out`` names (to merge them into: ``merge_caches``), "CACHE" when it names none."""
    result = merge_runs(out, shards)
    caches = [cache for cache in map(recorded_cache, shards) if cache]
    merged = Path(out) / "config.json"
    target = (orjson.loads(merged.read_bytes()).get("cache") if merged.is_file() else None) or "CACHE"
    return result, caches, str(target)

