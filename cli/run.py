"""`pre run`: score prompts on a dataset (clean metric), optionally attack the best ones."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from promptrobust.cli import aliases, common, flag_settings, gen_kwargs, lm_eval_model
from promptrobust.cli.errors import UserError

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

The run folder (under --output-dir) holds config.json (the exact flags),
results.json (one layout for every command: versions, command, settings, every
prompt's score with its 95% interval, APDR, counters), results.jsonl (one record
per attacked prompt, kind "attack") and, with --log-samples, samples.jsonl (one
line per prompt x sample; with --attack, the clean and the final adversarial
prompt of every record).
"""


def add_parser(sub: Any, formatter: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser("run", help=HELP, description=HELP, epilog=EPILOG, formatter_class=formatter)
    g = p.add_argument_group("what to evaluate")
    common.add_model_arguments(g)
    common.add_data_arguments(g)
    g.add_argument("--prompt", default=None, help="prompt ids, comma-separated (see `pre list prompts --dataset X`)")
    g.add_argument("--prompt-type", default="task", choices=["task", "role", "semantic", "all"], help="prompt set used when --prompt is not given")
    g.add_argument("--prompt-text", default=None, help="evaluate this literal instruction instead of a stored prompt")
    g.add_argument("--promptbench", default=None, metavar="CHECKOUT", help="use the paper's own prompts from a promptbench checkout")
    g = p.add_argument_group("how to query the model")
    common.add_query_arguments(g)
    aliases.add_lm_eval_arguments(g)  # --gen_kwargs, --apply_chat_template, --system_instruction
    common.add_scheduler_arguments(g)
    common.add_output_arguments(p.add_argument_group("where things go"))
    common.add_attack_arguments(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from promptrobust.cli.attack_options import attack_settings_from
    from promptrobust.engine.serving.registry import check_values, parse_model_args, resolve_model
    from promptrobust.engine.runs.sync import run_sync

    from promptrobust.cli.preflight import check_credentials

    # -- lm-eval habits (cli/aliases.py, lm_eval_model.py, gen_kwargs.py): several datasets, --gen_kwargs, chat template, one batch size
    args.model, args.model_args = lm_eval_model.model_from_flags(args)  # --model hf --model_args pretrained=X, --device
    spec = resolve_model(args.model, parse_model_args(args.model_args))
    check_values(spec)  # bad values fail before any model loads or folder is made
    check_credentials(spec)  # a missing API key is said before any data loads
    datasets = flag_settings.dataset_names(args.dataset)
    generation = gen_kwargs.apply_generation(args)
    spec = lm_eval_model.one_batch_size(lm_eval_model.chat_model_args(spec, args), args)
    # --
    evaluation = flag_settings.evaluation_settings(args, limit=1 if isinstance(args.limit, float) else args.limit).with_(**generation)
    scheduler = flag_settings.scheduler_settings(args)
    attacks = attack_settings_from(args) if args.attack else None
    if args.holdout is not None and attacks is None:
        raise UserError("--holdout splits the samples of the attack protocol: add --attack NAME (or drop --holdout)")
    if args.prompt_text is not None and not args.prompt_text.strip():
        raise UserError("--prompt-text is empty: give the instruction text, or drop the flag to use the stored prompts")
    flag_settings.check_paths(args)
    code = 0
    for dataset in datasets:  # one run folder per dataset, as lm-eval writes one result per task
        one = evaluation.with_(dataset=dataset, limit=aliases.resolve_limit(args, dataset))
        fraction = {"limit_fraction": args.limit} if isinstance(args.limit, float) else {}
        per = argparse.Namespace(**{**vars(args), "dataset": dataset, "limit": one.limit, **fraction})
        code = max(code, run_sync(lambda per=per, one=one: _run(per, spec, one, scheduler, attacks)))
    return code


async def _run(args: argparse.Namespace, spec: Any, evaluation: Any, scheduler: Any, attacks: Any) -> int:
    from promptrobust.engine.runs.prompt_choice import choose_prompts
    from promptrobust.engine.runs.run_folder import RunFolder
    from promptrobust.engine.runs.session import Session
    from promptrobust.tasks.registry import get_task

    task = get_task(evaluation.dataset)
    if evaluation.mode == "choices" and not task.supports_choices:
        raise UserError(f"{task.name} answers are free text, so --mode choices cannot score them: use --mode generate")
    shots = evaluation.shots_for(bool(getattr(spec, "base_model", False)))
    prompts = choose_prompts(task.name, prompt_ids=args.prompt, prompt_type=args.prompt_type, text=args.prompt_text,
                             promptbench=args.promptbench, shots=shots)  # bad prompt ids fail before any model loads
    with RunFolder(args.output_dir, [spec.name, task.name]) as folder:
        session = Session(cache=args.cache, settings=scheduler, use_cache=not args.no_cache)
        try:
            bench = await session.workbench(spec, evaluation)
            if evaluation.shots is None and bench.shots:
                print(f"pre: {spec.name} is a base model: {bench.shots}-shot (the paper evaluates base models few-shot; --shots 0 to change)", file=sys.stderr)
            flag_settings.report_sample_count(bench, evaluation)
            folder.write_json("config.json", flag_settings.config_of(args))
            args.configs = {"evaluation": evaluation, "scheduler": scheduler}
            if attacks is not None:
                from promptrobust.cli.attack_options import run_attacks

                code = await run_attacks(args, session, bench, prompts, attacks, folder)
            else:
                from promptrobust.cli.evaluate_prompts import evaluate_and_write

                code = await evaluate_and_write(args, session, bench, prompts, folder)
        finally:
            await session.close()
    print(f"pre: results in {folder.final}", file=sys.stderr)
    return code

