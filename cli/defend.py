"""`pre defend`: how much of an attack does spell-checking the prompt undo?
(engine.analysis.defense)"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from promptrobust.cli import analysis_common as common
from promptrobust.cli import analysis_session as session_io
from promptrobust.cli.flag_settings import config_of

NAME = "defend"
HELP = "spell-correct adversarial prompts and measure the PDR with and without the defense"

EPILOG = f"""\
examples:
  pre defend --source runs/20250101-120000_gemma3-270m_rotten_tomatoes
  pre defend --source runs/ --attack textbugger,deepwordbug,textfooler --model smollm2-135m-instruct

Without --model each record is scored on the model that produced it.
{common.FROM_RECORDS_NOTE}

The run folder holds results.jsonl (one record per source record: the
corrected prompt as the adversarial prompt, so its PDR, interval and McNemar's
p are with the defense; the undefended prompt and PDR in "settings"),
defense.md and defense.csv (PDR without/with the defense per attack) and
records.csv. Needs the pyspellchecker package (offline dictionary).
"""


def add_parser(sub: Any, formatter: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser(NAME, help=HELP, description=HELP, epilog=EPILOG, formatter_class=formatter)
    common.add_source_arguments(p)
    p.add_argument("--distance", type=int, default=2, choices=[1, 2], help="largest edit distance of a spelling correction")
    common.add_arguments(p, from_records=True)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from promptrobust.engine.runs.run_folder import RunFolder
    from promptrobust.engine.analysis.defense import defend
    from promptrobust.engine.analysis.sources import load_source_records

    settings = common.source_settings(args)
    with session_io.library_errors():
        sources, _ = settings.select(load_source_records(args.source))
    models = sorted({args.model} if args.model else {s.record.model for s in sources})
    progress = session_io.ProgressLine(enabled=not args.no_progress, label="[defend] ")
    with RunFolder(args.output_dir, ["defend", *models[:2]]) as folder:
        result, facts = session_io.run_in_session(
            args,
            lambda session: defend(
                session, sources, model=args.model, model_args=common.model_args(args), settings=settings,
                distance=args.distance, keep_samples=args.log_samples, progress=progress,
            ),
        )
        logged = session_io.write_records(folder, result.records, result.sample_log)
        _write_tables(folder, result)
        folder.write_json("config.json", {**config_of(args), "sources": settings, "distance": args.distance})
        session_io.write_results(folder, args, result, facts, logged, {"sources": settings, "distance": args.distance})
    common.print_notes(result.notes)
    _print(result)
    print(f"pre: results in {folder.final}", file=sys.stderr)
    return 0


SUMMARY_COLUMNS = ["model", "attack", "n", "pdr_without", "pdr_without_std", "pdr_with", "pdr_with_std",
                   "pdr_with_ci95_low", "pdr_with_ci95_high", "recovered"]


def _write_tables(folder: Any, result: Any) -> None:
    from promptrobust.engine.analysis.scoring import text_table

    rows = result.rows()
    summary = text_table(result.summary, SUMMARY_COLUMNS, name="defense", title="Spell-check defense")
    records = text_table(rows, list(rows[0]), name="records", title="Records")
    summary.write_csv(folder.partial)
    records.write_csv(folder.partial)
    folder.write_text("defense.md", summary.markdown() + "\n" + records.markdown())


def _pdr(value: float | None) -> str:
    return "skipped" if value is None else f"{value:.4f}"


def _print(result: Any) -> None:
    print(f"{'attack':<12} {'prompt':<16} {'clean':>7} {'advers.':>7} {'defended':>8} {'PDR w/o':>7} {'PDR w/':>7}  {'95% interval w/':<17}")
    for row in result.rows():
        print(
            f"{row['attack']:<12} {row['prompt_id']:<16} {row['clean']:>7.4f} {row['adversarial']:>7.4f} "
            f"{row['defended']:>8.4f} {_pdr(row['pdr_without']):>7} {_pdr(row['pdr_with']):>7}  {common.ci_text(row['pdr_with_ci95']):<17}"
        )
    print()
    for s in result.summary:
        rec = "-" if s["recovered"] is None else f"{s['recovered']:.0%}"
        print(
            f"{s['model']} [{s['attack']}]: APDR {_pdr(s['pdr_without'])} -> {_pdr(s['pdr_with'])} with spell-check "
            f"(recovered {rec}, n={s['n']})"
        )
    for r in result.records:
        if r.settings["corrections"]:
            fixes = ", ".join(f"{a!r}->{b!r}" for a, b in r.settings["corrections"])
            print(f"[{r.attack} / {r.prompt_id}] {fixes}")
