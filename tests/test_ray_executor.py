"""The Ray executor on real local Ray clusters, against a real HTTP model server (FakeOpenAIServer).

Skipped when Ray is not installed (``pip install 'promptrobust[ray]'``). One
local 2-node cluster (``ray.cluster_utils.Cluster``: separate raylets on this
machine) is shared by the module, since Ray takes ~10 s to start; the
node-removal test runs last because it takes a node away.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray", exc_type=ImportError)

from promptrobust.engine.serving.cache import cache_keys  # noqa: E402
from promptrobust.engine.runs.sweep.ray_executor import RayExecutorError, RayOptions, run_sweep_ray  # noqa: E402
from promptrobust.engine.runs.session import Session  # noqa: E402
from promptrobust.engine.runs.sweep.config import SweepConfig
from promptrobust.engine.runs.sweep.runner import run_sweep  # noqa: E402
from promptrobust.testing import FakeOpenAIServer  # noqa: E402
from tests.sweep_helpers import hashed_text_answer, records, small_config, stable  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]

MODELS = ("openai:fake-a", "openai:fake-b")


@pytest.fixture(scope="module")
def server():  # noqa: ANN201
    """One real HTTP server per model (each serves one model name)."""
    with FakeOpenAIServer(model="fake-a", answer=hashed_text_answer, latency=0.01) as a, \
            FakeOpenAIServer(model="fake-b", answer=hashed_text_answer, latency=0.01) as b:
        yield {"openai:fake-a": a, "openai:fake-b": b}


@pytest.fixture(scope="module")
def cluster():  # noqa: ANN201
    """A head with no CPUs and two 2-CPU nodes, all on this machine; the tests' driver joins it."""
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a second node needs it (token auth is on by default)
    if ray.is_initialized():
        ray.shutdown()
    local = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    nodes = [local.add_node(num_cpus=2) for _ in range(2)]
    local.wait_for_nodes()
    ray.init(address=local.address, logging_level="WARNING")
    yield local, nodes
    ray.shutdown()
    local.shutdown()


def _config(root: Path, name: str, server: dict[str, FakeOpenAIServer]) -> SweepConfig:
    cfg = small_config(root, cache=root / f"{name}.sqlite", models=MODELS, name=name)
    cfg = cfg.with_(evaluation=cfg.evaluation.with_(limit=4), attack=cfg.attack.with_(top_k=1, budget=4))
    return cfg.with_(model_options={m: {"model_args": f"base_url={server[m].url}"} for m in MODELS})


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, server: dict[str, FakeOpenAIServer]) -> tuple[list[dict], set[str]]:
    """The same sweep on the local executor: its records and cache keys."""
    cfg = _config(tmp_path_factory.mktemp("local"), "local", server)

    async def go() -> None:
        session = Session(cache=cfg.cache, settings=cfg.scheduler)
        try:
            progress = await run_sweep(cfg, session=session)
        finally:
            await session.close()
        assert not progress.failed, progress.failed

    asyncio.run(go())
    return records(cfg.folder), cache_keys(cfg.cache)


def test_two_workers_give_the_local_executors_records(cluster: Any, tmp_path: Path, server: dict[str, FakeOpenAIServer],
                                                       reference: tuple[list[dict], set[str]]) -> None:
    cfg = _config(tmp_path, "ray", server)
    options = RayOptions(worker_cache_dir=str(tmp_path / "workers"), max_in_flight=2)
    in_flight: list[int] = []
    pids: set[int] = set()

    def watch(state: dict[str, Any]) -> None:
        for slot in state["slots"].values():
            in_flight.append(len(slot.in_flight))
            if slot.actor is not None and len(pids) < 2:
                pids.add(ray.get(slot.actor.where.remote())["pid"])

    progress = run_sweep_ray(cfg, options, after_submit=watch)
    assert not progress.failed and progress.workers_started == 2 and len(pids) == 2  # one worker process per model
    assert max(in_flight) == 2  # bounded: never more than max_in_flight units on one worker
    assert stable(records(cfg.folder)) == stable(reference[0])
    assert cache_keys(cfg.cache) == reference[1] and progress.caches_merged == 2

    again = run_sweep_ray(cfg, options)  # a rerun resumes: nothing new, nothing twice
    assert again.records == 0 and again.skipped == len(reference[0]) and again.workers_started == 0
    assert len(records(cfg.folder)) == len(reference[0])


