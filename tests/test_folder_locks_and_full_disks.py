"""Issue 20: one sweep folder, one writer; a held lock is waited for, then named in one line;
a full disk stops a sweep, a merge and a run with one line and exit 1, leaving the previous state."""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from promptrobust.engine.safe_io import atomic_io
from promptrobust.engine.safe_io.atomic_io import OutputWriteError
from promptrobust.engine.safe_io.folder_lock import LockHeld, folder_lock
from promptrobust.engine.runs.session import Session
from promptrobust.engine.runs.sweep.sharding import merge_runs
from promptrobust.engine.runs.sweep.runner import run_sweep
from promptrobust.testing import CountingBackend
from tests.sweep_helpers import hashed_answer, records, small_config

ROOT = Path(__file__).resolve().parents[1]


def _session(cfg) -> Session:  # noqa: ANN001
    return Session(cache=cfg.cache, settings=cfg.scheduler,
                   backend_factory=lambda spec: CountingBackend(answer=hashed_answer, name=spec.name))


def test_two_sweeps_of_one_folder_at_once_write_each_record_once(tmp_path):
    cfg = small_config(tmp_path / "out", cache=tmp_path / "c.sqlite", models=("openai:fake-a", "openai:fake-b"))
    events: list[str] = []

    async def both() -> None:
        a, b = _session(cfg), _session(cfg)
        try:
            await asyncio.gather(run_sweep(cfg, session=a, on_event=events.append, lock_wait=600),
                                 run_sweep(cfg, session=b, on_event=events.append, lock_wait=600))
        finally:
            await a.close()
            await b.close()

    asyncio.run(both())
    rows = records(cfg.folder)
    keys = [(r["job_id"], r["prompt_id"]) for r in rows]
    assert len(keys) == len(set(keys)) == 2 * 2 * 2 * 2  # 2 models x 2 prompt types x 2 attacks x top 2
    assert sum("is in use by" in e and "waiting" in e for e in events) == 1


def test_a_sweep_of_a_folder_held_by_another_process_refuses_in_one_line_naming_it(tmp_path):
    cfg = small_config(tmp_path / "out", cache=tmp_path / "c.sqlite", models=("openai:fake-a",))
    cfg.folder.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, sys.argv[2]);"
        "from promptrobust.engine.safe_io.folder_lock import folder_lock;"
        "lock = folder_lock(sys.argv[1], 'x').hold(); print('held', flush=True); time.sleep(120)"),
        str(cfg.folder), str(ROOT)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        events: list[str] = []
        session = _session(cfg)
        with pytest.raises(LockHeld) as err:
            asyncio.run(run_sweep(cfg, session=session, on_event=events.append, lock_wait=0.3))
        asyncio.run(session.close())
        message = str(err.value)
        assert f"process {holder.pid} (" in message and "\n" not in message and err.value.exit_code == 1
        assert len(events) == 1 and "waiting up to 0.3s" in events[0]
        assert not (cfg.folder / "results.jsonl").exists()
        with pytest.raises(LockHeld, match=f"process {holder.pid}"):  # a merge into it waits the same way
            folder_lock(cfg.folder, "folder").hold(wait=0.2)
    finally:
        holder.kill()
        holder.wait()
    # The holder is gone (killed): the kernel released its lock, nothing stale is left.
    folder_lock(cfg.folder, "folder").hold(wait=0).release()


# -- a full disk in a sweep and a merge (ENOSPC at the os.write boundary) -----------------------------

class _FullAfter:
    def __init__(self, writes: int) -> None:
        self.writes, self.real = writes, os.write

    def __call__(self, fd: int, data: bytes) -> int:  # noqa: ANN001
        if self.writes <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.writes -= 1
        return self.real(fd, data)


def test_a_sweep_on_a_full_disk_stops_with_one_error_and_no_torn_or_empty_files(tmp_path, monkeypatch):
    cfg = small_config(tmp_path / "out", cache=tmp_path / "c.sqlite", models=("openai:fake-a",))
    monkeypatch.setattr(atomic_io.os, "write", _FullAfter(writes=4))  # config.json, then a few records
    session = _session(cfg)
    with pytest.raises(OutputWriteError) as err:
        asyncio.run(run_sweep(cfg, session=session))
    assert str(err.value).startswith("no space left on ") and err.value.__cause__ is None
    assert err.value.__context__ is None or err.value.__suppress_context__
    folder = cfg.folder
    names = sorted(p.name for p in folder.iterdir())
    assert not [n for n in names if ".tmp-" in n] and "errors.jsonl" not in names and "results.parquet" not in names
    raw = (folder / "results.jsonl").read_bytes()
    assert raw.endswith(b"\n") and all(orjson.loads(line) for line in raw.splitlines())  # whole lines only
    monkeypatch.undo()
    asyncio.run(run_sweep(cfg, session=_session(cfg)))  # with room again, it resumes and completes
    keys = [(r["job_id"], r["prompt_id"]) for r in records(folder)]
    assert len(keys) == len(set(keys)) == 8


