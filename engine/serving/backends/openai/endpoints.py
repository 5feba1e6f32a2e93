"""The endpoints of one OpenAI-compatible model: which one takes the next call, and their health.

Several base URLs serving the same model share the load: each request goes to
the healthy endpoint with the fewest requests in flight (ties round robin),
and a retry avoids the endpoint that just failed it. An endpoint that fails
``eject_after`` calls in a row (5xx, timeouts, dropped connections, garbage;
not 429) is ejected for a cool-down (``cooldown`` seconds, doubling up to a
minute while it keeps failing); then one request probes it, and a success
re-admits it. An endpoint unreachable at start begins ejected.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from promptrobust.engine.serving.types import Request

__all__ = ["COOLDOWN", "EJECT_AFTER", "MAX_COOLDOWN", "Endpoint", "EndpointPool", "clean_url"]

log = logging.getLogger(__name__)

#: Consecutive failed calls that eject an endpoint (when there are several).
EJECT_AFTER = 3
#: Seconds an ejected endpoint rests before one request probes it (doubles up to MAX_COOLDOWN).
COOLDOWN = 2.0
MAX_COOLDOWN = 60.0
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
    last_error: str = field(default="", repr=False)


class EndpointPool:
    """The endpoints of one model, in the order given (the first names the model's identity)."""

    def __init__(self, urls: list[str], *, eject_after: int = EJECT_AFTER, cooldown: float = COOLDOWN) -> None:
        self.endpoints = [Endpoint(url=u, shown=clean_url(u)) for u in urls]
        self.eject_after = eject_after
        self.cooldown = float(cooldown)
        self._rr = 0
        self._retry_avoid: dict[Request, Endpoint] = {}

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
        # Every endpoint is resting: keep going on the one that rests the shortest.
        return min(order, key=lambda e: e.until), False

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
        if probe:
            ep.probing = False
        if outcome is True:
            if ep.ejected:
                log.warning("endpoint %s answers again: re-admitted", ep.shown)
            ep.failures, ep.ejected, ep.ejections = 0, False, 0
            return
        if outcome is False:
            ep.failures += 1
            if len(self.endpoints) > 1 and (probe or (not ep.ejected and ep.failures >= self.eject_after)):
                self.eject(ep)

    def avoid_next_time(self, request: Request, ep: Endpoint) -> None:
        """The next attempt of ``request`` goes elsewhere (when there is an elsewhere)."""
        if len(self.endpoints) < 2:
            return
        if len(self._retry_avoid) > _AVOID_MEMORY:  # requests that never came back (failed for good)
            self._retry_avoid.clear()
        self._retry_avoid[request] = ep
