"""API mode under a provider's rate limit: our scheduler versus a plain client.

A local OpenAI-compatible server (``fake_openai.FakeOpenAIServer``) enforces a
request limit over a sliding window with 429 + Retry-After, like a provider,
and answers after a fixed latency. Two clients send the same requests, each
against a fresh server, in one run:

* ``scheduler``  our ``Scheduler`` over ``OpenAIBackend``: ``rpm`` set to the
  server's limit, ``concurrency`` workers, default ``RetryPolicy`` (8 attempts,
  Retry-After honoured);
* ``plain``      what lm-evaluation-harness style code does: an
  ``asyncio.Semaphore(concurrency)`` around ``AsyncOpenAI`` calls, no rate
  limiting, the SDK's own retries (``max_retries=2`` by default: it waits out
  the server's Retry-After, then gives up; a request that still fails is lost).

Time scale: a provider's window is 60 s. To keep the run short the server's
window is ``window_s`` (6 s by default) holding ``rpm * window_s / 60``
requests, the same rate with less room for bursts. Our limiter keeps its
per-minute rate and scales its burst the same way (``window_s / 60`` seconds,
i.e. the default 1 s burst at a 60 s window), so both sides see the real
proportions. ``window_s=60`` runs in real provider time.

Sustained fraction of the limit: successes the server accepted, by arrival
time, in the whole windows after the first, ``(t0 + W, t0 + K*W]``, per
minute, divided by ``rpm``. ``t0`` is when the client sends its first request,
``W`` the window and ``K`` the number of whole windows from ``t0`` to the last
accepted request. The first window is left out because a sliding window lets
any client take a whole window's allowance at once there: that burst is not a
rate anyone can sustain. Whole windows, not "up to the last success", because
a client that bursts at each window's start would otherwise be credited with
its last burst but not with the window it must wait out after it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import math
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from dataclasses import asdict, dataclass, field
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout

from promptrobust.engine.serving.backends.openai import OpenAIBackend, OpenAIOptions
from bench.environment import describe, describe_line
from promptrobust.testing.fake_openai import FakeOpenAIServer
from promptrobust.engine.serving.ratelimit import RateLimiter
from promptrobust.engine.serving.scheduler import Scheduler
from promptrobust.engine.serving.scheduler_settings import SchedulerSettings
from promptrobust.engine.serving.types import Decoding, Request

MODEL = "bench-model"
#: An environment variable nobody sets: the local server needs no key, and a
#: real OPENAI_API_KEY must never be sent to it.
_NO_KEY_ENV = "PRE_BENCH_FAKE_SERVER_KEY"
#: The steady-state part must span at least this many windows after the first.
MIN_STEADY_WINDOWS = 2


@dataclass(frozen=True)
class ApiBenchConfig:
    """Settings of one `pre bench api` run."""

    rpm: float = 600.0
    window_s: float = 6.0
    latency: float = 0.05
    concurrency: int = 64
    requests: int | None = None  # None: enough for duration_s at the limit
    duration_s: float = 60.0
    baseline_retries: int = 2  # the openai SDK's default max_retries

    @property
    def per_window(self) -> int:
        """Requests the server accepts in any window."""
        return round(self.rpm * self.window_s / 60.0)

    @property
    def total_requests(self) -> int:
        return self.requests if self.requests is not None else math.ceil(self.rpm * self.duration_s / 60.0)

    @property
    def expected_seconds(self) -> float:
        """How long the requests take at exactly the limit."""
        return self.total_requests / (self.rpm / 60.0)

    def validate(self) -> None:
        """Raise ValueError (one line, naming the option to change) on bad settings."""
        for name in ("rpm", "window_s", "duration_s"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"--{name.replace('_', '-')} must be a positive number, got {value!r}")
        if not (math.isfinite(self.latency) and self.latency >= 0):
            raise ValueError(f"--latency must be >= 0 seconds, got {self.latency!r}")
        if self.concurrency < 1:
            raise ValueError(f"--concurrency must be at least 1, got {self.concurrency}")
        if self.requests is not None and self.requests < 1:
            raise ValueError(f"--requests must be at least 1, got {self.requests}")
        if self.baseline_retries < 0:
            raise ValueError(f"--baseline-retries must be >= 0, got {self.baseline_retries}")
        exact = self.rpm * self.window_s / 60.0
        if self.per_window < 1 or abs(exact - self.per_window) > 1e-6:
            raise ValueError(
                f"--rpm {self.rpm:g} over a {self.window_s:g} s window is {exact:g} requests per window: "
                "choose --rpm and --window-s so that rpm * window_s / 60 is a whole number >= 1"
            )
        if self.expected_seconds < (MIN_STEADY_WINDOWS + 1) * self.window_s:
            raise ValueError(
                f"{self.total_requests} requests at {self.rpm:g} rpm last {self.expected_seconds:.1f} s, under "
                f"{MIN_STEADY_WINDOWS + 1} windows of {self.window_s:g} s: raise --requests or --duration-s, "
                "or lower --window-s"
            )


@dataclass
class ClientResult:
    """What one client achieved against its own fresh server."""

    client: str
    requests: int
    succeeded: int
    lost: int
    sent: int  # POSTs the server answered, 429s included
    rate_limited: int  # 429 answers
    retries: int  # attempts beyond each request's first (sent - requests)
    wall_s: float
    cpu_s: float  # process CPU time (client and server threads together)
    steady_s: float  # length of the steady-state interval
    steady_successes: int
    steady_per_min: float
    fraction_of_limit: float
    overall_per_min: float  # all successes over the whole wall time
    max_sent_per_window: int
    max_accepted_per_window: int
    lost_reasons: dict[str, int] = field(default_factory=dict)


def bench_prompts(n: int) -> list[str]:
    """Distinct short prompts (distinct so that nothing is deduplicated)."""
    return [f"Review {i}: the film was good.\nSentiment:" for i in range(n)]


def max_in_window(times: Sequence[float], window: float) -> int:
    """Most events in any half-open interval (t - window, t]."""
    ordered = sorted(times)
    best = 0
    lo = 0
    for hi, t in enumerate(ordered):
        while ordered[lo] <= t - window:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def summarise(client: str, cfg: ApiBenchConfig, outcomes: Sequence[tuple[float, int]], *, requests: int,
              succeeded: int, lost_reasons: Counter[str], t0: float, wall_s: float, cpu_s: float) -> ClientResult:
    """Turn the server's log of (arrival, status) into the reported numbers."""
    accepted = sorted(t for t, status in outcomes if status == 200)
    sent = len(outcomes)
    steady_s = 0.0
    steady = 0
    if accepted:
        # Whole windows after the first: (t0 + W, t0 + K*W] with K the whole windows up to the last success.
        windows = math.floor((accepted[-1] - t0) / cfg.window_s)
        if windows >= 2:
            start, end = t0 + cfg.window_s, t0 + windows * cfg.window_s
            steady_s = end - start
            steady = sum(1 for t in accepted if start < t <= end)
    per_min = steady / steady_s * 60.0 if steady_s > 0 else 0.0
    return ClientResult(
        client=client, requests=requests, succeeded=succeeded, lost=requests - succeeded, sent=sent,
        rate_limited=sum(1 for _, status in outcomes if status == 429), retries=sent - requests,
        wall_s=round(wall_s, 3), cpu_s=round(cpu_s, 3), steady_s=round(steady_s, 3), steady_successes=steady,
        steady_per_min=round(per_min, 1), fraction_of_limit=round(per_min / cfg.rpm, 4),
        overall_per_min=round(succeeded / wall_s * 60.0, 1) if wall_s > 0 else 0.0,
        max_sent_per_window=max_in_window([t for t, _ in outcomes], cfg.window_s),
        max_accepted_per_window=max_in_window(accepted, cfg.window_s),
        lost_reasons=dict(lost_reasons),
    )


