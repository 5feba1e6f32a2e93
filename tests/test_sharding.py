"""Sharded sweeps: shard selection, record merge (exactly once, resumable) and cache merge."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from promptrobust.engine.serving.cache import cache_keys, merge_caches
from promptrobust.engine.runs.session import Session
from promptrobust.engine.runs.sweep.sharding import (
    Shard,
    ShardError,
    cell_shard,
    merge_runs,
    parse_shard,
    select_jobs,
    shard_config,
)
from promptrobust.engine.runs.sweep.config import SweepConfig
from promptrobust.engine.runs.sweep.runner import run_sweep
from promptrobust.testing import CountingBackend
from tests.sweep_helpers import hashed_answer, records, small_config, stable


def _run(cfg: SweepConfig, shard: Shard | None = None) -> tuple[SweepConfig, int]:
    """Run (or resume) a sweep or one shard of it in-process; returns its config and the backend calls made."""
    backends: list[CountingBackend] = []

    def factory(spec):  # noqa: ANN001, ANN202
        backends.append(CountingBackend(answer=hashed_answer, name=spec.name))
        return backends[-1]

    if shard is not None:
        jobs = select_jobs(cfg.jobs(), shard)
        cfg = shard_config(cfg, shard)
    else:
        jobs = cfg.jobs()

    async def go() -> None:
        session = Session(cache=cfg.cache, settings=cfg.scheduler, backend_factory=factory)
        try:
            progress = await run_sweep(cfg, session=session, jobs=jobs)
        finally:
            await session.close()
        assert not progress.failed, progress.failed

    asyncio.run(go())
    return cfg, sum(b.calls for b in backends)


@pytest.mark.parametrize("text, expected", [("1/2", Shard(1, 2)), (" 3 / 4 ", Shard(3, 4)), ("1/1", Shard(1, 1))])
def test_parse_shard(text: str, expected: Shard) -> None:
    assert parse_shard(text) == expected


@pytest.mark.parametrize("text", ["0/2", "3/2", "1/0", "a/b", "1", "-1/2", ""])
def test_bad_shard_names_the_fix(text: str) -> None:
    with pytest.raises(ShardError, match="use I/N with 1 <= I <= N"):
        parse_shard(text)


def test_shards_partition_the_jobs_and_keep_cells_together(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, models=("openai:a", "openai:b", "openai:c"))
    jobs = cfg.jobs()
    for count in (1, 2, 3, 5):
        parts = [select_jobs(jobs, Shard(i, count)) for i in range(1, count + 1)]
        assert sorted(j.id for part in parts for j in part) == sorted(j.id for j in jobs)  # each job exactly once
        for part in parts:
            cells = {j.cell for j in part}
            assert all(j in part for j in jobs if j.cell in cells)  # a cell is never split
    # The hash is content-based (SHA-256), not Python's salted hash(): pinned so it cannot drift.
    assert cell_shard(jobs[0], 1000) == _pinned_shard(jobs[0].cell, 1000)


def _pinned_shard(cell: tuple, count: int) -> int:
    import hashlib

    raw = "\x1f".join("auto" if p is None else str(p) for p in cell)
    return int.from_bytes(hashlib.sha256(raw.encode()).digest()[:8], "big") % count + 1


def test_shard_config_gives_each_shard_its_own_folder_and_cache(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, cache=tmp_path / "scores.sqlite")
    one = shard_config(cfg, Shard(1, 2))
    assert one.folder == tmp_path / "grid.shard-1-of-2"
    assert one.cache == str(tmp_path / "scores.shard-1-of-2.sqlite")
    bare = shard_config(small_config(tmp_path), Shard(2, 2))
    assert bare.cache == str(tmp_path / "grid.shard-2-of-2" / "cache.sqlite")


def test_two_shards_merged_equal_the_unsharded_sweep(tmp_path: Path) -> None:
    full, full_calls = _run(small_config(tmp_path / "full", cache=tmp_path / "full.sqlite"))
    reference = records(full.folder)
    assert len(reference) == 32 and full_calls == len(cache_keys(full.cache))

    base = small_config(tmp_path / "sharded", cache=tmp_path / "sharded.sqlite")
    shards = [_run(base, Shard(i, 2))[0] for i in (1, 2)]
    sizes = [len(records(s.folder)) for s in shards]
    assert all(sizes) and sum(sizes) == 32  # both shards did work, none twice

    out = tmp_path / "merged"
    first = merge_runs(out, [s.folder for s in shards])
    assert (first.added, first.total, first.duplicates) == (32, 32, 0)
    assert stable(records(out)) == stable(reference)
    merged_cache = tmp_path / "merged.sqlite"
    merge_caches(merged_cache, [s.cache for s in shards])
    assert cache_keys(merged_cache) == cache_keys(full.cache)
    assert (out / "results.parquet").exists()

    # Merging again (records and caches) adds nothing.
    again = merge_runs(out, [s.folder for s in shards])
    assert (again.added, again.already, again.total) == (0, 32, 32)
    assert merge_caches(merged_cache, [s.cache for s in shards]).added == [0, 0]
    assert len(records(out)) == 32


def test_a_torn_shard_is_resumed_and_the_merge_catches_up(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = small_config(tmp_path, cache=tmp_path / "c.sqlite")
    reference, _ = _run(base.with_(name="ref", cache=str(tmp_path / "ref.sqlite")))
    shards = [_run(base, Shard(i, 2))[0] for i in (1, 2)]
    results = shards[0].folder / "results.jsonl"
    raw = results.read_bytes()
    results.write_bytes(raw[: raw.rstrip(b"\n").rfind(b"\n") + 1 + 40])  # the last record torn mid-line
    torn_count = len(records(shards[0].folder))

    out = tmp_path / "merged"
    partial = merge_runs(out, [s.folder for s in shards])
    assert "not complete JSON" in capsys.readouterr().err  # the torn line was noticed, not merged
    assert partial.total == 31

    _, calls = _run(base, Shard(1, 2))  # resume the shard: only the torn record is redone ...
    assert calls == 0  # ... and its answers all come from the shard's cache
    assert len(records(shards[0].folder)) == torn_count + 1
    caught_up = merge_runs(out, [s.folder for s in shards])
    assert (caught_up.added, caught_up.total) == (1, 32)
    assert stable(records(out)) == stable(records(reference.folder))


def test_merge_keeps_one_record_per_key_and_prefers_finished_over_failed(tmp_path: Path) -> None:
    from promptrobust.engine.measuring.records import append_jsonl

    def row(job: str, prompt: str, status: str = "attacked") -> dict:
        return {"job_id": job, "prompt_id": prompt, "status": status, "model": "m", "dataset": "d", "attack": "a",
                "clean_prompt": "p", "clean_score": 1.0}

    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        _config_file(folder, small_config(tmp_path))
    append_jsonl(a / "results.jsonl", [row("j1", "p1"), row("j1", "p2", "failed"), row("j2", "p1", "failed")])
    append_jsonl(b / "results.jsonl", [row("j1", "p1"), row("j1", "p2")])
    result = merge_runs(tmp_path / "out", [a, b])
    got = sorted((r["job_id"], r["prompt_id"], r["status"]) for r in records(tmp_path / "out"))
    assert got == [("j1", "p1", "attacked"), ("j1", "p2", "attacked"), ("j2", "p1", "failed")]
    assert result.added == 3


def test_merge_refuses_shards_of_different_sweeps_and_non_sweep_folders(tmp_path: Path) -> None:
    import orjson

    from promptrobust.engine.measuring.records import append_jsonl
    from promptrobust.engine.runs.sweep.config import config_dict

    a, b = tmp_path / "a", tmp_path / "b"
    for folder, limit in ((a, 6), (b, 7)):
        folder.mkdir()
        cfg = small_config(tmp_path).with_(evaluation=small_config(tmp_path).evaluation.with_(limit=limit))
        (folder / "config.json").write_bytes(orjson.dumps(config_dict(cfg), default=str))
        append_jsonl(folder / "results.jsonl", [{"job_id": "j", "prompt_id": "p", "status": "attacked"}])
    with pytest.raises(ShardError, match="different sweep .* evaluation"):
        merge_runs(tmp_path / "out", [a, b])
    with pytest.raises(ShardError, match="not a sweep run folder"):
        merge_runs(tmp_path / "out", [tmp_path / "nothing"])
    c = tmp_path / "c"
    c.mkdir()
    (c / "config.json").write_bytes(orjson.dumps({"model": "m", "dataset": "d"}))  # a plain run's config ...
    append_jsonl(c / "results.jsonl", [{"prompt_id": "p", "status": "attacked"}])  # ... and records without a job id
    with pytest.raises(ShardError, match="without job_id"):
        merge_runs(tmp_path / "out2", [c])
    assert not (tmp_path / "out2" / "results.jsonl").exists() or not records(tmp_path / "out2")


def _config_file(folder: Path, cfg: SweepConfig) -> None:
    """A shard folder's config.json as the sweep writes it."""
    import orjson

    from promptrobust.engine.runs.sweep.config import config_dict

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_bytes(orjson.dumps(config_dict(cfg), default=str))


