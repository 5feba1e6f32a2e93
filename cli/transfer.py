"""`pre transfer`: do adversarial prompts found on one model hurt another?

Reads the attack records of source run folders, scores every (clean,
adversarial) pair on the target model with the same dataset sample, and
reports the transfer PDR per record and the transfer APDR (mean +- std) per
(source model -> target model, attack), like the paper's Table 6.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from promptrobust.cli.errors import UserError
from promptrobust.cli.eval_cmd import (
    add_common_arguments,
    config_of,
    input_format,
    resolve_spec,
    run_async,
    session_for,
    validate_common,
)

NAME = "transfer"
HELP = "score adversarial prompts found on a source model on a target model (transfer APDR)"

EPILOG = """\
examples:
  pre transfer --source runs/20250101-120000_smollm2-135m-instruct_rotten_tomatoes --model gemma3-270m
  pre transfer --source runs/ --model openai:gpt-4o-mini --attack textbugger,deepwordbug --rpm 500

Each source record is re-scored on the target with the records' own dataset,
sample count, seed, shots and mode unless --dataset/--limit/--seed/--shots/--mode
say otherwise. The run folder holds results.jsonl (one attack record per source
record, attack name kept, source model in settings), transfer.md and
transfer.csv (APDR per source -> target and attack) and records.csv.
"""


def add_parser(sub: Any, formatter: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser(NAME, help=HELP, description=HELP, epilog=EPILOG, formatter_class=formatter)
    p.add_argument("--source", nargs="+", required=True, metavar="RUN_DIR", help="run folders (or folders of them) with attack records")
    p.add_argument("--attack", default=None, help="only records of these attacks (comma-separated)")
    add_common_arguments(p, from_records=True)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    if not args.model:
        raise UserError("pre transfer needs --model TARGET (the model the adversarial prompts are moved to)")
    validate_common(args)
    sources = select_sources(args)
    return run_async(lambda a: _run(a, sources), args)


def select_sources(args: argparse.Namespace) -> list[Any]:
    """Source records after the --dataset and --attack filters."""
    from promptrobust.engine.analysis import AnalysisInputError, load_source_records

    try:
        sources = load_source_records(args.source)
    except AnalysisInputError as exc:
        raise UserError(str(exc)) from None
    if args.dataset:
        sources = [s for s in sources if s.record.dataset == args.dataset]
        if not sources:
            raise UserError(f"no source record is on dataset {args.dataset!r}; drop --dataset to use the records' own")
    if getattr(args, "attack", None):
        wanted = {a.strip().lower() for a in args.attack.split(",") if a.strip()}
        sources = [s for s in sources if s.record.attack.lower() in wanted]
        if not sources:
            raise UserError(f"no source record is from attack(s) {', '.join(sorted(wanted))}")
    return sources


def group_sources(sources: Sequence[Any], args: argparse.Namespace) -> dict[tuple[Any, ...], list[Any]]:
    """Records that share one evaluation setting: (dataset, limit, seed, shots,
    mode, parser, data_dir, data_file), command-line overrides applied."""
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for s in sources:
        r = s.record
        cfg = s.config
        mode = args.mode or r.mode or "choices"
        key = (
            r.dataset,
            args.limit if args.limit is not None else (r.samples or None),
            args.seed if args.seed is not None else r.seed,
            args.shots if args.shots is not None else r.shots,
            mode,
            args.parser or r.parser or "last_word",
            args.data_dir or cfg.get("data_dir"),
            args.data_file or cfg.get("data_file"),
        )
        groups.setdefault(key, []).append(s)
    return groups


def evaluation_setting(key: tuple[Any, ...]) -> tuple[Any, list[Any], list[Any]]:
    """(task, samples, few-shot examples) of one group key."""
    from promptrobust.engine.session import few_shot
    from promptrobust.tasks.registry import get_task

    dataset, limit, seed, shots, _mode, _parser, data_dir, data_file = key
    task = get_task(dataset)
    samples = task.load(limit=limit, seed=seed, data_dir=data_dir, data_file=data_file)
    return task, samples, few_shot(task, shots, seed=seed, data_dir=data_dir)


async def _run(args: argparse.Namespace, sources: list[Any]) -> int:
    from promptrobust.cli.output import RunFolder

    spec = resolve_spec(args.model, args.model_args)
    datasets = sorted({s.record.dataset for s in sources})
    with RunFolder(args.output_dir, ["transfer", spec.name, *datasets[:2]]) as folder:
        session = session_for(args)
        try:
            scheduler = await session.scheduler(spec)
            records = await transfer_records(sources, scheduler, spec.name, spec.backend, group_sources(sources, args))
            stats = scheduler.stats.snapshot()
            cache = session.cache.summary() if session.cache is not None else None
        finally:
            await session.close()
        summary = write_transfer_outputs(folder, records)
        folder.write_json("config.json", config_of(args))
        folder.write_json("results.json", {"target_model": spec.name, "apdr": summary, "scheduler": stats, "cache": cache})
    final = folder.final
    print_transfer(records, summary)
    print(f"pre: results in {final}", file=sys.stderr)
    return 0


async def transfer_records(
    sources: Sequence[Any],
    scheduler: Any,
    target_name: str,
    target_backend: str,
    groups: dict[tuple[Any, ...], list[Any]],
) -> list[Any]:
    """One target-model AttackRecord per source record (same order as ``groups``)."""
    from promptrobust.engine.analysis import score_pairs
    from promptrobust.engine.records import AttackRecord

    out: list[AttackRecord] = []
    for key, members in groups.items():
        task, samples, examples = evaluation_setting(key)
        _, _, seed, shots, mode, parser, _, _ = key
        scored = await score_pairs(
            scheduler, task, samples, [(s.record.clean_prompt, s.record.adversarial_prompt) for s in members],
            mode=mode, parser=parser, examples=examples,
        )
        fmt = input_format(scheduler)
        for s, ps in zip(members, scored):
            r = s.record
            out.append(
                AttackRecord(
                    model=target_name, backend=target_backend, dataset=task.name, prompt_id=r.prompt_id,
                    prompt_type=r.prompt_type, shots=shots, attack=r.attack, clean_prompt=ps.clean_prompt,
                    clean_score=ps.clean_score, adversarial_prompt=ps.adversarial_prompt,
                    adversarial_score=ps.adversarial_score, pdr=ps.pdr, candidate_evaluations=2,
                    model_requests=ps.requests, requests_sent=ps.requests_sent, cache_hits=ps.cache_hits,
                    deduplicated=ps.deduplicated, saved_by_early_stopping=0, pruned_candidates=0,
                    early_stopping="off", wall_seconds=ps.wall_seconds, seed=seed, samples=len(samples),
                    mode=mode, parser=parser if mode == "generate" else None, input_format=fmt, budget=None,
                    metric=task.metric.name,
                    settings={
                        "analysis": "transfer",
                        "source_model": r.model,
                        "source_backend": r.backend,
                        "source_run": str(s.run_dir),
                        "source_clean_score": r.clean_score,
                        "source_adversarial_score": r.adversarial_score,
                        "source_pdr": r.pdr,
                        "source_samples": r.samples,
                    },
                )
            )
    return out


def write_transfer_outputs(folder: Any, records: Sequence[Any]) -> list[dict[str, Any]]:
    """results.jsonl/.parquet, records.csv, transfer.md/.csv; returns the APDR rows."""
    from promptrobust.engine.analysis import apdr_summary, markdown_table, write_csv
    from promptrobust.engine.records import append_jsonl, consolidate_parquet

    append_jsonl(folder.path("results.jsonl"), records)
    consolidate_parquet(folder.path("results.jsonl"), folder.path("results.parquet"))
    rows = [
        {
            "source_model": r.settings["source_model"], "target_model": r.model, "dataset": r.dataset,
            "attack": r.attack, "prompt_id": r.prompt_id, "source_pdr": r.settings["source_pdr"],
            "clean": r.clean_score, "adversarial": r.adversarial_score, "pdr": r.pdr,
        }
        for r in records
    ]
    write_csv(folder.path("records.csv"), rows)
    summary = apdr_summary(rows, ["source_model", "target_model", "attack"])
    for row in summary:
        row["apdr"] = f"{row['pdr_mean']:.2f} ± {row['pdr_std']:.2f}"
    write_csv(folder.path("transfer.csv"), summary)
    md = "## Transfer APDR (source -> target)\n\n" + markdown_table(
        summary, ["source_model", "target_model", "attack", "n", "apdr"]
    ) + "\n## Records\n\n" + markdown_table(rows)
    folder.path("transfer.md").write_text(md, encoding="utf-8")
    return summary


def print_transfer(records: Sequence[Any], summary: Sequence[dict[str, Any]]) -> None:
    print(f"{'source -> target':<44} {'attack':<12} {'prompt':<16} {'clean':>7} {'advers.':>7} {'PDR':>7} {'src PDR':>7}")
    for r in records:
        pair = f"{r.settings['source_model']} -> {r.model}"
        print(
            f"{pair:<44} {r.attack:<12} {r.prompt_id:<16} {r.clean_score:>7.4f} {r.adversarial_score:>7.4f} "
            f"{r.pdr:>7.4f} {r.settings['source_pdr']:>7.4f}"
        )
    print()
    for s in summary:
        print(f"APDR {s['source_model']} -> {s['target_model']} [{s['attack']}]: {s['apdr']} (n={s['n']})")
