"""`pre sweep CONFIG.toml`: run a grid of models x datasets x prompt types x attacks."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from promptrobust.cli.errors import UserError

HELP = "run a grid of models x datasets x prompt types x attacks (resumable)"

EPILOG = """\
config (TOML):
  [sweep]
  name = "embedded"              # folder under output_dir
  output_dir = "runs/sweeps"
  limit = 100                    # samples per dataset (default: the paper's sizes)
  top_k = 3                      # attack the k best prompts of each set
  budget = 100                   # candidate evaluations per attacked prompt (default: unlimited)
  mode = "generate"              # the paper's; or "choices" (label log-probs, fast)
  concurrency = 64               # requests in flight per model (API / vLLM)
  max_jobs = 8                   # jobs running at once (they share schedulers)

  [grid]
  models = ["smollm2-135m-instruct", "gemma3-270m"]
  datasets = ["rotten_tomatoes", "math"]
  prompt_types = ["task", "role"]
  shots = [0, 3]                 # default ["auto"]: 0, or 3 for base models
  attacks = "all"                # or a list: ["textbugger", "checklist"]

  [models."openai:gpt-4o-mini"]  # per-model options
  model_args = "base_url=http://127.0.0.1:8000/v1"
  rpm = 500

Rerunning the same config resumes: finished (job, prompt) records are kept,
everything else is answered from the cache where it can be.

examples:
  pre sweep bench/sweeps/embedded.toml --dry-run
  pre sweep bench/sweeps/embedded.toml && pre report runs/sweeps/embedded

beyond one machine (docs/scale.md):
  pre sweep grid.toml --shard 2/4                  # cells hashed to shard 2 of 4 -> grid.shard-2-of-4/
  pre sweep merge runs/sweeps/grid runs/sweeps/grid.shard-*-of-4   # records, exactly once each
  pre cache merge scores.sqlite runs/sweeps/grid.shard-*-of-4/cache.sqlite
  pre sweep grid.toml --executor ray --address HEAD:6379 --num-gpus 1   # needs promptrobust[ray]
"""


def add_parser(sub: Any, formatter: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser("sweep", help=HELP, description=HELP, epilog=EPILOG, formatter_class=formatter)
    p.add_argument("config", help="sweep configuration file (TOML); or `merge OUT SHARD_DIR...` to merge shards")
    p.add_argument("more", nargs="*", metavar="SHARD_DIR", help=argparse.SUPPRESS)  # `pre sweep merge OUT DIR...`
    p.add_argument("--dry-run", action="store_true", help="print the job list and request estimates, run nothing")
    p.add_argument("--output-dir", default=None, help="override sweep.output_dir")
    p.add_argument("--quiet", action="store_true", help="no line per finished record")
    add_scale_arguments(p)
    p.set_defaults(handler=handle)


def add_scale_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("beyond one machine (docs/scale.md)")
    g.add_argument("--shard", metavar="I/N", default=None,
                   help="run only the cells hashed to shard I of N (1 <= I <= N), in <name>.shard-I-of-N with its own cache")
    g.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local: every job in this process; ray: model workers as Ray actors (pip install 'promptrobust[ray]')")
    g.add_argument("--address", default=None, help="Ray cluster to join (HOST:6379, ray://HOST:10001, auto); default: start a local one")
    g.add_argument("--num-cpus", type=float, default=0.5, help="CPUs each Ray model worker reserves")
    g.add_argument("--num-gpus", type=float, default=0.0, help="GPUs each Ray model worker reserves (1 per in-process model)")
    g.add_argument("--workers-per-model", type=int, default=1, help="Ray workers per model (cells spread over them)")
    g.add_argument("--max-in-flight", type=int, default=None, help="jobs sent to one Ray worker at a time (default: sweep.max_jobs)")
    g.add_argument("--unit-timeout", type=float, default=None,
                   help="seconds a job may run on a Ray worker before the worker is presumed lost and the job re-sent")
    g.add_argument("--worker-cache-dir", default=None, help="node-local folder for Ray workers' caches (default: the node's temp folder)")


_RAY_ONLY = ("address", "num_gpus", "workers_per_model", "max_in_flight", "unit_timeout", "worker_cache_dir")


def _ray_options(args: argparse.Namespace) -> Any:
    from promptrobust.engine.ray_executor import RayExecutorError, RayOptions

    defaults = {"address": None, "num_gpus": 0.0, "workers_per_model": 1, "max_in_flight": None,
                "unit_timeout": None, "worker_cache_dir": None}
    if args.executor != "ray":
        given = [k for k in _RAY_ONLY if getattr(args, k) != defaults[k]]
        if given or args.num_cpus != 0.5:
            flag = "--" + (given[0] if given else "num_cpus").replace("_", "-")
            raise UserError(f"{flag} only applies to --executor ray")
        return None
    try:
        return RayOptions(address=args.address, num_cpus=args.num_cpus, num_gpus=args.num_gpus,
                          workers_per_model=args.workers_per_model, max_in_flight=args.max_in_flight,
                          unit_timeout=args.unit_timeout, worker_cache_dir=args.worker_cache_dir)
    except RayExecutorError as exc:
        raise UserError(str(exc)) from None


def handle_merge(paths: list[str]) -> int:
    """`pre sweep merge OUT SHARD_DIR...`: every shard's records in OUT, exactly once each."""
    from pathlib import Path

    import orjson

    from promptrobust.engine.sharding import ShardError, merge_runs

    if len(paths) < 2:
        raise UserError("pre sweep merge needs OUT and at least one SHARD_DIR, e.g. pre sweep merge runs/sweeps/grid runs/sweeps/grid.shard-*")
    out, shards = paths[0], paths[1:]
    try:
        result = merge_runs(out, shards, say=lambda m: print(f"pre: {m}", file=sys.stderr))
    except ShardError as exc:
        raise UserError(str(exc)) from None
    for folder, added in result.per_shard.items():
        print(f"{folder}: {added} new records")
    print(f"{out}: {result.added} added, {result.already} already there, {result.total} records in total")
    caches = []
    for folder in shards:
        config = Path(folder) / "config.json"
        cache = orjson.loads(config.read_bytes()).get("cache") if config.is_file() else None
        if cache and Path(cache).is_file():
            caches.append(cache)
    merged = Path(out) / "config.json"
    target = (orjson.loads(merged.read_bytes()).get("cache") if merged.is_file() else None) or "CACHE"
    if caches:
        print(f"merge their caches too: pre cache merge {target} {' '.join(caches)}")
    return 0


