"""Sweeps: config validation, dry runs, and resuming after SIGKILL."""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest

from promptrobust.cli.main import main
from promptrobust.engine.measuring.records import read_jsonl
from promptrobust.testing.fake_openai import FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[1]


def write_config(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


GOOD = """
[sweep]
name = "t"
output_dir = "{out}"
limit = 6
top_k = 2
budget = 6
concurrency = 2
cache = "{cache}"

[grid]
models = ["{model}"]
datasets = ["rotten_tomatoes"]
attacks = ["checklist", "stresstest", "deepwordbug"]

[models."{model}"]
model_args = "base_url={url}"
"""


@pytest.mark.parametrize(
    "body, needle",
    [
        ('[grid]\nmodels=["smollm2-135m-instruct"]\ndatasets=["sst2"]\nattacks=["checklist"]\ncolour="red"\n', "grid.colour"),
        ('[sweep]\nlimt=5\n[grid]\nmodels=["smollm2-135m-instruct"]\ndatasets=["sst2"]\nattacks=["checklist"]\n', "sweep.limt"),
        ('[grid]\nmodels=["no-such-model"]\ndatasets=["sst2"]\nattacks=["checklist"]\n', "grid.models"),
        ('[grid]\nmodels=[]\ndatasets=["sst2"]\nattacks=["checklist"]\n', "grid.models is empty"),
        ('[grid]\nmodels=["smollm2-135m-instruct"]\ndatasets=["sst2"]\nattacks=["telekinesis"]\n', "grid.attacks"),
        ('[grid]\nmodels=["smollm2-135m-instruct"]\ndatasets=["imagenet"]\nattacks=["checklist"]\n', "grid.datasets"),
        ('[grid]\nmodels=["smollm2-135m-instruct"]\nattacks=["checklist"]\n', "grid.datasets is missing"),
        ("this is [not toml", "not valid TOML"),
    ],
)
def test_bad_config_names_the_field(tmp_path, capsys, body, needle) -> None:  # noqa: ANN001
    cfg = write_config(tmp_path / "bad.toml", body)
    code = main(["sweep", str(cfg)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and needle in err[0], err


def test_dry_run_lists_jobs_and_estimates(tmp_path, capsys) -> None:  # noqa: ANN001
    cfg = write_config(
        tmp_path / "s.toml",
        '[sweep]\nname="d"\nlimit=10\ntop_k=2\nbudget=5\noutput_dir="%s"\n'
        '[grid]\nmodels=["smollm2-135m-instruct","gemma3-270m"]\ndatasets=["rotten_tomatoes","math"]\n'
        'prompt_types=["task","role"]\nattacks=["checklist","stresstest"]\n' % tmp_path,
    )
    assert main(["sweep", str(cfg), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "16 jobs" in out  # 2 models x 2 datasets x 2 types x 2 attacks
    # clean: 10 prompts x 10 samples per job; attacks: top_k x (budget + 1) x samples
    assert "requests <= 220" in out
    assert not (tmp_path / "d").exists()  # a dry run writes nothing


def _answer(text: str) -> str:
    """A deterministic 'model' whose answers depend on the whole input."""
    return "positive" if int(hashlib.sha1(text.encode()).hexdigest(), 16) % 3 else "negative"


def _posts(srv: FakeOpenAIServer) -> int:
    return srv.count("/v1/chat/completions") + srv.count("/v1/completions")


def _cache_rows(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT count(*) FROM completions").fetchone()[0]


def _stable(records: list[dict]) -> list[tuple]:
    keep = ("job_id", "prompt_id", "attack", "clean_score", "adversarial_prompt", "adversarial_score", "pdr")
    return sorted(tuple(r[k] for k in keep) for r in records)


def _sweep_cmd(cfg: Path) -> list[str]:
    return [sys.executable, "-m", "promptrobust.cli.main", "sweep", str(cfg), "--quiet"]


def test_sigkill_then_rerun_gives_the_same_results_without_recomputing(tmp_path) -> None:  # noqa: ANN001
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "EMPTY"}
    with FakeOpenAIServer(answer=_answer, latency=0.03) as srv:
        model = "openai:fake-model"
        # 1. An uninterrupted reference sweep.
        ref_cfg = write_config(
            tmp_path / "ref.toml",
            GOOD.format(out=tmp_path / "ref", cache=tmp_path / "ref.sqlite", model=model, url=srv.url),
        )
        done = subprocess.run(_sweep_cmd(ref_cfg), cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]  # which job failed, and why
        reference = read_jsonl(tmp_path / "ref" / "t" / "results.jsonl")
        ref_posts = _posts(srv)
        assert reference and ref_posts == _cache_rows(tmp_path / "ref.sqlite")

        # 2. The same sweep, killed with SIGKILL once its first record exists.
        srv.reset_counts()
        cfg = write_config(
            tmp_path / "s.toml",
            GOOD.format(out=tmp_path / "out", cache=tmp_path / "c.sqlite", model=model, url=srv.url),
        )
        results = tmp_path / "out" / "t" / "results.jsonl"
        proc = subprocess.Popen(_sweep_cmd(cfg), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if results.exists() and results.read_bytes().count(b"\n") >= 1:
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the sweep finished before it could be killed: make it slower"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        # A request the killed run wrote just before it died is counted when a handler thread reads
        # it, which on a loaded machine can be after this point: let the server finish with it.
        assert srv.wait_until_idle(), "the killed run's connections are still open"
        partial = read_jsonl(results)
        assert 0 < len(partial) < len(reference)
        committed = _cache_rows(tmp_path / "c.sqlite")
        first_posts = _posts(srv)

        # 3. Rerun to completion.
        srv.reset_counts()
        done = subprocess.run(_sweep_cmd(cfg), cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        rerun_posts = _posts(srv)
        rerun_bodies = [orjson.dumps(body, option=orjson.OPT_SORT_KEYS) for _, body in srv.bodies]
        final = read_jsonl(results)

    # The rerun asked nothing twice (if it did, this names the request).
    doubled = [body for body, times in Counter(rerun_bodies).items() if times > 1]
    assert not doubled, doubled[:1]

    assert _stable(final) == _stable(reference)  # same records, none twice
    # Nothing the killed run committed was asked of the model again: the rerun
    # sent exactly the requests that were missing from the cache.
    # (if not: the rerun's own counters say whether a request was retried, probed or sent twice)
    rerun_counters = orjson.loads((tmp_path / "out" / "t" / "results.json").read_bytes()).get("counters")
    assert rerun_posts == _cache_rows(tmp_path / "c.sqlite") - committed, rerun_counters
    assert _cache_rows(tmp_path / "c.sqlite") == ref_posts
    # At most what was in flight at the kill was lost (concurrency 2).
    assert first_posts - committed <= 2
    assert (tmp_path / "out" / "t" / "results.parquet").exists()
    config = orjson.loads((tmp_path / "out" / "t" / "config.json").read_bytes())
    assert config["attack"]["budget"] == 6


def test_every_settings_field_is_a_sweep_key_under_its_own_name(tmp_path) -> None:  # noqa: ANN001
    """The [sweep] and [models."NAME"] keys are the settings' own fields (spelled once, in the
    settings classes): each reaches its settings value; the grid's own axes are not [sweep] keys."""
    from promptrobust.engine.runs.sweep.config import SweepConfigError, load_config, model_settings

    body = """
[sweep]
limit = 0.1
sample_selection = "first"
stop = ["\\n\\n", "Q:"]
system_instruction = "You rate film reviews."
holdout = 0.5
early_stopping = "off"
max_wait_ms = 2.5
request_timeout = 30

[grid]
models = ["openai:m"]
datasets = ["rotten_tomatoes"]
attacks = ["checklist"]

[models."openai:m"]
model_args = "base_url=http://127.0.0.1:9/v1"
max_wait_ms = 1.0
"""
    cfg = load_config(write_config(tmp_path / "s.toml", body))
    assert (cfg.evaluation.limit, cfg.evaluation.sample_selection) == (0.1, "first")
    assert cfg.evaluation.stop == ("\n\n", "Q:") and cfg.evaluation.system_instruction == "You rate film reviews."
    assert (cfg.attack.holdout, cfg.attack.early_stopping) == (0.5, "off")
    assert (cfg.scheduler.max_wait_ms, cfg.scheduler.request_timeout) == (2.5, 30)
    assert model_settings(cfg, "openai:m").max_wait_ms == 1.0
    for grid_axis in ("shots = [0]", "dataset = \"sst2\"", "attacks = [\"checklist\"]", "options = {}"):
        with pytest.raises(SweepConfigError, match="unknown key sweep"):
            load_config(write_config(tmp_path / "bad.toml", body.replace("[sweep]\n", f"[sweep]\n{grid_axis}\n")))


async def test_a_cells_shared_work_survives_one_job_cancelled_and_is_redone_after_it_failed() -> None:
    """A cell's workbench and ranking are shared by its jobs: one job cancelled does not cancel the
    others' wait, and work that failed (an outage during the ranking) is started again by the next
    job rather than failing every later job of the cell."""
    import asyncio

    from promptrobust.engine.runs.sweep.runner import _shared

    started: list[bool] = []

    async def work(fail: bool) -> int:
        started.append(fail)
        await asyncio.sleep(0.02)
        if fail:
            raise RuntimeError("request failed after 4 attempts: HTTP 503")
        return len(started)

    table: dict = {}
    first = asyncio.create_task(_shared(table, "cell", lambda: work(False)))
    second = asyncio.create_task(_shared(table, "cell", lambda: work(False)))
    await asyncio.sleep(0.005)
    first.cancel()
    assert await second == 1 and started == [False]  # the work went on for the job still waiting
    with pytest.raises(RuntimeError, match="503"):
        await _shared(table, "other", lambda: work(True))
    assert await _shared(table, "other", lambda: work(False)) == 3  # started again, not the old failure
    # the last job waiting cancelled: the work stops (no requests after the sweep stopped)
    last = asyncio.create_task(_shared(table, "third", lambda: work(False)))
    await asyncio.sleep(0.005)
    running = table["third"].task
    last.cancel()
    await asyncio.sleep(0.005)
    assert running.cancelled() and "third" not in table
