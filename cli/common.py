"""The flag groups shared by every command that queries a model.

Each ``add_*`` registers one group of flags; ``cli/flag_settings.py`` turns the
parsed flags into the validated settings values the library takes.
"""

from __future__ import annotations

import argparse

from promptrobust.engine.measuring.settings import AttackSettings
from promptrobust.engine.serving.scheduler_settings import SchedulerSettings


def add_model_arguments(g: argparse._ArgumentGroup, *, default: str | None = "") -> None:
    from promptrobust.engine.serving.registry import DEFAULT_MODEL

    default = DEFAULT_MODEL if default == "" else default
    g.add_argument("--model", default=default, help="registry name, HF id/folder, or BACKEND:ID (hf, vllm, openai, random)")
    g.add_argument(
        "--model-args",
        default="",
        help="backend arguments key=value,... e.g. dtype=bfloat16,batch_size=8 or base_url=http://host:8000/v1",
    )


def add_data_arguments(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--dataset", default="rotten_tomatoes", help="dataset name, or several comma-separated (one run folder each; see `pre list datasets`)")
    g.add_argument("--data-dir", default=None, help="read the dataset from local files in this folder instead of the hub")
    g.add_argument("--data-file", default=None, help="read the dataset from this local file (parquet, jsonl, csv, tsv)")
    from promptrobust.cli.aliases import limit_value

    g.add_argument("--limit", type=limit_value, default=None, help="evaluate at most this many samples, or a fraction of the dataset such as 0.1 (default: the paper's sample size)")
    g.add_argument("--shots", type=int, default=None, help="few-shot examples before each sample (default: 0, or 3 for base models, as the paper)")
    g.add_argument("--seed", type=int, default=0, help="seed for the sample order and the attacks")
    g.add_argument("--sample-selection", default="seeded", choices=["seeded", "first"],
                   help="seeded: a seeded random draw of the samples; first: the first rows of the split, as the paper takes them")


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
    g.add_argument("--batch-size", type=int, default=None, help="micro-batch size for in-process backends, the one place to set it (--model-args batch_size= means the same; default: the backend's)")
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
    g.add_argument("--no-progress", action="store_true",
                   help="no progress line or phase lines; one status line every 30 s still shows a long job is alive "
                        "($PRE_PROGRESS_EVERY seconds; PRE_PROGRESS=off for none)")


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
        "--holdout", type=float, default=None, metavar="FRACTION",
        help="hold out this fraction of the samples from the ranking and the search, and report the chosen prompts' "
        "scores and PDRs on them beside the in-sample ones (e.g. --limit 200 --holdout 0.5)",
    )
    g.add_argument(
        "--attack-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="attack setting, repeatable (e.g. mlm=/models/bert-base-uncased for bertattack); see `pre list attacks`",
    )
