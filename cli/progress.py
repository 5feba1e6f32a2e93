"""A progress line on stderr: requests done, requests/s, cache hits, ETA."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable


def _fmt_eta(seconds: float) -> str:
    if seconds != seconds or seconds == float("inf"):
        return "--:--"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class Progress:
    """Polls counters and redraws one line; on a non-terminal, prints a line every ``every`` seconds."""

    def __init__(
        self,
        total: int,
        counters: Callable[[], dict[str, float]],
        *,
        label: Callable[[], str] = lambda: "",
        enabled: bool = True,
        every: float = 10.0,
    ) -> None:
        self.total = total
        self.counters = counters
        self.label = label
        self.enabled = enabled
        self.tty = sys.stderr.isatty()
        self.every = every if not self.tty else 0.25
        self._task: asyncio.Task[None] | None = None
        self._start = time.monotonic()
        self._base = dict(counters())

    def line(self) -> str:
        now = self.counters()
        done = now.get("completed", 0) - self._base.get("completed", 0)
        hits = now.get("cache_hits", 0) - self._base.get("cache_hits", 0)
        sent = now.get("backend_requests", 0) - self._base.get("backend_requests", 0)
        elapsed = max(time.monotonic() - self._start, 1e-9)
        rate = done / elapsed
        eta = (self.total - done) / rate if rate > 0 else float("inf")
        pct = 100.0 * done / self.total if self.total else 100.0
        hit_pct = 100.0 * hits / done if done else 0.0
        label = self.label()
        return (
            f"{label}{done}/{self.total} requests ({pct:.0f}%) | {rate:.1f} req/s | "
            f"sent {sent} | cache hits {hits} ({hit_pct:.0f}%) | ETA {_fmt_eta(eta)}"
        )

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            self._draw()

    def _draw(self, final: bool = False) -> None:
        text = self.line()
        if self.tty:
            sys.stderr.write("\r\x1b[2K" + text + ("\n" if final else ""))
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()

    def start(self) -> None:
        if self.enabled:
            self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._draw(final=True)
