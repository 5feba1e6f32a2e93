"""`pre run`: score prompts on a dataset (clean metric), optionally attack them."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

from promptrobust.cli import attack_options
from promptrobust.cli.errors import UserError
from promptrobust.cli.output import RunFolder

HELP = "score prompts on a dataset with a model (and attack them with --attack)"

EPILOG = """\
examples:
  pre run                                         # offline: embedded SmolLM2, Rotten Tomatoes, task prompts
  pre run --limit 100 --prompt sst2-task-01,sst2-role-03 --log-samples
  pre run --mode generate --parser robust         # decode answers instead of scoring label log-probs
  pre run --model gemma3-270m --shots 3           # base models need few-shot prompts
  pre run --model openai:gpt-4o-mini --rpm 500 --tpm 200000 --concurrency 64
  pre run --model vllm:meta-llama/Llama-2-13b-chat-hf --dataset mnli --limit 1000

The run folder (under --output-dir) holds config.json (the exact settings),
results.json (scores, cost, cache and scheduler counters) and, with
--log-samples, samples.jsonl (one line per prompt x sample).
"""


def add_parser(sub: Any, formatter: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser("run", help=HELP, description=HELP, epilog=EPILOG, formatter_class=formatter)
    g = p.add_argument_group("what to evaluate")
    g.add_argument("--model", default="smollm2-135m-instruct", help="registry name, HF id/folder, or BACKEND:ID (hf, vllm, openai)")
    g.add_argument("--model-args", default="", help="backend arguments key=value,... e.g. dtype=bfloat16,batch_size=8 or base_url=http://host:8000/v1")
    g.add_argument("--dataset", default="rotten_tomatoes", help="dataset name (see `pre list datasets`)")
    g.add_argument("--data-dir", default=None, help="read the dataset from local files in this folder instead of the hub")
    g.add_argument("--data-file", default=None, help="read the dataset from this local file (parquet, jsonl, csv, tsv)")
    g.add_argument("--prompt", default=None, help="prompt ids, comma-separated (see `pre list prompts --dataset X`)")
    g.add_argument("--prompt-type", default="task", choices=["task", "role", "semantic", "all"], help="prompt set used when --prompt is not given")
    g.add_argument("--prompt-text", default=None, help="evaluate this literal instruction instead of a stored prompt")
    g.add_argument("--limit", type=int, default=None, help="evaluate at most this many samples (default: the paper's sample size)")
    g.add_argument("--shots", type=int, default=0, help="few-shot examples placed before each sample (the paper uses 0 or 3)")
    g.add_argument("--seed", type=int, default=0, help="seed for sampling data, few-shot examples and attacks")
    g = p.add_argument_group("how to query the model")
    g.add_argument("--mode", default="choices", choices=["choices", "generate"], help="choices: score label log-probs (fast, no parse failures); generate: decode and parse the answer")
    g.add_argument("--parser", default="last_word", choices=["last_word", "robust"], help="answer parser in generate mode (last_word is the paper's rule)")
    add_scheduler_arguments(g)
    g = p.add_argument_group("where things go")
    add_output_arguments(g)
    g.add_argument("--log-samples", action="store_true", help="write samples.jsonl with every input, answer and score")
    g.add_argument("--no-progress", action="store_true", help="do not draw the progress line")
    attack_options.add_arguments(p)
    p.set_defaults(handler=handle)


def add_scheduler_arguments(g: argparse._ArgumentGroup) -> None:
    """Limits of the model's scheduler (shared by every command that queries a model)."""
    g.add_argument("--concurrency", type=int, default=64, help="requests in flight at once (HTTP and vLLM backends)")
    g.add_argument("--batch-size", type=int, default=None, help="micro-batch size for in-process backends (default: the backend's)")
    g.add_argument("--rpm", type=float, default=None, help="requests-per-minute limit (API backends)")
    g.add_argument("--tpm", type=float, default=None, help="tokens-per-minute limit (API backends)")


def add_output_arguments(g: argparse._ArgumentGroup) -> None:
    """Where answers and run folders go."""
    g.add_argument("--cache", default=None, help="score cache file (default: ~/.cache/promptrobust/scores.sqlite or $PRE_CACHE_DIR)")
    g.add_argument("--no-cache", action="store_true", help="do not read or write the score cache")
    g.add_argument("--output-dir", default="runs", help="folder that receives one run folder per invocation")


def handle(args: argparse.Namespace) -> int:
    from promptrobust.engine.session import use_uvloop

    _validate(args)
    use_uvloop()
    return asyncio.run(_run(args))


def _validate(args: argparse.Namespace) -> None:
    if args.limit is not None and args.limit < 1:
        raise UserError(f"--limit must be at least 1 (got {args.limit})")
    if args.shots < 0:
        raise UserError(f"--shots must be 0 or more (got {args.shots})")
    if args.concurrency < 1:
        raise UserError(f"--concurrency must be at least 1 (got {args.concurrency})")
    if args.batch_size is not None and args.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1 (got {args.batch_size})")
    for flag in ("rpm", "tpm"):
        value = getattr(args, flag)
        if value is not None and value <= 0:
            raise UserError(f"--{flag} must be positive (got {value})")
    for flag in ("data_dir", "data_file"):
        path = getattr(args, flag)
        if path and not os.path.exists(path):
            raise UserError(f"--{flag.replace('_', '-')} {path} does not exist")


