"""Requests-per-minute and tokens-per-minute limits for HTTP backends.

Why our own buckets rather than ``asyncio-throttle``: that package counts
requests only; it has no notion of a request's weight, so it cannot enforce a
tokens-per-minute limit, and its clock is not injectable, so its behaviour
cannot be tested without real waiting. The buckets below take a clock and a
sleep function, which lets tests drive time by hand.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

# Tolerance for float drift when a waiter sleeps exactly the computed deficit.
_EPS = 1e-9


class _Bucket:
    """A token bucket that starts full and refills continuously.

    The level may go below zero: a request heavier than the whole bucket is let
    through once the bucket is full and leaves a debt that later requests wait
    out, so the long-run rate still holds.
    """

    __slots__ = ("capacity", "rate", "level", "stamp")

    def __init__(self, per_minute: float, now: float, burst_seconds: float = 60.0) -> None:
        self.rate = float(per_minute) / 60.0
        # The bucket holds ``burst_seconds`` worth of the rate (at least one unit).
        self.capacity = max(1.0, self.rate * burst_seconds)
        self.level = self.capacity
        self.stamp = now

    def refill(self, now: float) -> None:
        if now > self.stamp:
            self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = max(self.stamp, now)

    def wait_for(self, amount: float) -> float:
        """Seconds until ``amount`` (capped at the capacity) is available."""
        need = min(amount, self.capacity)
        deficit = need - self.level
        return 0.0 if deficit <= _EPS else deficit / self.rate


def _check_limit(name: str, value: float | None) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"{name} must be a positive number or None (no limit), got {value!r}")


class RateLimiter:
    """Requests-per-minute and tokens-per-minute token buckets.

    Both buckets hold ``burst_seconds`` worth of their rate (one second by
    default, at least one request), start full and refill continuously. A
    small burst matters: providers often enforce a per-minute limit over a
    sliding window or over shorter periods, and a bucket holding a whole
    minute would send up to twice the limit in the first minute and collect
    429s. With one second, any 60 s window sees at most ``rpm * 61/60`` (+1). Waiters are served strictly first come, first served:
    a heavy request at the head of the queue is not overtaken by light ones, so
    nobody starves. ``None`` disables a limit.
    """

    def __init__(
        self,
        *,
        rpm: float | None = None,
        tpm: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        burst_seconds: float = 1.0,
    ) -> None:
        _check_limit("rpm", rpm)
        _check_limit("tpm", tpm)
        if not burst_seconds > 0:
            raise ValueError(f"burst_seconds must be positive, got {burst_seconds!r}")
        self._clock = clock
        self._sleep = sleep
        now = clock()
        self._requests = _Bucket(rpm, now, burst_seconds) if rpm is not None else None
        self._tokens = _Bucket(tpm, now, burst_seconds) if tpm is not None else None
        # asyncio.Lock hands itself to waiters in arrival order: that is the FIFO queue.
        self._lock = asyncio.Lock()

    @property
    def rpm(self) -> float | None:
        return self._requests.rate * 60.0 if self._requests else None

    @property
    def tpm(self) -> float | None:
        return self._tokens.rate * 60.0 if self._tokens else None

    async def acquire(self, tokens: int = 1) -> None:
        """Wait until one request and ``tokens`` tokens are available, then take them."""
        if tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {tokens}")
        if self._requests is None and self._tokens is None:
            return
        async with self._lock:
            while True:
                now = self._clock()
                wait = 0.0
                if self._requests is not None:
                    self._requests.refill(now)
                    wait = max(wait, self._requests.wait_for(1))
                if self._tokens is not None:
                    self._tokens.refill(now)
                    wait = max(wait, self._tokens.wait_for(tokens))
                if wait <= 0.0:
                    break
                await self._sleep(wait)
            if self._requests is not None:
                self._requests.level -= 1
            if self._tokens is not None:
                self._tokens.level -= tokens
