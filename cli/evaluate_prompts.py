"""`pre run` without --attack: clean scores of a prompt set, with progress and sample logs."""

from __future__ import annotations

import argparse
import time
from typing import Any

import orjson

from promptrobust.cli import printing


async def evaluate_and_write(args: argparse.Namespace, session: Any, bench: Any, prompts: list[Any], folder: Any) -> int:
    from promptrobust.cli.progress import Progress
    from promptrobust.engine.protocol import clean_score
    from promptrobust.engine.run_results import clean_document, session_facts

    scheduler = bench.scheduler
    evaluator = bench.evaluator()
    current = {"i": 0}
    progress = Progress(
        len(prompts) * len(bench.samples),
        scheduler.stats.snapshot,
        label=lambda: f"[prompt {min(current['i'] + 1, len(prompts))}/{len(prompts)}] ",
        enabled=not args.no_progress,
    )
    started = time.monotonic()
    progress.start()
    clean = []
    logged = 0
    samples_file = folder.path("samples.jsonl").open("wb") if args.log_samples else None
    try:
        for i, prompt in enumerate(prompts):
            current["i"] = i
            ev = await evaluator.evaluate(prompt.text, keep_records=args.log_samples)
            clean.append(clean_score(bench, prompt, ev))
            if samples_file is not None:
                for rec in ev.records:
                    samples_file.write(orjson.dumps({"prompt_id": prompt.id, "role": "clean", **rec.__dict__}, default=str) + b"\n")
                    logged += 1
    finally:
        await progress.stop()
        if samples_file is not None:
            samples_file.close()
    wall = time.monotonic() - started
    settings = bench.describe()
    folder.write_results(clean_document(
        getattr(args, "argv", ["pre", "run"]), bench=bench, clean=clean, facts=session_facts(session), started=folder.started,
        wall_seconds=wall, configs=getattr(args, "configs", {}), logged=logged,
    ))
    printing.print_clean(settings, clean, chance=bench.chance_rate)
    s = scheduler.stats.snapshot()
    print(
        f"mean {sum(c.score for c in clean) / len(clean):.4f} | {wall:.1f}s | requests {s['submitted']} "
        f"(sent {s['backend_requests']}, cache hits {s['cache_hits']}, deduplicated {s['deduplicated']})"
    )
    printing.next_step(attacked=False)
    return 0