def _server(cfg: ApiBenchConfig) -> FakeOpenAIServer:
    return FakeOpenAIServer(model=MODEL, rpm=cfg.per_window, window=cfg.window_s, latency=cfg.latency).start()


async def run_scheduler(cfg: ApiBenchConfig) -> ClientResult:
    """Our Scheduler over OpenAIBackend, rpm set to the server's limit."""
    prompts = bench_prompts(cfg.total_requests)
    requests = [Request(kind="generate", prompt=p, decoding=Decoding(max_tokens=1)) for p in prompts]
    srv = _server(cfg)
    try:
        backend = OpenAIBackend(MODEL, OpenAIOptions(base_urls=[srv.url], api_key_env=_NO_KEY_ENV, max_connections=cfg.concurrency))
        limiter = RateLimiter(rpm=cfg.rpm, burst_seconds=cfg.window_s / 60.0)
        sched = Scheduler(backend, settings=SchedulerSettings(concurrency=cfg.concurrency), limiter=limiter)
        await sched.start()  # probes GET /models before the clock starts
        cpu0, t0 = time.process_time(), time.monotonic()
        outcomes = await asyncio.gather(*(sched.submit(r) for r in requests), return_exceptions=True)
        wall, cpu = time.monotonic() - t0, time.process_time() - cpu0
        await sched.close()
        lost = Counter(_reason(o) for o in outcomes if isinstance(o, BaseException))
        succeeded = len(outcomes) - sum(lost.values())
        return summarise("scheduler (ours)", cfg, srv.outcomes, requests=len(requests), succeeded=succeeded,
                         lost_reasons=lost, t0=t0, wall_s=wall, cpu_s=cpu)
    finally:
        srv.stop()


