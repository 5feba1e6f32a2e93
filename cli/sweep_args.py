"""`pre sweep`'s flags beyond one machine, and what they become: the Ray options and the config file."""

from __future__ import annotations

import argparse
from typing import Any

from promptrobust.cli.errors import UserError


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


def ray_options(args: argparse.Namespace) -> Any:
    """``RayOptions`` for ``--executor ray``; None for local, where a Ray-only flag is refused."""
    from promptrobust.engine.runs.sweep.ray_executor import RayExecutorError, RayOptions

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


def config_path(args: argparse.Namespace) -> str:
    """CONFIG, or the shipped file of ``--preset`` (exactly one of them)."""
    if args.preset and args.config:
        raise UserError("give either CONFIG or --preset NAME, not both")
    if not args.preset:
        if not args.config:
            raise UserError("pre sweep needs CONFIG.toml or --preset paper")
        return args.config
    from promptrobust.engine.runs.sweep.estimate import preset_path

    try:
        return str(preset_path(args.preset))
    except FileNotFoundError as exc:
        raise UserError(str(exc)) from None
