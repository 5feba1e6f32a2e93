"""`pre transfer`: do adversarial prompts found on one model hurt another?
(engine.analysis.transfer; the paper's Table 6)"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from promptrobust.cli import analysis_common as common
from promptrobust.cli import analysis_session as session_io
from promptrobust.cli.flag_settings import config_of
from promptrobust.cli.errors import UserError

NAME = "transfer"
HELP = "score adversarial prompts found on a source model on a target model (transfer APDR)"

EPILOG = f"""\
examples:
  pre transfer --source runs/20250101-120000_smollm2-135m-instruct_rotten_tomatoes --model gemma3-270m
  pre transfer --source runs/ --model openai:gpt-4o-mini --attack textbugger,deepwordbug --rpm 500

{common.FROM_RECORDS_NOTE}

The run folder holds results.jsonl (one record per source record: the transfer
PDR with its paired 95% interval and McNemar's p, the source in "settings"),
transfer.md and transfer.csv (APDR per source -> target and attack: mean ±
sample std and its 95% interval) and records.csv.
"""


def add_parser(sub: Any, formatter: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser(NAME, help=HELP, description=HELP, epilog=EPILOG, formatter_class=formatter)
    common.add_source_arguments(p)
    common.add_arguments(p, from_records=True)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from promptrobust.engine.runs.run_folder import RunFolder
    from promptrobust.engine.analysis.transfer import transfer

    if not args.model:
        raise UserError("pre transfer needs --model TARGET (the model the adversarial prompts are moved to)")
    settings = common.source_settings(args)
    with session_io.library_errors():
        from promptrobust.engine.analysis.sources import load_source_records

        sources, _ = settings.select(load_source_records(args.source))
    progress = session_io.ProgressLine(enabled=not args.no_progress, label="[transfer] ")
    with RunFolder(args.output_dir, ["transfer", args.model, *sorted({s.record.dataset for s in sources})[:2]]) as folder:
        result, facts = session_io.run_in_session(
            args,
            lambda session: transfer(
                session, sources, model=args.model, model_args=common.model_args(args), settings=settings,
                keep_samples=args.log_samples, progress=progress,
            ),
        )
        logged = session_io.write_records(folder, result.records, result.sample_log)
        _write_tables(folder, result)
        folder.write_json("config.json", {**config_of(args), "sources": settings})
        session_io.write_results(folder, args, result, facts, logged, {"sources": settings})
    common.print_notes(result.notes)
    _print(result)
    print(f"pre: results in {folder.final}", file=sys.stderr)
    return 0


APDR_COLUMNS = ["source_model", "target_model", "attack", "n", "pdr_mean", "pdr_std", "pdr_ci95_low", "pdr_ci95_high"]


def _write_tables(folder: Any, result: Any) -> None:
    from promptrobust.engine.analysis.scoring import text_table

    rows = result.rows()
    apdr = text_table(result.apdr, APDR_COLUMNS, name="transfer", title="Transfer APDR (source -> target)")
    records = text_table(rows, list(rows[0]), name="records", title="Records")
    apdr.write_csv(folder.partial)
    records.write_csv(folder.partial)
    folder.write_text("transfer.md", apdr.markdown() + "\n" + records.markdown())


def _print(result: Any) -> None:
    from promptrobust.engine.measuring.statistics import format_apdr

    print(f"{'source -> target':<44} {'attack':<12} {'prompt':<16} {'clean':>7} {'advers.':>7} {'PDR':>7}  {'PDR 95% interval':<17} {'src PDR':>7}")
    for r in result.records:
        pair = f"{r.settings['source_model']} -> {r.model}"
        pdr = "skipped" if r.pdr is None else f"{r.pdr:.4f}"
        src = r.settings.get("source_pdr")
        flag = "  at chance" if r.at_chance else ""
        print(
            f"{pair:<44} {r.attack:<12} {r.prompt_id:<16} {r.clean_score:>7.4f} {r.adversarial_score:>7.4f} {pdr:>7}  "
            f"{common.ci_text(r.pdr_ci95):<17} {'-' if src is None else f'{src:.4f}':>7}{flag}"
        )
    print()
    for a in result.apdr:
        print(f"APDR {a['source_model']} -> {a['target_model']} [{a['attack']}]: {format_apdr(a)} (n={a['n']})")
