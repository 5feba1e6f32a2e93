"""The sweep driver's own limits on one machine (docs/scale.md cites these numbers).

    python bench/driver_limits.py [--records 2000] [--requests 4000] [--concurrency 64]

1. Record writer: ``append_jsonl`` as the local executor uses it (one flushed
   and fsynced line per record) and as the Ray driver and ``pre sweep merge``
   use it (one fsync per unit of records), for records with 100 and 1000
   per-sample scores; and ``completed_keys`` (what a resume reads first).
2. HTTP: one process's Scheduler over the openai backend against
   FakeOpenAIServer (latency 0) running in a *separate* process, distinct
   requests, no cache and with the SQLite cache. On a small machine the
   server competes with the client for the same cores: the figure is a lower
   bound on the client's rate.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from promptrobust.engine.measuring.records import AttackRecord, append_jsonl
from promptrobust.engine.runs.run_folder import completed_keys


def _record(i: int, samples: int) -> AttackRecord:
    scores = [float((i * 7 + s) % 2) for s in range(samples)]
    return AttackRecord(
        model="openai:gpt-4o-mini", dataset="sst2", prompt_id=f"sst2-task-{i % 10:02d}", attack="textbugger",
        clean_prompt="Analyze the tone of this statement and respond with either 'positive' or 'negative':",
        clean_score=0.9, adversarial_prompt="Analyze the t0ne of this statement and respond with either 'positive' or 'negative':",
        adversarial_score=0.7, pdr=0.22, samples=samples, clean_sample_scores=scores, adversarial_sample_scores=scores[::-1],
        settings={"recipe": "textbugger", "budget": None}, job_id=f"job{i // 3:06d}", clean_ci95=[0.85, 0.93],
    )


def bench_writer(n: int, samples: int, folder: Path) -> dict[str, float]:
    records = [_record(i, samples) for i in range(n)]
    one = folder / f"one-{samples}.jsonl"
    t0 = time.perf_counter()
    for r in records:
        append_jsonl(one, [r])
    per_record = n / (time.perf_counter() - t0)
    batched = folder / f"batch-{samples}.jsonl"
    t0 = time.perf_counter()
    for start in range(0, n, 3):  # one unit = a job's top-3 records
        append_jsonl(batched, records[start : start + 3])
    per_unit = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    keys = completed_keys(one)
    read = n / (time.perf_counter() - t0)
    assert len(keys) == len({(r.job_id, r.prompt_id) for r in records})
    return {"samples": samples, "bytes_per_record": one.stat().st_size / n, "fsync_each_per_s": per_record,
            "fsync_per_3_per_s": per_unit, "resume_read_per_s": read}


_SERVER = (
    "import sys, time\n"
    "from promptrobust.testing import FakeOpenAIServer\n"
    "srv = FakeOpenAIServer(model='m', latency=0.0, lifetime=None).start()\n"
    "print(srv.url, flush=True)\n"
    "sys.stdin.read()\n"
)


async def bench_http(url: str, n: int, concurrency: int, cache_path: Path | None) -> dict[str, float]:
    from promptrobust.engine.serving.backends.openai import OpenAIBackend, OpenAIOptions
    from promptrobust.engine.serving.cache import ScoreCache
    from promptrobust.engine.serving.scheduler import Scheduler
    from promptrobust.engine.serving.scheduler_settings import SchedulerSettings
    from promptrobust.engine.serving.types import Decoding, Request

    backend = OpenAIBackend("m", OpenAIOptions(base_urls=[url], api_key_env="PRE_BENCH_NO_KEY", max_connections=concurrency))
    cache = ScoreCache(cache_path) if cache_path else None
    sched = Scheduler(backend, cache=cache, settings=SchedulerSettings(concurrency=concurrency))
    await sched.start()
    requests = [Request(kind="generate", prompt=f"Review {i}: a film that was good.\nAnswer:", decoding=Decoding(max_tokens=1))
                for i in range(n)]
    cpu0, t0 = time.process_time(), time.perf_counter()
    out = await asyncio.gather(*(sched.submit(r) for r in requests))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    await sched.close()
    if cache:
        cache.close()
    assert len(out) == n
    return {"requests": n, "concurrency": concurrency, "cache": bool(cache_path), "per_s": n / wall,
            "client_cpu_ms_per_request": 1000 * cpu / n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--concurrency", type=int, default=64)
    args = ap.parse_args()
    print(f"# driver limits: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}, Python {platform.python_version()}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print("\n| samples/record | bytes/record | records/s (fsync each) | records/s (fsync per 3) | resume read records/s |")
        print("|---|---|---|---|---|")
        for samples in (100, 1000):
            r = bench_writer(args.records, samples, folder)
            print(f"| {samples} | {r['bytes_per_record']:.0f} | {r['fsync_each_per_s']:.0f} | "
                  f"{r['fsync_per_3_per_s']:.0f} | {r['resume_read_per_s']:.0f} |")
        server = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            url = server.stdout.readline().strip()
            try:
                import uvloop

                uvloop.install()
            except ImportError:
                pass
            print("\n| requests | concurrency | cache | requests/s | client CPU ms/request |")
            print("|---|---|---|---|---|")
            for cache in (None, folder / "bench.sqlite"):
                r = asyncio.run(bench_http(url, args.requests, args.concurrency, cache))
                print(f"| {r['requests']} | {r['concurrency']} | {'sqlite' if r['cache'] else 'none'} | "
                      f"{r['per_s']:.0f} | {r['client_cpu_ms_per_request']:.2f} |")
        finally:
            server.stdin.close()
            server.wait(timeout=10)


if __name__ == "__main__":
    main()
