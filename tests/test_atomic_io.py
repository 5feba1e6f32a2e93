"""Issue 20: one atomic writer for every output; a full disk leaves the previous state and one line.

ENOSPC is simulated at the true boundary, ``os.write`` (every byte our writers
put on disk goes through it: Parquet and PNG are rendered in memory first),
and, where this test may mount one, on a real 64 KiB tmpfs.
"""

from __future__ import annotations

import errno
import multiprocessing
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import orjson
import polars as pl
import pytest

from promptrobust.engine.safe_io import atomic_io
from promptrobust.engine.safe_io.atomic_io import OutputWriteError


class DiskFull:
    """``os.write`` that accepts ``room`` more bytes, then fails like a full disk."""

    def __init__(self, room: int = 0) -> None:
        self.room = room
        self.real = os.write

    def __call__(self, fd: int, data: bytes) -> int:  # noqa: ANN001
        if self.room <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = min(self.room, len(data))
        self.room -= n
        return self.real(fd, bytes(data[:n]))


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[DiskFull]:
    disk = DiskFull(room=10)  # room for a few bytes: the failure comes mid-file
    monkeypatch.setattr(atomic_io.os, "write", disk)
    yield disk


def _listing(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


FRAME = pl.DataFrame({"model": ["m"] * 50, "pdr": [0.25] * 50})
WRITERS = {
    "json": lambda p: atomic_io.write_json(p, {"new": list(range(100))}),
    "jsonl": lambda p: atomic_io.write_jsonl(p, [{"row": i} for i in range(100)]),
    "text (md, html, csv)": lambda p: atomic_io.write_text(p, "new text " * 100),
    "parquet": lambda p: atomic_io.write_parquet(p, FRAME),
    "png bytes": lambda p: atomic_io.write_bytes(p, b"\x89PNG" + b"\0" * 4000),
}


@pytest.mark.parametrize("kind", list(WRITERS))
def test_each_writer_under_enospc_leaves_the_previous_file_and_one_line(tmp_path, kind, monkeypatch):
    target = tmp_path / "out.file"
    target.write_bytes(b"the previous state")
    monkeypatch.setattr(atomic_io.os, "write", DiskFull(room=10))
    with pytest.raises(OutputWriteError) as err:
        WRITERS[kind](target)
    message = str(err.value)
    assert message.startswith("no space left on ") and str(target) in message and "\n" not in message
    assert err.value.errno == errno.ENOSPC and err.value.exit_code == 1
    assert _listing(tmp_path) == {"out.file": b"the previous state"}  # no temporary left behind
    monkeypatch.undo()
    WRITERS[kind](target)  # with room, the same call writes the new file whole
    assert target.read_bytes() != b"the previous state" and _listing(tmp_path).keys() == {"out.file"}


def test_parquet_written_is_readable_and_whole(tmp_path):
    atomic_io.write_parquet(tmp_path / "r.parquet", FRAME)
    assert pl.read_parquet(tmp_path / "r.parquet").equals(FRAME)


def test_append_under_enospc_cuts_back_to_the_previous_end(tmp_path, full_disk):
    log = tmp_path / "results.jsonl"
    full_disk.room = 10**6
    atomic_io.append_jsonl(log, [{"a": 1}])
    before = log.read_bytes()
    full_disk.room = 5  # half a line fits
    with pytest.raises(OutputWriteError, match="no space left on"):
        atomic_io.append_jsonl(log, [{"b": 2}, {"c": 3}])
    assert log.read_bytes() == before  # no torn line
    with pytest.raises(OutputWriteError):
        atomic_io.append_jsonl(tmp_path / "errors.jsonl", [{"error": "x"}])
    assert not (tmp_path / "errors.jsonl").exists()  # no empty file created by a failed first append


def test_staged_files_all_change_or_none_does(tmp_path, monkeypatch):
    (tmp_path / "report.md").write_text("old md")
    (tmp_path / "plot.png").write_bytes(b"old png")
    disk = DiskFull(room=10**6)
    monkeypatch.setattr(atomic_io.os, "write", disk)
    with pytest.raises(OutputWriteError):
        with atomic_io.Staged() as staged:
            staged.write_text(tmp_path / "report.md", "new md")
            disk.room = 0
            staged.write_bytes(tmp_path / "plot.png", b"new png")
    assert _listing(tmp_path) == {"plot.png": b"old png", "report.md": b"old md"}


def test_advice_differs_for_a_taken_name_a_read_only_folder_and_a_full_disk(tmp_path):
    exists = atomic_io.describe_os_error(FileExistsError(errno.EEXIST, "File exists", str(tmp_path / "x")))
    assert "already exists" in exists and "free space" not in exists
    full = atomic_io.describe_os_error(OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "x")))
    assert full.startswith("no space left on ") and "free space" in full
    ro = atomic_io.describe_os_error(OSError(errno.EROFS, "Read-only file system", str(tmp_path / "x")))
    assert "read-only" in ro and "free space" not in ro
    # polars' own error type still carries the OS text: the same advice
    native = RuntimeError("ComputeError: failed to write: No space left on device (os error 28)")
    assert atomic_io.errno_of(native) == errno.ENOSPC


