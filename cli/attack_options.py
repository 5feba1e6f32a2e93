"""`pre run --attack`: the paper's protocol on one model and dataset.

Score every prompt of the chosen type, attack the top k (default 3) with each
requested attack, and write one record per (prompt, attack) as soon as it
exists (results.jsonl), then a summary (results.json) and a PDR table.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from promptrobust.cli.errors import UserError, one_line, user_error_types
from promptrobust.engine.attack_job import attack_prompt, rank_prompts
from promptrobust.engine.records import append_jsonl, consolidate_parquet

ALL = "all"


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("attacks (see `pre list attacks`)")
    g.add_argument("--attack", default=None, help="attack name, comma-separated names, or 'all'")
    g.add_argument("--top-k", type=int, default=3, help="attack the k best prompts of the set (the paper's protocol)")
    g.add_argument("--budget", type=int, default=100, help="most candidate prompt evaluations per attacked prompt")
    g.add_argument(
        "--early-stopping",
        default="exact",
        choices=["exact", "off"],
        help="exact: stop candidates that can no longer win (same result as exhaustive); off: score every candidate fully",
    )
    g.add_argument("--chunk-size", type=int, default=32, help="samples per early-stopping round")
    g.add_argument(
        "--attack-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="attack setting, repeatable (e.g. mlm=/models/bert-base-uncased for bertattack); see `pre list attacks`",
    )


def options_for(names: list[str], items: list[str]) -> dict[str, dict[str, str]]:
    """Split --attack-option KEY=VALUE items among the chosen attacks that take KEY."""
    from promptrobust.attacks.registry import attack_options

    per_attack: dict[str, dict[str, str]] = {n: {} for n in names}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError(f"--attack-option {item!r} is not KEY=VALUE (example: --attack-option mlm=/models/bert)")
        takers = [n for n in names if key in attack_options(n)]
        if not takers:
            raise UserError(f"--attack-option {key}: none of {', '.join(names)} takes it; see `pre list attacks`")
        for n in takers:
            per_attack[n][key] = value.strip()
    return per_attack


def attack_names(spec: str) -> list[str]:
    from promptrobust.attacks.registry import list_attacks

    known = [name for name, _ in list_attacks()]
    if spec.strip().lower() == ALL:
        return known
    names = [n.strip().lower() for n in spec.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UserError(f"unknown attack {unknown[0]!r}: use one of {', '.join(known)} or 'all'")
    return names


async def run_attacks(args, session, spec, task, samples, evaluator, prompts, folder) -> int:  # noqa: ANN001
    if args.top_k < 1:
        raise UserError(f"--top-k must be at least 1 (got {args.top_k})")
    if args.budget < 1:
        raise UserError(f"--budget must be at least 1 (got {args.budget})")
    names = attack_names(args.attack)
    per_attack_options = options_for(names, args.attack_option)
    scheduler = evaluator.scheduler
    started = time.monotonic()

    # 1. Clean scores of the whole prompt set, then the top k.
    print(f"pre: scoring {len(prompts)} prompts on {len(samples)} samples", file=sys.stderr)
    clean = await rank_prompts(evaluator, prompts)
    ranked = clean[: args.top_k]

    records: list[dict[str, Any]] = []
    failures: list[str] = []
    user_errors = user_error_types()
    jsonl_path = folder.path("results.jsonl")
    for prompt, clean_score in ranked:
        for name in names:
            print(f"pre: {name} on {prompt.id} (clean {clean_score:.4f})", file=sys.stderr)
            try:
                rec = await attack_prompt(
                    attack_name=name,
                    prompt=prompt,
                    scheduler=scheduler,
                    task=task,
                    samples=samples,
                    examples=evaluator.examples,
                    model_name=spec.name,
                    backend_kind=spec.backend,
                    mode=args.mode,
                    parser=args.parser,
                    shots=args.shots,
                    seed=args.seed,
                    budget=args.budget,
                    early_stopping=args.early_stopping,
                    chunk_size=args.chunk_size,
                    attack_options=per_attack_options[name],
                )
            except user_errors as exc:
                # A missing resource (e.g. no masked LM offline) stops this attack, not the run:
                # finished records stay, and the exit code says something failed.
                failures.append(f"{name} on {prompt.id}: {one_line(exc)}")
                print(f"pre: error: {failures[-1]}", file=sys.stderr)
                continue
            records.append(rec.to_dict())
            append_jsonl(jsonl_path, [rec])
    consolidate_parquet(jsonl_path, folder.path("results.parquet"))

    from promptrobust.cli.run import config_of

    folder.write_json("config.json", config_of(args))
    folder.write_json(
        "results.json",
        {
            "model": spec.name,
            "dataset": task.name,
            "clean_scores": {p.id: s for p, s in clean},
            "attacked": records,
            "failures": failures,
            "wall_seconds": round(time.monotonic() - started, 3),
            "scheduler": scheduler.stats.snapshot(),
            "cache": session.cache.summary() if session.cache is not None else None,
        },
    )
    if records:
        print_pdr_table(records)
    if failures:
        print(f"pre: {len(failures)} attack runs failed; the other results are in the run folder", file=sys.stderr)
        return 1
    return 0


def print_pdr_table(records: list[dict[str, Any]]) -> None:
    header = f"{'attack':<12} {'prompt':<16} {'clean':>7} {'attacked':>8} {'PDR':>7} {'cands':>5} {'requests':>8} {'sent':>6} {'hits':>6} {'saved(ES)':>9} {'secs':>7}"
    print(header)
    for r in records:
        print(
            f"{r['attack']:<12} {r['prompt_id']:<16} {r['clean_score']:>7.4f} {r['adversarial_score']:>8.4f} "
            f"{r['pdr']:>7.4f} {r['candidate_evaluations']:>5} {r['model_requests']:>8} {r['requests_sent']:>6} "
            f"{r['cache_hits']:>6} {r['saved_by_early_stopping']:>9} {r['wall_seconds']:>7.1f}"
        )
    for r in records:
        if r["adversarial_prompt"] != r["clean_prompt"]:
            print(f"\n[{r['attack']} / {r['prompt_id']}] {r['adversarial_prompt']}")