def _shard_with_limit(tmp_path: Path, name: str, limit: int, job: str) -> Path:
    from promptrobust.engine.measuring.records import append_jsonl

    folder = tmp_path / name
    base = small_config(tmp_path)
    _config_file(folder, base.with_(evaluation=base.evaluation.with_(limit=limit)))
    append_jsonl(folder / "results.jsonl", [{"job_id": job, "prompt_id": "p", "status": "attacked", "samples": limit}])
    return folder


def test_merging_one_shard_at_a_time_never_pools_settings(tmp_path: Path) -> None:
    """Issue 32 F, route 1: `merge OUT A; merge OUT B` with limits 20 and 10 used to pool them."""
    import orjson

    a = _shard_with_limit(tmp_path, "a", 20, "j1")
    a2 = _shard_with_limit(tmp_path, "a2", 20, "j2")
    b = _shard_with_limit(tmp_path, "b", 10, "j3")
    out = tmp_path / "out"
    assert merge_runs(out, [a]).added == 1
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(ShardError, match=r"other settings than the records already in .*out.*evaluation"):
        merge_runs(out, [b])
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing written
    assert merge_runs(out, [a2]).added == 1  # the same settings merge one at a time
    config = orjson.loads((out / "config.json").read_bytes())
    assert config["merged_from"] == [str(a), str(a2)]  # every source, not only the last call's
    assert config["evaluation"]["limit"] == 20
    assert {r["samples"] for r in records(out)} == {20}


