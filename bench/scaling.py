"""How an attack's cost grows with the number of samples.

Runs one attack with our engine (label scoring, exact early stopping, a fresh
cache file per size) on the first 50, 100, 200, 400 samples of the same seeded
draw, and prints requests, wall time and requests/s per size, in one run.

    python bench/scaling.py --attack stresstest --sizes 50,100,200,400
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.attack_cost import measure, write_json  # noqa: E402
from engine.registry import build_backend, resolve_model  # noqa: E402
from tasks import get_task, load_prompts  # noqa: E402


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--dataset", default="rotten_tomatoes")
    ap.add_argument("--attack", default="stresstest")
    ap.add_argument("--sizes", default="50,100,200,400")
    ap.add_argument("--budget", type=int, default=12)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    task = get_task(args.dataset)
    prompt = load_prompts(task.name, types=["task"])[0]
    backend = build_backend(resolve_model(args.model))
    await backend.start()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            samples = task.load(limit=n, seed=0)
            sub = Path(tmp) / f"n{n}"
            sub.mkdir()
            m = await measure("engine", args.attack, backend, task, samples, prompt.text, budget=args.budget, seed=0,
                              cache_dir=sub, batch_size=args.batch_size)
            rows.append((n, m))
            print(f"# {n:5d} samples {m.seconds:7.1f}s sent {m.requests_sent}", file=sys.stderr, flush=True)
    await backend.close()
    cmd = "python bench/scaling.py " + " ".join(sys.argv[1:])
    lines = [
        "# Attack cost versus dataset size",
        "",
        f"Command: `{cmd}`",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; model {args.model}; "
        f"{task.name}; prompt {prompt.id}; attack {args.attack}; budget {args.budget}; our engine, label scoring, fresh cache per size.",
        "",
        "| samples | candidates | requests sent | seconds | requests/s | seconds per 100 samples | clean | attacked |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, m in rows:
        lines.append(
            f"| {n} | {m.candidates} | {m.requests_sent} | {m.seconds:.1f} | {m.samples_per_second:.2f} | "
            f"{100 * m.seconds / n:.1f} | {m.clean_score:.3f} | {m.adversarial_score:.3f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
        write_json(Path(args.out).with_suffix(".json"), cmd, [m for _, m in rows])


if __name__ == "__main__":
    asyncio.run(main())
