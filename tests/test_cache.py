"""The score cache: persistence across processes, corruption, counters."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from promptrobust.engine.serving.cache import CacheError, ScoreCache, merge_caches
from promptrobust.engine.serving.types import Completion

ROOT = Path(__file__).resolve().parents[1]

_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    sys.path.insert(0, {root!r})
    from promptrobust.engine.serving.cache import ScoreCache
    from promptrobust.engine.serving.scheduler import Scheduler
    from promptrobust.engine.serving.types import Request
    from promptrobust.testing.backends import CountingBackend

    async def main():
        backend = CountingBackend(batching=True)
        cache = ScoreCache(sys.argv[1])
        async with Scheduler(backend, cache=cache) as sched:
            out = await sched.submit_many([Request(kind="generate", prompt=f"q{{i}}") for i in range(20)])
        print(backend.calls, sched.stats.cache_hits, out[3].text)

    asyncio.run(main())
    """
)


def _run_child(cache_file: Path) -> list[str]:
    code = _CHILD.format(root=str(ROOT))
    done = subprocess.run([sys.executable, "-c", code, str(cache_file)], capture_output=True, text=True, check=True)
    return done.stdout.split()


def test_cache_survives_a_process_restart(tmp_path: Path) -> None:
    cache_file = tmp_path / "scores.sqlite"
    calls, hits, answer = _run_child(cache_file)
    assert (calls, hits) == ("20", "0")
    calls, hits, answer_again = _run_child(cache_file)
    assert (calls, hits) == ("0", "20")  # a new process: every answer came from the file
    assert answer_again == answer


def test_corrupt_cache_file_gives_one_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "scores.sqlite"
    bad.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(CacheError) as info:
        ScoreCache(bad)
    message = str(info.value)
    assert "\n" not in message and "delete it or pass --cache PATH" in message


def test_unwritable_cache_folder_is_reported(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(CacheError, match="pass --cache PATH"):
        ScoreCache(blocker / "sub" / "scores.sqlite")


def test_counts_hits_and_misses(tmp_path: Path) -> None:
    with ScoreCache(tmp_path / "c.sqlite") as cache:
        cache.put("k1", "m", Completion(text="a"))
        found = cache.get_many(["k1", "k2", "k1"])
        assert found == {"k1": Completion(text="a")}
        assert cache.stats.hits == 1 and cache.stats.misses == 1
        assert cache.count() == 1 and cache.count("m") == 1


def test_wal_mode_is_on(tmp_path: Path) -> None:
    with ScoreCache(tmp_path / "c.sqlite") as cache:
        assert cache._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_completion_roundtrip_keeps_logprobs(tmp_path: Path) -> None:
    with ScoreCache(tmp_path / "c.sqlite") as cache:
        c = Completion(choice_logprobs=(-0.5, -2.25), prompt_tokens=7, note="n")
        cache.put("k", "m", c)
    with ScoreCache(tmp_path / "c.sqlite") as cache:
        assert cache.get("k") == c


# -- merging caches (pre cache merge) ------------------------------------------------


def _cache(path: Path, items: dict[str, str]) -> Path:
    with ScoreCache(path) as cache:
        cache.put_many([(k, "m", Completion(text=v)) for k, v in items.items()])
    return path


def test_cache_merge_is_insert_or_ignore_and_idempotent(tmp_path: Path) -> None:
    a = _cache(tmp_path / "a.sqlite", {"k1": "x", "k2": "y"})
    b = _cache(tmp_path / "b.sqlite", {"k2": "y", "k3": "z"})
    out = tmp_path / "out.sqlite"
    result = merge_caches(out, [a, b])
    assert (result.added, result.total) == ([2, 1], 3)
    assert merge_caches(out, [a, b]).added == [0, 0]
    with ScoreCache(out) as merged:
        assert merged.get("k3").text == "z" and merged.count() == 3


def test_cache_merge_refuses_foreign_files_before_writing(tmp_path: Path) -> None:
    good = _cache(tmp_path / "good.sqlite", {"k": "v"})
    text = tmp_path / "notes.sqlite"
    text.write_bytes(b"not a database at all" * 50)
    foreign = tmp_path / "foreign.sqlite"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE people (name TEXT)")
    other_schema = tmp_path / "old.sqlite"
    with sqlite3.connect(other_schema) as conn:
        conn.execute("CREATE TABLE completions (key TEXT PRIMARY KEY, value BLOB)")
    out = tmp_path / "out.sqlite"
    for bad, needle in ((text, "not a promptrobust cache"), (foreign, "no completions table"),
                        (other_schema, "different cache schema"), (tmp_path / "missing.sqlite", "does not exist")):
        with pytest.raises(CacheError, match=needle) as info:
            merge_caches(out, [good, bad])
        assert "\n" not in str(info.value)
    assert not out.exists()  # refused before anything was written
    with pytest.raises(CacheError, match="both the output and a source"):
        merge_caches(good, [good])


def test_cache_merge_command_prints_counts_and_refuses_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from promptrobust.cli.main import main

    a = _cache(tmp_path / "a.sqlite", {"k1": "x"})
    b = _cache(tmp_path / "b.sqlite", {"k1": "x", "k2": "y"})
    out = tmp_path / "merged.sqlite"
    assert main(["cache", "merge", str(out), str(a), str(b)]) == 0
    assert "2 added, 2 in total" in capsys.readouterr().out
    foreign = tmp_path / "notes.txt"
    foreign.write_text("hello")
    assert main(["cache", "merge", str(out), str(foreign)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a promptrobust cache" in err[0]