def test_a_killed_worker_still_completes_every_unit_exactly_once_and_released_workers_make_room(cluster: Any, tmp_path: Path,
                                                                 server: dict[str, FakeOpenAIServer],
                                                                 reference: tuple[list[dict], set[str]]) -> None:
    cfg = _config(tmp_path, "killed", server)
    killed: list[str] = []

    slowed: list[bool] = []

    def kill_once(state: dict[str, Any]) -> None:
        if killed or state["progress"].records < 1:
            return
        if not slowed:  # from now on answers take a while, so a unit that needs one is still working
            slowed.append(True)
            for srv in server.values():
                srv.script(*["slow:1"] * 24)
        # A unit that already finished keeps its result after its worker dies (nothing to requeue),
        # as can happen on a loaded machine: kill a worker only while one of its units is unfinished,
        # whichever worker that is (the first one may have finished its units and been released).
        for slot in state["slots"].values():
            if slot.actor is None or not slot.in_flight:
                continue
            _, unfinished = ray.wait(list(slot.in_flight), num_returns=len(slot.in_flight), timeout=0)
            if unfinished:
                killed.append(slot.label)
                ray.kill(slot.actor, no_restart=True)
                return

    # 4 workers (2 per model) of 2 CPUs on two 2-CPU nodes: two must wait until others finish and are released.
    options = RayOptions(worker_cache_dir=str(tmp_path / "workers"), max_in_flight=2, workers_per_model=2, num_cpus=2)
    progress = run_sweep_ray(cfg, options, after_submit=kill_once)
    assert killed, "the sweep finished before a worker could be killed: make it slower"
    assert progress.units_requeued >= 1 and progress.workers_started == 5
    rows = records(cfg.folder)
    assert len({(r["job_id"], r["prompt_id"]) for r in rows}) == len(rows)  # exactly once
    assert stable(rows) == stable(reference[0])
    assert cache_keys(cfg.cache) == reference[1]  # the dead worker's local cache was merged too


def test_bad_options_name_the_fix() -> None:
    with pytest.raises(RayExecutorError, match="CPUs each worker reserves must be a positive number") as info:
        RayOptions(num_cpus=0)
    assert info.value.setting == "num_cpus" and "--" not in str(info.value)
    with pytest.raises(RayExecutorError, match="workers per model must be a whole number") as info:
        RayOptions(workers_per_model=0)
    assert info.value.setting == "workers_per_model"


def test_workers_no_node_can_hold_are_refused_in_one_line(cluster: Any, tmp_path: Path,
                                                          server: dict[str, FakeOpenAIServer]) -> None:
    with pytest.raises(RayExecutorError, match="no node of the Ray cluster has 0.5 CPUs and 1 GPUs") as info:
        run_sweep_ray(_config(tmp_path, "gpu", server), RayOptions(num_gpus=1))
    assert "\n" not in str(info.value)


def test_a_node_removed_mid_sweep_completes_with_the_same_records_and_cache_keys(
    cluster: Any, tmp_path: Path, server: dict[str, FakeOpenAIServer], reference: tuple[list[dict], set[str]]
) -> None:
    local, nodes = cluster
    removed: list[str] = []
    events: list[str] = []

    def remove_a_node(state: dict[str, Any]) -> None:
        # fake-b holds its first answers for 4 s each (scripted below): once its server has a request,
        # fake-b's unit is surely still working, so its node goes mid-unit on any machine load.
        slow = server["openai:fake-b"]
        if removed or slow.count("/v1/chat/completions") + slow.count("/v1/completions") < 1:
            return
        busy = {ray.get(s.actor.where.remote())["node"] for s in state["slots"].values()
                if s.actor is not None and s.in_flight and s.model == "openai:fake-b"}
        for node in nodes:
            if node.node_id in busy:
                removed.append(node.node_id)
                local.remove_node(node, allow_graceful=False)
                return

    server["openai:fake-b"].reset_counts()
    server["openai:fake-b"].script(*["slow:4"] * 6)
    cfg = _config(tmp_path, "nodes", server)
    started = time.monotonic()
    # A unit takes well under 30 s here unloaded (fake-b's six slow answers); the timeout only bounds a
    # call to the removed node that would never return, so it is far above what a loaded machine
    # takes (at 60 s, a CI run beside other work timed out every attempt of fake-b's units).
    progress = run_sweep_ray(cfg, RayOptions(worker_cache_dir=str(tmp_path / "workers"), unit_timeout=300),
                             after_submit=remove_a_node, on_event=lambda m: events.append(f"{time.monotonic() - started:.1f}s {m}"))
    assert removed, "the sweep finished before a node could be removed: make it slower"
    assert not progress.failed and progress.units_requeued >= 1, events
    assert stable(records(cfg.folder)) == stable(reference[0])
    assert cache_keys(cfg.cache) == reference[1]  # per-node caches merged (one machine: the dead node's too)



@pytest.mark.parametrize("address, fix", [(None, "run with --executor local"), ("10.0.0.9:6379", "ray status --address 10.0.0.9:6379")])
def test_a_ray_that_does_not_start_is_one_line_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str], address: str | None, fix: str) -> None:
    """Issue 35: "node timed out during startup" printed a 20-line traceback."""
    from promptrobust.cli.main import main

    def no_start(**kwargs: Any) -> None:
        raise Exception("The current node timed out during startup. This could happen because some of the Ray processes "
                        "failed to startup.\n" + "\n".join(f"  detail line {i}" for i in range(20)))

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", no_start)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    config = tmp_path / "grid.toml"
    config.write_text(f'[sweep]\nname = "g"\noutput_dir = "{tmp_path / "sweeps"}"\nlimit = 2\n[grid]\nmodels = ["openai:fake-a"]\n'
                      'datasets = ["rotten_tomatoes"]\nattacks = ["checklist"]\n[models."openai:fake-a"]\n'
                      'model_args = "base_url=http://127.0.0.1:9/v1"\n')
    argv = ["sweep", str(config), "--executor", "ray", "--no-progress", *(["--address", address] if address else [])]
    assert main(argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert err[0].startswith("pre: error: Ray did not start") and "node timed out during startup" in err[0] and fix in err[0]
