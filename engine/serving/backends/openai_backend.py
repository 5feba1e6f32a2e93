"""The OpenAI-compatible HTTP backend (OpenAI, vLLM serve, llama.cpp server, ...).

One request per call (``batching = False``): the scheduler supplies
concurrency, rate limits and retries, so the SDK's own retries are off
(``max_retries=0``) and every failure is mapped to our error types:

* 429, 408, 409, 5xx, timeouts, refused or dropped connections ->
  ``TransientBackendError`` (with the server's Retry-After, when given);
  ``timeout`` is also a deadline for the whole request (connect, headers and
  body), so a server dripping its headers a byte a second is cut off too;
* a body over ``max_body_mb`` (default 4 MiB), refused from its Content-Length
  or while it is read -> ``TransientBackendError``;
* a log-probability that is NaN, infinite or above 0 (beyond a 1e-3 rounding
  tolerance), or a label left without a score -> ``TransientBackendError``
  (``check_top_logprobs``, ``check_choice_logprobs``): never scored or cached;
* a 200 answer that lacks what its request needs (a body that is empty, cut
  off, not JSON or an HTML page; no ``choices`` or an empty list; no message
  content or text; no log-probabilities when they were asked for) ->
  ``TransientBackendError`` too: it is retried, never scored, never cached;
* other 4xx -> ``BackendError``;
* no endpoint reachable at ``start()``, a rejected or missing API key, a model
  the server does not serve -> ``BackendUnavailable``.

Several base URLs serving the same model share the load: each request goes to
the healthy endpoint with the fewest requests in flight (ties round robin),
and a retry avoids the endpoint that just failed it. An endpoint that fails
``eject_after`` calls in a row (5xx, timeouts, dropped connections, garbage;
not 429) is ejected for a cool-down (``cooldown`` seconds, doubling up to a
minute while it keeps failing); then one request probes it, and a success
re-admits it. An endpoint unreachable at start begins ejected. All endpoints
count as one model: the identity is the model name plus the first URL.

Label scoring (``score_choices``) is exact where the server allows it: with
``api=completions`` the start-up checks once whether the completions endpoint
scores a prompt's own tokens (``echo`` + ``logprobs``, or vLLM's
``prompt_logprobs``), and each label's tokens are then scored as the
in-process backends score them (``openai_scoring``). Otherwise (chat
requests, or a server that allows neither) it asks for the top-20
log-probabilities of the first generated token and reads each choice from
them (``choice_logprobs_from_top``), an approximation; ``label_scoring`` says
which path was used and the results record it. Whether the server returns log-probabilities is
decided once: by the ``logprobs`` argument, or else by the first label-scoring
request (the scheduler sends ``capability_probe()`` right after start). A
server that answers several well-formed requests without them, or refuses the
option, cannot score labels (``supports_choice_scoring`` is False: the
evaluator generates instead and says so); later ``score_choices`` requests are
refused, never answered with generated text.

The API key is read from an environment variable, kept in one private
attribute and the SDK client, and scrubbed (with any fragment of 8 or more
characters) from every error message we raise.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import math
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from promptrobust.engine.serving.backends import openai_scoring
from promptrobust.engine.serving.backends.base import Backend, BackendError, BackendUnavailable, TransientBackendError
from promptrobust.engine.safe_io.redact import redact_text, redact_url
from promptrobust.engine.serving.retry import parse_retry_after
from promptrobust.engine.serving.types import ChatMessage, Completion, Decoding, ModelIdentity, Request

log = logging.getLogger(__name__)

OFFICIAL_BASE_URL = "https://api.openai.com/v1"
#: How many alternatives we ask for (the OpenAI API's maximum).
TOP_LOGPROBS = 20
#: A choice absent from the top list scores this far below the smallest listed
#: log-probability: its true value is lower than every listed one, by an
#: unknown amount; a fixed margin keeps it ranked last without inventing -inf.
MISSING_CHOICE_MARGIN = 1.0
#: Well-formed answers without log-probabilities, in a row, before we conclude
#: that the server never sends them (one garbage answer must not decide it).
PROBE_ANSWERS = 5
#: Consecutive failed calls that eject an endpoint (when there are several).
EJECT_AFTER = 3
#: Seconds an ejected endpoint rests before one request probes it (doubles up to MAX_COOLDOWN).
COOLDOWN = 2.0
MAX_COOLDOWN = 60.0
#: A log-probability may exceed 0 by this much (rounding in the server's softmax);
#: anything larger, NaN or infinite is an impossible number: a malformed answer.
LOGPROB_TOLERANCE = 1e-3
#: Largest answer body read (MiB; ``max_body_mb`` raises it): a label or a short
#: generation is a few KiB, so a bigger body is a broken or hostile server and
#: must not hold hundreds of MB per request in flight.
MAX_BODY_MB = 4.0
#: Shortest piece of the API key that is scrubbed wherever it appears.
KEY_FRAGMENT = 8
_PROBE_TEXT = "Answer with one word, yes or no: is water wet?"
_PLACEHOLDER_KEY = "EMPTY"
# Byte-level BPE and SentencePiece word-start markers some servers leave in tokens.
_TOKEN_PREFIX_CHARS = " \t\n\u0120\u2581"


def _http_module() -> Any:
    """The httpx flavour the installed openai SDK is built on (httpx or httpx2)."""
    import openai

    return importlib.import_module(openai.DefaultAsyncHttpxClient.__mro__[1].__module__.split(".")[0])


def clean_url(url: str) -> str:
    """``url`` without user:password, query or fragment (safe to log and cache)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))


