"""`pre defend`: how much of an attack does spell-checking the prompt undo?
(``engine.analysis.commands``: plan_defense -> the executor)"""

from __future__ import annotations

import argparse
from typing import Any

from promptrobust.cli import flags, output
from promptrobust.cli.transfer import FROM_RECORDS_NOTE

NAME = "defend"
HELP = "spell-correct adversarial prompts and measure the PDR with and without the defense"

EPILOG = f"""\
examples:
  pre defend --source runs/20250101-120000_gemma3-270m_rotten_tomatoes
  pre defend --source runs/ --attack textbugger,deepwordbug,textfooler --model smollm2-135m-instruct

Without --model each record is scored on the model that produced it.
{FROM_RECORDS_NOTE}

The run folder holds results.jsonl (one record per source record: the
corrected prompt as the adversarial prompt, so its PDR, interval and McNemar's
p are with the defense; the undefended prompt and PDR in "settings"),
defense.md and defense.csv (PDR without/with the defense per attack) and
records.csv. Needs the pyspellchecker package (offline dictionary).
"""


def add_parser(sub: flags.Subcommands, formatter: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser(NAME, help=HELP, description=HELP, epilog=EPILOG, formatter_class=formatter)
    flags.add_source_arguments(p)
    p.add_argument("--distance", type=int, default=2, choices=[1, 2], help="largest edit distance of a spelling correction")
    flags.add_analysis_arguments(p, from_records=True)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from promptrobust.engine.analysis.commands import plan_defense

    plan = plan_defense(args.source, model=args.model, model_args=args.model_args, distance=args.distance,
                        settings=flags.source_settings(args), scheduler=flags.scheduler_settings(args),
                        output=flags.output_options(args))
    return output.run_analysis(plan, _print)


def _pdr(value: float | None) -> str:
    return "skipped" if value is None else f"{value:.4f}"


def _print(result: Any) -> None:
    print(f"{'attack':<12} {'prompt':<16} {'clean':>7} {'advers.':>7} {'defended':>8} {'PDR w/o':>7} {'PDR w/':>7}  {'95% interval w/':<17}")
    for row in result.rows():
        print(f"{row['attack']:<12} {row['prompt_id']:<16} {row['clean']:>7.4f} {row['adversarial']:>7.4f} "
              f"{row['defended']:>8.4f} {_pdr(row['pdr_without']):>7} {_pdr(row['pdr_with']):>7}  {output.ci_text(row['pdr_with_ci95']):<17}")
    print()
    for s in result.summary:
        rec = "-" if s["recovered"] is None else f"{s['recovered']:.0%}"
        print(f"{s['model']} [{s['attack']}]: APDR {_pdr(s['pdr_without'])} -> {_pdr(s['pdr_with'])} with spell-check "
              f"(recovered {rec}, n={s['n']})")
    for r in result.records:
        if r.settings["corrections"]:
            fixes = ", ".join(f"{a!r}->{b!r}" for a, b in r.settings["corrections"])
            print(f"[{r.attack} / {r.prompt_id}] {fixes}")
