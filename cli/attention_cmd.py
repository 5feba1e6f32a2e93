"""`pre attention`: word importance of a clean and an adversarial prompt on one
sample (engine.analysis.attention; hf models)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from promptrobust.cli.common import add_data_arguments, add_model_arguments
from promptrobust.cli.flag_settings import check_paths, config_of
from promptrobust.cli.errors import UserError

NAME = "attention"
HELP = "show which prompt words a model relies on: clean vs adversarial prompt on one sample (hf models)"

EPILOG = """\
examples:
  pre attention --clean "Determine the sentiment of this review." \\
                --adversarial "Determine the sentimnet of this reveiw."
  pre attention --record runs/20250101-120000_gemma3-270m_rotten_tomatoes
  pre attention --model hf:google/flan-t5-large --dataset sst2 --sample-index 3 --clean ... --adversarial ...

Gradient importance: the norm of the loss gradient at each word's input
embeddings; deletion importance: how much the loss grows without the word.
--record takes the record with the largest PDR (whose prompt changed) from the
run folder, with its model, dataset, seed and shots unless flags say otherwise.
The run folder (under --output-dir) receives gradient.png, deletion.png,
attention.html (a fragment for reports) and attention.json (every score).
"""


def add_parser(sub: Any, formatter: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser(NAME, help=HELP, description=HELP, epilog=EPILOG, formatter_class=formatter)
    g = p.add_argument_group("model and data (default: the record's, else gemma3-270m on rotten_tomatoes)")
    add_model_arguments(g, default=None)
    add_data_arguments(g)
    g.add_argument("--sample-index", type=int, default=0, help="which evaluation sample (0-based, in the seed's order)")
    g = p.add_argument_group("prompts")
    g.add_argument("--clean", default=None, help="the clean prompt")
    g.add_argument("--adversarial", default=None, help="the adversarial prompt")
    g.add_argument("--record", default=None, metavar="RUN_DIR", help="take both prompts from the worst record of this run folder")
    g.add_argument("--prompt-type", default="all", choices=["task", "role", "semantic", "all"], help="with --record: only records of this prompt type")
    g = p.add_argument_group("analysis")
    g.add_argument("--method", default="both", choices=["both", "gradient", "deletion"], help="which importance to compute")
    g.add_argument("--device", default="cpu", help="torch device")
    g.add_argument("--output-dir", default="runs", help="folder that receives one run folder per invocation")
    g.add_argument("--output", dest="output_dir", help=argparse.SUPPRESS)  # the old name
    p.set_defaults(handler=handle, dataset=None, seed=None)


def handle(args: argparse.Namespace) -> int:
    from promptrobust.cli.output import RunFolder
    from promptrobust.engine.analysis.attention import AttentionError, compare_prompts, worst_record
    from promptrobust.engine.analysis.scoring import AnalysisInputError
    from promptrobust.engine.serving.registry import parse_model_args
    from promptrobust.engine.measuring.settings import EvaluationSettings

    check_paths(args)
    try:
        record = _record(args, worst_record)
        clean, adversarial = (record.clean_prompt, record.adversarial_prompt) if record else (args.clean, args.adversarial)
        settings = EvaluationSettings(
            dataset=args.dataset or (record.dataset if record else "rotten_tomatoes"),
            limit=args.limit,
            seed=args.seed if args.seed is not None else (record.seed if record else 0),
            shots=args.shots if args.shots is not None else (record.shots if record else None),
            data_dir=args.data_dir, data_file=args.data_file,
        )
        from promptrobust.engine.serving.registry import DEFAULT_MODEL

        model = args.model or (record.model if record else DEFAULT_MODEL)
        with RunFolder(args.output_dir, ["attention", model, settings.dataset]) as folder:
            result = compare_prompts(
                clean, adversarial, model=model, model_args=parse_model_args(args.model_args), settings=settings,
                sample_index=args.sample_index, device=args.device,
                methods=("gradient", "deletion") if args.method == "both" else (args.method,),
            )
            result.write(folder.partial)
            folder.write_json("config.json", {**config_of(args), "evaluation": settings})
    except (AttentionError, AnalysisInputError) as exc:
        raise UserError(str(exc)) from None
    print(f"pre: {result.model} on {result.dataset} sample {result.sample_id} (answer {result.target!r}, "
          f"{'chat' if result.chat else 'completion'}, {result.shots}-shot)", file=sys.stderr)
    print(result.table())
    print(f"pre: results in {folder.final}", file=sys.stderr)
    return 0


def _record(args: argparse.Namespace, worst_record: Any) -> Any:
    if args.sample_index < 0:
        raise UserError(f"--sample-index must be 0 or more (got {args.sample_index})")
    if args.record:
        if args.clean or args.adversarial:
            raise UserError("use either --record or --clean/--adversarial, not both")
        return worst_record(args.record, prompt_type=args.prompt_type)
    if not (args.clean and args.adversarial):
        raise UserError("pass --clean and --adversarial prompts, or --record RUN_DIR")
    return None