def _is_official(url: str) -> bool:
    return (urlsplit(url).hostname or "").lower() == "api.openai.com"


def _logsumexp(values: Sequence[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def choice_logprobs_from_top(top: Sequence[tuple[str, float]], choices: Sequence[str]) -> tuple[float, ...]:
    """Each choice's log-probability read from the first token's top alternatives.

    Without the server's tokenizer we match text: a listed token belongs to a
    choice when the token, with leading spaces (and BPE/SentencePiece markers)
    stripped and lower-cased, is a prefix of the lower-cased choice; so "Positive",
    " positive" and "pos" all count for "positive", and their probabilities are
    added (log-sum-exp). A token that matches one choice exactly goes to that
    choice only ("no" does not count for "not_entailment"). A choice no listed
    token matches gets the floor ``min(listed) - MISSING_CHOICE_MARGIN``.
    Only the first token is scored: choices should differ in their first token.
    """
    if not top:
        raise ValueError("no top log-probabilities to read choices from")
    keys = [c.strip().lower() for c in choices]
    matched: list[list[float]] = [[] for _ in choices]
    for token, logprob in top:
        text = token.lstrip(_TOKEN_PREFIX_CHARS).lower()
        if not text:
            continue
        exact = [i for i, k in enumerate(keys) if k == text]
        owners = exact or [i for i, k in enumerate(keys) if k.startswith(text)]
        for i in owners:
            matched[i].append(logprob)
    floor = min(lp for _, lp in top) - MISSING_CHOICE_MARGIN
    return tuple(_logsumexp(m) if m else floor for m in matched)


# -- bounded answers ------------------------------------------------------------------------------
class BodyTooLarge(TransientBackendError):
    """An answer body over ``max_body_mb``: transient (a retry or another endpoint may answer well)."""


def body_limit_hook(http: Any, max_bytes: int) -> Any:
    """An HTTP client response hook that refuses bodies over ``max_bytes``: at once when the
    Content-Length says so, else while reading (never more than ``max_bytes`` plus one chunk held)."""

    class Limited(http.AsyncByteStream):  # type: ignore[misc, name-defined]
        def __init__(self, inner: Any, where: str) -> None:
            self.inner, self.where = inner, where

        async def __aiter__(self) -> Any:
            seen = 0
            async for chunk in self.inner:
                seen += len(chunk)
                if seen > max_bytes:
                    raise _too_large(self.where, max_bytes)
                yield chunk

        async def aclose(self) -> None:
            await self.inner.aclose()

    async def hook(response: Any) -> None:
        where = clean_url(str(response.request.url))
        length = response.headers.get("content-length", "")
        if length.strip().isdigit() and int(length) > max_bytes:
            await response.aclose()
            raise _too_large(where, max_bytes, int(length))
        response.stream = Limited(response.stream, where)

    return hook


def _too_large(where: str, max_bytes: int, length: int | None = None) -> BodyTooLarge:
    size = f"a body of {length / 2**20:.1f} MiB" if length is not None else "a body"
    return BodyTooLarge(
        f"malformed answer from {where}: {size} over the {max_bytes / 2**20:g} MiB limit "
        "(raise max_body_mb= in --model-args if the server really sends that much)"
    )


# -- validation of the numbers a server sends (before anything scores or caches them) --------------
def logprob_problem(value: object) -> str | None:
    """Why ``value`` cannot be a log-probability (not a finite number <= LOGPROB_TOLERANCE), or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{type(value).__name__} {value!r} is not a number"
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return f"{value} (infinite)"
    if value > LOGPROB_TOLERANCE:
        return f"{value:g} is above 0 (a probability above 1)"
    return None


def check_top_logprobs(top: Sequence[tuple[str, float]], shown: str) -> None:
    """Raise TransientBackendError (a malformed answer: retried, never scored or cached)
    when any listed alternative's log-probability is impossible."""
    for token, value in top:
        problem = logprob_problem(value)
        if problem is not None:
            raise TransientBackendError(
                f"malformed answer from {shown}: log-probability of token {token[:40]!r}: {problem}"
            )


def check_choice_logprobs(scores: Sequence[float], choices: Sequence[str], shown: str) -> None:
    """Every label accounted for, each with a possible log-probability, or TransientBackendError."""
    if len(scores) != len(choices):
        raise TransientBackendError(
            f"malformed answer from {shown}: {len(scores)} label log-probabilities for {len(choices)} labels"
        )
    for label, value in zip(choices, scores):
        problem = logprob_problem(value)
        if problem is not None:
            raise TransientBackendError(f"malformed answer from {shown}: log-probability of label {label[:40]!r}: {problem}")


@dataclass
class _Endpoint:
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


class LogprobsUnsupported(BackendError):
    """The server does not return log-probabilities, so it cannot score choices."""


class OpenAIBackend(Backend):
    """A model behind one or more OpenAI-compatible endpoints."""

    kind = "openai"
    batching = False
    #: identity needs the /models answer and label scoring a decision: start at once.
    defer_start = False

    def __init__(
        self,
        model: str,
        *,
        base_urls: Sequence[str] | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        api: Literal["chat", "completions", "auto"] = "auto",
        timeout: float = 60.0,
        max_connections: int = 256,
        logprobs: bool | None = None,
        eject_after: int = EJECT_AFTER,
        cooldown: float = COOLDOWN,
        scoring: str = "auto",
        max_body_mb: float = MAX_BODY_MB,
    ) -> None:
        if not model or not str(model).strip():
            raise ValueError("the openai backend needs a model name, e.g. openai:gpt-4o-mini")
        if api not in ("chat", "completions", "auto"):
            raise ValueError(f"api must be chat, completions or auto, got {api!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if isinstance(max_connections, bool) or not isinstance(max_connections, int) or max_connections < 1:
            raise ValueError(f"max_connections must be a whole number >= 1, got {max_connections!r}")
        if logprobs not in (None, True, False):
            raise ValueError(f"logprobs must be true, false or unset (auto), got {logprobs!r}")
        if isinstance(eject_after, bool) or not isinstance(eject_after, int) or eject_after < 1:
            raise ValueError(f"eject_after must be a whole number >= 1, got {eject_after!r}")
        if isinstance(cooldown, bool) or not isinstance(cooldown, (int, float)) or not 0 <= cooldown < math.inf:
            raise ValueError(f"cooldown must be a number of seconds >= 0, got {cooldown!r}")
        self._scoring_path = _scoring_arg(scoring, api, logprobs)
        if isinstance(max_body_mb, bool) or not isinstance(max_body_mb, (int, float)) or not 0 < max_body_mb < math.inf:
            raise ValueError(f"max_body_mb must be a positive number of MiB, got {max_body_mb!r}")
        urls = [str(u).strip() for u in (base_urls or [OFFICIAL_BASE_URL]) if str(u).strip()]
        if not urls:
            raise ValueError("base_urls is empty: give at least one URL such as http://127.0.0.1:8000/v1")
        for url in urls:
            parts = urlsplit(url)
            try:
                parts.port  # noqa: B018 - raises on a port that is not a number
            except ValueError:
                raise ValueError(f"base URL {redact_url(url)!r} has a bad port: use http://host:PORT/v1") from None
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"base URL {clean_url(url)!r} is not http(s)://host[:port]/path, e.g. http://127.0.0.1:8000/v1")
        self.model = str(model)
        self.api = api
        self.timeout = float(timeout)
        self.max_connections = int(max_connections)
        self.logprobs = logprobs
        self.eject_after = eject_after
        self.cooldown = float(cooldown)
        self.max_body_bytes = int(max_body_mb * 1024 * 1024)
        self.api_key_env = api_key_env
        key = os.environ.get(api_key_env, "").strip()
        if not key:
            official = [clean_url(u) for u in urls if _is_official(u)]
            if official:
                raise BackendUnavailable(
                    f"set {api_key_env} to your OpenAI API key to use {official[0]} "
                    "(or pass base_url=... for a local OpenAI-compatible server)"
                )
            key = _PLACEHOLDER_KEY
        self.__key = key
        self._endpoints = [_Endpoint(url=u, shown=clean_url(u)) for u in urls]
        self._rr = 0
        self._http: Any = None
        self._revision = ""
        #: Whether the server returns log-probs: None until decided (see the module docstring).
        self._server_logprobs: bool | None = logprobs
        self._retry_avoid: dict[Request, _Endpoint] = {}

    def __repr__(self) -> str:
        urls = ", ".join(e.shown for e in self._endpoints)
        return f"OpenAIBackend(model={self.model!r}, base_urls=[{urls}], api={self.api!r})"

    # -- identity ----------------------------------------------------------------
    @property
    def identity(self) -> ModelIdentity:
        """Model name + first endpoint; final once ``start()`` has read the model list.

        All endpoints must serve the same weights under the same name, so they
        share one identity (and one cache). ``revision`` comes from the
        ``/models`` entry: its ``created`` date on the official API (a model
        release), its ``root`` elsewhere when given (vLLM: the weights path).
        Local servers' ``created`` is often the current time, and
        ``system_fingerprint`` only arrives with answers (after cache keys are
        needed) and changes with the provider's infrastructure, so neither is used.
        """
        extra: tuple[tuple[str, str], ...] = (("base_url", self._endpoints[0].shown),)
        if self._scoring_path in openai_scoring.EXACT_PATHS:  # exact label scores never share keys with top-20 ones
            extra += (("label_scoring", str(self._scoring_path)),)
        return ModelIdentity(backend="openai", name=self.model, revision=self._revision, extra=extra)

    @property
    def label_scoring(self) -> str:
        """How labels are scored, as the results record it (decided at ``start()``)."""
        if self._scoring_path == "prompt_logprobs" and self.is_chat:
            return openai_scoring.CHAT_DESCRIPTION
        return openai_scoring.DESCRIPTIONS[self._scoring_path or openai_scoring.TOP_PATH]

    @property
    def is_chat(self) -> bool:
        return self.api != "completions"

    @property
    def supports_choice_scoring(self) -> bool:
        """False when ``logprobs=false`` or the server was found to return none."""
        return self._server_logprobs is not False

    def capability_probe(self) -> Request | None:
        """A tiny label-scoring request whose answer decides ``supports_choice_scoring``
        (None once decided). The scheduler sends it through its cache right after start."""
        if self._server_logprobs is not None:
            return None
        decoding = Decoding(max_tokens=1)
        if self.is_chat:
            return Request("score_choices", messages=(ChatMessage("user", _PROBE_TEXT),), choices=("yes", "no"), decoding=decoding)
        return Request("score_choices", prompt=_PROBE_TEXT + "\nAnswer:", choices=("yes", "no"), decoding=decoding)

    def probe_answered(self, request: Request, completion: Completion) -> None:
        """A probe answered with label log-probs (from the server or a cached earlier run) settles it."""
        if self._server_logprobs is None and completion.choice_logprobs is not None:
            self._server_logprobs = True

    @property
    def endpoint_counts(self) -> dict[str, int]:
        """Requests sent to each endpoint (credential-free URL -> count)."""
        return {e.shown: e.sent for e in self._endpoints}

    @property
    def endpoint_health(self) -> dict[str, str]:
        """Each endpoint's state: ``ok``, ``ejected`` or ``probing`` (credential-free URL -> state)."""
        return {e.shown: ("probing" if e.probing else "ejected" if e.ejected else "ok") for e in self._endpoints}

    # -- lifecycle ---------------------------------------------------------------
    def _ensure_clients(self) -> None:
        if self._http is not None:
            return
        import openai

        http = _http_module()
        self._http = openai.DefaultAsyncHttpxClient(
            timeout=http.Timeout(self.timeout, connect=min(self.timeout, 10.0)),
            limits=http.Limits(max_connections=self.max_connections, max_keepalive_connections=self.max_connections),
            # Bodies as sent (a compressed body could expand past the limit after it is counted).
            headers={"Accept-Encoding": "identity"},
            event_hooks={"response": [body_limit_hook(http, self.max_body_bytes)]},
        )
        for ep in self._endpoints:
            ep.client = openai.AsyncOpenAI(
                api_key=self.__key, base_url=ep.url, max_retries=0, timeout=self.timeout, http_client=self._http,
            )

    async def start(self) -> None:
        """Open the clients and read ``GET /models`` on every endpoint.

        A rejected key or a model an endpoint does not serve stops here; an
        endpoint that cannot be reached starts ejected (it is probed later),
        unless none can be reached.
        """
        try:
            import openai  # noqa: F401
        except ImportError:
            raise BackendUnavailable("the openai backend needs the openai package: pip install openai") from None
        self._ensure_clients()
        try:
            answers = await asyncio.gather(*(self._probe(ep) for ep in self._endpoints), return_exceptions=True)
            for answer in answers:
                if isinstance(answer, BaseException) and not isinstance(answer, _Unreachable):
                    raise answer
            reachable = [(ep, a) for ep, a in zip(self._endpoints, answers) if not isinstance(a, _Unreachable)]
            if not reachable:
                raise BackendUnavailable(str(answers[0])) from None
            for ep, answer in zip(self._endpoints, answers):
                if isinstance(answer, _Unreachable):
                    log.warning("%s; carrying on with the other endpoints", answer)
                    ep.last_error, ep.failures = "unreachable at start", 1
                    self._eject(ep)
        except BaseException:
            await self.close()  # a failed start leaves no open connections behind
            raise
        self._revision = str(reachable[0][1])
        if self._scoring_path is None:
            self._scoring_path = await self._detect_scoring(reachable[0][0])

    async def _probe(self, ep: _Endpoint) -> str:
        import openai

        limit = min(self.timeout, 10.0)
        try:
            async with asyncio.timeout(limit):  # slow headers included
                page = await ep.client.with_options(timeout=limit).models.list()
        except TimeoutError:
            raise _Unreachable(f"cannot reach {ep.shown}: no complete answer to GET /models within {limit:g}s") from None
        except BodyTooLarge as exc:  # a model list is no reason to stop: the answers are checked one by one
            log.warning("GET %s/models: %s; carrying on", ep.shown, exc)
            return ""
        except openai.APIConnectionError as exc:
            raise _Unreachable(f"cannot reach {ep.shown}: is the server running? ({self._reason(exc)})") from None
        except openai.APIStatusError as exc:
            if exc.status_code in (401, 403):
                raise BackendUnavailable(
                    f"{ep.shown} rejected the API key (HTTP {exc.status_code}): "
                    f"set a valid key in {self.api_key_env}"
                ) from None
            if exc.status_code == 404 and "/v1" not in urlsplit(ep.url).path:
                raise BackendUnavailable(
                    f"{ep.shown}/models not found (HTTP 404): does the base URL need a /v1 suffix?"
                ) from None
            log.warning("GET %s/models answered HTTP %s; carrying on", ep.shown, exc.status_code)
            return ""
        except (ValueError, TypeError, AttributeError):  # a model list that is not JSON: not fatal
            log.warning("GET %s/models sent an unreadable answer; carrying on", ep.shown)
            return ""
        entries = list(getattr(page, "data", None) or [])
        if not entries:
            return ""
        ids = [str(getattr(m, "id", "")) for m in entries]
        if self.model not in ids:
            shown = ", ".join(ids[:10]) + (", ..." if len(ids) > 10 else "")
            raise BackendUnavailable(
                f"model {self.model!r} is not served at {ep.shown} (it serves: {shown}): pass one of those names"
            )
        entry = entries[ids.index(self.model)]
        if _is_official(ep.url):
            created = getattr(entry, "created", None)
            return f"created={created}" if created else ""
        root = getattr(entry, "root", None) or (getattr(entry, "model_extra", None) or {}).get("root")
        return f"root={root}" if root and root != self.model else ""

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None
            for ep in self._endpoints:
                ep.client = None

    # -- endpoint health -------------------------------------------------------------
    def _pick(self, avoid: _Endpoint | None) -> tuple[_Endpoint, bool]:
        """(endpoint for the next call, whether the call probes an ejected endpoint)."""
        n = len(self._endpoints)
        order = [self._endpoints[(self._rr + k) % n] for k in range(n)]
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

    def _eject(self, ep: _Endpoint) -> None:
        ep.ejections += 1
        rest = min(MAX_COOLDOWN, self.cooldown * 2.0 ** min(ep.ejections - 1, 16))
        ep.ejected, ep.until = True, time.monotonic() + rest
        if len(self._endpoints) > 1:
            log.warning("endpoint %s ejected after %d failed calls in a row (%s); probing it again in %.3gs",
                        ep.shown, ep.failures, ep.last_error or "no answer", rest)

    def _settle(self, ep: _Endpoint, request: Request, outcome: bool | None, probe: bool) -> None:
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
            if len(self._endpoints) > 1 and (probe or (not ep.ejected and ep.failures >= self.eject_after)):
                self._eject(ep)

    def _avoid_next_time(self, request: Request, ep: _Endpoint) -> None:
        if len(self._endpoints) < 2:
            return
        if len(self._retry_avoid) > 10_000:  # requests that never came back (failed for good)
            self._retry_avoid.clear()
        self._retry_avoid[request] = ep

    # -- requests ------------------------------------------------------------------
    async def complete(self, request: Request) -> Completion:
        import openai

        self._ensure_clients()
        ep, probe = self._pick(self._retry_avoid.pop(request, None))
        ep.in_flight += 1
        ep.sent += 1
        outcome: bool | None = None
        try:
            try:
                if request.kind == "generate":
                    out = await self._generate(ep, request)
                else:
                    out = await self._score(ep, request)
            except openai.APIError as exc:
                raise self._map_error(exc, ep) from None
            outcome = True
            return out
        except TransientBackendError as exc:
            ep.last_error = str(exc)
            outcome = None if exc.status == 429 else False  # a busy server is not a broken one
            self._avoid_next_time(request, ep)
            raise
        except asyncio.CancelledError:
            ep.last_error = "call cut short (timeout)"
            outcome = False  # the scheduler's --request-timeout gave up on this endpoint
            self._avoid_next_time(request, ep)
            raise
        finally:
            ep.in_flight -= 1
            self._settle(ep, request, outcome, probe)

    def _use_chat(self, request: Request) -> bool:
        if self.api == "chat":
            return True
        if self.api == "completions":
            if request.is_chat:
                raise BackendError(
                    "the completions API takes plain prompts but this request has chat messages: use api=chat or api=auto"
                )
            return False
        return request.is_chat

    @staticmethod
    def _messages(request: Request) -> list[dict[str, str]]:
        if request.messages is not None:
            return [{"role": m.role, "content": m.content} for m in request.messages]
        return [{"role": "user", "content": request.prompt or ""}]

    async def _call(self, ep: _Endpoint, request: Request, *, max_tokens: int, stop: Sequence[str],
                    want_logprobs: bool) -> tuple[dict[str, Any], bool]:
        """One API call; returns (the answer's JSON object, whether the chat API was used).

        The body is read and checked here, not by the SDK, so that an empty,
        cut-off, non-JSON or HTML answer is a transient failure, never a crash.
        """
        async with self._deadline(ep):
            return await self._call_once(ep, request, max_tokens=max_tokens, stop=stop, want_logprobs=want_logprobs)

    @contextlib.asynccontextmanager
    async def _deadline(self, ep: _Endpoint) -> Any:
        """The whole request (connect, headers, body) within ``timeout`` seconds: the HTTP
        client's own timeouts are per read, so a server sending a byte a second never trips them."""
        try:
            async with asyncio.timeout(self.timeout):
                yield
        except TimeoutError:
            raise TransientBackendError(
                f"request to {ep.shown} timed out after {self.timeout:g}s (no complete answer by the deadline; "
                "timeout= in --model-args)"
            ) from None

    async def _call_once(self, ep: _Endpoint, request: Request, *, max_tokens: int, stop: Sequence[str],
                         want_logprobs: bool) -> tuple[dict[str, Any], bool]:
        chat = self._use_chat(request)
        common: dict[str, Any] = {
            "model": self.model, "max_tokens": max_tokens, "temperature": request.decoding.temperature,
        }
        if stop:
            common["stop"] = list(stop)
        if chat:
            if want_logprobs:
                common.update(logprobs=True, top_logprobs=TOP_LOGPROBS)
            raw = await ep.client.chat.completions.with_raw_response.create(messages=self._messages(request), **common)
        else:
            if want_logprobs:
                common["logprobs"] = TOP_LOGPROBS
            raw = await ep.client.completions.with_raw_response.create(prompt=request.prompt or "", **common)
        return self._json_body(raw.http_response, ep), chat

    @staticmethod
    def _json_body(response: Any, ep: _Endpoint) -> dict[str, Any]:
        status = getattr(response, "status_code", 200)
        content = response.content or b""
        kind = (response.headers.get("content-type") or "").split(";")[0].strip().lower()
        if not content.strip():
            raise TransientBackendError(f"malformed answer from {ep.shown}: HTTP {status} with an empty body")
        try:
            data = json.loads(content)
        except (ValueError, UnicodeDecodeError):
            what = "an HTML page" if "html" in kind or content.lstrip()[:1] == b"<" else (
                "cut-off or invalid JSON" if "json" in kind else f"{kind or 'an untyped body'}, not JSON")
            raise TransientBackendError(f"malformed answer from {ep.shown}: HTTP {status} sent {what}") from None
        if not isinstance(data, dict):
            raise TransientBackendError(f"malformed answer from {ep.shown}: the JSON is a {type(data).__name__}, not an object")
        return data

    @staticmethod
    def _first_choice(data: dict[str, Any], ep: _Endpoint) -> dict[str, Any]:
        choices = data.get("choices")
        if not isinstance(choices, list):
            raise TransientBackendError(f"malformed answer from {ep.shown}: no choices in the answer")
        if not choices or not isinstance(choices[0], dict):
            raise TransientBackendError(f"malformed answer from {ep.shown}: an empty choices list")
        return choices[0]

    @staticmethod
    def _text(choice: dict[str, Any], chat: bool, ep: _Endpoint) -> str:
        if chat:
            message = choice.get("message")
            content = message.get("content") if isinstance(message, dict) else None
            if content is None and isinstance(message, dict) and isinstance(message.get("refusal"), str):
                content = message["refusal"]  # the model's own answer, even if it declines
            if not isinstance(content, str):
                raise TransientBackendError(f"malformed answer from {ep.shown}: no message content")
            return content
        text = choice.get("text")
        if not isinstance(text, str):
            raise TransientBackendError(f"malformed answer from {ep.shown}: no text")
        return text

    @staticmethod
    def _usage(data: dict[str, Any]) -> tuple[int, int]:
        usage = data.get("usage")
        if not isinstance(usage, dict):
            return 0, 0

        def whole(v: Any) -> int:
            return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else 0

        return whole(usage.get("prompt_tokens")), whole(usage.get("completion_tokens"))

    async def _generate(self, ep: _Endpoint, request: Request) -> Completion:
        d = request.decoding
        data, chat = await self._call(ep, request, max_tokens=d.max_tokens, stop=d.stop, want_logprobs=False)
        text = self._text(self._first_choice(data, ep), chat, ep)
        prompt_tokens, completion_tokens = self._usage(data)
        return Completion(text=text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)

    @staticmethod
    def _top_logprobs(choice: dict[str, Any], chat: bool) -> list[tuple[str, float]]:
        """The first generated token's alternatives, or [] when the answer has none (or unreadable ones)."""
        lp = choice.get("logprobs")
        if not isinstance(lp, dict):
            return []
        try:
            if chat:
                content = lp.get("content") or []
                if not content or not isinstance(content[0], dict):
                    return []
                top = [(str(t["token"]), float(t["logprob"])) for t in (content[0].get("top_logprobs") or [])]
            else:
                tops = lp.get("top_logprobs") or []
                if not tops or not isinstance(tops[0], dict):
                    return []
                top = [(str(tok), float(v)) for tok, v in tops[0].items()]
        except (KeyError, TypeError, ValueError):
            return []
        return top

    async def _score(self, ep: _Endpoint, request: Request) -> Completion:
        if self._scoring_path in openai_scoring.EXACT_PATHS:
            if not self._use_chat(request):
                return await self._score_exact(ep, request, self._scoring_path)  # type: ignore[arg-type]
            if self._scoring_path == "prompt_logprobs":
                return await self._score_exact_chat(ep, request)
        if self._server_logprobs is False:
            why = "logprobs=false" if self.logprobs is False else "it returns no log-probabilities"
            raise LogprobsUnsupported(
                f"{self.model} at {ep.shown} cannot score choices ({why}): use --mode generate"
            )
        attempts = 1 if self._server_logprobs else PROBE_ANSWERS
        for _ in range(attempts):
            try:
                data, chat = await self._call(ep, request, max_tokens=1, stop=(), want_logprobs=True)
            except Exception as exc:
                if self._server_logprobs is None and self._rejects_logprobs(exc):
                    # e.g. llama-cpp-python without --logits_all: HTTP 500 "logprobs is not supported"
                    self._decide_no_logprobs(ep, f"it refused them: {self._redact(self._detail(exc))}")
                    return await self._score(ep, request)
                raise
            choice = self._first_choice(data, ep)
            top = self._top_logprobs(choice, chat)
            if top:
                check_top_logprobs(top, ep.shown)
                if self._server_logprobs is None:
                    self._server_logprobs = True
                prompt_tokens, completion_tokens = self._usage(data)
                scores = choice_logprobs_from_top(top, request.choices)
                check_choice_logprobs(scores, request.choices, ep.shown)
                return Completion(choice_logprobs=scores, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
            if self._server_logprobs:
                raise TransientBackendError(f"malformed answer from {ep.shown}: no log-probabilities although they were asked for")
        self._decide_no_logprobs(ep, f"{PROBE_ANSWERS} answers in a row came without them")
        return await self._score(ep, request)

    # -- exact label scoring (engine/serving/backends/openai_scoring.py) -------------------------
    async def _post_completions(self, ep: _Endpoint, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to the completions endpoint; the answer's JSON object (read as in ``_call``)."""
        known = {k: body[k] for k in ("model", "prompt", "echo", "logprobs", "max_tokens", "temperature") if k in body}
        extra = {k: v for k, v in body.items() if k not in known}
        async with self._deadline(ep):  # the same whole-request deadline as every other call
            raw = await ep.client.completions.with_raw_response.create(**known, **({"extra_body": extra} if extra else {}))
            return self._json_body(raw.http_response, ep)

    async def _detect_scoring(self, ep: _Endpoint) -> openai_scoring.ScoringPath:
        """Once, at start: the exact path the server allows for plain prompts, else the top-20 approximation."""
        import openai

        if self.api != "completions" or self.logprobs is False:
            # Chat requests: only a vLLM server can score a label inside the model's own template, and
            # asking others costs a refused request at every start, so that path is opted into
            # (scoring=prompt_logprobs); the settings line and the records say "approximate".
            return openai_scoring.TOP_PATH
        for path, body in openai_scoring.probe_bodies(self.model):
            try:
                data = await self._post_completions(ep, body)
            except (openai.APIError, TransientBackendError):
                continue  # refused or unreadable: this path is not available here
            if openai_scoring.accepts(path, data):
                return path
        log.warning("%s at %s scores no prompt tokens (neither echo+logprobs nor prompt_logprobs): labels are "
                    "read from the first token's top-20 log-probs, an approximation", self.model, ep.shown)
        return openai_scoring.TOP_PATH

    async def _score_exact(self, ep: _Endpoint, request: Request, path: openai_scoring.ScoringPath) -> Completion:
        data = await self._post_completions(ep, openai_scoring.body(path, self.model, request.prompt or "", request.choices))
        try:
            values = openai_scoring.read(path, data, request.prompt or "", request.choices)
        except openai_scoring.ScoringAnswerError as exc:
            raise TransientBackendError(f"malformed answer from {ep.shown}: {exc}") from None
        prompt_tokens, _ = self._usage(data)
        return Completion(choice_logprobs=values, prompt_tokens=prompt_tokens, completion_tokens=0)

    async def _score_exact_chat(self, ep: _Endpoint, request: Request) -> Completion:
        """One chat request per label (a conversation cannot be a list); summed as the completions path does."""
        messages = self._messages(request)

        async def one(label: str) -> tuple[float, int]:
            body = openai_scoring.chat_body(self.model, messages, label)
            extra = {k: v for k, v in body.items() if k not in ("model", "messages", "max_tokens", "temperature")}
            raw = await ep.client.chat.completions.with_raw_response.create(
                model=body["model"], messages=body["messages"], max_tokens=1, temperature=0.0, extra_body=extra)
            data = self._json_body(raw.http_response, ep)
            try:
                value = openai_scoring.read_chat(data, label)
            except openai_scoring.ScoringAnswerError as exc:
                raise TransientBackendError(f"malformed answer from {ep.shown}: {exc}") from None
            return value, self._usage(data)[0]

        answers = await asyncio.gather(*(one(label) for label in request.choices))
        return Completion(choice_logprobs=tuple(v for v, _ in answers), prompt_tokens=max(t for _, t in answers), completion_tokens=0)

    def _decide_no_logprobs(self, ep: _Endpoint, why: str) -> None:
        self._server_logprobs = False
        log.warning("%s at %s returns no log-probabilities (%s): label scoring is off, answers are generated; "
                    "pass logprobs=false to skip this check", self.model, ep.shown, why)

    def _rejects_logprobs(self, exc: BaseException) -> bool:
        """An error answer that refuses the logprobs option itself (retrying cannot help)."""
        import openai

        if not isinstance(exc, openai.APIStatusError) or exc.status_code == 429:
            return False
        return exc.status_code < 600 and "logprob" in self._detail(exc).lower()

    # -- errors --------------------------------------------------------------------
    def _redact(self, text: str) -> str:
        """One line, no secrets: our key and any piece of it of KEY_FRAGMENT+ characters
        (with or without its ``sk-`` prefix), other sk-... strings, and echoed keys."""
        key = self.__key
        if key and key != _PLACEHOLDER_KEY:
            text = text.replace(key, "***")
            if len(key) >= KEY_FRAGMENT:
                text = _scrub_fragments(text, key)
        text = re.sub(r"sk-[A-Za-z0-9_*.\-]+", "sk-***", text)
        text = re.sub(r"(api key provided:\s*)\S+", r"\1***", text, flags=re.IGNORECASE)
        text = re.sub(r"(Bearer\s+)\S+", r"\1***", text)
        text = redact_text(text)  # credentials in echoed URLs and Authorization headers of any scheme
        text = " ".join(text.split())
        return text if len(text) <= 300 else text[:297] + "..."

    def _reason(self, exc: BaseException) -> str:
        cause = exc.__cause__ or exc.__context__
        if cause is not None and str(cause):
            return self._redact(f"{type(cause).__name__}: {cause}")
        return self._redact(f"{type(exc).__name__}: {exc}")

    @staticmethod
    def _detail(exc: Any) -> str:
        body = getattr(exc, "body", None)
        if isinstance(body, dict):
            err = body.get("error", body)
            if isinstance(err, dict) and err.get("message"):
                return str(err["message"])
            if isinstance(err, str):
                return err
        return str(getattr(exc, "message", "") or exc)

    def _map_error(self, exc: Exception, ep: _Endpoint) -> Exception:
        import openai

        if isinstance(exc, openai.APITimeoutError):
            return TransientBackendError(f"request to {ep.shown} timed out after {self.timeout:g}s")
        if isinstance(exc, openai.APIConnectionError):
            return TransientBackendError(f"connection to {ep.shown} failed: {self._reason(exc)}")
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            detail = self._redact(self._detail(exc))
            message = f"HTTP {status} from {ep.shown}: {detail}"
            if status in (408, 409, 429) or status >= 500:
                return TransientBackendError(message, retry_after=parse_retry_after(exc.response.headers), status=status)
            if status in (401, 403):
                return BackendError(f"{message} (check the key in {self.api_key_env})")
            return BackendError(message)
        # The SDK's own checks of an answer (we read bodies ourselves, so rare): retry it.
        return TransientBackendError(f"malformed answer from {ep.shown}: {self._redact(str(exc))}")


def _scoring_arg(scoring: str, api: str, logprobs: bool | None) -> openai_scoring.ScoringPath | None:
    """The ``scoring`` model argument checked: a fixed path, or None (auto: decided at start)."""
    if scoring not in openai_scoring.SCORING_ARGS:
        raise ValueError(f"scoring must be one of {', '.join(openai_scoring.SCORING_ARGS)}, got {scoring!r}")
    if scoring == "echo" and api != "completions":
        raise ValueError("scoring=echo scores plain prompts on the completions endpoint: add api=completions")
    if scoring in openai_scoring.EXACT_PATHS and logprobs is False:
        raise ValueError(f"scoring={scoring} reads log-probs: drop logprobs=false")
    return None if scoring == "auto" else scoring  # type: ignore[return-value]


class _Unreachable(BackendUnavailable):
    """An endpoint that did not answer at start (fatal only when none does)."""


def _scrub_fragments(text: str, key: str) -> str:
    """``text`` with every run of KEY_FRAGMENT or more characters that also occurs in ``key`` starred out."""
    out: list[str] = []
    i = 0
    while i < len(text):
        n = 0
        if i + KEY_FRAGMENT <= len(text) and text[i : i + KEY_FRAGMENT] in key:
            n = KEY_FRAGMENT
            while i + n < len(text) and text[i : i + n + 1] in key:
                n += 1
        if n:
            out.append("***")
            i += n
        else:
            out.append(text[i])
            i += 1
    return "".join(out)
