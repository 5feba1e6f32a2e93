"""`pre report RUN_DIR...`: the paper's tables and pictures from finished runs.

Arguments become one ``build_report`` call (library code in
``promptrobust.engine.analysis.report``); the report is written to the
output folder and its Markdown printed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from promptrobust.cli.errors import UserError

if TYPE_CHECKING:
    from promptrobust.cli.flags import Subcommands

HELP = "tables, plots and an HTML page (clean scores, APDR with intervals, cost, word frequency) from finished runs"

EPILOG = """\
examples:
  pre report runs/20250101-120000_gemma3-270m_sst2
  pre report runs/sweeps/embedded                     # every run under a sweep folder
  pre report runs/a runs/b --output-dir report/ --format md,html
  pre report runs/eval-pairs --group-by source_model  # an extra column of a pairs file

Outputs (in --output-dir, default <first RUN_DIR>-report/ next to it, never inside what it reads;
`pre report runs` writes runs-report/, which a checkout of promptrobust ignores as it ignores runs/):
  report.md       every table (also printed to stdout)
  *.csv           one file per table: one row per cell, mean/std/ci_low/ci_high/count columns
  meaning_review.csv  with csv: every edited adversarial prompt (and each Semantic rewrite),
                  most damaging first, with the meaning check's verdict and an empty `person`
                  column: write kept or changed, then `pre report ... --meaning-verdicts
                  meaning_review.csv` uses a person's verdicts in the acceptable-only tables
                  and compares them with the check's
  *.png *.svg *.pdf  APDR bars (95% intervals) and heat maps centred on 0 (cells: APDR, interval,
                  records), word-frequency bars; the same drawing in each format
  report.html     one self-contained page: tables, plots, the most damaging and the most
                  helpful adversarial prompts next to their clean originals
  samples/*.html  with report.html: one page per record whose samples were logged (--log-samples):
                  each sample's input, clean and adversarial answers and scores, filterable by flipped
  report.tex      --format latex: booktabs tables with intervals fitted to the line at 9 or 8 pt,
                  captions stating the statistic and the settings, the figures included from
                  their files (--format latex,pdf); compiles with pdflatex

APDR cells are the mean ± sample standard deviation (ddof=1) of PDR over the
attacked records in the cell, then the 95% interval (bootstrap over prompts
and samples); a cell of one record shows its PDR and its own interval. A
Semantic record enters every APDR table as the mean PDR over its prompt set
(the paper's statistic), its cells marked †; the worst prompt of each set is
in the Semantic table. Records of different settings (mode, parser, generation length,
samples, budget) are reported in separate sections, never pooled; a rerun of
the same measurement counts once; skipped (clean score 0) and failed records
are listed, not averaged.
"""

FORMATS = ("md", "csv", "png", "svg", "pdf", "html", "latex")


def add_parser(sub: Subcommands, formatter: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser("report", help=HELP, description=HELP, epilog=EPILOG, formatter_class=formatter)
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run folders, sweep folders or results files (searched recursively)")
    p.add_argument("--output-dir", default=None, metavar="DIR",
                   help="folder for the report files (default: <first RUN_DIR>-report, next to it)")
    p.add_argument("--output", dest="output_dir", default=None, help=argparse.SUPPRESS)  # old spelling
    p.add_argument("--format", default=",".join(FORMATS), metavar="LIST", help="comma-separated outputs among " + ", ".join(FORMATS))
    p.add_argument("--top", type=int, default=10, metavar="N",
                   help="most damaging and most helpful adversarial prompts listed (each)")
    p.add_argument("--words", type=int, default=15, metavar="N", help="words listed each way in the word-frequency analysis")
    p.add_argument("--word-threshold", type=float, metavar="PDR", default=None,
                   help="PDR that splits robust (<=) from vulnerable (>) prompts in the word-frequency analysis (default: the median PDR)")
    p.add_argument("--group-by", default=None, metavar="COLS",
                   help="comma-separated record fields or extra pairs-file columns (e.g. source_model,shots) for extra APDR tables")
    p.add_argument("--pool-searches", action="store_true",
                   help="put records of raced searches (--early-stopping racing) in the same tables as exhaustive ones "
                        "(kept apart by default: a raced search may keep another candidate); said in the report's notes")
    p.add_argument("--meaning-verdicts", default=None, metavar="SHEET",
                   help="a filled meaning_review.csv (every report with edited adversarial prompts writes one): a "
                        "person's kept/changed per prompt replaces the meaning check's in the acceptable-only tables, "
                        "as the paper's people judged acceptability; blank rows stay the check's")
    p.add_argument("--quiet", action="store_true", help="do not print the Markdown tables to stdout")
    p.set_defaults(handler=handle)


def parse_formats(spec: str) -> set[str]:
    chosen = {f.strip().lower() for f in spec.split(",") if f.strip()}
    unknown = sorted(chosen - set(FORMATS))
    if unknown or not chosen:
        bad = unknown[0] if unknown else spec
        raise UserError(f"unknown format {bad!r} in --format: use {', '.join(FORMATS)} (comma-separated)")
    return chosen


def output_folder(args: argparse.Namespace) -> Path:
    """``--output-dir``, else a sibling of the first folder read (``runs`` -> ``runs-report``), never
    inside a folder the report reads."""
    if args.output_dir:
        return Path(args.output_dir)
    first = Path(args.run_dirs[0])
    folder = (first.parent if first.is_file() else first).resolve()
    return folder.parent / f"{folder.name or 'runs'}-report"


def handle(args: argparse.Namespace) -> int:
    from promptrobust.engine.analysis.report import REVIEW_SHEET, ReportInputError, build_report

    formats = parse_formats(args.format)
    if args.top < 1:
        raise UserError(f"--top must be at least 1 (got {args.top})")
    if args.words < 1:
        raise UserError(f"--words must be at least 1 (got {args.words})")
    group_by = [c.strip() for c in (args.group_by or "").split(",") if c.strip()]
    folder = output_folder(args)
    try:
        report = build_report(args.run_dirs, top=args.top, words=args.words, word_threshold=args.word_threshold,
                              group_by=group_by, figures=bool(formats & {"png", "svg", "pdf", "html"}),
                              pool_searches=args.pool_searches, meaning_verdicts=args.meaning_verdicts)
        written = report.write(folder, formats)
    except ReportInputError as exc:
        hint = " (--group-by)" if "group by" in str(exc) else ""
        raise UserError(f"{exc}{hint}") from None
    except ModuleNotFoundError as exc:
        if exc.name != "matplotlib":
            raise
        raise UserError("matplotlib is not installed: pip install matplotlib, or pass --format md,csv,latex") from None
    if not args.quiet:
        print(report.markdown())
    print(f"pre: report in {folder} ({len(written)} files)", file=sys.stderr)
    if report.review_sheet is not None and "csv" in formats and not args.meaning_verdicts:
        print(f"pre: to judge the adversarial prompts' meaning yourself (the acceptable-only tables): fill the person "
              f"column of {folder / REVIEW_SHEET}, then add --meaning-verdicts with that file", file=sys.stderr)
    return 0
