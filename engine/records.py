"""Result records: one per (model, dataset, prompt, attack), and where they live.

Records are appended to ``results.jsonl`` the moment they exist (one flushed
line each, so a crash loses nothing finished) and consolidated into
``results.parquet`` for analysis with polars.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import orjson


@dataclass
class AttackRecord:
    model: str
    backend: str
    dataset: str
    prompt_id: str
    prompt_type: str  # task | role (the attacked prompt's set)
    shots: int  # 0 = zero-shot, 3 = few-shot
    attack: str
    clean_prompt: str
    clean_score: float
    adversarial_prompt: str
    adversarial_score: float
    pdr: float  # 1 - adversarial / clean (0 when clean == 0)
    candidate_evaluations: int  # candidate prompts scored (the query budget used)
    model_requests: int  # (prompt, sample) requests the attack asked for
    requests_sent: int  # of those, sent to the backend
    cache_hits: int
    deduplicated: int
    saved_by_early_stopping: int  # (candidate, sample) pairs never requested
    pruned_candidates: int
    early_stopping: str  # exact | off
    wall_seconds: float
    seed: int
    samples: int
    mode: str  # choices | generate
    parser: str | None  # answer parser in generate mode
    input_format: str  # chat | completion
    budget: int | None
    metric: str = ""
    samples_evaluated: int = 0  # (candidate, sample) pairs scored, clean prompt included
    budget_exhausted: bool = False
    perturbed_words: int = 0
    settings: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "AttackRecord":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def append_jsonl(path: str | os.PathLike[str], records: Iterable[AttackRecord | dict[str, Any]]) -> None:
    """Append records, one flushed and fsynced line each."""
    with open(path, "ab") as fh:
        for rec in records:
            data = rec.to_dict() if isinstance(rec, AttackRecord) else rec
            fh.write(orjson.dumps(data, default=str) + b"\n")
            fh.flush()
        os.fsync(fh.fileno())


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Records from a JSONL file; a torn last line (crash mid-write) is ignored."""
    out: list[dict[str, Any]] = []
    raw = Path(path).read_bytes()
    for line in raw.splitlines():
        if not line.strip():
            continue
        try:
            out.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            continue
    return out


def consolidate_parquet(jsonl: str | os.PathLike[str], parquet: str | os.PathLike[str]) -> int:
    """Write all records of ``jsonl`` to ``parquet`` atomically; returns the row count."""
    import polars as pl

    rows = read_jsonl(jsonl)
    for r in rows:
        r["settings"] = orjson.dumps(r.get("settings", {}), default=str).decode()
    frame = pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()
    tmp = Path(str(parquet) + ".tmp")
    frame.write_parquet(tmp)
    os.replace(tmp, parquet)
    return frame.height


def records_frame(paths: Sequence[str | os.PathLike[str]]):  # noqa: ANN201 - polars.DataFrame
    """All records under run folders or files, as one polars DataFrame."""
    import polars as pl

    rows: list[dict[str, Any]] = []
    for p in paths:
        p = Path(p)
        files = [p] if p.is_file() else sorted(p.rglob("results.jsonl"))
        for f in files:
            for r in read_jsonl(f):
                r["settings"] = orjson.dumps(r.get("settings", {}), default=str).decode()
                r["source"] = str(f.parent)
                rows.append(r)
    return pl.DataFrame(rows, infer_schema_length=None) if rows else pl.DataFrame()
