"""`pre transfer`: do adversarial prompts found on one model hurt another? (the paper's Table 6;
``engine.analysis.commands``: plan_transfer -> the executor)"""

from __future__ import annotations

import argparse
from typing import Any

from promptrobust.cli import flags, output

NAME = "transfer"
HELP = "score adversarial prompts found on a source model on a target model (transfer APDR)"

FROM_RECORDS_NOTE = """\
Data and query flags left out (--dataset, --limit, --seed, --shots, --mode,
--parser, --max-tokens, --data-dir/--data-file) take each source record's own
value, so a prompt is re-measured as it was made; a base model gets at least
3 shots (the paper)."""

EPILOG = f"""\
examples:
  pre transfer --source runs/20250101-120000_smollm2-135m-instruct_rotten_tomatoes --model gemma3-270m
  pre transfer --source runs/ --model openai:gpt-4o-mini --attack textbugger,deepwordbug --rpm 500
  pre transfer --source runs/ --model gemma3-270m --all-records   # every attacked record, not the paper's pick

Which source records: by default the paper's selection, the most vulnerable
adversarial prompt (highest source PDR) per source model, dataset, attack and
prompt type (task/role, zero-/few-shot); --all-records re-scores every attacked
record. results.json ("configs" -> "sources" -> "selection") and every record's
settings say which ran.

{FROM_RECORDS_NOTE}

The run folder holds results.jsonl (one record per source record: the transfer
PDR with its paired 95% interval and McNemar's p, the source in "settings"),
transfer.md and transfer.csv (APDR per source -> target and attack: mean ±
sample std and its 95% interval) and records.csv.
"""


def add_parser(sub: flags.Subcommands, formatter: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser(NAME, help=HELP, description=HELP, epilog=EPILOG, formatter_class=formatter)
    flags.add_source_arguments(p)
    p.add_argument("--all-records", dest="selection", action="store_const", const="all", default=None,
                   help="re-score every attacked source record (default: the paper's selection, the most vulnerable "
                        "adversarial prompt per source model, dataset, attack and prompt type)")
    flags.add_analysis_arguments(p, from_records=True)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from promptrobust.engine.analysis.commands import plan_transfer

    plan = plan_transfer(args.source, model=args.model, model_args=args.model_args, settings=flags.source_settings(args),
                         scheduler=flags.scheduler_settings(args), output=flags.output_options(args))
    return output.run_analysis(plan, _print)


def _print(result: Any) -> None:
    from promptrobust.engine.analysis.commands import format_apdr

    print(f"{'source -> target':<44} {'attack':<12} {'prompt':<16} {'clean':>7} {'advers.':>7} {'PDR':>7}  {'PDR 95% interval':<17} {'src PDR':>7}")
    for r in result.records:
        pair = f"{r.settings['source_model']} -> {r.model}"
        pdr = "skipped" if r.pdr is None else f"{r.pdr:.4f}"
        src = r.settings.get("source_pdr")
        flag = "  at chance" if r.at_chance else ""
        print(f"{pair:<44} {r.attack:<12} {r.prompt_id:<16} {r.clean_score:>7.4f} {r.adversarial_score:>7.4f} {pdr:>7}  "
              f"{output.ci_text(r.pdr_ci95):<17} {'-' if src is None else f'{src:.4f}':>7}{flag}")
    print()
    for a in result.apdr:
        print(f"APDR {a['source_model']} -> {a['target_model']} [{a['attack']}]: {format_apdr(a)} (n={a['n']})")
