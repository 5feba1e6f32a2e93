"""The backend's own ceiling: throughput of ``complete_batch`` alone at several
batch sizes, on the same score and generate requests the engine sends.

Every other figure (engine_overhead.py, attack_cost.py) can be read as a
fraction of the best row here. Batch sizes run interleaved, round after round,
so load changes on a shared machine hit all of them alike. Each batch size
above 1 runs with the hf backend's prefix sharing off and on (a candidate's
requests share the chat template and the instruction), which shows what that
lever is worth on the machine.

    python bench/ceiling.py --samples 64 --batch-sizes 1,4,8,16 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.report import command_line, header, write_results
from promptrobust.engine.serving.registry import build_backend, resolve_model
from promptrobust.engine.measuring.requests import RequestBuilder
from promptrobust.engine.serving.types import Request
from promptrobust.tasks import get_task, load_prompts


def requests_for(task, samples, prompt: str, chat: bool, kind: str) -> list[Request]:
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
    cells = [(s, False) for s in sizes] + [(s, True) for s in sizes if s > 1 and hasattr(backend, "with_options")]
    times: dict[tuple[str, int, bool], list[float]] = {}
    for _ in range(args.rounds):
        for kind in kinds:
            reqs = requests_for(task, samples, prompt, backend.is_chat, kind)
            for size, share in cells:
                if hasattr(backend, "with_options"):
                    backend.with_options(share_prefix=share)
                t0 = time.perf_counter()
                for i in range(0, len(reqs), size):
                    await backend.complete_batch(reqs[i : i + size])
                times.setdefault((kind, size, share), []).append(time.perf_counter() - t0)
    await backend.close()
    lines = [
        *header("Backend ceiling", command_line("ceiling.py"),
                f"model {args.model} (hf backend); {len(samples)} {task.name} requests per cell, sorted by length; "
                f"{args.rounds} interleaved rounds, median."),
        "| request kind | batch size | prefix sharing | median seconds | requests/s | vs best | vs batch 1 |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    rows = []
    for kind in kinds:
        rates = {c: len(samples) / statistics.median(times[(kind, *c)]) for c in cells}
        best = max(rates.values())
        for size, share in cells:
            rate = rates[(size, share)]
            rows.append({"kind": kind, "batch_size": size, "prefix_sharing": share,
                         "median_seconds": statistics.median(times[(kind, size, share)]), "requests_per_second": rate})
            lines.append(
                f"| {kind} | {size} | {'on' if share else 'off'} | {statistics.median(times[(kind, size, share)]):.2f} | "
                f"{rate:.2f} | {rate / best:.2f} | {rate / rates[(sizes[0], False)]:.2f} |"
            )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        write_results(args.out, text, command_line("ceiling.py"), {"model": args.model, "rows": rows})


if __name__ == "__main__":
    asyncio.run(main())
