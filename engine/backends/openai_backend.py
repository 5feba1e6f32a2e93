"""The OpenAI-compatible HTTP backend (OpenAI, vLLM serve, llama.cpp server, ...).

One request per call (``batching = False``): the scheduler supplies
concurrency, rate limits and retries, so the SDK's own retries are off
(``max_retries=0``) and every failure is mapped to our error types:

* 429, 408, 409, 5xx, timeouts, refused or dropped connections ->
  ``TransientBackendError`` (with the server's Retry-After, when given);
* other 4xx -> ``BackendError``;
* an endpoint that cannot be reached at ``start()``, a rejected or missing
  API key, a model the server does not serve -> ``BackendUnavailable``.

Several base URLs serving the same model share the load: each request goes to
the endpoint with the fewest requests in flight (ties broken round robin).
They count as one model: the identity is the model name plus the first URL.

Label scoring (``score_choices``) asks for the top-20 log-probabilities of the
first generated token and reads each choice from them; see
``choice_logprobs_from_top``. Servers that return no log-probabilities get a
short generation instead, and the completion's ``note`` says so.

The API key is read from an environment variable, kept in one private
attribute and the SDK client, and scrubbed from every error message we raise.
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from promptrobust.engine.backends.base import Backend, BackendError, BackendUnavailable, TransientBackendError
from promptrobust.engine.retry import parse_retry_after
from promptrobust.engine.types import Completion, ModelIdentity, Request

log = logging.getLogger(__name__)

OFFICIAL_BASE_URL = "https://api.openai.com/v1"
#: How many alternatives we ask for (the OpenAI API's maximum).
TOP_LOGPROBS = 20
#: A choice absent from the top list scores this far below the smallest listed
#: log-probability: its true value is lower than every listed one, by an
#: unknown amount; a fixed margin keeps it ranked last without inventing -inf.
MISSING_CHOICE_MARGIN = 1.0
FALLBACK_NOTE = "score_choices fell back to generation: server returned no logprobs"
DISABLED_NOTE = "score_choices by generation: logprobs disabled (logprobs=False)"
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


@dataclass
class _Endpoint:
    url: str  # as given (used by the client)
    shown: str  # credentials stripped (used in messages)
    client: Any = None
    in_flight: int = 0
    sent: int = 0


class OpenAIBackend(Backend):
    """A model behind one or more OpenAI-compatible endpoints."""

    kind = "openai"
    batching = False

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
    ) -> None:
        if not model or not str(model).strip():
            raise ValueError("the openai backend needs a model name, e.g. openai:gpt-4o-mini")
        if api not in ("chat", "completions", "auto"):
            raise ValueError(f"api must be chat, completions or auto, got {api!r}")
        if not timeout or float(timeout) <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if int(max_connections) < 1:
            raise ValueError(f"max_connections must be >= 1, got {max_connections!r}")
        if logprobs not in (None, True, False):
            raise ValueError(f"logprobs must be true, false or unset (auto), got {logprobs!r}")
        urls = [str(u).strip() for u in (base_urls or [OFFICIAL_BASE_URL]) if str(u).strip()]
        if not urls:
            raise ValueError("base_urls is empty: give at least one URL such as http://127.0.0.1:8000/v1")
        for url in urls:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"base URL {clean_url(url)!r} is not http(s)://host[:port]/path, e.g. http://127.0.0.1:8000/v1")
        self.model = str(model)
        self.api = api
        self.timeout = float(timeout)
        self.max_connections = int(max_connections)
        self.logprobs = logprobs
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
        self._server_logprobs: bool | None = None  # learnt from the first scoring answer
        self._warned_fallback = False

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
        return ModelIdentity(
            backend="openai", name=self.model, revision=self._revision,
            extra=(("base_url", self._endpoints[0].shown),),
        )

    @property
    def is_chat(self) -> bool:
        return self.api != "completions"

    @property
    def endpoint_counts(self) -> dict[str, int]:
        """Requests sent to each endpoint (credential-free URL -> count)."""
        return {e.shown: e.sent for e in self._endpoints}

    # -- lifecycle ---------------------------------------------------------------
    def _ensure_clients(self) -> None:
        if self._http is not None:
            return
        import openai

        http = _http_module()
        self._http = openai.DefaultAsyncHttpxClient(
            timeout=http.Timeout(self.timeout, connect=min(self.timeout, 10.0)),
            limits=http.Limits(max_connections=self.max_connections, max_keepalive_connections=self.max_connections),
        )
        for ep in self._endpoints:
            ep.client = openai.AsyncOpenAI(
                api_key=self.__key, base_url=ep.url, max_retries=0, timeout=self.timeout, http_client=self._http,
            )

    async def start(self) -> None:
        """Open the clients and probe ``GET /models`` on every endpoint."""
        try:
            import openai  # noqa: F401
        except ImportError:
            raise BackendUnavailable("the openai backend needs the openai package: pip install openai") from None
        self._ensure_clients()
        try:
            revisions = [await self._probe(ep) for ep in self._endpoints]
        except BaseException:
            await self.close()  # a failed start leaves no open connections behind
            raise
        self._revision = revisions[0]

    async def _probe(self, ep: _Endpoint) -> str:
        import openai

        try:
            page = await ep.client.with_options(timeout=min(self.timeout, 10.0)).models.list()
        except openai.APIConnectionError as exc:
            raise BackendUnavailable(
                f"cannot reach {ep.shown}: is the server running? ({self._reason(exc)})"
            ) from None
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

    # -- requests ------------------------------------------------------------------
    def _pick(self) -> _Endpoint:
        n = len(self._endpoints)
        start = self._rr
        self._rr = (self._rr + 1) % n
        order = [self._endpoints[(start + k) % n] for k in range(n)]
        return min(order, key=lambda e: e.in_flight)  # min() keeps the first of equals

    async def complete(self, request: Request) -> Completion:
        import openai

        self._ensure_clients()
        ep = self._pick()
        ep.in_flight += 1
        ep.sent += 1
        try:
            if request.kind == "generate":
                return await self._generate(ep, request)
            return await self._score(ep, request)
        except openai.APIError as exc:
            raise self._map_error(exc, ep) from None
        finally:
            ep.in_flight -= 1

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
                    want_logprobs: bool) -> tuple[Any, bool]:
        """One API call; returns (response, whether the chat API was used)."""
        chat = self._use_chat(request)
        common: dict[str, Any] = {
            "model": self.model, "max_tokens": max_tokens, "temperature": request.decoding.temperature,
        }
        if stop:
            common["stop"] = list(stop)
        if chat:
            if want_logprobs:
                common.update(logprobs=True, top_logprobs=TOP_LOGPROBS)
            resp = await ep.client.chat.completions.create(messages=self._messages(request), **common)
        else:
            if want_logprobs:
                common["logprobs"] = TOP_LOGPROBS
            resp = await ep.client.completions.create(prompt=request.prompt or "", **common)
        return resp, chat

    @staticmethod
    def _text(resp: Any, chat: bool) -> str:
        if not resp.choices:
            raise BackendError("the server answered with no choices")
        choice = resp.choices[0]
        if chat:
            return (choice.message.content if choice.message else None) or ""
        return choice.text or ""

    @staticmethod
    def _usage(resp: Any) -> tuple[int, int]:
        usage = getattr(resp, "usage", None)
        if usage is None:
            return 0, 0
        return int(usage.prompt_tokens or 0), int(usage.completion_tokens or 0)

    async def _generate(self, ep: _Endpoint, request: Request, note: str | None = None) -> Completion:
        d = request.decoding
        resp, chat = await self._call(ep, request, max_tokens=d.max_tokens, stop=d.stop, want_logprobs=False)
        prompt_tokens, completion_tokens = self._usage(resp)
        return Completion(text=self._text(resp, chat), prompt_tokens=prompt_tokens,
                          completion_tokens=completion_tokens, note=note)

    @staticmethod
    def _top_logprobs(resp: Any, chat: bool) -> list[tuple[str, float]]:
        """The first generated token's alternatives, or [] when the server sent none."""
        if not resp.choices:
            return []
        lp = resp.choices[0].logprobs
        if lp is None:
            return []
        if chat:
            content = getattr(lp, "content", None) or []
            if not content:
                return []
            return [(t.token, float(t.logprob)) for t in (content[0].top_logprobs or [])]
        tops = getattr(lp, "top_logprobs", None) or []
        if not tops or not tops[0]:
            return []
        return [(tok, float(v)) for tok, v in tops[0].items()]

    async def _score(self, ep: _Endpoint, request: Request) -> Completion:
        if self.logprobs is False:
            return await self._generate(ep, request, note=DISABLED_NOTE)
        if self._server_logprobs is False and self.logprobs is None:
            return await self._generate(ep, request, note=FALLBACK_NOTE)
        try:
            resp, chat = await self._call(ep, request, max_tokens=1, stop=(), want_logprobs=True)
            top = self._top_logprobs(resp, chat)
        except Exception as exc:
            if not self._rejects_logprobs(exc):
                raise
            top = []  # e.g. llama-cpp-python without --logits_all: HTTP 500 "logprobs is not supported"
        if top:
            self._server_logprobs = True
            prompt_tokens, completion_tokens = self._usage(resp)
            return Completion(choice_logprobs=choice_logprobs_from_top(top, request.choices),
                              prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
        if self.logprobs is True:
            raise BackendError(
                f"{ep.shown} returned no logprobs but logprobs=true was asked: unset logprobs to allow generation"
            )
        self._server_logprobs = False
        if not self._warned_fallback:
            self._warned_fallback = True
            log.warning("%s for %s at %s", FALLBACK_NOTE, self.model, ep.shown)
        return await self._generate(ep, request, note=FALLBACK_NOTE)

    def _rejects_logprobs(self, exc: BaseException) -> bool:
        """An error answer that refuses the logprobs option itself (retrying cannot help)."""
        import openai

        if not isinstance(exc, openai.APIStatusError) or exc.status_code == 429:
            return False
        return exc.status_code < 600 and "logprob" in self._detail(exc).lower()

    # -- errors --------------------------------------------------------------------
    def _redact(self, text: str) -> str:
        """One line, no secrets: our key, sk-... strings, and echoed key fragments."""
        if self.__key and self.__key != _PLACEHOLDER_KEY:
            text = text.replace(self.__key, "***")
        text = re.sub(r"sk-[A-Za-z0-9_*.\-]+", "sk-***", text)
        text = re.sub(r"(api key provided:\s*)\S+", r"\1***", text, flags=re.IGNORECASE)
        text = re.sub(r"(Bearer\s+)\S+", r"\1***", text)
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
        return BackendError(f"bad answer from {ep.shown}: {self._redact(str(exc))}")