async def run_plain(cfg: ApiBenchConfig) -> ClientResult:
    """Semaphore-only client: AsyncOpenAI with the SDK's own retries, no rate limiting."""
    import openai

    prompts = bench_prompts(cfg.total_requests)
    srv = _server(cfg)
    try:
        client = openai.AsyncOpenAI(api_key="EMPTY", base_url=srv.url, max_retries=cfg.baseline_retries, timeout=60.0)
        sem = asyncio.Semaphore(cfg.concurrency)
        lost: Counter[str] = Counter()

        async def one(prompt: str) -> bool:
            async with sem:
                try:
                    await client.completions.create(model=MODEL, prompt=prompt, max_tokens=1, temperature=0.0)
                    return True
                except openai.APIError as exc:
                    lost[_reason(exc)] += 1
                    return False

        cpu0, t0 = time.process_time(), time.monotonic()
        done = await asyncio.gather(*(one(p) for p in prompts))
        wall, cpu = time.monotonic() - t0, time.process_time() - cpu0
        await client.close()
        return summarise(f"plain semaphore (SDK max_retries={cfg.baseline_retries})", cfg, srv.outcomes,
                         requests=len(prompts), succeeded=sum(done), lost_reasons=lost, t0=t0, wall_s=wall, cpu_s=cpu)
    finally:
        srv.stop()


def _reason(exc: BaseException) -> str:
    status = getattr(exc, "status_code", None) or getattr(exc, "status", None)
    return f"{type(exc).__name__} (HTTP {status})" if status else type(exc).__name__


async def run_api_bench(cfg: ApiBenchConfig) -> list[ClientResult]:
    """Both clients, one after the other, each against a fresh server."""
    cfg.validate()
    return [await run_scheduler(cfg), await run_plain(cfg)]


def to_json(cfg: ApiBenchConfig, results: Sequence[ClientResult], command: str) -> dict[str, Any]:
    return {
        "benchmark": "api",
        "command": command,
        "settings": {**asdict(cfg), "per_window": cfg.per_window, "total_requests": cfg.total_requests},
        "environment": describe(),
        "results": [asdict(r) for r in results],
    }


def table(results: Sequence[ClientResult]) -> list[str]:
    lines = [
        ("| client | requests | succeeded | lost | sent to server (incl. 429) | 429s | retries | wall s | "
        "steady successes/min | fraction of limit | max sent in a window | max accepted in a window | CPU s |"),
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.client} | {r.requests} | {r.succeeded} | {r.lost} | {r.sent} | {r.rate_limited} | {r.retries} | "
            f"{r.wall_s:.1f} | {r.steady_per_min:.1f} | {r.fraction_of_limit:.3f} | {r.max_sent_per_window} | "
            f"{r.max_accepted_per_window} | {r.cpu_s:.1f} |"
        )
    return lines


