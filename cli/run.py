"""`pre run`: score prompts on a dataset (clean metric), optionally attack the best ones.

Arguments -> settings -> the run plan (``engine.runs.plan``, where everything is decided) ->
run (the executor's ``run_plan``: one run folder per dataset, written as it goes) -> print.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from promptrobust.cli import flags, lm_eval, output

if TYPE_CHECKING:
    from promptrobust.engine.runs.execute import RunPlan

HELP = "score prompts on a dataset with a model (and attack the best ones with --attack)"

EPILOG = """\
defaults are the paper's protocol: decode up to 20 new tokens and parse the
last word (--mode generate), base models 3-shot, unlimited attack budget.
The default model is the embedded gemma3-270m (offline, a base model: 3-shot).

examples:
  pre run --limit 100 --mode choices --attack stresstest --top-k 1   # offline: embedded Gemma 3 270M, Rotten Tomatoes
  pre run --limit 100 --prompt sst2-task-01 --log-samples   # prompt ids: pre list prompts --dataset rotten_tomatoes
  pre run --mode choices                          # fast: label log-probs, one forward pass
  pre run --attack all --top-k 3 --budget 100     # every attack on the 3 best prompts, capped budget
  pre run --model openai:gpt-4o-mini --rpm 500 --tpm 200000 --concurrency 64 --dataset sst2
  pre run --model vllm:meta-llama/Llama-2-13b-chat-hf --dataset mnli --limit 1000
  pre run --task tickets.toml --mode choices --attack textbugger,checklist --top-k 1   # your own task
  pre run --data-file tickets.csv --input-column body --label-column queue --labels BIL=billing,TEC=technical,OTH=other

The run folder (under --output-dir) holds config.json (the exact flags),
results.json (one layout for every command: versions, command, settings, every
prompt's score with its 95% interval, APDR, counters), results.jsonl and
results.parquet (one record per attacked prompt, kind "attack"; without --attack
one row per prompt, kind "clean") and, with --log-samples, samples.jsonl (one
line per prompt x sample; with --attack, the clean and the final adversarial
prompt of every record).
"""


def add_parser(sub: flags.Subcommands, formatter: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser("run", help=HELP, description=HELP, epilog=EPILOG, formatter_class=formatter)
    g = p.add_argument_group("what to evaluate")
    flags.add_model_arguments(g)
    flags.add_data_arguments(g)
    g.add_argument("--prompt", default=None, help="prompt ids, comma-separated (see `pre list prompts --dataset X`)")
    g.add_argument("--prompt-type", default="task", choices=flags.PROMPT_TYPES, help="prompt set used when --prompt is not given")
    g.add_argument("--prompt-text", default=None, help="evaluate this literal instruction instead of a stored prompt")
    g.add_argument("--promptbench", default=None, metavar="CHECKOUT", help="use the paper's own prompts from a promptbench checkout")
    g.add_argument("--adversarial-samples", default=None, metavar="FILE|hub",
                   help="joint attack on prompt and sample (the paper's AdvGLUE study): measure on adversarial samples, "
                        "a file in AdvGLUE's layout (or rows in the task's columns) or 'hub' (adv_glue, needs "
                        "promptrobust[hub]); each record also scores its clean prompt on the clean samples")
    g = p.add_argument_group("how to query the model")
    flags.add_query_arguments(g)
    lm_eval.add_arguments(g)  # --gen_kwargs, --apply_chat_template, --system_instruction, --device
    flags.add_scheduler_arguments(g)
    flags.add_output_arguments(p.add_argument_group("where things go"))
    flags.add_attack_arguments(p)
    flags.add_task_arguments(p)
    p.add_argument("--dry-run", action="store_true",
                   help="say what the run will cost (requests, tokens, US dollars for a priced API model; every candidate "
                        "on every sample, and with racing) and stop: no model is loaded")
    p.set_defaults(handler=handle)


def plan_from_args(args: argparse.Namespace) -> RunPlan:
    """The run plan of a parsed `pre run` command line: what `pre run` will do, nothing run yet."""
    from promptrobust.engine.runs.plan import PromptChoice, attack_settings, build_plan

    model, model_args = lm_eval.model_and_args(args, say=output.say)  # --model hf --model_args pretrained=X, --device
    attacks = attack_settings(args.attack, options=args.attack_options, budget=args.budget, holdout=args.holdout,
                              top_k=args.top_k, early_stopping=args.early_stopping, chunk_size=args.chunk_size,
                              error_rate=args.error_rate, racing_tolerance=args.racing_tolerance,
                              meaning_nli=args.meaning_nli)
    prompts = PromptChoice(ids=tuple(i.strip() for i in (args.prompt or "").split(",") if i.strip()), type=args.prompt_type,
                           text=args.prompt_text, promptbench=args.promptbench)
    targets = flags.targets(args)  # dataset names, or a user's own task (--task FILE, or a data file's columns)
    evaluation = flags.evaluation_settings(args, targets[0])
    if lm_eval.plain_prompts_in_lm_eval_spelling(args):  # lm-eval's spelling scores what lm-eval scores
        from promptrobust.engine.runs.lm_eval_args import lm_eval_stop

        evaluation, note = lm_eval_stop(evaluation, targets)
        if note is not None:
            output.say_note(note)
    return build_plan(model, targets, model_args=model_args, chat=args.apply_chat_template,
                      evaluation=evaluation, prompts=prompts, attacks=attacks,
                      scheduler=flags.scheduler_settings(args), output=flags.output_options(args, results_file=True),
                      ready=not args.dry_run)


def handle(args: argparse.Namespace) -> int:
    from promptrobust.engine.runs.executor import Hooks, run_plan

    from promptrobust.engine import progress

    plan = plan_from_args(args)  # everything is decided and checked before any model loads
    if args.dry_run:
        from promptrobust.engine.runs.plan import dry_run

        for line in dry_run(plan):
            print(line)
        output.say("dry run: nothing was run")
        return 0
    # Until the first phase (loading the data, torch, the model's identity: seconds on a cold start)
    # the status line says what is being prepared; no line of its own (an error may follow).
    progress.phase(f"preparing {plan.model.name} on {', '.join(t.task.name for t in plan.targets)}", line=False)
    hooks = Hooks(on_event=output.event_printer(quiet=args.no_progress), on_note=output.say_note,
                  on_part=lambda target: output.print_target(args, target))
    outcome = run_plan(plan, hooks=hooks, progress=None)
    return outcome.exit_status
