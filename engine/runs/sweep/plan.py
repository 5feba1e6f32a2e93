"""A sweep plan: which config (a file or a shipped preset), which folder, which shard, which
executor, and what cannot run here, decided before anything runs; then running it, its
dry-run estimates, and merging shards (records and caches) back.

    plan = plan_sweep("grid.toml", shard="2/4")
    for line in finding_lines(plan.jobs, plan.findings): print(line)
    progress = run_planned_sweep(plan)

``pre sweep`` is arguments -> ``plan_sweep`` -> ``run_planned_sweep`` (or ``dry_run``) -> print.
Reading this module is cheap (the command line derives flags from ``RayOptions`` on every
start); what runs, estimates or merges is imported when it is called.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from promptrobust.engine.errors import SettingsError
from promptrobust.engine.runs.sweep.config import Job, SweepConfig, load_config
from promptrobust.engine.runs.sweep.ray_options import RayOptions

if TYPE_CHECKING:
    from promptrobust.engine.runs.executor import Context, SessionOptions
    from promptrobust.engine.runs.sweep.checks import Finding
    from promptrobust.engine.runs.sweep.estimate import ModelEstimate, PlanTotals
    from promptrobust.engine.runs.sweep.ray_executor import RaySweepProgress
    from promptrobust.engine.runs.sweep.runner import SweepProgress
    from promptrobust.engine.runs.sweep.sharding import MergeResult, Shard
    from promptrobust.engine.serving.cache import CacheMergeResult

__all__ = ["DryRun", "HereReport", "RayOptions", "SweepPlan", "dry_run", "finding_lines", "format_estimates", "hardware", "kept_records",
           "merge_caches", "merge_shards", "plan_sweep", "ray_progress", "run_planned_sweep"]


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

    def session_options(self) -> SessionOptions:
        """The sweep's session: its score cache and schedulers' limits (Ray workers keep node-local caches)."""
        from promptrobust.engine.runs.executor import SessionOptions

        return SessionOptions(cache=self.config.cache, scheduler=self.config.scheduler)

    async def run(self, context: Context) -> SweepProgress:
        """Every job of the plan on the executor's session (one cache, one scheduler per model), or on Ray."""
        if self.ray is not None:
            import asyncio

            from promptrobust.engine.runs.sweep.ray_executor import run_sweep_ray

            return await asyncio.to_thread(run_sweep_ray, self.config, self.ray, jobs=self.jobs,
                                           on_event=context.hooks.on_event)
        from promptrobust.engine.runs.sweep.runner import run_sweep

        return await run_sweep(self.config, session=context.session, on_event=context.hooks.on_event, jobs=self.jobs)


def plan_sweep(config: str | os.PathLike[str] | SweepConfig | None = None, *, preset: str | None = None,
               output_dir: str | None = None, shard: str | None = None, executor: str = "local",
               ray_options: Mapping[str, Any] | None = None) -> SweepPlan:
    """A sweep from a config file, a ``SweepConfig`` or a shipped ``preset`` (exactly one);
    ``output_dir`` replaces the config's; ``shard`` ("I/N") keeps that shard's cells, in a folder
    and cache of its own; ``executor`` "ray" runs on Ray with ``ray_options`` (``RayOptions``
    fields), which mean nothing to the local executor."""
    from promptrobust.engine.runs.sweep.checks import findings
    from promptrobust.engine.runs.sweep.estimate import preset_path
    from promptrobust.engine.runs.sweep.sharding import parse_shard, select_jobs, shard_config

    if config is not None and preset is not None:
        raise SettingsError("give either a sweep config or a preset, not both", setting="preset")
    if config is None and preset is None:
        raise SettingsError("give a sweep config, or a preset such as paper", setting="preset")
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


def finding_lines(plan: SweepPlan) -> list[str]:
    """What cannot run here, under three headings, each with how many of the plan's jobs it concerns."""
    from promptrobust.engine.runs.sweep import checks

    return checks.finding_lines(plan.jobs, plan.findings)


def run_planned_sweep(plan: SweepPlan, *, on_event: Callable[[str], None] = lambda message: None) -> SweepProgress:
    """Run (or resume) the plan's jobs into its folder, in this process or on Ray (the executor's ``run_plan``)."""
    from promptrobust.engine.runs.executor import Hooks, run_plan

    folder = plan.config.folder
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SettingsError(f"cannot create {folder} ({exc.strerror}); set the sweep's output_dir", setting="output_dir") from None
    return run_plan(plan, hooks=Hooks(on_event=on_event), progress=None)


def ray_progress(progress: SweepProgress) -> RaySweepProgress | None:
    """What the Ray cluster did (workers started, jobs re-sent, caches merged or lost); None for a local run."""
    from promptrobust.engine.runs.sweep.ray_executor import RaySweepProgress

    return progress if isinstance(progress, RaySweepProgress) else None