def markdown(cfg: ApiBenchConfig, results: Sequence[ClientResult], command: str) -> str:
    lost_notes = [f"{r.client}: " + ", ".join(f"{n} x {k}" for k, n in r.lost_reasons.items())
                  for r in results if r.lost_reasons]
    lines = [
        "# API mode under a rate limit",
        "",
        f"Command: `{command}`",
        describe_line(),
        (f"Server: local OpenAI-compatible server on 127.0.0.1, limit {cfg.rpm:g} requests/min enforced as "
        f"{cfg.per_window} requests per sliding {cfg.window_s:g} s window (429 + Retry-After), "
        f"{cfg.latency * 1000:g} ms latency per answer. Each client: {cfg.total_requests} distinct requests, "
        f"concurrency {cfg.concurrency}, its own fresh server."),
        "",
        *table(results),
        "",
        *(["Lost requests: " + "; ".join(lost_notes) + ".", ""] if lost_notes else []),
        "How to read it:",
        "",
        (f"- **scheduler (ours)**: `Scheduler(settings=SchedulerSettings(concurrency={cfg.concurrency}))` with an rpm={cfg.rpm:g} limiter over `OpenAIBackend`, "
        "default retry policy (8 attempts, exponential backoff with jitter, Retry-After honoured)."),
        (f"- **plain semaphore**: `asyncio.Semaphore({cfg.concurrency})` around `AsyncOpenAI.completions.create`, "
        f"no rate limiting, the openai SDK's own retries (max_retries={cfg.baseline_retries}; it waits out the "
        "server's Retry-After); a request that fails after them is lost (the lm-evaluation-harness approach)."),
        "- *sent to server* counts every POST the server answered; *retries* = sent - requests.",
        (f"- *steady successes/min*: accepted requests (server side, by arrival time) in the whole {cfg.window_s:g} s "
        "windows after the first, (t0 + W, t0 + K*W], per minute; t0 is the client's first request and K the "
        "number of whole windows up to its last accepted request. The first window is excluded because a "
        "sliding window lets any client take a whole window's allowance at once there; whole windows, so that "
        "a client bursting at each window start is not credited with a last burst without the wait after it. "
        "*fraction of limit* = that rate / rpm."),
        (f"- *max sent / accepted in a window*: most requests arriving in any {cfg.window_s:g} s interval "
        f"(the server accepts at most {cfg.per_window})."),
        (f"- Time scale: a provider's window is 60 s; here it is {cfg.window_s:g} s holding {cfg.per_window} requests "
        "(the same rate, less room for bursts). Our limiter keeps rpm and scales its burst to window/60 s, the "
        "proportion its default 1 s burst has at a 60 s window. `--window-s 60` runs in real provider time."),
        "",
    ]
    return "\n".join(lines)


# -- the command line (`pre bench api`, or `python bench/api_bench.py`) ------------------

API_EPILOG = """\
what it measures:
  A local OpenAI-compatible server on 127.0.0.1 enforces a requests-per-minute
  limit over a sliding window (429 + Retry-After, like a provider) and answers
  after --latency seconds. Two clients send the same distinct requests, each
  against its own fresh server, one after the other:
    scheduler (ours)  Scheduler(settings=SchedulerSettings(rpm=RPM, concurrency=N)) over the openai
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
  python bench/api_bench.py                                  # 600 rpm, 6 s window, ~2 min
  python bench/api_bench.py --out bench/results              # also writes api.md and api.json
  python bench/api_bench.py --rpm 600 --window-s 1 --requests 40 --concurrency 16
"""


def build_parser() -> argparse.ArgumentParser:
    api = argparse.ArgumentParser(prog="pre bench api",
                                  description="Our scheduler versus a plain semaphore client against a rate-limited local "
                                              "OpenAI-compatible server.",
                                  epilog=API_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    return api


def _config(args: argparse.Namespace) -> ApiBenchConfig:
    cfg = ApiBenchConfig(rpm=args.rpm, window_s=args.window_s, latency=args.latency, concurrency=args.concurrency,
                         requests=args.requests, duration_s=args.duration_s, baseline_retries=args.baseline_retries)
    cfg.validate()  # ValueError: one line and exit code 2 (main)
    return cfg


def _command(cfg: ApiBenchConfig) -> str:
    """The full command, every setting explicit, so the result can be reproduced."""
    return (f"pre bench api --rpm {cfg.rpm:g} --window-s {cfg.window_s:g} --latency {cfg.latency:g} "
            f"--concurrency {cfg.concurrency} --requests {cfg.total_requests} "
            f"--baseline-retries {cfg.baseline_retries}")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out_dir = Path(args.out) if args.out else None
    try:
        cfg = _config(args)
        if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
            raise ValueError(f"--out {out_dir} is a file: give a directory for api.md and api.json")
    except ValueError as exc:
        print(f"pre bench api: {exc}", file=sys.stderr)
        return 2
    print(f"# {cfg.total_requests} requests per client at {cfg.rpm:g} rpm ({cfg.per_window} per {cfg.window_s:g} s "
          f"window): about {cfg.expected_seconds:.0f} s each", file=sys.stderr, flush=True)
    results = asyncio.run(run_api_bench(cfg))
    command = _command(cfg)
    text = markdown(cfg, results, command)
    print(text)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "api.md").write_text(text)
        (out_dir / "api.json").write_text(json.dumps(to_json(cfg, results, command), indent=2) + "\n")
        print(f"# wrote {out_dir / 'api.md'} and {out_dir / 'api.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
