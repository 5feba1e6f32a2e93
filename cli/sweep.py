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
"""


def add_parser(sub: Any, formatter: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser("sweep", help=HELP, description=HELP, epilog=EPILOG, formatter_class=formatter)
    p.add_argument("config", help="sweep configuration file (TOML)")
    p.add_argument("--dry-run", action="store_true", help="print the job list and request estimates, run nothing")
    p.add_argument("--output-dir", default=None, help="override sweep.output_dir")
    p.add_argument("--quiet", action="store_true", help="no line per finished record")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from pathlib import Path

    from promptrobust.engine.sync import use_uvloop
    from promptrobust.engine.sweep import SweepConfigError, describe_plan, load_config, run_sweep

    try:
        cfg = load_config(args.config)
    except SweepConfigError as exc:
        raise UserError(str(exc)) from None
    if args.output_dir:
        cfg = cfg.with_(output_dir=Path(args.output_dir))
    if args.dry_run:
        plan = describe_plan(cfg)
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
    progress = asyncio.run(run_sweep(cfg, on_event=say))
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
