"""`pre sweep CONFIG.toml`: run a grid of models x datasets x prompt types x attacks, and
`pre sweep merge OUT SHARD_DIR...` (``engine.runs.sweep.plan``: plan_sweep -> run or dry run)."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from promptrobust.cli import flags, output
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
  tasks = ["tickets.toml"]       # your own task files (docs/your-task.md), beside the datasets
  prompt_types = ["task", "role"]
  shots = [0, 3]                 # default ["auto"]: 0, or 3 for base models
  attacks = "all"                # or a list: ["textbugger", "checklist"]

  [models."openai:gpt-4o-mini"]  # per-model options
  model_args = "base_url=http://127.0.0.1:8000/v1"
  rpm = 500

Every field of the evaluation, attack and scheduler settings is a [sweep] key
under its own name (the grid's own axes aside); a model's table takes
model_args and the scheduler's. Rerunning the same config resumes: finished
(job, prompt) records are kept, everything else is answered from the cache
where it can be.

examples:
  pre sweep --preset paper --dry-run             # the paper's grid: jobs, requests, tokens, API cost per model
  pre sweep bench/sweeps/embedded.toml --dry-run
  pre sweep bench/sweeps/embedded.toml && pre report runs/sweeps/embedded

beyond one machine (docs/scale.md):
  pre sweep grid.toml --shard 2/4                  # cells hashed to shard 2 of 4 -> grid.shard-2-of-4/
  pre sweep merge runs/sweeps/grid runs/sweeps/grid.shard-*-of-4   # records, exactly once each
  pre cache merge scores.sqlite runs/sweeps/grid.shard-*-of-4/cache.sqlite
  pre sweep grid.toml --executor ray --address HEAD:6379 --num-gpus 1   # needs promptrobust[ray]
"""

#: A dry run lists its jobs one a line up to this many; beyond, it sums them per axis (--verbose: every line).
JOB_LINES = 50

#: RayOptions fields that are flags of `pre sweep` (each: its docstring, its default).
RAY_FLAGS = ("address", "num_cpus", "num_gpus", "workers_per_model", "max_in_flight", "unit_timeout", "worker_cache_dir")


def add_parser(sub: flags.Subcommands, formatter: type[argparse.HelpFormatter]) -> None:
    from promptrobust.engine.runs.sweep.plan import RayOptions

    p = sub.add_parser("sweep", help=HELP, description=HELP, epilog=EPILOG, formatter_class=formatter)
    p.add_argument("config", nargs="?", default=None,
                   help="sweep configuration file (TOML); or `merge OUT SHARD_DIR...` to merge shards")
    p.add_argument("--preset", default=None, metavar="NAME",
                   help="a shipped configuration instead of CONFIG: paper (the paper's 9 models x 13 datasets grid)")
    p.add_argument("--prices", default=None, metavar="FILE",
                   help="API prices (USD per million tokens) for the --dry-run cost estimate (default: the shipped table)")
    p.add_argument("more", nargs="*", metavar="SHARD_DIR", help=argparse.SUPPRESS)  # `pre sweep merge OUT DIR...`
    p.add_argument("--dry-run", action="store_true",
                   help=f"print the jobs (summed per model, dataset, prompt set and attack beyond {JOB_LINES} jobs) "
                        "and request estimates, run nothing")
    p.add_argument("--verbose", action="store_true", help="with --dry-run: a line for every job, however many")
    p.add_argument("--output-dir", default=None, help="override sweep.output_dir")
    p.add_argument("--quiet", action="store_true", help="no line per finished record")
    flags.add_no_progress(p)
    g = p.add_argument_group("beyond one machine (docs/scale.md)")
    g.add_argument("--shard", metavar="I/N", default=None,
                   help="run only the cells hashed to shard I of N (1 <= I <= N), in <name>.shard-I-of-N with its own cache")
    g.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local: every job in this process; ray: model workers as Ray actors (pip install 'promptrobust[ray]')")
    for name in RAY_FLAGS:  # given only when set: each means something to the ray executor alone
        flags.add_field(g, RayOptions, name, default=argparse.SUPPRESS)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    """Arguments -> the sweep plan -> the dry-run printout, or the run."""
    from promptrobust.engine.runs.sweep import plan as sweeps

    if args.config == "merge":
        return _merge(args.more, args.argv)
    if args.more:
        raise UserError(f"unexpected argument {args.more[0]!r}: pre sweep takes one CONFIG (or: pre sweep merge OUT SHARD_DIR...)")
    plan = sweeps.plan_sweep(args.config, preset=args.preset, output_dir=args.output_dir, shard=args.shard,
                             executor=args.executor, ray_options={k: getattr(args, k) for k in RAY_FLAGS if hasattr(args, k)})
    findings = sweeps.finding_lines(plan)  # what cannot run here, and why
    if args.dry_run:
        estimate = sweeps.dry_run(plan, args.prices)
        _print_dry_run(estimate, plan, verbose=args.verbose)
        here = sweeps.hardware(plan, estimate)  # what each model needs, and whether this machine has it
        for line in [*here.lines, *findings, here.count_line()]:
            print(line)
        return 0
    for line in findings:
        print(line, file=sys.stderr)
    try:
        progress = sweeps.run_planned_sweep(plan, on_event=output.event_printer(quiet=args.quiet or args.no_progress))
    except KeyboardInterrupt as exc:  # main() prints what was kept and how to resume
        resume = ["pre", "sweep", *(["--preset", args.preset] if args.preset else [args.config])]
        resume += [*(["--output-dir", args.output_dir] if args.output_dir else []), *(["--shard", args.shard] if args.shard else [])]
        kept = sweeps.kept_records(plan)
        where = (f"{kept} finished records are kept in {plan.config.folder / 'results.jsonl'} and every answer is in the cache"
                 if kept else "no record was finished yet; every answer so far is in the cache")
        exc.pre_message = f"{where}; resume with: {shlex.join(resume)}"  # type: ignore[attr-defined]
        raise
    ray = sweeps.ray_progress(progress)
    if ray is not None:
        print(f"ray: {ray.workers_started} workers started, {ray.units_requeued} jobs re-sent after lost workers, "
              f"{ray.caches_merged} worker caches merged ({ray.cache_rows_added} new answers)")
        if ray.caches_lost:
            output.say(f"{len(ray.caches_lost)} worker caches were on lost nodes; a rerun recomputes what they held")
    print(f"sweep {plan.config.name}: {progress.jobs_done}/{progress.jobs_total} jobs, {progress.records} new records, "
          f"{progress.skipped} already done -> {plan.config.folder}")
    for label, reason in progress.failed:
        output.say(f"job failed: {label}: {reason}")
    if progress.failed:
        output.say(f"{len(progress.failed)} jobs failed (see errors.jsonl); rerun the sweep after fixing them")
        return 1
    return 0


