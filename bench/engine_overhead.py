"""What the engine costs on top of the backend.

The same score requests are answered (a) through the evaluator and the
scheduler (request building, cache lookups and writes in a fresh SQLite file,
micro-batching, answer interpretation) and (b) straight by the backend's
``complete_batch`` in the same batches the scheduler would form. Both run in
one process, interleaved (a, b, a, b, ...), and the ratio of their throughputs
is printed: the target is (a)/(b) >= 0.9.

    python bench/engine_overhead.py [--samples 256] [--repeats 3] [--batch-size 16]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.report import header
from promptrobust.engine.serving.cache import ScoreCache
from promptrobust.engine.measuring.evaluator import Evaluator
from promptrobust.engine.serving.registry import build_backend, resolve_model
from promptrobust.engine.measuring.requests import RequestBuilder
from promptrobust.engine.serving.scheduler import Scheduler
from promptrobust.engine.serving.scheduler_settings import SchedulerSettings
from promptrobust.tasks.prompt_sets import load_prompts
from promptrobust.tasks.registry import get_task


async def through_engine(sched: Scheduler, task, samples, prompt: str, cache_file: Path) -> float:
    sched.cache = ScoreCache(cache_file)  # fresh file: every request is a miss and a write
    ev = Evaluator(sched, task, samples, mode="choices")
    t0 = time.perf_counter()
    await ev.evaluate(prompt)
    elapsed = time.perf_counter() - t0
    sched.cache.close()
    sched.cache = None
    return elapsed


async def straight(backend, task, samples, prompt: str, batch_size: int) -> float:
    """The same requests in the batches the scheduler forms (windows of 4 batches, arranged by the backend)."""
    builder = RequestBuilder(task, mode="choices", chat=backend.is_chat)
    requests = [builder.build(prompt, s) for s in samples]
    window = batch_size * 4
    t0 = time.perf_counter()
    for start in range(0, len(requests), window):
        part = requests[start : start + window]
        for batch in backend.arrange_batches(part, batch_size):
            await backend.complete_batch([part[i] for i in batch])
    return time.perf_counter() - t0


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--dataset", default="rotten_tomatoes")
    ap.add_argument("--samples", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "engine_overhead.md"))
    args = ap.parse_args()

    task = get_task(args.dataset)
    samples = task.load(limit=args.samples, seed=0)
    prompts = load_prompts(task.name, types=["task"])
    backend = build_backend(resolve_model(args.model))
    await backend.start()  # loaded once, shared by both paths
    sched = Scheduler(backend, settings=SchedulerSettings(batch_size=args.batch_size, max_wait_ms=5), owns_backend=False)
    await sched.start()
    # Warm-up (first-call costs in torch) outside the measurement.
    await straight(backend, task, samples[:32], prompts[0].text, args.batch_size)

    engine_times, direct_times = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            prompt = prompts[r % len(prompts)].text  # a new prompt each round: no cache hits anywhere
            e = await through_engine(sched, task, samples, prompt, Path(tmp) / f"round{r}.sqlite")
            d = await straight(backend, task, samples, prompt, args.batch_size)
            engine_times.append(e)
            direct_times.append(d)
    n = len(samples)
    e_rate = n / statistics.median(engine_times)
    d_rate = n / statistics.median(direct_times)
    ratio = e_rate / d_rate
    lines = [
        *header("Engine overhead",
                f"python bench/engine_overhead.py --samples {args.samples} --repeats {args.repeats} --batch-size {args.batch_size}",
                f"model {args.model} (hf backend, CPU), dataset {task.name}, {n} score_choices requests per round, "
                f"batch size {args.batch_size}, {args.repeats} interleaved rounds (a new prompt each round, fresh cache file)."),
        "| path | median seconds | requests/s |",
        "|---|---:|---:|",
        f"| (a) evaluator + scheduler + SQLite cache | {statistics.median(engine_times):.3f} | {e_rate:.1f} |",
        f"| (b) backend.complete_batch, same batches | {statistics.median(direct_times):.3f} | {d_rate:.1f} |",
        "",
        f"Throughput ratio (a)/(b): **{ratio:.3f}** (target >= 0.9)",
        "",
        f"Rounds (a): {', '.join(f'{t:.3f}' for t in engine_times)}; rounds (b): {', '.join(f'{t:.3f}' for t in direct_times)}",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    await sched.close()
    await backend.close()


if __name__ == "__main__":
    asyncio.run(main())
