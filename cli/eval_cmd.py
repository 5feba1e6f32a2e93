"""`pre eval --prompts FILE`: score the prompts of a file, or clean/adversarial
pairs with their PDR, on a model and dataset (engine.analysis.prompt_eval)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from promptrobust.cli import analysis_common as common
from promptrobust.cli import analysis_session as session_io
from promptrobust.cli.flag_settings import check_paths, config_of, evaluation_settings
from promptrobust.cli.errors import UserError

NAME = "eval"
HELP = "score the prompts of a file (or clean/adversarial pairs, with their PDR) on a dataset"

EPILOG = """\
examples:
  pre eval --prompts my_prompts.txt --limit 100           # one prompt a line
  pre eval --prompts pairs.jsonl --dataset sst2            # {"id":..,"clean":..,"adversarial":..}
  pre eval --prompts pairs.csv --model openai:gpt-4o-mini --rpm 500
  pre eval --promptbench-adv ~/src/promptbench --source-model chatgpt --dataset sst2   # the paper's published pairs

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


def add_parser(sub: Any, formatter: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser(NAME, help=HELP, description=HELP, epilog=EPILOG, formatter_class=formatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompts", metavar="FILE", help="prompts file (.jsonl, .json, .csv, .tsv or text)")
    src.add_argument("--promptbench-adv", metavar="CHECKOUT",
                     help="the paper's published adversarial prompts: a promptbench checkout, its adv_prompts folder or one .md file")
    p.add_argument("--source-model", default=None, metavar="M",
                   help="with --promptbench-adv: only prompts found on this model (chatgpt, t5, ul2, vicuna)")
    p.add_argument("--source-shot", default=None, choices=["zero", "few"], help="with --promptbench-adv: only this shot setting's file")
    common.add_arguments(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from promptrobust.engine.runs.run_folder import RunFolder
    from promptrobust.engine.analysis.prompt_eval import evaluate_prompts, read_prompt_file

    check_paths(args)
    settings = evaluation_settings(args)
    source = args.prompts or args.promptbench_adv
    if args.promptbench_adv:
        items = _promptbench_items(args)
    else:
        if args.source_model or args.source_shot:
            raise UserError("--source-model and --source-shot choose among --promptbench-adv prompts; add --promptbench-adv CHECKOUT")
        with session_io.library_errors():
            items = read_prompt_file(args.prompts)
    from promptrobust.tasks.placeholders import check_no_content_placeholder

    check_no_content_placeholder((it.id, t) for it in items for t in (it.prompt, it.clean, it.adversarial))
    progress = session_io.ProgressLine(enabled=not args.no_progress, label="[eval] ")
    with RunFolder(args.output_dir, ["eval", args.model, args.dataset]) as folder:
        result, facts = session_io.run_in_session(
            args,
            lambda session: evaluate_prompts(
                session, items, model=args.model, model_args=common.model_args(args), settings=settings,
                prompt_type=args.prompt_type, keep_samples=args.log_samples, progress=progress,
            ),
        )
        logged = session_io.write_records(folder, result.records, result.sample_log)
        session_io.write_results(folder, args, result, facts, logged, {"evaluation": settings, "prompts_file": str(source)})
        folder.write_json("config.json", {**config_of(args), "evaluation": settings})
        folder.write_text("results.md", _markdown(result))
    common.print_notes(result.notes)
    _print(result)
    print(f"pre: results in {folder.final}", file=sys.stderr)
    return 0


def _promptbench_items(args: argparse.Namespace) -> list[Any]:
    """The published pairs as prompt items (the same rows `write_pairs_jsonl` writes);
    the importer's notes (incomplete or relabelled blocks) are said on the terminal."""
    from pathlib import Path

    from promptrobust.engine.analysis.prompt_eval import _item
    from promptrobust.tasks.promptbench_import import load_adversarial_prompts

    pairs = load_adversarial_prompts(args.promptbench_adv, model=args.source_model, dataset=args.dataset,
                                     shot=args.source_shot)
    for note in [*pairs.skipped, *pairs.relabelled]:
        print(f"pre: {note}", file=sys.stderr)
    return [_item(Path(args.promptbench_adv), n, pr.to_row()) for n, pr in enumerate(pairs, 1)]


def _markdown(result: Any) -> str:
    from promptrobust.engine.analysis.prompt_eval import pair_row
    from promptrobust.engine.analysis.scoring import text_table

    clean = [c.to_dict() for c in result.clean]
    parts = [text_table(clean, ["prompt_id", "score", "ci95", "at_chance", "prompt"], name="clean", title="Clean scores").markdown()]
    if result.records:
        cols = ["id", "attack", "clean", "adversarial", "pdr", "pdr_ci95", "mcnemar_p", "at_chance"]
        parts.append(text_table([pair_row(r) for r in result.records], cols, name="pairs", title="Pairs").markdown())
        cols = ["attack", "n", "pdr_mean", "pdr_std", "pdr_ci95_low", "pdr_ci95_high"]
        parts.append(text_table(result.apdr, cols, name="apdr", title="APDR (sample std, ddof=1)").markdown())
    return "\n".join(parts)


def _print(result: Any) -> None:
    from promptrobust.cli.printing import settings_line
    from promptrobust.engine.measuring.statistics import format_apdr
    from promptrobust.engine.measuring.statistics import AT_CHANCE_NOTE

    print(settings_line(result.settings))
    width = max([len(c.prompt_id) for c in result.clean] + [6])
    print(f"{'prompt':<{width}}  score   95% interval    unparseable  prompt")
    for c in result.clean:
        flag = " (at chance)" if c.at_chance else ""
        print(f"{c.prompt_id:<{width}}  {c.score:.4f}  {common.ci_text(c.ci95):<15} {c.unparseable:>11}  {common.short(c.prompt)}{flag}")
    if not result.records:
        print(f"mean {result.mean_score:.4f}")
    else:
        print(f"\n{'pair':<{width}}  {'attack':<12} {'clean':>7} {'advers.':>7} {'PDR':>7}  {'PDR 95% interval':<17} {'McNemar p':>9}")
        for r in result.records:
            pdr = "skipped" if r.pdr is None else f"{r.pdr:.4f}"
            p = "-" if r.mcnemar_p is None else f"{r.mcnemar_p:.3g}"
            flag = "  at chance" if r.at_chance else ""
            print(
                f"{r.prompt_id:<{width}}  {r.attack:<12} {r.clean_score:>7.4f} {r.adversarial_score:>7.4f} {pdr:>7}  "
                f"{common.ci_text(r.pdr_ci95):<17} {p:>9}{flag}"
            )
        print()
        for a in result.apdr:
            legend = ", mean ± sample std [95% interval]" if a["n"] > 1 else ""
            print(f"APDR {a['attack']}: {format_apdr(a)} (n={a['n']}{legend})")
    if any(c.at_chance for c in result.clean):
        rate = "" if result.chance_rate is None else f" (majority class {result.chance_rate:.2f})"
        print(f"note: {AT_CHANCE_NOTE}{rate}")
