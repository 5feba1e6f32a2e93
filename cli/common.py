"""Arguments shared by every command that queries a model, and their settings objects.

Each ``add_*`` registers one group of flags; each ``*_settings(args)`` turns
the parsed flags into the validated settings value the library takes. A
command never validates a number itself: the settings' ``__post_init__`` does,
and a bad value becomes one line and exit code 2.
"""

from __future__ import annotations

import argparse
from typing import Any

from promptrobust.engine.settings import (
    AttackSettings,
    EvaluationSettings,
    SchedulerSettings,
    SettingsError,
    parse_budget,
)


def add_model_arguments(g: argparse._ArgumentGroup, *, default: str | None = "") -> None:
    from promptrobust.engine.registry import DEFAULT_MODEL

    default = DEFAULT_MODEL if default == "" else default
    g.add_argument("--model", default=default, help="registry name, HF id/folder, or BACKEND:ID (hf, vllm, openai, random)")
    g.add_argument(
        "--model-args",
        default="",
        help="backend arguments key=value,... e.g. dtype=bfloat16,batch_size=8 or base_url=http://host:8000/v1",
    )


def add_data_arguments(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--dataset", default="rotten_tomatoes", help="dataset name (see `pre list datasets`)")
    g.add_argument("--data-dir", default=None, help="read the dataset from local files in this folder instead of the hub")
    g.add_argument("--data-file", default=None, help="read the dataset from this local file (parquet, jsonl, csv, tsv)")
    g.add_argument("--limit", type=int, default=None, help="evaluate at most this many samples (default: the paper's sample size)")
    g.add_argument("--shots", type=int, default=None, help="few-shot examples before each sample (default: 0, or 3 for base models, as the paper)")
    g.add_argument("--seed", type=int, default=0, help="seed for the sample order and the attacks")


def add_query_arguments(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "--mode",
        default="generate",
        choices=["generate", "choices"],
        help="generate: decode and parse the answer (the paper); choices: score label log-probs (fast, no parse failures)",
    )
    g.add_argument("--parser", default="last_word", choices=["last_word", "robust"], help="answer parser in generate mode (last_word is the paper's rule)")
    g.add_argument("--max-tokens", type=int, default=None, help="most new tokens in generate mode (default: the paper's 20 for label tasks)")


def add_scheduler_arguments(g: argparse._ArgumentGroup) -> None:
    """Limits of the model's scheduler (shared by every command that queries a model)."""
    d = SchedulerSettings()
    g.add_argument("--concurrency", type=int, default=d.concurrency, help="requests in flight at once (HTTP and vLLM backends)")
    g.add_argument("--batch-size", type=int, default=None, help="micro-batch size for in-process backends (default: the backend's)")
    g.add_argument("--rpm", type=float, default=None, help="requests-per-minute limit (API backends; default: none)")
    g.add_argument("--tpm", type=float, default=None, help="tokens-per-minute limit (API backends; default: none)")
    g.add_argument("--max-retries", type=int, default=d.max_retries, help="retries of a failed request (429, 5xx, timeout, malformed answer) before its job fails")
    g.add_argument("--request-timeout", type=float, default=None, help="seconds one call to an HTTP or vLLM backend may take before it is retried (default: the backend's; in-process hf calls are not cut short)")


def add_output_arguments(g: argparse._ArgumentGroup) -> None:
    """Where answers and run folders go, and what is shown while running."""
    g.add_argument("--cache", default=None, help="score cache file (default: ~/.cache/promptrobust/scores.sqlite or $PRE_CACHE_DIR)")
    g.add_argument("--no-cache", action="store_true", help="do not read or write the score cache")
    g.add_argument("--output-dir", default="runs", help="folder that receives one run folder per invocation")
    g.add_argument("--log-samples", action="store_true", help="write samples.jsonl with every input, answer and score")
    g.add_argument("--no-progress", action="store_true", help="do not draw the progress line")


def add_attack_arguments(p: argparse.ArgumentParser) -> None:
    d = AttackSettings()
    g = p.add_argument_group("attacks (see `pre list attacks`)")
    g.add_argument("--attack", default=None, help="attack name, comma-separated names, or 'all'")
    g.add_argument("--top-k", type=int, default=d.top_k, help="attack the k best prompts of the set (the paper's protocol)")
    g.add_argument(
        "--budget",
        default="unlimited",
        help="most candidate prompt evaluations per attacked prompt: a number, or 'unlimited' (promptbench)",
    )
    g.add_argument(
        "--early-stopping",
        default=d.early_stopping,
        choices=["exact", "off"],
        help="exact: stop candidates that can no longer win (same result as exhaustive); off: score every candidate fully",
    )
    g.add_argument("--chunk-size", type=int, default=d.chunk_size, help="samples per early-stopping round")
    g.add_argument(
        "--attack-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="attack setting, repeatable (e.g. mlm=/models/bert-base-uncased for bertattack); see `pre list attacks`",
    )


#: settings field -> the flag that sets it (so an error names what the user typed)
FLAGS = {
    "limit": "--limit", "seed": "--seed", "shots": "--shots", "mode": "--mode", "parser": "--parser",
    "max_new_tokens": "--max-tokens", "concurrency": "--concurrency", "batch_size": "--batch-size",
    "rpm": "--rpm", "tpm": "--tpm", "max_retries": "--max-retries", "request_timeout": "--request-timeout",
    "top_k": "--top-k", "budget": "--budget", "chunk_size": "--chunk-size", "early_stopping": "--early-stopping",
    "dataset": "--dataset",
}


def _flag_error(exc: SettingsError) -> SettingsError:
    text = str(exc)
    field_name = text.split(" ", 1)[0]
    if field_name in FLAGS:
        text = FLAGS[field_name] + text[len(field_name):]
    return SettingsError(text)


def _build(kind: Any, **values: Any) -> Any:
    try:
        return kind(**values)
    except SettingsError as exc:
        raise _flag_error(exc) from None


def scheduler_settings(args: argparse.Namespace) -> SchedulerSettings:
    return _build(SchedulerSettings,
        concurrency=args.concurrency,
        batch_size=args.batch_size,
        rpm=args.rpm,
        tpm=args.tpm,
        max_retries=getattr(args, "max_retries", SchedulerSettings.max_retries),
        request_timeout=getattr(args, "request_timeout", None),
    )


def evaluation_settings(args: argparse.Namespace) -> EvaluationSettings:
    return _build(EvaluationSettings,
        dataset=args.dataset,
        limit=args.limit,
        seed=args.seed,
        shots=args.shots,
        mode=args.mode,
        parser=args.parser,
        max_new_tokens=getattr(args, "max_tokens", None),
        data_dir=getattr(args, "data_dir", None),
        data_file=getattr(args, "data_file", None),
    )


def attack_settings(args: argparse.Namespace, names: list[str], options: dict[str, dict[str, str]]) -> AttackSettings:
    try:
        budget = parse_budget(args.budget)
    except SettingsError as exc:
        raise _flag_error(exc) from None
    return _build(
        AttackSettings,
        attacks=tuple(names),
        top_k=args.top_k,
        budget=budget,
        early_stopping=args.early_stopping,
        chunk_size=args.chunk_size,
        options={k: v for k, v in options.items() if v},
    )


def config_of(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed command line as written to config.json (no handler objects)."""
    from promptrobust.engine.redact import scrub

    skip = {"handler", "command"}
    return scrub({k: v for k, v in sorted(vars(args).items()) if k not in skip})  # no credentials in base URLs


def check_paths(args: argparse.Namespace) -> None:
    """Data paths that do not exist fail before any model is loaded."""
    import os

    from promptrobust.cli.errors import UserError

    for flag in ("data_dir", "data_file", "promptbench"):
        path = getattr(args, flag, None)
        if path and not os.path.exists(path):
            raise UserError(f"--{flag.replace('_', '-')} {path} does not exist")


def report_sample_count(bench: Any, evaluation: EvaluationSettings) -> None:
    """Say so when --limit asks for more samples than the dataset has."""
    import sys

    if evaluation.limit is not None and len(bench.samples) < evaluation.limit:
        print(
            f"pre: {bench.task.name} has {len(bench.samples)} samples; using all {len(bench.samples)} (--limit {evaluation.limit})",
            file=sys.stderr,
        )