# -- unique run folders --------------------------------------------------------------------------

def _claim(args: tuple[str, object]) -> str:
    root, barrier = args
    barrier.wait()  # type: ignore[attr-defined]
    partial, final = atomic_io.reserve_folder(Path(root), "20261124-074254_openai-fake-model_rotten_tomatoes")
    (partial / "results.json").write_text(str(os.getpid()))
    return str(atomic_io.commit_folder(partial, final))


def test_eight_claims_of_one_name_in_the_same_instant_get_eight_folders(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(8)
        with ctx.Pool(8) as pool:
            finals = pool.map(_claim, [(str(tmp_path), barrier)] * 8)
    assert len(set(finals)) == 8
    names = sorted(p.name for p in tmp_path.iterdir())
    assert not [n for n in names if n.startswith(".")]  # every claim committed
    assert len({(tmp_path / n / "results.json").read_text() for n in names}) == 8  # each its own process's


def test_a_name_taken_after_the_claim_moves_the_commit_to_the_next_suffix(tmp_path):
    partial, final = atomic_io.reserve_folder(tmp_path, "run")
    (partial / "a").write_text("mine")
    final.mkdir()
    (final / "b").write_text("someone else's finished run")
    used = atomic_io.commit_folder(partial, final)
    assert used.name == "run-2" and (final / "b").exists() and (used / "a").read_text() == "mine"


# -- a real full disk (a tiny tmpfs), where this machine lets the test mount one ------------------

@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def _fill(folder: Path) -> None:
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 1024):
            pass
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)


def test_a_real_full_disk_names_its_device_and_keeps_the_previous_file(tmpfs):
    target = tmpfs / "results.json"
    target.write_bytes(orjson.dumps({"previous": True}))
    _fill(tmpfs)
    with pytest.raises(OutputWriteError) as err:
        atomic_io.write_json(target, {"rows": list(range(50_000))})
    assert str(err.value).startswith(f"no space left on tmpfs ({tmpfs})")
    assert orjson.loads(target.read_bytes()) == {"previous": True}
    assert sorted(p.name for p in tmpfs.iterdir()) == ["filler", "results.json"]


@pytest.mark.slow
def test_eight_pre_runs_started_together_into_one_folder_all_finish_in_their_own_folders(tmp_path):
    import sys

    from promptrobust.testing.fake_openai import FakeOpenAIServer

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "PRE_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("OPENAI_API_KEY", None)
    out = tmp_path / "runs"
    with FakeOpenAIServer(model="fake-model") as srv:
        cmd = [sys.executable, "-m", "promptrobust.cli.main", "run", "--model", "openai:fake-model",
               "--model-args", f"base_url={srv.url}", "--dataset", "rotten_tomatoes", "--limit", "4",
               "--prompt", "sst2-task-01", "--attack", "checklist", "--top-k", "1", "--budget", "2",
               "--output-dir", str(out), "--no-progress"]
        procs = [subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(8)]
        results = [p.communicate(timeout=900) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, [err[-400:] for _, err in results]
    folders = sorted(p for p in out.iterdir())
    assert len(folders) == 8 and not [f for f in folders if f.name.startswith(".")]
    assert all((f / "results.json").is_file() for f in folders)
    said = sorted(line.split("results in ", 1)[1] for _, err in results for line in err.splitlines() if "results in " in line)
    assert said == sorted(str(f) for f in folders)  # each run names the folder it really wrote
