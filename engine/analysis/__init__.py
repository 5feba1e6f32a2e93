"""Analyses built on finished attacks: re-scoring (clean, adversarial) prompt
pairs on a model (transfer, defense, ``pre eval`` of given pairs) and the
APDR summaries the paper reports (mean +- std of PDR per group).

The attention/importance analysis lives in ``engine.analysis.attention``;
it needs torch and is not imported here.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from promptrobust.attacks.result import performance_drop_rate
from promptrobust.engine.evaluator import Evaluator, Mode
from promptrobust.engine.records import AttackRecord, read_jsonl
from promptrobust.engine.scheduler import Scheduler
from promptrobust.tasks.base import ParserName, Sample, Task

__all__ = [
    "AnalysisInputError",
    "PairScore",
    "SourceRecord",
    "apdr_summary",
    "load_source_records",
    "markdown_table",
    "score_pairs",
    "score_prompts",
]


class AnalysisInputError(ValueError):
    """Source runs or prompt files that cannot be analysed (the CLI exits with code 2)."""


@dataclass(frozen=True)
class SourceRecord:
    """One attack record read from a run folder, with the folder's config."""

    record: AttackRecord
    run_dir: Path
    config: dict[str, Any] = field(default_factory=dict)


def load_source_records(paths: Sequence[str | Path]) -> list[SourceRecord]:
    """Every attack record in ``results.jsonl`` files under ``paths`` (run
    folders, folders of run folders, or the files themselves)."""
    out: list[SourceRecord] = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise AnalysisInputError(f"source {path} does not exist; pass a run folder written by `pre run --attack`")
        files = [path] if path.is_file() else sorted(path.rglob("results.jsonl"))
        if not files:
            raise AnalysisInputError(f"no results.jsonl under {path}; pass run folders written by `pre run --attack`")
        for f in files:
            config = _read_config(f.parent / "config.json")
            for n, row in enumerate(read_jsonl(f), 1):
                missing = [k for k in ("model", "dataset", "attack", "clean_prompt", "adversarial_prompt") if k not in row]
                if missing:
                    raise AnalysisInputError(f"{f} line {n} is not an attack record (missing {', '.join(missing)})")
                out.append(SourceRecord(_record_from(row), f.parent, config))
    if not out:
        raise AnalysisInputError(f"no attack records in {', '.join(map(str, paths))}; run `pre run --attack ...` first")
    return out


def _read_config(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def _record_from(row: dict[str, Any]) -> AttackRecord:
    """An AttackRecord from a JSON row; fields older writers left out get neutral defaults."""
    defaults: dict[str, Any] = {
        "backend": "", "prompt_id": "", "prompt_type": "", "shots": 0, "clean_score": 0.0,
        "adversarial_score": 0.0, "pdr": 0.0, "candidate_evaluations": 0, "model_requests": 0,
        "requests_sent": 0, "cache_hits": 0, "deduplicated": 0, "saved_by_early_stopping": 0,
        "pruned_candidates": 0, "early_stopping": "", "wall_seconds": 0.0, "seed": 0, "samples": 0,
        "mode": "choices", "parser": None, "input_format": "", "budget": None,
    }
    data = {**defaults, **row}
    if not isinstance(data.get("settings"), dict):
        data["settings"] = {}
    return AttackRecord.from_dict(data)


@dataclass
class PairScore:
    """Scores of a clean and an adversarial prompt on the same samples."""

    clean_prompt: str
    adversarial_prompt: str
    clean_score: float
    adversarial_score: float
    pdr: float
    requests: int = 0
    requests_sent: int = 0
    cache_hits: int = 0
    deduplicated: int = 0
    wall_seconds: float = 0.0


async def score_prompts(
    scheduler: Scheduler,
    task: Task,
    samples: Sequence[Sample],
    prompts: Sequence[str],
    *,
    mode: Mode = "choices",
    parser: ParserName = "last_word",
    examples: Sequence[Sample] = (),
) -> tuple[list[float], Evaluator]:
    """Exact scores of ``prompts`` (all submitted as one stream), and the
    evaluator whose counters say what they cost."""
    evaluator = Evaluator(scheduler, task, samples, mode=mode, parser=parser, examples=examples, early_stopping=False)
    scores = await evaluator(list(prompts))
    return [s.score for s in scores], evaluator


async def score_pairs(
    scheduler: Scheduler,
    task: Task,
    samples: Sequence[Sample],
    pairs: Sequence[tuple[str, str]],
    *,
    mode: Mode = "choices",
    parser: ParserName = "last_word",
    examples: Sequence[Sample] = (),
) -> list[PairScore]:
    """Score each (clean, adversarial) pair; pairs run concurrently on the
    shared scheduler, each with its own evaluator so its cost is its own."""
    loop = asyncio.get_running_loop()

    async def one(clean: str, adversarial: str) -> PairScore:
        started = loop.time()
        (c, a), ev = await score_prompts(
            scheduler, task, samples, [clean, adversarial], mode=mode, parser=parser, examples=examples
        )
        counters = ev.requests
        return PairScore(
            clean, adversarial, c, a, performance_drop_rate(c, a),
            requests=counters.requests, requests_sent=counters.sent, cache_hits=counters.cache_hits,
            deduplicated=counters.deduplicated, wall_seconds=round(loop.time() - started, 3),
        )

    return list(await asyncio.gather(*(one(c, a) for c, a in pairs)))


def apdr_summary(rows: Iterable[dict[str, Any]], by: Sequence[str], value: str = "pdr") -> list[dict[str, Any]]:
    """Mean and (population) standard deviation of ``value`` per group: the
    paper's APDR "mean +- std". Groups keep their first-seen order."""
    groups: dict[tuple[Any, ...], list[float]] = {}
    for row in rows:
        groups.setdefault(tuple(row[k] for k in by), []).append(float(row[value]))
    out = []
    for key, values in groups.items():
        mean = math.fsum(values) / len(values)
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))
        out.append({**dict(zip(by, key)), "n": len(values), f"{value}_mean": mean, f"{value}_std": std})
    return out


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """A GitHub-style Markdown table; floats with 4 decimals, pipes escaped."""
    if not rows:
        return "_no rows_\n"
    cols = list(columns or rows[0].keys())

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4f}"
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(cell(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def write_csv(path: str | Path, rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> None:
    """Rows as CSV (UTF-8, header first)."""
    import csv

    cols = list(columns or (rows[0].keys() if rows else []))
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        writer.writeheader()
        for r in rows:
            writer.writerow({c: r.get(c) for c in cols})
