"""A user's own task in sweeps (issue 34, round two): ``tasks = ["tickets.toml"]`` beside
``datasets`` in the grid, through jobs, resume, shards and the Ray executor; the task travels as
its file's path and every process that runs its jobs reads it again and checks its hashes, so a
file changed between shards (or under a resumed sweep, or under a worker) is an error, never a
mix of two definitions. Against a real HTTP server on 127.0.0.1 (``FakeOpenAIServer``)."""

from __future__ import annotations

import asyncio
import os
import pickle
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from promptrobust.cli.main import main
from promptrobust.engine.errors import PromptRobustError
from promptrobust.engine.measuring.records import read_jsonl
from promptrobust.engine.runs.sweep.config import SweepConfig, load_config
from promptrobust.engine.runs.sweep.ray_executor import SweepWorker
from promptrobust.engine.runs.sweep.sharding import Shard, select_jobs
from promptrobust.tasks import load_task_file
from promptrobust.testing.fake_openai import FakeOpenAIServer
from tests.sweep_helpers import hashed_text_answer

DOCS = Path(__file__).resolve().parents[1] / "docs" / "examples" / "tickets"
GRID = """\
[sweep]
name = "{name}"
output_dir = "out"
cache = "{cache}"
limit = 6
mode = "choices"
budget = 6
top_k = 1

[grid]
models = ["openai:fake-model"]
datasets = ["rotten_tomatoes"]
tasks = ["tickets/tickets.toml"]
attacks = ["checklist", "stresstest"]

[models."openai:fake-model"]
model_args = "base_url={url}"
"""


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(answer=hashed_text_answer) as srv:
        yield srv


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(DOCS, tmp_path / "tickets")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def grid(root: Path, server: FakeOpenAIServer, name: str = "own") -> Path:
    path = root / f"{name}.toml"
    path.write_text(GRID.format(name=name, cache=root / f"{name}.sqlite", url=server.url))
    return path


def edit_label_word(root: Path) -> None:
    task = root / "tickets" / "tickets.toml"
    task.write_text(task.read_text().replace('OTH = "other"', 'OTH = "misc"'))


def sent(server: FakeOpenAIServer) -> int:
    return server.count("/v1/chat/completions") + server.count("/v1/completions")


def sweep(capsys: pytest.CaptureFixture[str], *words: str) -> tuple[int, str]:
    code = main(["sweep", *words])
    return code, capsys.readouterr().err


