"""The rate of requests actually sent, and the time the rest will take (also used for a step's
own units: MB converted, passes over the model).

Backends finish work in steps: an API answers request by request, a local
model answers a whole batch (16-64 requests) at once every few seconds or
minutes. A rate measured over a fixed recent window sees zero between two
batches, so this one is measured between *the moments answers arrived*: from a
reference point (when sending began, or an earlier arrival) to the latest
arrival, over a window that spans at least ``min_steps`` arrivals and
``window`` seconds once the run has that many. The first batch's answers give
a rate at once.

Time runs on a *busy clock*: it stops while nothing is pending (between
phases) and while the model loads (a step said with ``progress.during``, which
will not come again), so neither dilutes the rate. Time spent computing
candidates between search steps is part of the work, and counts.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

#: The rate spans at least this many busy seconds of arrivals ...
RATE_WINDOW = 60.0
#: ... and at least this many arrivals (batches), once the run has seen them.
MIN_STEPS = 4


@dataclass(frozen=True)
class Arrival:
    """Answers had arrived by busy-clock time ``at``: ``sent`` in all."""

    at: float
    sent: float


class SendRate:
    """Requests sent per busy second, from observations (wall time, sent so far, busy or not)."""

    def __init__(self, window: float = RATE_WINDOW, min_steps: int = MIN_STEPS) -> None:
        self.window = window
        self.min_steps = min_steps
        self._busy_before = 0.0  # busy seconds accumulated before the current stretch
        self._stretch: float | None = None  # wall time the current busy stretch began
        self._last_wall: float | None = None
        self._points: deque[Arrival] = deque()  # the reference, then every arrival since
        self._steps = 0  # arrivals in ``_points`` after the first

    def busy_clock(self, now: float) -> float:
        """Busy seconds so far (the clock the rate is measured on)."""
        return self._busy_before + (now - self._stretch if self._stretch is not None else 0.0)

    def observe(self, now: float, sent: float, busy: bool) -> None:
        """One look at the counter: ``busy`` when work is pending and no model is loading."""
        if self._last_wall is not None and now < self._last_wall:
            now = self._last_wall  # a clock never runs backwards here
        self._last_wall = now
        if busy and self._stretch is None:
            self._stretch = now
        clock = self.busy_clock(now)
        if not busy and self._stretch is not None:
            self._busy_before, self._stretch = clock, None
        if not self._points:
            if busy or sent:
                self._points.append(Arrival(clock, sent))
            return
        if sent > self._points[-1].sent:
            self._points.append(Arrival(clock, sent))
            self._steps += 1
            self._forget_old(clock)

    def _forget_old(self, clock: float) -> None:
        """Drop the oldest reference while the next one still spans the window and enough arrivals."""
        while self._steps > self.min_steps and clock - self._points[1].at >= self.window:
            self._points.popleft()
            self._steps -= 1

    def _measure(self, now: float) -> tuple[float, float, float] | None:
        """(rate, time since the last arrival, mean time between arrivals), or None before any."""
        if self._steps < 1:
            return None
        ref, last = self._points[0], self._points[-1]
        span = last.at - ref.at
        if span <= 0 or last.sent <= ref.sent:
            return None
        gap = span / self._steps
        since = max(0.0, self.busy_clock(now) - last.at)
        # Between arrivals the rate is what the arrivals said; once the next is later than the
        # usual gap, the wait beyond it counts (a stalled backend slows the rate down).
        return (last.sent - ref.sent) / max(span, span + since - gap), since, gap

    def rate(self, now: float) -> float | None:
        measured = self._measure(now)
        return None if measured is None else measured[0]

    def eta(self, now: float, remaining: float) -> float | None:
        """Seconds until ``remaining`` more requests are sent; None before anything arrived.
        The batch in flight has been running since the last arrival: that time is taken off."""
        if remaining <= 0:
            return 0.0
        measured = self._measure(now)
        if measured is None:
            return None
        rate, since, gap = measured
        return max(0.0, remaining / rate - min(since, gap))