def _print_dry_run(estimate: Any, plan: Any, *, verbose: bool = False) -> None:
    """The jobs (each on a line, or summed per axis beyond ``JOB_LINES``), request and token
    estimates and, per model, an API cost; runs nothing."""
    from promptrobust.engine.runs.sweep.plan import format_estimates

    cfg = plan.config
    print(f"sweep {cfg.name}: {len(estimate.rows)} jobs -> {cfg.folder}")
    if verbose or len(estimate.rows) <= JOB_LINES:
        for row in estimate.rows:
            job = row["job"]
            done = f" ({row['finished_prompts']} prompts already done)" if row["finished_prompts"] else ""
            print(f"  {job.id}  {job.label():<70} samples {row['samples']:>5}  prompts {row['prompts']:>3}  "
                  f"requests <= {row['clean'] + row['attack_max']}{done}")
    if len(estimate.rows) > JOB_LINES:
        begun = sum(1 for row in estimate.rows if row["finished_prompts"])
        print(f"jobs per axis of the grid (attack requests before cache and early stopping, at most; clean scoring, "
              f"shared by a cell's attacks, is in the totals below)"
              f"{f'; {begun} jobs have finished prompts already' if begun else ''}"
              f"{'' if verbose else '; a line per job: --verbose'}:")
        for axis, values in estimate.by_axis().items():
            width = max(len(value) for value, _, _ in values)
            print(f"  by {axis}:")
            for value, jobs, requests in values:
                print(f"    {value:<{width}}  {jobs:>5} jobs  attack requests <= {requests:>15,}")
    t = estimate.totals
    print(f"estimated model requests before cache and early stopping: clean {t.clean} "
          f"({t.cells} cells, shared by their attacks), attacks <= {t.attack_max}")
    print(f"per model (tokens: each job's prompts on its task's shipped examples at 4 characters a token; "
          f"cost: {estimate.prices or 'the shipped price table'}, USD per million tokens):")
    for line in format_estimates(estimate.models):
        print("  " + line)
    print(f"config: {cfg.source}")


def _merge(paths: list[str], argv: list[str]) -> int:
    """`pre sweep merge OUT SHARD_DIR...`: the shards' records and a results.json in OUT, and which caches to merge too."""
    from promptrobust.engine.runs.sweep.plan import merge_shards

    if len(paths) < 2:
        raise UserError("pre sweep merge needs OUT and at least one SHARD_DIR, e.g. pre sweep merge runs/sweeps/grid runs/sweeps/grid.shard-*")
    result, caches, target = merge_shards(paths[0], paths[1:], argv=argv)
    for folder, added in result.per_shard.items():
        print(f"{folder}: {added} new records")
    print(f"{paths[0]}: {result.added} added, {result.already} already there, {result.total} records in total")
    if caches:
        print(f"merge their caches too: pre cache merge {target} {' '.join(caches)}")
    return 0
