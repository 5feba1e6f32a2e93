"""`pre eval --prompts FILE`: score the prompts of a file, or clean/adversarial pairs with their
PDR, on a model and dataset (``engine.analysis.commands``: plan_eval -> the executor)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from promptrobust.cli import flags, output

if TYPE_CHECKING:
    from promptrobust.engine.analysis.prompt_eval import PromptEvalResult

NAME = "eval"
HELP = "score the prompts of a file (or clean/adversarial pairs, with their PDR) on a dataset"

EPILOG = """\
examples:
  pre eval --prompts my_prompts.txt --limit 100           # one prompt a line
  pre eval --prompts pairs.jsonl --dataset sst2            # {"id":..,"clean":..,"adversarial":..}
  pre eval --prompts pairs.csv --model openai:gpt-4o-mini --rpm 500
  pre eval --promptbench-adv ~/src/promptbench --source-model chatgpt --dataset sst2   # the paper's published pairs
  pre eval --prompts pairs.jsonl --task tickets.toml --mode choices   # your own task (docs/your-task.md)

FILE formats (chosen by extension):
  .jsonl   one JSON object a line: {"prompt": ...} (or "text"), or
           {"clean": ..., "adversarial": ...}; optional "id", "attack",
           "prompt_type", "dataset" and any other columns (e.g. source_model)
  .json    a list of such objects
  .csv/.tsv  a header row with the same column names
  other    plain text, one prompt a line (blank lines and lines starting with # skipped)

Every score comes with its 95% interval and an "at chance" flag. With pairs,
results.jsonl holds one record per pair (attack from the "attack" column, else
"given"; other columns kept in "extra", so `pre report --group-by source_model`
works; a column named like a record field, e.g. shots, is kept as source_shots) with the PDR, its paired 95% interval and McNemar's p; rows whose
"dataset" column names another dataset are not scored.
"""


def add_parser(sub: flags.Subcommands, formatter: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser(NAME, help=HELP, description=HELP, epilog=EPILOG, formatter_class=formatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompts", metavar="FILE", help="prompts file (.jsonl, .json, .csv, .tsv or text)")
    src.add_argument("--promptbench-adv", metavar="CHECKOUT",
                     help="the paper's published adversarial prompts: a promptbench checkout, its adv_prompts folder or one .md file")
    p.add_argument("--source-model", default=None, metavar="M",
                   help="with --promptbench-adv: only prompts found on this model (chatgpt, t5, ul2, vicuna)")
    p.add_argument("--source-shot", default=None, choices=["zero", "few"], help="with --promptbench-adv: only this shot setting's file")
    flags.add_analysis_arguments(p)
    flags.add_task_arguments(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from promptrobust.engine.analysis.commands import plan_eval

    plan = plan_eval(args.prompts, promptbench_adv=args.promptbench_adv, source_model=args.source_model,
                     source_shot=args.source_shot, model=args.model, model_args=args.model_args,
                     evaluation=flags.evaluation_settings(args, flags.targets(args)[0]), scheduler=flags.scheduler_settings(args),
                     prompt_type=args.prompt_type, output=flags.output_options(args))
    return output.run_analysis(plan, _print)


def _print(result: PromptEvalResult) -> None:
    from promptrobust.engine.analysis.commands import AT_CHANCE_NOTE, format_apdr

    print(output.settings_line(result.settings))
    width = max([len(c.prompt.id) for c in result.clean] + [6])
    print(f"{'prompt':<{width}}  score   95% interval    unparseable  prompt")
    for c in result.clean:
        flag = " (at chance)" if c.at_chance else ""
        print(f"{c.prompt.id:<{width}}  {c.score:.4f}  {output.ci_text(c.ci95):<15} {c.unparseable:>11}  {output.short(c.prompt.text)}{flag}")
    if not result.records:
        print(f"mean {result.mean_score:.4f}")
    else:
        print(f"\n{'pair':<{width}}  {'attack':<12} {'clean':>7} {'advers.':>7} {'PDR':>7}  {'PDR 95% interval':<17} {'McNemar p':>9}")
        for r in result.records:
            pdr = "skipped" if r.pdr is None else f"{r.pdr:.4f}"
            p = "-" if r.mcnemar_p is None else f"{r.mcnemar_p:.3g}"
            flag = "  at chance" if r.at_chance else ""
            print(f"{r.prompt_id:<{width}}  {r.attack:<12} {r.clean_score:>7.4f} {r.adversarial_score:>7.4f} {pdr:>7}  "
                  f"{output.ci_text(r.pdr_ci95):<17} {p:>9}{flag}")
        print()
        for a in result.apdr:
            legend = ", mean ± sample std [95% interval]" if a["n"] > 1 else ""
            print(f"APDR {a['attack']}: {format_apdr(a)} (n={a['n']}{legend})")
    if any(c.at_chance for c in result.clean):
        rate = "" if result.chance_rate is None else f" (majority class {result.chance_rate:.2f})"
        print(f"note: {AT_CHANCE_NOTE}{rate}")
