"""`pre eval --prompts FILE`: score a given list of prompts, or of (clean,
adversarial) prompt pairs, on a model and dataset.

Also holds the argument and session helpers that `pre transfer` and
`pre defend` share.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from promptrobust.cli.errors import UserError
from promptrobust.cli.run import add_output_arguments, add_scheduler_arguments

NAME = "eval"
HELP = "score the prompts of a file (or clean/adversarial pairs, with their PDR) on a dataset"

EPILOG = """\
examples:
  pre eval --prompts my_prompts.txt --limit 100           # one prompt a line
  pre eval --prompts pairs.jsonl --dataset rotten_tomatoes  # {"id":..,"clean":..,"adversarial":..}
  pre eval --prompts pairs.csv --model openai:gpt-4o-mini --rpm 500

FILE formats (chosen by extension):
  .jsonl   one JSON object a line: {"prompt": ...} (or "text"), or
           {"clean": ..., "adversarial": ...}; optional "id" and "attack"
  .json    a list of such objects
  .csv/.tsv  a header row with the same column names
  other    plain text, one prompt a line (blank lines and lines starting with # skipped)

With pairs, the run folder's results.jsonl holds one attack record per pair
(attack name from the "attack" column, else "given"), so `pre report` reads it.
"""


# --------------------------------------------------------------------------- shared arguments


def add_common_arguments(p: argparse.ArgumentParser, *, from_records: bool = False) -> None:
    """Model, data, query and output options. With ``from_records`` the data
    options default to None: the source records' own settings are used."""
    g = p.add_argument_group("model and data")
    if from_records:
        g.add_argument("--model", default=None, help="model to score on (registry name, HF id/folder, or BACKEND:ID)")
    else:
        g.add_argument("--model", default="smollm2-135m-instruct", help="registry name, HF id/folder, or BACKEND:ID (hf, vllm, openai)")
    g.add_argument("--model-args", default="", help="backend arguments key=value,... e.g. dtype=bfloat16,batch_size=8")
    keep = " (default: the source records')" if from_records else ""
    g.add_argument("--dataset", default=None if from_records else "rotten_tomatoes", help=f"dataset name{keep}")
    g.add_argument("--data-dir", default=None, help="read the dataset from local files in this folder")
    g.add_argument("--data-file", default=None, help="read the dataset from this local file (parquet, jsonl, csv, tsv)")
    g.add_argument("--limit", type=int, default=None, help=f"evaluate at most this many samples{keep or ' (default: the paper sample size)'}")
    g.add_argument("--shots", type=int, default=None if from_records else 0, help=f"few-shot examples before each sample{keep}")
    g.add_argument("--seed", type=int, default=None if from_records else 0, help=f"seed for data and few-shot sampling{keep}")
    g = p.add_argument_group("how to query the model")
    g.add_argument("--mode", default=None if from_records else "choices", choices=["choices", "generate"], help=f"choices: label log-probs; generate: decode and parse{keep}")
    g.add_argument("--parser", default=None if from_records else "last_word", choices=["last_word", "robust"], help=f"answer parser in generate mode{keep}")
    add_scheduler_arguments(g)
    g = p.add_argument_group("where things go")
    add_output_arguments(g)


def validate_common(args: argparse.Namespace) -> None:
    """The checks of `pre run` (reused), tolerating options left to the records."""
    from promptrobust.cli.run import _validate

    filled = argparse.Namespace(**{**vars(args), "shots": args.shots or 0})
    _validate(filled)
    if args.seed is not None and args.seed < 0:
        raise UserError(f"--seed must be 0 or more (got {args.seed})")


def session_for(args: argparse.Namespace) -> Any:
    from promptrobust.engine.session import SchedulerSettings, Session

    settings = SchedulerSettings(concurrency=args.concurrency, batch_size=args.batch_size, rpm=args.rpm, tpm=args.tpm)
    return Session(cache=args.cache, settings=settings, use_cache=not args.no_cache)


def resolve_spec(name: str, model_args: str) -> Any:
    from promptrobust.engine.registry import parse_model_args, resolve_model

    return resolve_model(name, parse_model_args(model_args))


def run_async(coro_fn: Any, args: argparse.Namespace) -> int:
    from promptrobust.engine.session import use_uvloop

    use_uvloop()
    return asyncio.run(coro_fn(args))


def config_of(args: argparse.Namespace) -> dict[str, Any]:
    return {k: v for k, v in sorted(vars(args).items()) if k not in ("handler", "command")}


def input_format(scheduler: Any) -> str:
    return "chat" if scheduler.backend.is_chat else "completion"


# --------------------------------------------------------------------------- prompt files


@dataclass(frozen=True)
class PromptItem:
    """One line of a prompts file: a single prompt, or a clean/adversarial pair."""

    id: str
    prompt: str | None = None
    clean: str | None = None
    adversarial: str | None = None
    attack: str = "given"

    @property
    def is_pair(self) -> bool:
        return self.clean is not None


def read_prompt_file(path: str | Path) -> list[PromptItem]:
    """Prompts (or pairs) from a JSONL, JSON, CSV/TSV or plain text file."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"--prompts {path} does not exist; pass a .jsonl, .csv or .txt file of prompts")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(f"--prompts {path} is not UTF-8 text; save it as UTF-8") from None
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append((n, orjson.loads(line)))
                except orjson.JSONDecodeError:
                    raise UserError(f"{path} line {n} is not valid JSON; write one JSON object per line") from None
    elif suffix == ".json":
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError:
            raise UserError(f"{path} is not valid JSON; write a list of prompt objects") from None
        if not isinstance(data, list):
            raise UserError(f"{path} must hold a JSON list of prompt objects")
        rows = list(enumerate(data, 1))
    elif suffix in (".csv", ".tsv"):
        reader = csv.DictReader(text.splitlines(), delimiter="\t" if suffix == ".tsv" else ",")
        known = {"prompt", "text", "clean", "adversarial"}
        if not reader.fieldnames or not known & {f.strip().lower() for f in reader.fieldnames}:
            raise UserError(f"{path} needs a header row with a 'prompt' column, or 'clean' and 'adversarial' columns")
        rows = [(n, {(k or "").strip().lower(): v for k, v in row.items()}) for n, row in enumerate(reader, 2)]
    else:
        rows = [
            (n, line.rstrip("\r"))
            for n, line in enumerate(text.split("\n"), 1)
            if line.strip() and not line.lstrip().startswith("#")
        ]
    items = [_item(path, n, row) for n, row in rows]
    if not items:
        raise UserError(f"--prompts {path} holds no prompts")
    kinds = {it.is_pair for it in items}
    if len(kinds) > 1:
        raise UserError(f"{path} mixes single prompts and clean/adversarial pairs; put them in separate files")
    ids = [it.id for it in items]
    dup = next((i for i in ids if ids.count(i) > 1), None)
    if dup is not None:
        raise UserError(f"{path}: id {dup!r} appears more than once; ids must be unique")
    return items


def _item(path: Path, n: int, row: Any) -> PromptItem:
    where = f"{path} entry {n}"
    if isinstance(row, str):
        if not row.strip():
            raise UserError(f"{where} is an empty prompt")
        return PromptItem(id=f"p{n}", prompt=row)
    if not isinstance(row, dict):
        raise UserError(f"{where} must be a prompt string or an object with 'prompt' or 'clean'/'adversarial'")
    rid = str(row.get("id") or f"p{n}")
    attack = str(row.get("attack") or "given")
    clean, adv = row.get("clean"), row.get("adversarial")
    if clean is not None or adv is not None:
        if not (isinstance(clean, str) and clean.strip() and isinstance(adv, str) and adv.strip()):
            raise UserError(f"{where} needs both a non-empty 'clean' and 'adversarial' prompt")
        return PromptItem(id=rid, clean=clean, adversarial=adv, attack=attack)
    prompt = row.get("prompt", row.get("text"))
    if not isinstance(prompt, str) or not prompt.strip():
        raise UserError(f"{where} has no 'prompt' (or 'text'), nor 'clean' and 'adversarial'")
    return PromptItem(id=rid, prompt=prompt, attack=attack)


# --------------------------------------------------------------------------- the command


def add_parser(sub: Any, formatter: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser(NAME, help=HELP, description=HELP, epilog=EPILOG, formatter_class=formatter)
    p.add_argument("--prompts", required=True, metavar="FILE", help="prompts file (.jsonl, .json, .csv, .tsv or text)")
    add_common_arguments(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    validate_common(args)
    items = read_prompt_file(args.prompts)
    return run_async(lambda a: _run(a, items), args)


async def _run(args: argparse.Namespace, items: list[PromptItem]) -> int:
    from promptrobust.cli.output import RunFolder
    from promptrobust.engine.session import few_shot
    from promptrobust.tasks.registry import get_task

    spec = resolve_spec(args.model, args.model_args)
    task = get_task(args.dataset)
    if spec.base_model and args.shots == 0:
        print(f"pre: {spec.name} is a base model: using --shots 3", file=sys.stderr)
        args.shots = 3
    samples = task.load(limit=args.limit, seed=args.seed, data_dir=args.data_dir, data_file=args.data_file)
    examples = few_shot(task, args.shots, seed=args.seed, data_dir=args.data_dir)
    with RunFolder(args.output_dir, ["eval", spec.name, task.name]) as folder:
        session = session_for(args)
        try:
            scheduler = await session.scheduler(spec)
            if items[0].is_pair:
                summary = await _eval_pairs(args, spec, task, samples, examples, scheduler, items, folder)
            else:
                summary = await _eval_singles(args, spec, task, samples, examples, scheduler, items, folder)
            summary["scheduler"] = scheduler.stats.snapshot()
            summary["cache"] = session.cache.summary() if session.cache is not None else None
        finally:
            await session.close()
        folder.write_json("config.json", config_of(args))
        folder.write_json("results.json", summary)
    final = folder.final
    print(f"pre: results in {final}", file=sys.stderr)
    return 0


def _base_summary(args: argparse.Namespace, spec: Any, task: Any, samples: list[Any], scheduler: Any) -> dict[str, Any]:
    return {
        "model": spec.name,
        "backend": spec.backend,
        "dataset": task.name,
        "metric": task.metric.name,
        "mode": args.mode,
        "parser": args.parser if args.mode == "generate" else None,
        "input_format": input_format(scheduler),
        "shots": args.shots,
        "seed": args.seed,
        "samples": len(samples),
        "prompts_file": str(args.prompts),
    }


async def _eval_singles(args, spec, task, samples, examples, scheduler, items, folder) -> dict[str, Any]:
    from promptrobust.engine.analysis import markdown_table, score_prompts, write_csv

    started = time.monotonic()
    scores, _ = await score_prompts(
        scheduler, task, samples, [it.prompt for it in items], mode=args.mode, parser=args.parser, examples=examples
    )
    rows = [{"id": it.id, "score": s, "prompt": it.prompt} for it, s in zip(items, scores)]
    summary = _base_summary(args, spec, task, samples, scheduler)
    summary.update(prompts=rows, mean_score=sum(scores) / len(scores), wall_seconds=round(time.monotonic() - started, 3))
    folder.path("results.md").write_text(markdown_table(rows, ["id", "score", "prompt"]), encoding="utf-8")
    write_csv(folder.path("results.csv"), rows, ["id", "score", "prompt"])
    print(f"{spec.name} on {task.name} ({len(samples)} samples, {args.mode}), metric {task.metric.name}")
    width = max(len(r["id"]) for r in rows)
    print(f"{'id':<{width}}  score   prompt")
    for r in rows:
        print(f"{r['id']:<{width}}  {r['score']:.4f}  {_short(r['prompt'])}")
    print(f"mean {summary['mean_score']:.4f}")
    return summary


async def _eval_pairs(args, spec, task, samples, examples, scheduler, items, folder) -> dict[str, Any]:
    from promptrobust.engine.analysis import apdr_summary, markdown_table, score_pairs, write_csv
    from promptrobust.engine.records import AttackRecord, append_jsonl, consolidate_parquet

    started = time.monotonic()
    scored = await score_pairs(
        scheduler, task, samples, [(it.clean, it.adversarial) for it in items],
        mode=args.mode, parser=args.parser, examples=examples,
    )
    fmt = input_format(scheduler)
    records = [
        AttackRecord(
            model=spec.name, backend=spec.backend, dataset=task.name, prompt_id=it.id, prompt_type="given",
            shots=args.shots, attack=it.attack, clean_prompt=ps.clean_prompt, clean_score=ps.clean_score,
            adversarial_prompt=ps.adversarial_prompt, adversarial_score=ps.adversarial_score, pdr=ps.pdr,
            candidate_evaluations=2, model_requests=ps.requests, requests_sent=ps.requests_sent,
            cache_hits=ps.cache_hits, deduplicated=ps.deduplicated, saved_by_early_stopping=0,
            pruned_candidates=0, early_stopping="off", wall_seconds=ps.wall_seconds, seed=args.seed,
            samples=len(samples), mode=args.mode, parser=args.parser if args.mode == "generate" else None,
            input_format=fmt, budget=None, metric=task.metric.name,
            settings={"analysis": "eval", "prompts_file": str(args.prompts)},
        )
        for it, ps in zip(items, scored)
    ]
    append_jsonl(folder.path("results.jsonl"), records)
    consolidate_parquet(folder.path("results.jsonl"), folder.path("results.parquet"))
    rows = [
        {"id": r.prompt_id, "attack": r.attack, "clean": r.clean_score, "adversarial": r.adversarial_score, "pdr": r.pdr}
        for r in records
    ]
    per_attack = apdr_summary(rows, ["attack"])
    folder.path("results.md").write_text(
        markdown_table(rows) + "\n" + markdown_table(per_attack), encoding="utf-8"
    )
    write_csv(folder.path("results.csv"), rows)
    summary = _base_summary(args, spec, task, samples, scheduler)
    summary.update(pairs=rows, apdr=per_attack, wall_seconds=round(time.monotonic() - started, 3))
    print(f"{spec.name} on {task.name} ({len(samples)} samples, {args.mode}), metric {task.metric.name}")
    width = max(len(r["id"]) for r in rows)
    print(f"{'id':<{width}}  {'attack':<12} {'clean':>7} {'advers.':>7} {'PDR':>7}")
    for r in rows:
        print(f"{r['id']:<{width}}  {r['attack']:<12} {r['clean']:>7.4f} {r['adversarial']:>7.4f} {r['pdr']:>7.4f}")
    for a in per_attack:
        print(f"APDR {a['attack']}: {a['pdr_mean']:.4f} ± {a['pdr_std']:.4f} (n={a['n']})")
    return summary


def _short(text: str, width: int = 70) -> str:
    one = " ".join(text.split())
    return one if len(one) <= width else one[: width - 1] + "…"
