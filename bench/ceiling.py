"""The backend's own ceiling: throughput of ``complete_batch`` alone at several
batch sizes, on the same score and generate requests the engine sends.

Every other figure (engine_overhead.py, attack_cost.py) can be read as a
fraction of the best row here. Batch sizes run interleaved, round after round,
so load changes on a shared machine hit all of them alike.

    python bench/ceiling.py --samples 64 --batch-sizes 1,4,8,16 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.registry import build_backend, resolve_model  # noqa: E402
from engine.requests import RequestBuilder  # noqa: E402
from engine.types import Request  # noqa: E402
from tasks import get_task, load_prompts  # noqa: E402


def requests_for(task, samples, prompt: str, chat: bool, kind: str) -> list[Request]:  # noqa: ANN001
    builder = RequestBuilder(task, mode="choices" if kind == "score_choices" else "generate", chat=chat)
    return sorted((builder.build(prompt, s) for s in samples), key=lambda r: len(r.input_text()))  # as the scheduler groups them


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--dataset", default="rotten_tomatoes")
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--batch-sizes", default="1,4,8,16")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    sizes = [int(x) for x in args.batch_sizes.split(",")]
    task = get_task(args.dataset)
    samples = task.load(limit=args.samples, seed=0)
    prompt = load_prompts(task.name, types=["task"])[0].text
    backend = build_backend(resolve_model(args.model))
    await backend.start()
    kinds = ["score_choices", "generate"] if task.supports_choices else ["generate"]
    await backend.complete_batch(requests_for(task, samples[:4], prompt, backend.is_chat, kinds[0]))  # warm-up
    times: dict[tuple[str, int], list[float]] = {}
    for _ in range(args.rounds):
        for kind in kinds:
            reqs = requests_for(task, samples, prompt, backend.is_chat, kind)
            for size in sizes:
                t0 = time.perf_counter()
                for i in range(0, len(reqs), size):
                    await backend.complete_batch(reqs[i : i + size])
                times.setdefault((kind, size), []).append(time.perf_counter() - t0)
    await backend.close()
    lines = [
        "# Backend ceiling",
        "",
        f"Command: `python bench/ceiling.py {' '.join(sys.argv[1:])}`",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; model {args.model} "
        f"(hf backend); {len(samples)} {task.name} requests per cell, sorted by length; {args.rounds} interleaved rounds, median.",
        "",
        "| request kind | batch size | median seconds | requests/s | vs best |",
        "|---|---:|---:|---:|---:|",
    ]
    for kind in kinds:
        rates = {s: len(samples) / statistics.median(times[(kind, s)]) for s in sizes}
        best = max(rates.values())
        for s in sizes:
            lines.append(
                f"| {kind} | {s} | {statistics.median(times[(kind, s)]):.2f} | {rates[s]:.2f} | {rates[s] / best:.2f} |"
            )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    asyncio.run(main())