def test_a_shard_without_its_config_is_refused(tmp_path: Path) -> None:
    """Issue 32 F, route 2: a shard folder whose config.json was removed could not be compared."""
    a = _shard_with_limit(tmp_path, "a", 20, "j1")
    b = _shard_with_limit(tmp_path, "b", 10, "j2")
    (b / "config.json").unlink()
    with pytest.raises(ShardError, match=r"b has no config.json"):
        merge_runs(tmp_path / "out", [a, b])
    with pytest.raises(ShardError, match=r"b has no config.json"):
        merge_runs(tmp_path / "out", [b])
    assert not (tmp_path / "out").exists()


def test_records_in_out_without_a_config_are_not_merged_into(tmp_path: Path) -> None:
    from promptrobust.engine.measuring.records import append_jsonl

    out = tmp_path / "out"
    out.mkdir()
    append_jsonl(out / "results.jsonl", [{"job_id": "old", "prompt_id": "p", "status": "attacked"}])
    with pytest.raises(ShardError, match="holds records but no config.json"):
        merge_runs(out, [_shard_with_limit(tmp_path, "a", 20, "j1")])


def test_the_cli_refuses_both_routes_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from promptrobust.cli.main import main

    a = _shard_with_limit(tmp_path, "a", 20, "j1")
    b = _shard_with_limit(tmp_path, "b", 10, "j2")
    out = tmp_path / "out"
    assert main(["sweep", "merge", str(out), str(a)]) == 0
    capsys.readouterr()
    assert main(["sweep", "merge", str(out), str(b)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "other settings" in err[0] and "Traceback" not in err[0]
    (b / "config.json").unlink()
    assert main(["sweep", "merge", str(tmp_path / "out2"), str(b)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has no config.json" in err[0]


# -- the command line, with a shard killed mid-run --------------------------------

_TOML = """
[sweep]
name = "cli"
output_dir = "{out}"
cache = "{cache}"
limit = 4
top_k = 1
budget = 4
concurrency = 2
max_jobs = 1  # one job at a time: once a record is written, the next one needs answers the test holds

[grid]
models = ["openai:fake-a", "openai:fake-b"]
datasets = ["rotten_tomatoes"]
prompt_types = ["task", "role"]
attacks = ["checklist", "stresstest"]

[models."openai:fake-a"]
model_args = "base_url={url_a}"

[models."openai:fake-b"]
model_args = "base_url={url_b}"
"""


@pytest.mark.slow
def test_cli_shard_killed_mid_run_is_resumed_and_merges_to_the_unsharded_sweep(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import threading
    import time

    from promptrobust.cli.main import main
    from promptrobust.engine.runs.sweep.config import load_config
    from promptrobust.testing import FakeOpenAIServer
    from tests.sweep_helpers import hashed_text_answer

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    shard1 = tmp_path / "runs" / "cli.shard-1-of-2"
    # Once shard 1 has written a record, the servers hold every answer until the shard is
    # killed: the kill then surely lands mid-run, however slowly a loaded machine polls.
    proc_started, holding, released = threading.Event(), threading.Event(), threading.Event()

    def gated_answer(text: str) -> str:
        if proc_started.is_set() and (holding.is_set() or (
                (shard1 / "results.jsonl").exists() and (shard1 / "results.jsonl").read_bytes().count(b"\n") >= 1)):
            holding.set()
            released.wait(timeout=120)
        return hashed_text_answer(text)

    with FakeOpenAIServer(model="fake-a", answer=gated_answer, latency=0.03) as a, \
            FakeOpenAIServer(model="fake-b", answer=gated_answer, latency=0.03) as b:
        config = tmp_path / "cli.toml"
        config.write_text(_TOML.format(out=tmp_path / "runs", cache=tmp_path / "scores.sqlite", url_a=a.url, url_b=b.url))
        cfg = load_config(config)
        assert all(select_jobs(cfg.jobs(), Shard(i, 2)) for i in (1, 2))  # both shards have cells

        reference = cfg.with_(name="reference", cache=str(tmp_path / "reference.sqlite"))

        async def go() -> None:
            session = Session(cache=reference.cache, settings=reference.scheduler)
            try:
                assert not (await run_sweep(reference, session=session)).failed
            finally:
                await session.close()

        asyncio.run(go())

        command = [sys.executable, "-m", "promptrobust.cli.main", "sweep", str(config), "--quiet", "--shard"]
        proc_started.set()
        proc = subprocess.Popen([*command, "1/2"], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if (shard1 / "results.jsonl").exists() and (shard1 / "results.jsonl").read_bytes().count(b"\n") >= 1:
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the shard finished before it could be killed: make it slower"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        killed_with = len(records(shard1))
        proc_started.clear()
        released.set()
        for part in ("1/2", "2/2"):  # resume shard 1, run shard 2
            done = subprocess.run([*command, part], cwd=root, env=env, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr

    assert 0 < killed_with < len(records(shard1))
    out = tmp_path / "runs" / "cli"
    shards = [str(shard1), str(tmp_path / "runs" / "cli.shard-2-of-2")]
    assert main(["sweep", "merge", str(out), *shards]) == 0
    assert main(["sweep", "merge", str(out), *shards]) == 0  # idempotent
    assert stable(records(out)) == stable(records(reference.folder))
    caches = [str(tmp_path / f"scores.shard-{i}-of-2.sqlite") for i in (1, 2)]
    assert main(["cache", "merge", str(tmp_path / "merged.sqlite"), *caches]) == 0
    assert cache_keys(tmp_path / "merged.sqlite") == cache_keys(reference.cache)


def test_shards_may_differ_in_where_models_are_served_but_not_in_what_is_measured(tmp_path: Path) -> None:
    import orjson

    from promptrobust.engine.measuring.records import append_jsonl
    from promptrobust.engine.serving.scheduler_settings import SchedulerSettings
    from promptrobust.engine.runs.sweep.config import config_dict

    def shard(name: str, model_args: str, concurrency: int) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        cfg = small_config(tmp_path, models=("openai:m",)).with_(
            model_options={"openai:m": {"model_args": model_args}}, scheduler=SchedulerSettings(concurrency=concurrency))
        (folder / "config.json").write_bytes(orjson.dumps(config_dict(cfg), default=str))
        append_jsonl(folder / "results.jsonl", [{"job_id": name, "prompt_id": "p", "status": "attacked"}])
        return folder

    a = shard("a", "base_url=http://gpu1:8000/v1,logprobs=true", 64)
    b = shard("b", "base_url=http://gpu2:8000/v1|http://gpu3:8000/v1,logprobs=true", 256)
    assert merge_runs(tmp_path / "out", [a, b]).added == 2
    c = shard("c", "base_url=http://gpu1:8000/v1,logprobs=false", 64)
    with pytest.raises(ShardError, match="model_options"):
        merge_runs(tmp_path / "out2", [a, c])