def resolve_prompts(task_name: str, args: argparse.Namespace) -> list[Any]:
    from promptrobust.tasks.base import Prompt
    from promptrobust.tasks.prompt_sets import get_prompt, load_prompts

    if args.prompt_text:
        return [Prompt(id="custom", dataset=task_name, type="task", text=args.prompt_text)]
    if args.prompt:
        return [get_prompt(task_name, pid.strip()) for pid in args.prompt.split(",") if pid.strip()]
    types = ["task", "role"] if args.prompt_type == "all" else [args.prompt_type]
    prompts = load_prompts(task_name, types=types)
    if not prompts:
        raise UserError(f"dataset {task_name} has no {args.prompt_type} prompts; see `pre list prompts --dataset {task_name}`")
    return prompts


def config_of(args: argparse.Namespace) -> dict[str, Any]:
    skip = {"handler", "command"}
    return {k: v for k, v in sorted(vars(args).items()) if k not in skip}


async def _run(args: argparse.Namespace) -> int:
    from promptrobust.engine.registry import parse_model_args, resolve_model
    from promptrobust.engine.session import Session, SchedulerSettings, few_shot
    from promptrobust.tasks.registry import get_task

    spec = resolve_model(args.model, parse_model_args(args.model_args))
    task = get_task(args.dataset)
    prompts = resolve_prompts(task.name, args)
    if spec.base_model and args.shots == 0:
        print(f"pre: {spec.name} is a base model: using --shots 3 (the paper evaluates base models few-shot)", file=sys.stderr)
        args.shots = 3
    samples = task.load(limit=args.limit, seed=args.seed, data_dir=args.data_dir, data_file=args.data_file)
    examples = few_shot(task, args.shots, seed=args.seed, data_dir=args.data_dir)
    settings = SchedulerSettings(concurrency=args.concurrency, batch_size=args.batch_size, rpm=args.rpm, tpm=args.tpm)
    with RunFolder(args.output_dir, [spec.name, task.name]) as folder:
        session = Session(cache=args.cache, settings=settings, use_cache=not args.no_cache)
        try:
            code = await _evaluate_and_write(args, session, spec, task, samples, examples, prompts, folder)
        finally:
            await session.close()
    final = folder.final
    print(f"pre: results in {final}", file=sys.stderr)
    return code


async def _evaluate_and_write(args, session, spec, task, samples, examples, prompts, folder) -> int:  # noqa: ANN001
    from promptrobust.cli.progress import Progress
    from promptrobust.engine.evaluator import Evaluator

    scheduler = await session.scheduler(spec)
    evaluator = Evaluator(scheduler, task, samples, mode=args.mode, parser=args.parser, examples=examples)
    if args.attack:
        return await attack_options.run_attacks(args, session, spec, task, samples, evaluator, prompts, folder)

    current = {"i": 0}
    progress = Progress(
        len(prompts) * len(samples),
        scheduler.stats.snapshot,
        label=lambda: f"[prompt {min(current['i'] + 1, len(prompts))}/{len(prompts)}] ",
        enabled=not args.no_progress,
    )
    started = time.monotonic()
    progress.start()
    rows = []
    samples_file = folder.path("samples.jsonl").open("wb") if args.log_samples else None
    try:
        for i, prompt in enumerate(prompts):
            current["i"] = i
            ev = await evaluator.evaluate(prompt.text, keep_records=args.log_samples)
            rows.append(
                {
                    "prompt_id": prompt.id,
                    "prompt_type": prompt.type,
                    "language": prompt.language,
                    "prompt": prompt.text,
                    "score": ev.score,
                    "samples": ev.samples,
                    "unparseable": ev.unparseable,
                }
            )
            if samples_file is not None:
                import orjson

                for rec in ev.records:
                    samples_file.write(orjson.dumps({"prompt_id": prompt.id, **rec.__dict__}, default=str) + b"\n")
    finally:
        await progress.stop()
        if samples_file is not None:
            samples_file.close()
    wall = time.monotonic() - started
    record = {
        "model": spec.name,
        "backend": spec.backend,
        "model_identity": _identity_dict(scheduler),
        "dataset": task.name,
        "metric": task.metric.name,
        "mode": args.mode,
        "parser": args.parser if args.mode == "generate" else None,
        "input_format": "chat" if evaluator.chat else "completion",
        "shots": args.shots,
        "samples": len(samples),
        "prompts": rows,
        "mean_score": sum(r["score"] for r in rows) / len(rows),
        "wall_seconds": round(wall, 3),
        "scheduler": scheduler.stats.snapshot(),
        "cache": session.cache.summary() if session.cache is not None else None,
    }
    folder.write_json("config.json", config_of(args))
    folder.write_json("results.json", record)
    _print_table(record)
    return 0


def _identity_dict(scheduler: Any) -> dict[str, Any]:
    ident = scheduler.backend.identity
    return {"backend": ident.backend, "name": ident.name, "revision": ident.revision, "extra": dict(ident.extra)}


def _print_table(record: dict[str, Any]) -> None:
    print(
        f"{record['model']} on {record['dataset']} ({record['samples']} samples, {record['mode']}, "
        f"{record['input_format']}, {record['shots']}-shot), metric {record['metric']}"
    )
    width = max(len(r["prompt_id"]) for r in record["prompts"])
    print(f"{'prompt':<{width}}  score   unparseable")
    for r in record["prompts"]:
        print(f"{r['prompt_id']:<{width}}  {r['score']:.4f}  {r['unparseable']}")
    s = record["scheduler"]
    print(
        f"mean {record['mean_score']:.4f} | {record['wall_seconds']:.1f}s | requests {s['submitted']} "
        f"(sent {s['backend_requests']}, cache hits {s['cache_hits']}, deduplicated {s['deduplicated']})"
    )