def kept_records(plan: SweepPlan) -> int:
    """Finished records in the plan's folder (what an interrupted sweep kept)."""
    from promptrobust.engine.runs.run_folder import completed_keys

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

    def by_axis(self) -> dict[str, list[tuple[str, int, int]]]:
        """The jobs summed along each axis of the grid (model, dataset, prompt set, attack): per
        value, in grid order, (value, jobs, attack requests at most before cache and early stopping).
        A cell's clean scoring is shared by its attacks, so it is counted in ``totals`` only."""
        axes: dict[str, dict[str, list[int]]] = {"model": {}, "dataset": {}, "prompt set": {}, "attack": {}}
        for row in self.rows:
            job = row["job"]
            requests = row["attack_max"]
            for axis, value in (("model", job.model), ("dataset", job.dataset),
                                ("prompt set", f"{job.shots}-shot {job.prompt_type}"), ("attack", job.attack)):
                count = axes[axis].setdefault(value, [0, 0])
                count[0] += 1
                count[1] += requests
        return {axis: [(value, jobs, requests) for value, (jobs, requests) in values.items()]
                for axis, values in axes.items()}


def dry_run(plan: SweepPlan, prices: str | None = None) -> DryRun:
    """The plan's jobs with their request estimates; API costs from ``prices`` (default: the shipped table)."""
    from promptrobust.engine.runs.sweep.estimate import describe_plan, load_prices, model_estimates, plan_totals

    ids = {j.id for j in plan.jobs}
    rows = [row for row in describe_plan(plan.config) if row["job"].id in ids]
    return DryRun(rows, plan_totals(rows), model_estimates(plan.config, rows, load_prices(prices)), prices)


@dataclass(frozen=True)
class HereReport:
    """A dry run's hardware section and its one count of the jobs that can run on this machine now."""

    lines: list[str]
    runnable: int
    total: int
    reasons: dict[str, int]

    def count_line(self) -> str:
        """One honest line: how many jobs run here now, and why the others cannot."""
        if self.runnable == self.total:
            return f"runs here: all {self.total} jobs can run on this machine now"
        from promptrobust.engine.progress import counted

        why = "; ".join(f"{counted(n, 'job')}: {reason}" for reason, n in sorted(self.reasons.items(), key=lambda kv: -kv[1]))
        lead = "none of" if self.runnable == 0 else f"{self.runnable} of"
        return f"runs here: {lead} the {self.total} jobs can run on this machine now ({why}; a job may have several reasons)"


def hardware(plan: SweepPlan, estimate: DryRun) -> HereReport:
    """Per model what it needs and whether this machine has it, and how many of the plan's jobs
    can run here now (its blockers, the hub out of reach, the model too big for this machine)."""
    from promptrobust.engine.runs.sweep import hardware as hw
    from promptrobust.engine.serving.registry import parse_model_args, resolve_model
    from promptrobust.tasks.hf_data import hub_reachable

    cfg = plan.config
    specs = {m: resolve_model(m, parse_model_args(str(cfg.model_options.get(m, {}).get("model_args", ""))))
             for m in dict.fromkeys(j.model for j in plan.jobs)}
    tokens = {m.model: m.input_tokens + m.output_tokens for m in estimate.models}
    lines, needs = hw.hardware_lines(specs, tokens, hw.this_machine())
    count = hw.runs_here(plan.jobs, plan.findings, needs, hub_reachable())
    return HereReport(lines, count.runnable, count.total, count.reasons)


def format_estimates(rows: Sequence[ModelEstimate]) -> list[str]:
    """A dry run's per-model estimates, one line each."""
    from promptrobust.engine.runs.sweep import estimate

    return estimate.format_estimates(rows)


def merge_shards(out: str, shards: Sequence[str], *, argv: Sequence[str] | None = None) -> tuple[MergeResult, list[str], str]:
    """Every shard's records in ``out``, exactly once each, and ``out``'s results.json (as an
    unsharded sweep writes it, with each shard's command and versions: ``argv`` is the merge's
    own command); also the caches the shards recorded and the cache ``out`` names (to merge them
    into: ``merge_caches``), "CACHE" when it names none."""
    import time

    import orjson

    from promptrobust.engine.measuring.records import now
    from promptrobust.engine.runs.run_folder import SweepFolder, recorded_cache
    from promptrobust.engine.runs.run_results import merged_sweep_document
    from promptrobust.engine.runs.sweep.sharding import merge_runs

    started, began = now(), time.monotonic()
    result = merge_runs(out, shards)
    folder = SweepFolder(out)
    folder.write_results(merged_sweep_document(folder, shards, started=started, wall_seconds=time.monotonic() - began,
                                               argv=argv))
    caches = [cache for cache in map(recorded_cache, shards) if cache]
    merged = Path(out) / "config.json"
    target = (orjson.loads(merged.read_bytes()).get("cache") if merged.is_file() else None) or "CACHE"
    return result, caches, str(target)


def merge_caches(out: str, caches: Sequence[str]) -> CacheMergeResult:
    """Every answer of ``caches`` (a sweep's shards, Ray workers, other machines) in the cache ``out``
    (``engine.serving.cache.merge_caches``: content-addressed keys, so merging twice adds nothing)."""
    from promptrobust.engine.serving import cache

    return cache.merge_caches(out, caches)
