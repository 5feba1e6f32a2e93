"""`pre sweep merge` writes results.json like the unsharded sweep (issue 31 item 4): the same
results from the same records, in the one layout, with where they came from (each shard's
command and versions) and the merge's own command."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from promptrobust.cli.main import main
from promptrobust.engine.runs.run_folder import SCHEMA_PATH
from promptrobust.engine.runs.session import Session
from promptrobust.engine.runs.sweep.config import SweepConfig
from promptrobust.engine.runs.sweep.runner import run_sweep
from promptrobust.engine.runs.sweep.sharding import Shard, select_jobs, shard_config
from promptrobust.testing import CountingBackend
from tests.sweep_helpers import hashed_answer, small_config


def _sweep(cfg: SweepConfig, shard: Shard | None = None) -> SweepConfig:
    jobs = cfg.jobs()
    if shard is not None:
        jobs, cfg = select_jobs(jobs, shard), shard_config(cfg, shard)

    async def go() -> None:
        session = Session(cache=cfg.cache, settings=cfg.scheduler,
                          backend_factory=lambda spec: CountingBackend(answer=hashed_answer, name=spec.name))
        try:
            assert not (await run_sweep(cfg, session=session, jobs=jobs)).failed
        finally:
            await session.close()

    asyncio.run(go())
    return cfg


def test_a_merged_sweep_has_the_unsharded_sweeps_results_json_and_its_sources(tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    full = _sweep(small_config(tmp_path / "full", cache=tmp_path / "full.sqlite"))
    base = small_config(tmp_path / "sharded", cache=tmp_path / "sharded.sqlite")
    shards = [_sweep(base, Shard(i, 2)).folder for i in (1, 2)]
    out = tmp_path / "merged"
    assert main(["sweep", "merge", str(out), *map(str, shards)]) == 0

    merged = orjson.loads((out / "results.json").read_bytes())
    reference = orjson.loads((full.folder / "results.json").read_bytes())
    jsonschema.Draft202012Validator(orjson.loads(SCHEMA_PATH.read_bytes())).validate(merged)
    assert merged["results"]["records"] == reference["results"]["records"] and merged["results"]["records"]["total"] == 32

    def by_key(rows: list[dict], *keys: str) -> list[dict]:
        """In a fixed order, numbers to 12 digits (records in another order sum in another order)."""
        rounded = [{k: round(v, 12) if isinstance(v, float) else v for k, v in r.items()} for r in rows]
        return sorted(rounded, key=lambda r: tuple(str(r.get(k)) for k in keys))

    assert by_key(merged["results"]["apdr"], "model", "attack") == by_key(reference["results"]["apdr"], "model", "attack")
    assert by_key(merged["results"]["clean"], "model", "prompt_id") == by_key(reference["results"]["clean"], "model", "prompt_id")
    assert merged["command"][:3] == ["pre", "sweep", "merge"]
    assert merged["configs"]["sweep"]["name"] == "grid" and merged["configs"]["sweep"]["merged_from"] == [str(s) for s in shards]
    sources = merged["configs"]["merged_from"]
    assert [s["folder"] for s in sources] == [str(s) for s in shards]
    assert all(s["versions"]["promptrobust"] == merged["versions"]["promptrobust"] and s["command"] for s in sources)
    assert sorted(m["name"] for m in merged["models"]) == sorted(m["name"] for m in reference["models"])

    # Merging again rewrites it from the same records: the same results.
    assert main(["sweep", "merge", str(out), *map(str, shards)]) == 0
    assert orjson.loads((out / "results.json").read_bytes())["results"] == merged["results"]
