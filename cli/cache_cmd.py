"""`pre cache merge OUT CACHE...`: combine score caches of shards, workers or machines."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from promptrobust.cli.flags import Subcommands

HELP = "merge score caches (of sweep shards, Ray workers or other machines) into one file"

EPILOG = """\
Keys are content addresses (model identity, decoding settings, input), so a key
in two caches holds the same answer: rows are copied with INSERT OR IGNORE,
merging twice adds nothing, and an interrupted merge is simply run again.
Every source is checked first; a file that is not a promptrobust cache (or one
of another schema) is refused before anything is written.

examples:
  pre cache merge scores.sqlite runs/sweeps/grid.shard-*-of-4/cache.sqlite
  pre cache merge ~/.cache/promptrobust/scores.sqlite node1.sqlite node2.sqlite
"""


def add_parser(sub: Subcommands, formatter: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser("cache", help="score cache tools (merge)", description=HELP, formatter_class=formatter)
    actions = p.add_subparsers(dest="cache_command", metavar="ACTION")
    m = actions.add_parser("merge", help=HELP, description=HELP, epilog=EPILOG, formatter_class=formatter)
    m.add_argument("out", metavar="OUT", help="cache file to merge into (created if missing)")
    m.add_argument("caches", nargs="+", metavar="CACHE", help="cache files to copy from (SQLite, from --cache or sweep shards)")
    m.set_defaults(handler=handle_merge)


def handle_merge(args: argparse.Namespace) -> int:
    from promptrobust.engine.runs.sweep.plan import merge_caches

    result = merge_caches(args.out, args.caches)
    for path, added in zip(args.caches, result.added):
        print(f"{path}: {added} new answers")
    print(f"{args.out}: {sum(result.added)} added, {result.total} in total")
    return 0
