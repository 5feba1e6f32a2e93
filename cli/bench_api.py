"""`pre bench api`: our scheduler versus a plain client under a provider's rate limit
(the benchmark itself is engine/benchmarks/api.py; this module is its flags and printout)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from promptrobust.cli.errors import UserError

API_EPILOG = """\
what it measures:
  A local OpenAI-compatible server on 127.0.0.1 enforces a requests-per-minute
  limit over a sliding window (429 + Retry-After, like a provider) and answers
  after --latency seconds. Two clients send the same distinct requests, each
  against its own fresh server, one after the other:
    scheduler (ours)  Scheduler(rpm=RPM, concurrency=N) over the openai
                      backend, default retries (8 attempts, Retry-After honoured)
    plain semaphore   asyncio.Semaphore(N) around AsyncOpenAI calls, no rate
                      limiting, the SDK's own retries (--baseline-retries,
                      default 2 as in the SDK); what still fails is lost
  Reported per client: requests, succeeded, lost, requests the server saw
  (429s included), 429s, retries, wall time, and the sustained fraction of the
  limit: accepted requests per minute in the whole windows after the first,
  (t0 + W, t0 + K*W], divided by RPM. The first window is left out: a sliding
  window lets any client spend a whole window's allowance there at once.

time scale:
  A provider's window is 60 s. Here the server's window is --window-s seconds
  holding RPM * window / 60 requests: the same rate, less room for bursts.
  Our limiter keeps RPM and scales its burst to window/60 s (its default 1 s
  at a 60 s window). --window-s 60 runs in real provider time (minutes).

examples:
  pre bench api                                  # 600 rpm, 6 s window, ~2 min
  pre bench api --out bench/results              # also writes api.md and api.json
  pre bench api --rpm 600 --window-s 1 --requests 40 --concurrency 16
  pre bench attack-cost --variants exhaustive,engine --limit 24 --budget 12
  pre bench attack-cost --variants reference,engine-gen,engine --limit 16 --budget 12 --protocol-top-k 3
  pre bench engine-overhead --samples 256 --batch-size 16
  pre bench ceiling --samples 48 --batch-sizes 1,8,16,32
  pre bench scaling --sizes 50,100,200,400 --prompt-lengths 0,2,4,8
  pre bench protocol --limit 2 --top-k 1 --out bench/results/protocol.md --summary bench/results/summary.json
  pre bench gpu --model random:llama-2-7b --out bench/results
  pre bench gpu --model random:tiny-llama --candidates 2 --samples 4 --batch-sizes 2,4
"""


def add_api_parser(kinds: Any, formatter: type[argparse.HelpFormatter]) -> None:
    """Register `pre bench api` under `pre bench`'s subcommands."""
    api = kinds.add_parser("api", help="openai backend under a provider's rate limit: our scheduler vs a plain client",
                           description="Our scheduler versus a plain semaphore client against a rate-limited local "
                                       "OpenAI-compatible server.",
                           epilog=API_EPILOG, formatter_class=formatter)
    api.add_argument("--rpm", type=float, default=600.0, help="the server's limit, requests per minute")
    api.add_argument("--window-s", type=float, default=6.0,
                     help="the server's sliding window in seconds (60 = real provider time)")
    api.add_argument("--latency", type=float, default=0.05, help="seconds the server takes per answer")
    api.add_argument("--concurrency", type=int, default=64, help="requests in flight, both clients")
    api.add_argument("--requests", type=int, default=None,
                     help="requests per client (default: as many as --duration-s takes at the limit)")
    api.add_argument("--duration-s", type=float, default=60.0,
                     help="seconds each client should need at the limit; sets --requests when absent")
    api.add_argument("--baseline-retries", type=int, default=2,
                     help="the plain client's SDK max_retries (the openai SDK's default)")
    api.add_argument("--out", default=None, metavar="DIR", help="also write DIR/api.md and DIR/api.json")
    api.set_defaults(handler=run_api)


def _config(args: argparse.Namespace) -> Any:
    from promptrobust.engine.benchmarks.api import ApiBenchConfig

    cfg = ApiBenchConfig(rpm=args.rpm, window_s=args.window_s, latency=args.latency, concurrency=args.concurrency,
                         requests=args.requests, duration_s=args.duration_s, baseline_retries=args.baseline_retries)
    try:
        cfg.validate()
    except ValueError as exc:
        raise UserError(str(exc)) from None
    return cfg


def _command(cfg: Any) -> str:
    """The full command, every setting explicit, so the result can be reproduced."""
    return (f"pre bench api --rpm {cfg.rpm:g} --window-s {cfg.window_s:g} --latency {cfg.latency:g} "
            f"--concurrency {cfg.concurrency} --requests {cfg.total_requests} "
            f"--baseline-retries {cfg.baseline_retries}")


def run_api(args: argparse.Namespace) -> int:
    from promptrobust.engine.benchmarks import api

    cfg = _config(args)
    out_dir = Path(args.out) if args.out else None
    if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"--out {out_dir} is a file: give a directory for api.md and api.json")
    print(f"# {cfg.total_requests} requests per client at {cfg.rpm:g} rpm ({cfg.per_window} per {cfg.window_s:g} s "
          f"window): about {cfg.expected_seconds:.0f} s each", file=sys.stderr, flush=True)
    results = asyncio.run(api.run_api_bench(cfg))
    command = _command(cfg)
    text = api.markdown(cfg, results, command)
    print(text)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "api.md").write_text(text)
        (out_dir / "api.json").write_text(json.dumps(api.to_json(cfg, results, command), indent=2) + "\n")
        print(f"# wrote {out_dir / 'api.md'} and {out_dir / 'api.json'}", file=sys.stderr)
    return 0
