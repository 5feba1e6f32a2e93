"""`pre bench`: the benchmarks.

``api`` ships with the package (bench/api_bench.py). ``attack-cost``,
``engine-overhead``, ``ceiling``, ``scaling``, ``protocol``, ``gpu`` and ``racing`` are the scripts in the
repository's bench/ folder, run with this Python and the remaining arguments;
they need a source checkout.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import promptrobust.cli as cli_package
from promptrobust.cli.errors import UserError

if TYPE_CHECKING:
    from promptrobust.cli.flags import Subcommands

#: The repository's bench/ folder (absent when the package is installed without the checkout).
REPO_BENCH_DIR = Path(cli_package.__file__).resolve().parents[1] / "bench"

#: Benchmarks that are scripts in bench/: subcommand -> (file, one-line help).
SCRIPTS = {
    "api": ("api_bench.py", "openai backend under a provider's rate limit: our scheduler vs a plain client"),
    "attack-cost": ("attack_cost.py", "what each attack costs: reference loop vs batched vs our engine"),
    "engine-overhead": ("engine_overhead.py", "what evaluator, scheduler and cache cost on top of the backend"),
    "ceiling": ("ceiling.py", "the backend alone at each batch size, prefix sharing off and on"),
    "scaling": ("scaling.py", "attack cost versus number of samples and prompt length"),
    "protocol": ("protocol.py", "the paper's protocol: engine vs reference loop vs stock promptbench, levers, peak, bf16"),
    "gpu": ("gpu.py", "one attack step on one GPU (or CPU): batch-1 loop vs engine, random: models, MFU"),
    "racing": ("racing.py", "racing the candidates: model calls saved against agreement with exhaustive search, "
                            "replayed on recorded attacks (record, replay, finish)"),
}

DESCRIPTION = """\
Benchmarks. Each compares its contenders in one run, on the same machine,
and prints a Markdown table with the command and settings that produced it.
"""



def add_parser(sub: Subcommands, formatter: type[argparse.HelpFormatter]) -> None:
    """Register `pre bench` and its benchmarks."""
    bench = sub.add_parser("bench", help="benchmarks: API rate limits, attack cost, engine overhead, ceiling, scaling, gpu",
                           description=DESCRIPTION, formatter_class=formatter)
    kinds = bench.add_subparsers(dest="benchmark", metavar="BENCHMARK")
    bench.set_defaults(handler=lambda args, _p=bench: _usage(_p))

    for name, (script, text) in SCRIPTS.items():
        # No options of our own: everything after the name goes to the script, --help included.
        sp = kinds.add_parser(name, help=f"{text} (bench/{script}; --help for its options)", add_help=False,
                              prefix_chars="+", description=f"Runs bench/{script} with the arguments given.")
        sp.add_argument("script_args", nargs=argparse.REMAINDER, help=f"arguments for bench/{script}")
        sp.set_defaults(handler=run_script, script=script)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def run_script(args: argparse.Namespace) -> int:
    """Run a bench/ script with this Python; its exit status is ours."""
    script = REPO_BENCH_DIR / args.script
    if not script.is_file():
        raise UserError(
            f"`pre bench {args.benchmark}` runs bench/{args.script} from a source checkout and {script} is missing: "
            "run it from a clone of the promptrobust repository"
        )
    rest = list(args.script_args)
    if rest[:1] == ["--"]:
        rest = rest[1:]
    return subprocess.run([sys.executable, str(script), *rest], check=False).returncode