def test_a_task_beside_a_dataset_in_the_grid_runs_resumes_and_records_its_provenance(
        root: Path, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    config = grid(root, server)
    cfg = load_config(config)
    assert [j.dataset for j in cfg.jobs()] == ["rotten_tomatoes", "rotten_tomatoes", "tickets", "tickets"]
    code, err = sweep(capsys, str(config))
    assert code == 0, err
    folder = root / "out" / "own"
    rows = read_jsonl(folder / "results.jsonl")
    task = load_task_file(root / "tickets" / "tickets.toml")
    mine = [r for r in rows if r["dataset"] == "tickets"]
    assert sorted(r["attack"] for r in mine) == ["checklist", "stresstest"]
    assert all(r["task_definition"] == task.definition_hash for r in mine)
    assert all("task_definition" not in r for r in rows if r["dataset"] == "rotten_tomatoes")
    (entry,) = orjson.loads((folder / "config.json").read_bytes())["tasks"]
    assert entry == {"path": str((root / "tickets" / "tickets.toml").resolve()), "name": "tickets",
                     "definition_hash": task.definition_hash, "data_hash": task.data_hash()}
    (provenance,) = orjson.loads((folder / "results.json").read_bytes())["tasks"]
    assert provenance["definition_hash"] == task.definition_hash and provenance["definition"]["name"] == "tickets"

    server.reset_counts()
    code, err = sweep(capsys, str(config))
    assert code == 0 and sent(server) == 0 and len(read_jsonl(folder / "results.jsonl")) == len(rows)  # resumed: nothing new

    edit_label_word(root)
    code, err = sweep(capsys, str(config))
    assert code == 2 and err.strip().startswith("pre: error: ") and len(err.strip().splitlines()) == 1, err
    assert "holds records of task tickets made from another version" in err and "another name" in err


def test_shards_of_two_versions_of_a_task_never_merge(root: Path, server: FakeOpenAIServer,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    config = grid(root, server)
    count, task_shard, other_shard = two_shards(load_config(config))
    assert sweep(capsys, str(config), "--shard", f"{task_shard}/{count}")[0] == 0
    edit_label_word(root)  # the task file changes before the other machine runs its shard
    assert sweep(capsys, str(config), "--shard", f"{other_shard}/{count}")[0] == 0
    shards = [str(root / "out" / f"own.shard-{i}-of-{count}") for i in (task_shard, other_shard)]
    code, err = sweep(capsys, "merge", str(root / "merged"), *shards)
    assert code == 2 and "comes from a different sweep" in err and "tasks" in err, err
    assert not (root / "merged").exists()


def two_shards(cfg: SweepConfig) -> tuple[int, int, int]:
    """The fewest shards that put the task's cell and the dataset's on shards of their own: (count, the task's, the dataset's)."""
    for count in range(2, 9):
        shard = {j.dataset: next(i for i in range(1, count + 1) if select_jobs([j], Shard(i, count))) for j in cfg.jobs()}
        if shard["tickets"] != shard["rotten_tomatoes"]:
            return count, shard["tickets"], shard["rotten_tomatoes"]
    raise AssertionError("no shard count up to 8 splits the two cells")


def test_shards_of_one_version_of_a_task_merge(root: Path, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    config = grid(root, server)
    count, *shards = two_shards(load_config(config))
    for i in shards:
        assert sweep(capsys, str(config), "--shard", f"{i}/{count}")[0] == 0
    code, err = sweep(capsys, "merge", str(root / "merged"), *(str(root / "out" / f"own.shard-{i}-of-{count}") for i in shards))
    assert code == 0, err
    merged = read_jsonl(root / "merged" / "results.jsonl")
    assert sorted(r["dataset"] for r in merged) == ["rotten_tomatoes", "rotten_tomatoes", "tickets", "tickets"]


def test_a_worker_reads_the_task_file_and_refuses_one_that_changed(root: Path, server: FakeOpenAIServer) -> None:
    """What a Ray worker does (SweepWorker in this process): the pickled config carries the task's
    path and hashes, not its data; the worker reads the file and checks it."""
    cfg: SweepConfig = pickle.loads(pickle.dumps(load_config(grid(root, server))))
    job = next(j for j in cfg.jobs() if j.dataset == "tickets" and j.attack == "stresstest")
    worker = SweepWorker(cfg, job.model, "worker.sqlite", cache_dir=str(root / "worker"))
    done = asyncio.run(worker.run_unit(job, []))
    assert done["error"] is None and done["records"] and all(r["dataset"] == "tickets" for r in done["records"])
    asyncio.run(worker.export_cache())

    edit_label_word(root)
    worker = SweepWorker(cfg, job.model, "worker2.sqlite", cache_dir=str(root / "worker"))
    failed = asyncio.run(worker.run_unit(job, []))
    assert failed["records"] == [] and re.search(r"tickets\.toml: its definition changed since the sweep was planned", failed["error"])
    asyncio.run(worker.export_cache())
    with pytest.raises(PromptRobustError, match="changed since the sweep was planned"):
        cfg.job_evaluation(job)


def test_a_task_in_the_grid_needs_a_task_file_and_its_own_name(root: Path, server: FakeOpenAIServer) -> None:
    config = grid(root, server)
    text = config.read_text()
    config.write_text(text.replace('tasks = ["tickets/tickets.toml"]', 'tasks = ["tickets/missing.toml"]'))
    with pytest.raises(PromptRobustError, match="grid.tasks: .*missing.toml: task file not found"):
        load_config(config)
    shutil.copy(root / "tickets" / "tickets.toml", root / "tickets" / "again.toml")
    config.write_text(text.replace('tasks = ["tickets/tickets.toml"]', 'tasks = ["tickets/tickets.toml", "tickets/again.toml"]'))
    with pytest.raises(PromptRobustError, match="'tickets' is named twice"):
        load_config(config)
    config.write_text(text.replace('datasets = ["rotten_tomatoes"]\n', ""))  # a grid of tasks alone
    assert [j.dataset for j in load_config(config).jobs()] == ["tickets", "tickets"]


@pytest.mark.ray
@pytest.mark.slow
def test_the_ray_executor_runs_a_task_as_the_local_one(root: Path, server: FakeOpenAIServer) -> None:
    ray = pytest.importorskip("ray", exc_type=ImportError)
    from promptrobust.engine.runs.sweep.ray_executor import RayOptions, run_sweep_ray
    from promptrobust.engine.runs.sweep.plan import plan_sweep, run_planned_sweep

    local = load_config(grid(root, server, "local"))
    assert not run_planned_sweep(plan_sweep(local)).failed
    remote = load_config(grid(root, server, "remote"))
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    started = not ray.is_initialized()
    if started:
        # a cluster of its own ("local"), not one another test started on this machine (a second worker's)
        ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING")
    try:
        progress = run_sweep_ray(remote, RayOptions(worker_cache_dir=str(root / "ray-caches")))
    finally:
        if started:
            ray.shutdown()
    assert not progress.failed, progress.failed

    def mine(cfg: SweepConfig) -> list[tuple[str, str, float]]:
        rows = read_jsonl(cfg.folder / "results.jsonl")
        return sorted((r["attack"], r["task_definition"], r["pdr"]) for r in rows if r["dataset"] == "tickets")

    assert mine(remote) == mine(local) and len(mine(local)) == 2
