"""Fault injection: whole attack runs through the `pre` CLI against a faulty OpenAI-compatible server.

One FakeOpenAIServer on 127.0.0.1 serves every run of this module. Each run
sends its own API key, and the server gives each key its own seeded fault
plan, so every run has its faults while all runs share one URL, one model
identity and so the same cache keys: a faulty run's cache can be compared row
by row with the fault-free run's.

The claim under test (issue 12): whatever transient wrong the server does
(``TRANSIENT_FAULTS``: 429 with Retry-After, 500, 503, hanging answers, reset
connections, truncated bodies, malformed JSON, HTML pages, empty bodies, 200
answers without content, without log-probs, without or with empty choices), a
run with enough retries ends with exit code 0 and the same result records
(timing and cost counters aside) and the same cache contents as the fault-free
run; nothing garbage is scored or cached. Two endpoints with one dead or
hanging give the same results too, and the broken one costs a bounded number
of calls (it is ejected). And (issue 32) an answer the server computes wrong
and would send again (``BAD_ANSWER_FAULTS``: impossible log-probs, positive,
NaN or infinite, and JSON nested 200,000 levels deep) ends the run at once
with exit code 2 and one line naming it, and every cache row it left is one
the fault-free run has too.

The long parts are marked ``slow``; ``-s`` shows the table of outcomes.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

pytestmark = pytest.mark.slow  # every test here runs `pre` several times (seconds to a minute each)

from promptrobust.testing.fake_openai import BAD_ANSWER_FAULTS, TRANSIENT_FAULTS, FakeOpenAIServer, FaultPlan

ROOT = Path(__file__).resolve().parents[1]
ATTACKS = "stresstest,checklist,deepwordbug"
#: Samples per run: hundreds of requests a run, so a 20% fault rate injects dozens of faults of each kind.
SAMPLES = 40
#: Determinism on a loaded machine (issue 20): no wall-clock limit a slow machine can reach.
#: A "timeout" fault is a hang the server ends itself: it holds the request HANG seconds and
#: then closes the connection without an answer (FaultPlan(hang_up=True)), so the client sees
#: an unanswered request whatever the load. The client's own request timeout has lots of room:
#: no healthy answer is ever cut short, however busy the machine (a 1 s timeout once was, and
#: eight slow answers in a row failed a run).
REQUEST_TIMEOUT = 120.0
HANG = 1.0
#: Wall-clock limit of one `pre run` subprocess: only there to end a hung test, never reached.
RUN_LIMIT = 1800
#: The test servers stop themselves after this long (a safety net for a forgotten server). It
#: must outlast the whole module on a loaded machine: 900 s once did not (15 min under load 16).
LIFETIME = 3 * 3600
#: Keys of a record / of results.json that measure time or cost, not results.
#: And keys that say when, how and with what a run was made (provenance, not results): the
#: command names each run's own server and cache, the date its time, the versions its software.
COST_KEYS = {"cost", "wall_seconds", "scheduler", "cache", "command", "date", "versions"}


@dataclass
class Run:
    """What one `pre run` left behind."""

    label: str
    code: int
    wall: float
    stderr: str
    records: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    cache: dict[str, bytes] = field(default_factory=dict)
    retries: int = 0

    def same_as(self, other: Run) -> bool:
        return (self.code == other.code == 0 and self.records == other.records
                and self.summary == other.summary and self.cache == other.cache)

    def differences(self, other: Run) -> str:
        out = [f"exit {self.code} (stderr: {self.stderr.strip()[-600:]!r})"] if self.code else []
        if self.records != other.records:
            out.append(f"records differ: {len(self.records)} vs {len(other.records)}")
        if self.summary != other.summary:
            keys = sorted(k for k in set(self.summary) | set(other.summary) if self.summary.get(k) != other.summary.get(k))
            out.append(f"results.json differs in {keys}")
        if self.cache != other.cache:
            extra, missing = set(self.cache) - set(other.cache), set(other.cache) - set(self.cache)
            changed = [k for k in set(self.cache) & set(other.cache) if self.cache[k] != other.cache[k]]
            out.append(f"cache: {len(extra)} extra, {len(missing)} missing, {len(changed)} changed rows")
        return "; ".join(out) or "identical"


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in COST_KEYS}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _read_run(out: Path, cache: Path) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, bytes], int]:
    folders = [p for p in out.iterdir() if p.is_dir() and not p.name.startswith(".")] if out.exists() else []
    if len(folders) != 1:
        return [], {}, {}, 0
    folder = folders[0]
    records = [_strip(orjson.loads(line)) for line in (folder / "results.jsonl").read_bytes().splitlines() if line.strip()]
    raw = orjson.loads((folder / "results.json").read_bytes())
    per_model = ((raw.get("counters") or {}).get("scheduler") or {}).values()  # results.json's one layout
    retries = sum(int(stats.get("retries", 0)) for stats in per_model)
    with sqlite3.connect(cache) as conn:
        rows = dict(conn.execute("SELECT key, value FROM completions").fetchall())
    return records, _strip(raw), rows, retries


def pre_run(
    tmp: Path, label: str, base_url: str, *, mode: str, key: str, retries: int = 7, extra: Sequence[str] = ()
) -> Run:
    """One whole `pre run` (three attacks on SAMPLES samples) in a subprocess."""
    work = tmp / label
    work.mkdir(parents=True)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PRE_FAULT_KEY": key,
        # Short waits between retries so that hundreds of faults cost seconds, not minutes.
        "PRE_RETRY_BASE_DELAY": "0.01",
        "PRE_RETRY_MAX_DELAY": "0.05",
    }
    cmd = [
        sys.executable, "-m", "promptrobust.cli.main", "run",
        "--model", "openai:fake-model", "--model-args", f"base_url={base_url},api_key_env=PRE_FAULT_KEY",
        "--dataset", "rotten_tomatoes", "--limit", str(SAMPLES), "--prompt", "sst2-task-01",
        "--attack", ATTACKS, "--top-k", "1", "--budget", "4",
        "--cache", str(work / "cache.sqlite"), "--output-dir", str(work / "out"), "--no-progress",
        "--mode", mode, "--max-retries", str(retries), "--request-timeout", str(REQUEST_TIMEOUT), *extra,
    ]
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=RUN_LIMIT)
    wall = time.monotonic() - started
    records, summary, cache, retried = _read_run(work / "out", work / "cache.sqlite")
    return Run(label, done.returncode, wall, done.stderr, records, summary, cache, retried)


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(model="fake-model", lifetime=LIFETIME) as srv:
        yield srv


@pytest.fixture(scope="module")
def reference(server: FakeOpenAIServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """The fault-free run of each mode, computed once and on demand."""

    class Lazy(dict):
        def __missing__(self, mode: str) -> Run:
            run = pre_run(tmp_path_factory.mktemp("reference"), f"clean-{mode}", server.url, mode=mode, key="clean")
            assert run.code == 0 and run.records, run.stderr
            assert {r["mode"] for r in run.records} == {mode}
            self[mode] = run
            return run

    return Lazy()


TABLE: list[tuple[str, str, str, str, str, int, str]] = []


def _row(kind: str, rate: str, mode: str, run: Run, ref: Run, server: FakeOpenAIServer) -> None:
    injected = sum(server.injected_by_key.get(run.label, {}).values())
    verdict = "yes" if run.same_as(ref) else run.differences(ref)
    TABLE.append((kind, rate, mode, str(injected), str(run.retries), run.code, f"{verdict} ({run.wall:.0f}s)"))


@pytest.fixture(scope="module", autouse=True)
def _print_table() -> Iterator[None]:
    yield
    if TABLE:
        lines = ["| fault kind | rate | mode | faults injected | retries | exit | identical to fault-free? |",
                 "|---|---|---|---|---|---|---|"]
        lines += [f"| {k} | {r} | {m} | {n} | {t} | {c} | {i} |" for k, r, m, n, t, c, i in TABLE]
        text = "\n".join(lines)
        print("\n" + text)
        target = os.environ.get("PRE_FAULT_TABLE")
        if target:
            Path(target).write_text(text + "\n")


# -- the fault matrix ----------------------------------------------------------------------------

def modes_for(kind: str) -> tuple[str, ...]:
    """The modes a fault kind runs in alone: both with PRE_FAULT_FULL=1, else the one where it
    bites (``no_content`` only matters to generation; every other kind hits label scoring).
    Every kind meets both modes in the all-kinds-together runs."""
    if os.environ.get("PRE_FAULT_FULL") == "1":
        return ("choices", "generate")
    return ("generate",) if kind == "no_content" else ("choices",)


@dataclass(frozen=True)
class Case:
    kind: str  # a fault kind, or "all kinds"
    rate: float
    mode: str
    retries: int = 7

    @property
    def label(self) -> str:
        return f"{self.kind.replace(' ', '-')}-{round(self.rate * 100)}-{self.mode}"

    def plan(self) -> FaultPlan:
        seed = sum(map(ord, self.label))
        if self.kind == "all kinds":
            return FaultPlan.spread(TRANSIENT_FAULTS, self.rate, seed=seed, hang=HANG, hang_up=True)
        return FaultPlan({self.kind: self.rate}, seed=seed, hang=HANG, hang_up=True)


CASES = sorted([
    *(Case("all kinds", 0.2, mode) for mode in ("choices", "generate")),
    *(Case(kind, 0.2, mode) for kind in TRANSIENT_FAULTS for mode in modes_for(kind)),
    # Half the answers faulty: with enough retries (P(31 faults in a row) = 2**-31 per request) nothing changes.
    *(Case("all kinds", 0.5, mode, retries=30) for mode in ("choices", "generate")),
], key=lambda c: c.kind != "timeout")  # the slowest run first: the pool finishes sooner


def test_faults_of_every_kind_change_nothing(server, reference, tmp_path) -> None:  # noqa: ANN001
    """Each fault kind alone at 20%, all kinds together at 20% and at 50%: same records, same cache, exit 0."""
    def one(case: Case) -> Run:
        server.set_key_faults(case.label, case.plan())
        return pre_run(tmp_path, case.label, server.url, mode=case.mode, key=case.label, retries=case.retries)

    with ThreadPoolExecutor(max_workers=4) as pool:  # runs wait on the network more than on the CPU
        clean = {mode: pool.submit(reference.__getitem__, mode) for mode in ("choices", "generate")}
        runs = list(pool.map(one, CASES))
        refs = {mode: future.result() for mode, future in clean.items()}
    for case, run in zip(CASES, runs):
        _row(case.kind, f"{case.rate:.0%}", case.mode, run, refs[case.mode], server)
    bad = [f"{case.label}: {run.differences(refs[case.mode])}" for case, run in zip(CASES, runs)
           if not run.same_as(refs[case.mode])]
    assert not bad, bad
    together = next(run for case, run in zip(CASES, runs) if case.label == "all-kinds-20-choices")
    assert together.retries > 0 and sum(server.injected_by_key[together.label].values()) > 40


# -- answers a retry would get again ------------------------------------------------------------------

@pytest.mark.parametrize("kind", BAD_ANSWER_FAULTS)
def test_a_bad_answer_ends_the_run_at_once_in_one_line_and_caches_nothing_wrong(server, reference, tmp_path, kind) -> None:  # noqa: ANN001
    ref = reference["choices"]
    label = f"bad-{kind}"
    server.set_key_faults(label, FaultPlan({kind: 0.2}, seed=sum(map(ord, label))))
    run = pre_run(tmp_path, label, server.url, mode="choices", key=label)
    injected = sum(server.injected_by_key.get(label, {}).values())
    lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
    TABLE.append((kind, "20%", "choices", str(injected), "-", run.code, f"{lines[-1][:90] if lines else ''} ({run.wall:.0f}s)"))
    assert run.code == 2 and injected >= 1
    assert len(lines) == 1 and lines[0].startswith("pre: error: ") and "Traceback" not in run.stderr
    assert ("nested 200000 levels deep" if kind == "nested_json" else "impossible answer") in lines[0]
    assert "--max-retries" not in lines[0]  # retrying is not the fix
    with sqlite3.connect(tmp_path / label / "cache.sqlite") as conn:
        rows = dict(conn.execute("SELECT key, value FROM completions").fetchall())
    assert all(ref.cache.get(key) == value for key, value in rows.items())  # only what the fault-free run cached


# -- two endpoints, one of them broken ------------------------------------------------------------

def _refused_url() -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}/v1"


#: What a broken second endpoint may cost, in calls, whatever the clock: the requests in
#: flight to it when it fails (at most the default concurrency, 64) plus one probe per
#: cool-down (2, 4, 8, ... 60 s: about 20 in a 15-minute run on a very slow machine).
#: It used to be "at most twice the healthy wall time", which a machine whose load changes
#: between the two runs reached (19.7 s vs 9.1 s healthy, with 35 retries as always).
BROKEN_ENDPOINT_CALLS = 64 + 20


@pytest.mark.parametrize("broken", ["500", "refused", "hanging"])
def test_two_endpoints_with_one_broken_finish_identically_at_a_bounded_cost(
    server, reference, tmp_path, broken  # noqa: ANN001
) -> None:
    ref = reference["choices"]
    # The healthy time, measured now (the machine is shared: an old number would not compare).
    healthy = pre_run(tmp_path, f"healthy-for-{broken}", server.url, mode="choices", key="clean")
    assert healthy.same_as(ref), healthy.differences(ref)
    other: FakeOpenAIServer | None = None
    if broken == "refused":
        second = _refused_url()
    else:
        plan = FaultPlan({"500": 1.0}) if broken == "500" else FaultPlan({"timeout": 1.0}, hang=HANG, hang_up=True)
        other = FakeOpenAIServer(model="fake-model", faults=plan, lifetime=LIFETIME).start()
        second = other.url
    try:
        # The healthy endpoint first: the model identity (and so the cache keys) is the first URL's.
        run = pre_run(tmp_path, f"two-{broken}", f"{server.url}|{second}", mode="choices", key="clean")
        broken_calls = other.count("/v1/chat/completions") if other is not None else run.retries
    finally:
        if other is not None:
            other.stop()
    TABLE.append((f"2 endpoints, 1 {broken}", "all of one", "choices", "-", str(run.retries), run.code,
                  ("yes" if run.same_as(ref) else run.differences(ref))
                  + f"; {run.wall:.1f}s vs {healthy.wall:.1f}s healthy"))
    assert run.same_as(ref), run.differences(ref)
    # Ejection works: the broken endpoint got a bounded share of the calls (the wall times are
    # shown in the table, not asserted: on a shared machine they measure the neighbours too).
    assert broken_calls <= BROKEN_ENDPOINT_CALLS and run.retries <= BROKEN_ENDPOINT_CALLS, (broken_calls, run.retries)
