"""`pre run` without --attack: clean scores of a prompt set, with progress and sample logs."""

from __future__ import annotations

import argparse
import time
from typing import Any

import orjson

from promptrobust.cli import printing


async def evaluate_and_write(args: argparse.Namespace, session: Any, bench: Any, prompts: list[Any], folder: Any) -> int:
    from promptrobust.engine import progress
    from promptrobust.engine.protocol import clean_score

    scheduler = bench.scheduler
    evaluator = bench.evaluator()
    started = time.monotonic()
    clean = []
    samples_file = folder.path("samples.jsonl").open("wb") if args.log_samples else None
    total = len(prompts) * len(bench.samples)
    try:
        with progress.reserve(total):  # the whole phase's requests are known now
            for i, prompt in enumerate(prompts):
                progress.phase(f"scoring prompt {i + 1} of {len(prompts)} ({prompt.id}) on {len(bench.samples)} samples")
                ev = await evaluator.evaluate(prompt.text, keep_records=args.log_samples)
                clean.append(clean_score(bench, prompt, ev))
                if samples_file is not None:
                    for rec in ev.records:
                        samples_file.write(orjson.dumps({"prompt_id": prompt.id, **rec.__dict__}, default=str) + b"\n")
    finally:
        if samples_file is not None:
            samples_file.close()
    wall = time.monotonic() - started
    settings = bench.describe()
    settings["mode"] = evaluator.mode  # a backend without log-probs turns choices into generate
    folder.write_json(
        "results.json",
        {
            **settings,
            "model_identity": identity_dict(scheduler),
            "chance_rate": bench.chance_rate,
            "prompts": [c.to_dict() for c in clean],
            "clean_scores": {c.prompt.id: c.score for c in clean},
            "mean_score": sum(c.score for c in clean) / len(clean),
            "wall_seconds": round(wall, 3),
            "scheduler": scheduler.stats.snapshot(),
            "cache": session.cache.summary() if session.cache is not None else None,
        },
    )
    printing.print_clean(settings, clean, chance=bench.chance_rate)
    s = scheduler.stats.snapshot()
    print(
        f"mean {sum(c.score for c in clean) / len(clean):.4f} | {wall:.1f}s | requests {s['submitted']} "
        f"(sent {s['backend_requests']}, cache hits {s['cache_hits']}, deduplicated {s['deduplicated']})"
    )
    printing.next_step(args, clean=clean, samples=len(bench.samples))
    return 0


def identity_dict(scheduler: Any) -> dict[str, Any]:
    ident = scheduler.backend.identity
    return {"backend": ident.backend, "name": ident.name, "revision": ident.revision, "extra": dict(ident.extra)}
