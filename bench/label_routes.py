"""What exact label scores cost over HTTP: vLLM's ``logprob_token_ids`` route against the top-20 approximation.

Against a vLLM server ``pre`` scores labels exactly by token ids (vLLM 0.26+):
the server's ``/tokenize`` renders a label set once per run (and once more per
other ending of the inputs), then each sample is one completions request that
reads the labels' tokens at the generated position and returns the input's ids
(a second one for labels of several tokens). The approximation sends one
request and reads the first token's top-20. Both run
here, interleaved round by round in one process, against the same local fake
server playing vLLM (``FakeOpenAIServer(vllm=True)``, a fixed ``latency`` per
answer standing in for the network and the server's queue): what the exact
route costs in HTTP requests and in wall time, with the model's own work left
out (the fake computes nothing; on a real server the read request is the one
that runs the model, and its prompt's prefix stays cached).

    PYTHONPATH=. python bench/label_routes.py --samples 400 --labels 2 --latency 0.02 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout

from bench.environment import describe_line
from promptrobust.engine.serving.backends.openai import OpenAIBackend, OpenAIOptions
from promptrobust.engine.serving.types import Request
from promptrobust.testing.fake_openai import FakeOpenAIServer

MODEL = "bench-model"
ROUTES = ("logprob_token_ids", "top_logprobs")
LABEL_POOL = (" positive", " negative", " neutral", " mixed feelings", " unsure")


def _requests(samples: int, labels: int, shots: int) -> list[Request]:
    shot_block = "".join(f"Review: example {i} was great fun\nAnswer: positive\n" for i in range(shots))
    return [Request("score_choices", prompt=f"Classify the review.\n{shot_block}Review: sample {i} was great\nAnswer:",
                    choices=LABEL_POOL[:labels]) for i in range(samples)]


async def _run(url: str, route: str, requests: list[Request], concurrency: int) -> float:
    backend = OpenAIBackend(MODEL, OpenAIOptions(base_urls=[url], api="completions", scoring=route, api_key_env="PRE_BENCH_NO_KEY"))
    await backend.start()
    gate = asyncio.Semaphore(concurrency)

    async def one(r: Request) -> None:
        async with gate:
            out = await backend.complete(r)
            assert out.choice_logprobs is not None

    try:
        began = time.perf_counter()
        await asyncio.gather(*(one(r) for r in requests))
        return time.perf_counter() - began
    finally:
        await backend.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--labels", type=int, default=2, choices=range(1, len(LABEL_POOL) + 1))
    ap.add_argument("--shots", type=int, default=3)
    ap.add_argument("--latency", type=float, default=0.02, help="seconds the fake server waits before each answer")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path, help="write the numbers here too")
    args = ap.parse_args(argv)
    requests = _requests(args.samples, args.labels, args.shots)
    seconds: dict[str, list[float]] = {r: [] for r in ROUTES}
    http: dict[str, int] = {}
    for _ in range(args.rounds):
        for route in ROUTES:  # interleaved: both see the same machine load
            with FakeOpenAIServer(model=MODEL, vllm=True, latency=args.latency) as srv:
                seconds[route].append(asyncio.run(_run(srv.url, route, requests, args.concurrency)))
                http[route] = srv.count()
    median = {r: statistics.median(v) for r, v in seconds.items()}
    print(describe_line())
    print(f"{args.samples} samples, {args.labels} labels, {args.shots} shots, latency {args.latency:g}s, "
          f"concurrency {args.concurrency}, median of {args.rounds} rounds")
    for route in ROUTES:
        print(f"  {route:<18} {median[route]:7.3f} s  {http[route] / args.samples:5.2f} HTTP requests per sample "
              f"(last round: {http[route]})")
    ratio = median["logprob_token_ids"] / median["top_logprobs"]
    print(f"  exact (token ids) / approximate (top-20): {ratio:.2f}x the wall time, "
          f"{http['logprob_token_ids'] / http['top_logprobs']:.2f}x the HTTP requests")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "seconds": seconds,
                                         "http_requests": http, "ratio_wall": ratio}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
