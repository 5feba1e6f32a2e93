"""`pre attention`: word importance of a clean and an adversarial prompt on one sample
(hf models; ``engine.analysis.commands``: plan_attention -> the executor)."""

from __future__ import annotations

import argparse

from promptrobust.cli import flags, output

NAME = "attention"
HELP = "show which prompt words a model relies on: clean vs adversarial prompt on one sample (hf models)"

EPILOG = """\
examples:
  pre attention --clean "Determine the sentiment of this review." \\
                --adversarial "Determine the sentimnet of this reveiw."
  pre attention --record runs/20250101-120000_gemma3-270m_rotten_tomatoes
  pre attention --model hf:google/flan-t5-large --dataset sst2 --sample-index 3 --clean ... --adversarial ...
  pre attention --task tickets.toml --clean ... --adversarial ...      # your own task (a record brings its own)

Gradient importance: the norm of the loss gradient at each word's input
embeddings; deletion importance: how much the loss grows without the word.
--record takes the record with the largest PDR (whose prompt changed) from the
run folder, with its model, dataset, seed and shots unless flags say otherwise.
The run folder (under --output-dir) receives gradient.png, deletion.png,
attention.html (a fragment for reports) and attention.json (every score).
"""


def add_parser(sub: flags.Subcommands, formatter: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser(NAME, help=HELP, description=HELP, epilog=EPILOG, formatter_class=formatter)
    g = p.add_argument_group("model and data (default: the record's, else gemma3-270m on rotten_tomatoes)")
    flags.add_model_arguments(g, default=None)
    flags.add_data_arguments(g)
    g.add_argument("--sample-index", type=int, default=0, help="which evaluation sample (0-based, in the seed's order)")
    g = p.add_argument_group("prompts")
    g.add_argument("--clean", default=None, help="the clean prompt")
    g.add_argument("--adversarial", default=None, help="the adversarial prompt")
    g.add_argument("--record", default=None, metavar="RUN_DIR", help="take both prompts from the worst record of this run folder")
    g.add_argument("--prompt-type", default="all", choices=flags.PROMPT_TYPES, help="with --record: only records of this prompt type")
    g = p.add_argument_group("analysis")
    g.add_argument("--method", default="both", choices=["both", "gradient", "deletion"], help="which importance to compute")
    g.add_argument("--device", default="cpu", help="torch device")
    g.add_argument("--output-dir", default="runs", help="folder that receives one run folder per invocation")
    g.add_argument("--output", dest="output_dir", help=argparse.SUPPRESS)  # the old name
    flags.add_no_progress(g)
    flags.add_task_arguments(p)
    p.set_defaults(handler=handle, dataset=None, seed=None)


def handle(args: argparse.Namespace) -> int:
    from promptrobust.engine.analysis.commands import plan_attention
    from promptrobust.engine.runs.executor import run_plan

    evaluation = {k: getattr(args, k) for k in ("dataset", "limit", "seed", "shots", "data_dir", "data_file")}
    choice = flags.task_choice(args)
    if choice.task or choice.by_columns:  # your own task (a record brings its own)
        (task,) = flags.targets(args)
        assert not isinstance(task, str)  # a task file or columns always give a task value
        evaluation.update(dataset=task.name, task=task)
    plan = plan_attention(clean=args.clean, adversarial=args.adversarial, record=args.record, prompt_type=args.prompt_type,
                          model=args.model, model_args=args.model_args, evaluation=evaluation, sample_index=args.sample_index,
                          methods=("gradient", "deletion") if args.method == "both" else (args.method,), device=args.device,
                          output=flags.output_options(args))
    outcome = run_plan(plan, progress=None)
    result = outcome.result
    output.say(f"{result.model} on {result.dataset} sample {result.sample_id} (answer {result.target!r}, "
               f"{'chat' if result.chat else 'completion'}, {result.shots}-shot)")
    print(result.table())
    output.say(f"results in {outcome.folder}")
    return 0