def handle(args: argparse.Namespace) -> int:
    from pathlib import Path

    from promptrobust.engine.sharding import ShardError, parse_shard, select_jobs, shard_config
    from promptrobust.engine.sweep import SweepConfigError, describe_plan, load_config, run_sweep
    from promptrobust.engine.sync import use_uvloop

    if args.config == "merge":
        return handle_merge(args.more)
    if args.more:
        raise UserError(f"unexpected argument {args.more[0]!r}: pre sweep takes one CONFIG (or: pre sweep merge OUT SHARD_DIR...)")
    ray_options = _ray_options(args)
    try:
        cfg = load_config(args.config)
    except SweepConfigError as exc:
        raise UserError(str(exc)) from None
    if args.output_dir:
        cfg = cfg.with_(output_dir=Path(args.output_dir))
    jobs = cfg.jobs()
    if args.shard:
        try:
            shard = parse_shard(args.shard)
        except ShardError as exc:
            raise UserError(str(exc)) from None
        jobs = select_jobs(jobs, shard)
        cfg = shard_config(cfg, shard)
    if args.dry_run:
        ids = {j.id for j in jobs}
        plan = [row for row in describe_plan(cfg) if row["job"].id in ids]
        total_clean = total_attack = 0
        cells: set[tuple] = set()
        print(f"sweep {cfg.name}: {len(plan)} jobs -> {cfg.folder}")
        for row in plan:
            job = row["job"]
            cell = (job.model, job.dataset, job.shots, job.prompt_type)
            if cell not in cells:  # every attack of a cell shares its clean scoring
                cells.add(cell)
                total_clean += row["clean"]
            total_attack += row["attack_max"]
            done = f" ({row['finished_prompts']} prompts already done)" if row["finished_prompts"] else ""
            print(
                f"  {job.id}  {job.label():<70} samples {row['samples']:>5}  prompts {row['prompts']:>3}  "
                f"requests <= {row['clean'] + row['attack_max']}{done}"
            )
        print(
            f"estimated model requests before cache and early stopping: clean {total_clean} "
            f"({len(cells)} cells, shared by their attacks), attacks <= {total_attack}"
        )
        return 0
    use_uvloop()
    try:
        cfg.folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create {cfg.folder} ({exc.strerror}); set sweep.output_dir or --output-dir") from None
    say = (lambda m: None) if args.quiet else (lambda m: print(f"pre: {m}", file=sys.stderr))
    if ray_options is not None:
        progress = _run_ray(cfg, ray_options, jobs, say)
    else:
        progress = asyncio.run(run_sweep(cfg, on_event=say, jobs=jobs))
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


def _run_ray(cfg: Any, options: Any, jobs: list[Any], say: Any) -> Any:
    from promptrobust.engine.ray_executor import RayExecutorError, run_sweep_ray

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
