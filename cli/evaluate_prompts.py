"""`pre run` without --attack: clean scores of a prompt set, with progress and sample logs."""

from __future__ import annotations

import argparse
import time
from typing import Any

from promptrobust.cli import printing


async def evaluate_and_write(args: argparse.Namespace, session: Any, bench: Any, prompts: list[Any], folder: Any) -> int:
    from promptrobust.engine.runs.run_results import clean_document, session_facts

    scheduler = bench.scheduler
    started = time.monotonic()
    result = await session.evaluate(  # phases and request counts reach the progress reporter from the session
        bench.evaluation, model=bench.spec, prompts=prompts, keep_records=args.log_samples,
    )
    clean = result.clean
    logged = folder.write_jsonl("samples.jsonl", result.sample_log()) if args.log_samples else 0
    wall = time.monotonic() - started
    settings = bench.describe()
    folder.write_results(clean_document(
        getattr(args, "argv", ["pre", "run"]), result=result, facts=session_facts(session),
        configs=getattr(args, "configs", {}), logged=logged,
    ))
    printing.print_clean(settings, clean, chance=bench.chance_rate)
    s = scheduler.stats.snapshot()
    print(
        f"mean {sum(c.score for c in clean) / len(clean):.4f} | {wall:.1f}s | requests {s['submitted']} "
        f"(sent {s['backend_requests']}, cache hits {s['cache_hits']}, deduplicated {s['deduplicated']})"
    )
    printing.next_step(args, clean=clean, samples=len(bench.samples))
    return 0

