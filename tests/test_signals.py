"""SIGTERM and SIGINT mid-run: one line, no partial folder, cache intact, the rerun sends only what is missing."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from promptrobust.testing.fake_openai import FakeOpenAIServer

pytestmark = pytest.mark.slow


def _cmd(srv: FakeOpenAIServer, tmp_path: Path) -> list[str]:
    return [
        sys.executable, "-m", "promptrobust.cli.main", "run", "--model", "openai:fake-model",
        "--model-args", f"base_url={srv.url}", "--dataset", "rotten_tomatoes", "--limit", "30",
        "--mode", "choices", "--concurrency", "2", "--cache", str(tmp_path / "c.sqlite"),
        "--output-dir", str(tmp_path / "runs"), "--no-progress",
    ]


def _rows(path: Path) -> int:
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        return db.execute("SELECT COUNT(*) FROM completions").fetchone()[0]


def _posts(srv: FakeOpenAIServer) -> int:
    return srv.count("/v1/chat/completions") + srv.count("/v1/completions")


def _terminal_dispositions() -> None:
    """A terminal's defaults, whatever the test runner inherited (under `nohup pytest` HUP is
    ignored, and an ignored hang-up rightly stays ignored in `pre`)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _ignore_sigint() -> None:
    """What a shell does to `cmd &` in a script, and what nohup and some schedulers do."""
    _terminal_dispositions()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("signum, code, word, sigint_ignored", [
    (signal.SIGTERM, 143, "terminated", False),
    (signal.SIGINT, 130, "interrupted", False),
    (signal.SIGHUP, 129, "hung up", False),
    # issue 32 A: with SIGINT ignored, TERM used to be turned into an ignored SIGINT and lost
    (signal.SIGTERM, 143, "terminated", True),
    (signal.SIGHUP, 129, "hung up", True),
])
def test_signal_mid_run_leaves_one_line_no_folder_and_a_resumable_cache(tmp_path, signum, code, word, sigint_ignored) -> None:  # noqa: ANN001
    total = 10 * 30  # ten task prompts x 30 samples
    with FakeOpenAIServer(latency=0.02) as srv:
        proc = subprocess.Popen(_cmd(srv, tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=_ignore_sigint if sigint_ignored else _terminal_dispositions)
        deadline = time.monotonic() + 60
        while _posts(srv) < 40 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the run finished before it could be signalled"
        os.kill(proc.pid, signum)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == code, err
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and word in lines[0] and "Traceback" not in err, err
        assert "so this resumes: pre run " in lines[0]  # the command that resumes, as typed
        runs = tmp_path / "runs"
        assert not any(runs.iterdir()) if runs.exists() else True  # neither a partial nor a final folder
        cached = _rows(tmp_path / "c.sqlite")
        assert 0 < cached < total
        srv.reset_counts()
        done = subprocess.run(_cmd(srv, tmp_path), capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        final = _rows(tmp_path / "c.sqlite")
        assert final == total + 1  # every answer, plus the backend's cached start-up log-prob probe
        assert _posts(srv) == final - cached  # the rerun sent only what was missing


def test_a_killed_runs_partial_folder_is_removed_by_the_next_run(tmp_path) -> None:  # noqa: ANN001
    from promptrobust.engine.runs.run_folder import OWNER_FILE, RunFolder

    runs = tmp_path / "runs"
    runs.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = runs / ".20250101-000000_m_d.partial"
    stale.mkdir()
    (stale / OWNER_FILE).write_text(str(dead.pid))
    (stale / "results.jsonl").write_text("{}\n")
    with RunFolder(runs, ["m", "d"]) as folder:
        live_partial = folder.partial
        assert live_partial.exists() and not stale.exists()
    assert folder.final.exists() and not live_partial.exists()


def test_a_hangup_ignored_by_nohup_stays_ignored() -> None:
    """nohup starts pre with SIGHUP ignored: pre keeps it so (TERM is still handled)."""
    code = ("import signal; from promptrobust.cli.errors import terminate_as_interrupt\n"
            "with terminate_as_interrupt():\n"
            "    print(signal.getsignal(signal.SIGHUP) == signal.SIG_IGN, callable(signal.getsignal(signal.SIGTERM)))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"]


def test_a_signal_under_no_cache_promises_no_resume_from_the_cache(tmp_path) -> None:  # noqa: ANN001
    """Issue 41, item 10: with --no-cache nothing is kept, so the stop line says a rerun starts over."""
    with FakeOpenAIServer(latency=0.02) as srv:
        cmd = [*_cmd(srv, tmp_path), "--no-cache"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_terminal_dispositions)
        deadline = time.monotonic() + 60
        while _posts(srv) < 40 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the run finished before it could be signalled"
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "terminated" in lines[0], err
    assert "in the cache" not in lines[0] and "resumes" not in lines[0], lines[0]
    assert "--no-cache" in lines[0] and "starts over" in lines[0], lines[0]
