"""Shared by the sharding and Ray executor tests: a small offline sweep and how to compare its records."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from promptrobust.engine.measuring.records import read_jsonl
from promptrobust.engine.measuring.settings import AttackSettings, EvaluationSettings
from promptrobust.engine.serving.scheduler_settings import SchedulerSettings
from promptrobust.engine.runs.sweep.config import SweepConfig
from promptrobust.engine.serving.types import Completion, Request

#: Record fields that depend on timing or on what another process had cached.
VOLATILE = ("cost",)


def hashed_answer(request: Request) -> Completion:
    """A deterministic 'model' whose answers depend on the whole input (so attacks find something)."""
    h = int(hashlib.sha1(request.input_text().encode()).hexdigest(), 16)
    if request.kind == "score_choices":
        return Completion(choice_logprobs=tuple(-0.1 if (h >> i) % 3 else -3.0 for i, _ in enumerate(request.choices)))
    return Completion(text="positive" if h % 3 else "negative", completion_tokens=1)


def hashed_text_answer(text: str) -> str:
    """The same idea for FakeOpenAIServer(answer=...)."""
    return "positive" if int(hashlib.sha1(text.encode()).hexdigest(), 16) % 3 else "negative"


def small_config(out: Path, *, cache: Path | None = None, models: tuple[str, ...] = ("openai:fake-a", "openai:fake-b", "openai:fake-c", "openai:fake-d"),
                 name: str = "grid", **changes: Any) -> SweepConfig:
    """4 models x 1 dataset (the offline one) x 2 prompt types x 2 attacks = 16 jobs, 8 cells, 32 records."""
    cfg = SweepConfig(
        name=name,
        output_dir=out,
        models=models,
        datasets=("rotten_tomatoes",),
        attacks=("checklist", "stresstest"),
        prompt_types=("task", "role"),
        shots=(0,),
        evaluation=EvaluationSettings(dataset="rotten_tomatoes", limit=6),
        attack=AttackSettings(attacks=("checklist",), top_k=2, budget=6),
        scheduler=SchedulerSettings(concurrency=2),
        cache=str(cache) if cache else None,
        max_jobs=4,
    )
    return cfg.with_(**changes) if changes else cfg


def stable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records without their time and cost counters, in a fixed order."""
    out = [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows]
    return sorted(out, key=lambda r: (r["job_id"], r["prompt_id"]))


def records(folder: Path) -> list[dict[str, Any]]:
    return read_jsonl(folder / "results.jsonl")
