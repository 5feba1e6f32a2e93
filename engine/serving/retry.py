"""Retries with exponential backoff and jitter for transient backend failures.

Only ``TransientBackendError`` is retried (429, 5xx, timeouts, dropped
connections, malformed answers); every other exception propagates at once.
A server's Retry-After hint is a floor for the wait, never shortened by jitter.
A failure that does not spend an attempt (``spends_attempt=False``: an endpoint
refusing connections during an outage, which the backend waits out itself) is
retried without a backoff and without counting, up to ``MAX_FREE_RETRIES``
times in a row per call (beyond that it counts like any other).

The default waits can be shortened for a whole process with the environment
variables ``PRE_RETRY_BASE_DELAY`` and ``PRE_RETRY_MAX_DELAY`` (seconds), e.g.
for tests that inject faults into a local server.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import os
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from promptrobust.engine.serving.backends.base import TransientBackendError

T = TypeVar("T")

#: Failures that spend no attempt, in a row, before they count like any other (a safety bound: the
#: backend's own bound on an outage, ``max_outage``, ends the wait long before).
MAX_FREE_RETRIES = 10_000


def _env_seconds(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a number of seconds >= 0 (got {raw!r})")
    return value


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to wait between attempts.

    The wait before retry ``attempt`` (1 after the first failure) is
    ``min(max_delay, base_delay * 2**(attempt-1))`` shrunk by a random factor in
    ``[1 - jitter, 1]`` so that many clients hit by the same 429 do not come back
    in lock step. A Retry-After hint raises the wait to at least the hint, capped
    at ``2 * max_delay`` so a confused server cannot park us for hours.
    """

    max_attempts: int = 8
    base_delay: float = field(default_factory=lambda: _env_seconds("PRE_RETRY_BASE_DELAY", 0.5))
    max_delay: float = field(default_factory=lambda: _env_seconds("PRE_RETRY_MAX_DELAY", 60.0))
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.base_delay < 0 or self.max_delay < 0:
            raise ValueError("base_delay and max_delay must be >= 0")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"jitter must be between 0 and 1, got {self.jitter}")

    def delay(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        """Seconds to wait before retrying after failed attempt number ``attempt`` (1-based)."""
        exponent = max(0, attempt - 1)
        # Cap the exponent so huge attempt numbers cannot overflow the float.
        backoff = min(self.max_delay, self.base_delay * 2.0 ** min(exponent, 64))
        wait = backoff * (1.0 - self.jitter * rng.random())
        if retry_after is not None and retry_after > 0:
            wait = max(wait, min(retry_after, 2.0 * self.max_delay))
        return wait


async def call_with_retries(
    call: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    rng: random.Random | None = None,
    on_retry: Callable[[int, BaseException, float], None] | None = None,
) -> T:
    """Await ``call()``; on ``TransientBackendError`` wait and try again.

    ``on_retry(attempt, error, delay)`` is told about each retry before the wait.
    After ``policy.max_attempts`` failed attempts the last error is re-raised;
    failures with ``spends_attempt=False`` are retried at once and not counted.
    """
    rng = rng if rng is not None else random.Random()
    attempt = 0
    free = 0
    while True:
        try:
            return await call()
        except TransientBackendError as err:
            if not err.spends_attempt and free < MAX_FREE_RETRIES:
                free += 1
                if on_retry is not None:
                    on_retry(attempt, err, 0.0)
                continue  # the next call waits for the endpoint itself (the backend bounds that wait)
            free = 0
            attempt += 1
            if attempt >= policy.max_attempts:
                raise
            wait = policy.delay(attempt, err.retry_after, rng)
            if on_retry is not None:
                on_retry(attempt, err, wait)
            await sleep(wait)


def parse_retry_after(headers: Mapping[str, str] | None, *, now: float | None = None) -> float | None:
    """Seconds a server asked us to wait, from ``retry-after-ms`` or ``Retry-After``.

    ``Retry-After`` may be delta-seconds or an HTTP-date; a date in the past
    means 0. Unparseable or absent values give None.
    """
    if not headers:
        return None
    lower = {k.lower(): v for k, v in headers.items()}
    raw_ms = lower.get("retry-after-ms")
    if raw_ms is not None:
        try:
            ms = float(raw_ms)
            if math.isfinite(ms) and ms >= 0:
                return ms / 1000.0
        except ValueError:
            pass
    raw = lower.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        seconds = float(raw)
        return seconds if math.isfinite(seconds) and seconds >= 0 else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)