def test_a_merge_on_a_full_disk_leaves_the_previous_output_whole(tmp_path, monkeypatch):
    from tests.test_sharding import _run
    from promptrobust.engine.runs.sweep.sharding import Shard

    cfg = small_config(tmp_path / "out", cache=tmp_path / "c.sqlite", models=("openai:fake-a", "openai:fake-b"))
    shards = [_run(cfg, Shard(i, 2))[0].folder for i in (1, 2)]
    out = tmp_path / "merged"
    merge_runs(out, shards[:1])
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    monkeypatch.setattr(atomic_io.os, "write", _FullAfter(writes=1))
    with pytest.raises(OutputWriteError, match="^no space left on "):
        merge_runs(out, shards)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir() if ".work-" in p.name or ".old-" in p.name) == []
    monkeypatch.undo()
    merge_runs(out, shards)
    assert len(records(out)) == 16 and (out / "config.json").exists()


def test_the_cli_says_one_line_and_exits_1_on_a_full_disk(tmp_path, monkeypatch, capsys):
    from promptrobust.cli.main import main
    from promptrobust.testing.fake_openai import FakeOpenAIServer

    monkeypatch.setattr(atomic_io.os, "write", _FullAfter(writes=0))
    monkeypatch.setenv("PRE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FakeOpenAIServer(model="fake-model") as srv:
        code = main(["run", "--model", "openai:fake-model", "--model-args", f"base_url={srv.url}",
                     "--dataset", "rotten_tomatoes", "--limit", "4", "--prompt", "sst2-task-01", "--attack", "checklist",
                     "--top-k", "1", "--budget", "2", "--output-dir", str(tmp_path / "runs"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1, err
    assert len([line for line in err if line.startswith("pre: error:")]) == 1
    assert err[-1].startswith("pre: error: no space left on ") and "Traceback" not in "\n".join(err)
    assert not list((tmp_path / "runs").iterdir())  # no run folder, no partial left


def test_a_cache_locked_by_another_process_is_waited_for_then_named(tmp_path, monkeypatch, caplog):
    import logging

    from promptrobust.engine.serving import cache as cache_module
    from promptrobust.engine.serving.cache import CacheError, ScoreCache
    from promptrobust.engine.serving.types import Completion

    path = tmp_path / "scores.sqlite"
    ScoreCache(path).close()
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], isolation_level=None);"
        "c.execute('BEGIN EXCLUSIVE'); print('held', flush=True); time.sleep(120)"), str(path)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(cache_module, "BUSY_SECONDS", 0.2)
        monkeypatch.setattr(cache_module, "LOCK_ATTEMPTS", 2)
        cache = ScoreCache(path)
        with caplog.at_level(logging.WARNING), pytest.raises(CacheError) as err:
            cache.put("k", "m", Completion(text="x"))
        message = str(err.value)
        assert f"process {holder.pid} (" in message and "locked" in message and "writable place" not in message
        assert [r.getMessage() for r in caplog.records if "waiting" in r.getMessage()]
    finally:
        holder.kill()
        holder.wait()
    cache.put("k", "m", Completion(text="x"))  # free again: the write goes through
    assert cache.get("k").text == "x"
    cache.close()


def test_pre_report_on_a_full_disk_keeps_the_previous_report_whole(tmp_path, monkeypatch, capsys):
    import shutil

    from promptrobust.cli.main import main

    sweep = tmp_path / "sweep"
    shutil.copytree(ROOT / "tests" / "fixtures" / "report" / "sweep", sweep)
    out = tmp_path / "rep"
    assert main(["report", str(sweep), "--output-dir", str(out), "--quiet"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    monkeypatch.setattr(atomic_io.os, "write", _FullAfter(writes=3))  # a few files fit, then the disk is full
    capsys.readouterr()
    assert main(["report", str(sweep), "--output-dir", str(out), "--quiet", "--top", "3"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pre: error: no space left on ")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no 0-byte PNG, no temporaries


def test_a_merge_killed_midway_leaves_nothing_a_report_would_read(tmp_path):
    """A kill between building and renaming leaves `.OUT.work-*` beside OUT: reports skip it
    and the next merge removes it."""
    from promptrobust.engine.measuring.records import append_jsonl, results_files

    out = tmp_path / "merged"
    out.mkdir()
    append_jsonl(out / "results.jsonl", [{"job_id": "j", "prompt_id": "p"}])
    leftover = tmp_path / ".merged.work-999999-abcd"  # a pid that does not exist
    leftover.mkdir()
    append_jsonl(leftover / "results.jsonl", [{"job_id": "j", "prompt_id": "p"}])
    assert results_files([tmp_path]) == [out / "results.jsonl"]
    atomic_io.remove_leftovers(tmp_path, "merged")
    assert not leftover.exists() and out.exists()
