"""`pre sweep CONFIG.toml`: run a grid of models x datasets x prompt types x attacks."""

from __future__ import annotations

import argparse
from typing import Any

from promptrobust.cli.errors import UserError
from promptrobust.cli.sweep_args import add_scale_arguments, config_path, ray_options
from promptrobust.cli.sweep_merge import handle_merge
from promptrobust.cli.sweep_plan import print_plan
from promptrobust.cli.sweep_run import run

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
  pre sweep --preset paper --dry-run             # the paper's grid: jobs, requests, tokens, API cost per model
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
    p.add_argument("config", nargs="?", default=None,
                   help="sweep configuration file (TOML); or `merge OUT SHARD_DIR...` to merge shards")
    p.add_argument("--preset", default=None, metavar="NAME",
                   help="a shipped configuration instead of CONFIG: paper (the paper's 9 models x 13 datasets grid)")
    p.add_argument("--prices", default=None, metavar="FILE",
                   help="API prices (USD per million tokens) for the --dry-run cost estimate (default: the shipped table)")
    p.add_argument("more", nargs="*", metavar="SHARD_DIR", help=argparse.SUPPRESS)  # `pre sweep merge OUT DIR...`
    p.add_argument("--dry-run", action="store_true", help="print the job list and request estimates, run nothing")
    p.add_argument("--output-dir", default=None, help="override sweep.output_dir")
    p.add_argument("--quiet", action="store_true", help="no line per finished record")
    add_scale_arguments(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    """Arguments -> the sweep config (and its shard) -> the dry-run printout, or the run."""
    from pathlib import Path

    from promptrobust.engine.runs.sweep.sharding import ShardError, parse_shard, select_jobs, shard_config
    from promptrobust.engine.runs.sweep.config import SweepConfigError, load_config

    if args.config == "merge":
        return handle_merge(args.more)
    args.config = config_path(args)
    if args.more:
        raise UserError(f"unexpected argument {args.more[0]!r}: pre sweep takes one CONFIG (or: pre sweep merge OUT SHARD_DIR...)")
    options = ray_options(args)
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
        return print_plan(cfg, jobs, args.prices)
    return run(args, cfg, jobs, options)
