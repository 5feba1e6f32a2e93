"""The ``OpenAIBackend``: a model behind one or more OpenAI-compatible endpoints (OpenAI, vLLM serve,
llama.cpp server, ...).

One request per call (``batching = False``): the scheduler supplies
concurrency, rate limits and retries, so the SDK's own retries are off
(``max_retries=0``) and every failure becomes one of our errors
(``errors.map_error``). ``timeout`` is a deadline for the whole request
(connect, headers and body), so a server dripping its headers a byte a second
is cut off too. No endpoint reachable at ``start()``, a rejected or missing API
key, a model the server does not serve -> ``BackendUnavailable``. An endpoint
that refuses connections later is waited out (``endpoints``: its requests go
elsewhere or wait for it, without spending their attempts, up to ``max_outage``
seconds when every endpoint is down).

The parts, each in its module: ``endpoints`` (the pool: which endpoint takes a
call, health, ejection), ``answers`` (reading and checking what a server
sends: bounded bodies, the JSON's parts, impossible numbers), ``scoring`` (the
label-scoring routes) and ``errors`` (the SDK's errors mapped, secrets out of
every message). All endpoints count as one model: the identity is the model
name plus the first URL.

Label scoring (``score_choices``) is exact where the server allows it: on a
vLLM server (its ``/models`` says so) start-up first checks vLLM 0.26+'s
``logprob_token_ids`` (``token_ids``: plain prompts and chat, prefix cache
kept); then, with ``api=completions``, which exact route the completions
endpoint allows (``scoring.ROUTES``: ``echo`` + ``logprobs``, or vLLM's
``prompt_logprobs``), and each label's tokens are then scored as the
in-process backends score them. Otherwise (chat requests, or a server that
allows none) it asks for the top-20 log-probabilities of the first generated
token and reads each choice from them (``scoring.choice_logprobs_from_top``),
an approximation; ``label_scoring`` says which route was used and the results
record it. Whether the server returns log-probabilities is decided once: by
the ``logprobs`` argument, or else by the first label-scoring request (the
scheduler sends ``capability_probe()`` right after start). A server that
answers several well-formed requests without them, or refuses the option,
cannot score labels (``supports_choice_scoring`` is False: the evaluator
generates instead and says so); later ``score_choices`` requests are refused,
never answered with generated text.

The API key is read from an environment variable, kept in one private
attribute and the SDK client, and scrubbed (with any fragment of 8 or more
characters) from every error message we raise.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from promptrobust.engine.safe_io.redact import register_secret, register_url_credentials
from promptrobust.engine.serving.backends.base import (
    BackendError,
    BackendUnavailable,
    BadAnswerError,
    PerRequestBackend,
    TransientBackendError,
)
from promptrobust.engine.serving.backends.label_tokens import (
    TokenIds,
    check_label_ids,
    continuation_ids,
    sum_choice_logprobs,
    trie_queries,
)
import promptrobust.engine.serving.backends.openai.answers as answers
import promptrobust.engine.serving.backends.openai.scoring as scoring
import promptrobust.engine.serving.backends.openai.token_ids as token_ids
from promptrobust.engine.serving.backends.openai.answers import BodyTooLarge
from promptrobust.engine.serving.backends.openai.endpoints import Endpoint, EndpointPool, clean_url
from promptrobust.engine.serving.backends.openai.errors import PLACEHOLDER_KEY, Redactor, detail, map_error, rejects_logprobs
from promptrobust.engine.serving.backends.openai.options import OFFICIAL_BASE_URL, OpenAIOptions
from promptrobust.engine.serving.types import ChatMessage, Completion, Decoding, ModelIdentity, Request

__all__ = ["OFFICIAL_BASE_URL", "PROBE_ANSWERS", "LogprobsUnsupported", "OpenAIBackend", "OpenAIOptions"]

log = logging.getLogger(__name__)

#: Well-formed answers without log-probabilities, in a row, before we conclude
#: that the server never sends them (one garbage answer must not decide it).
PROBE_ANSWERS = 5
_PROBE_TEXT = "Answer with one word, yes or no: is water wet?"


def _http_module() -> Any:
    """The httpx flavour the installed openai SDK is built on (httpx or httpx2)."""
    import openai

    return importlib.import_module(openai.DefaultAsyncHttpxClient.__mro__[1].__module__.split(".")[0])


def _is_official(url: str) -> bool:
    return (urlsplit(url).hostname or "").lower() == "api.openai.com"


class LogprobsUnsupported(BackendError):
    """The server does not return log-probabilities, so it cannot score choices."""


class _Unreachable(BackendUnavailable):
    """An endpoint that did not answer at start (fatal only when none does)."""


class EndpointDown(TransientBackendError):
    """The endpoint refused the connection (or none could be made): the request goes elsewhere or waits
    for the endpoint, without spending an attempt (``spends_attempt=False``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, spends_attempt=False)


def _connect_failure(exc: BaseException) -> bool:
    """Whether an SDK error is a connection that could not be made (refused, unreachable, connect timeout),
    as opposed to one that broke mid-answer."""
    http = _http_module()
    kinds = tuple(k for k in (getattr(http, "ConnectError", None), getattr(http, "ConnectTimeout", None)) if k)
    seen: BaseException | None = exc
    for _ in range(8):  # the SDK wraps the HTTP client's error: follow the chain a few links
        if seen is None:
            return False
        if kinds and isinstance(seen, kinds):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class OpenAIBackend(PerRequestBackend):
    """A model behind one or more OpenAI-compatible endpoints (``options``: every choice, whole)."""

    kind = "openai"
    #: identity needs the /models answer and label scoring a decision: start at once.
    defer_start = False

    def __init__(self, model: str, options: OpenAIOptions | None = None) -> None:
        if not model or not str(model).strip():
            raise ValueError("the openai backend needs a model name, e.g. openai:gpt-4o-mini")
        options = options if options is not None else OpenAIOptions()
        if not isinstance(options, OpenAIOptions):
            raise TypeError(f"openai backend: options must be an OpenAIOptions, not {type(options).__name__}")
        #: Every choice, whole (checked when it was made).
        self.options = options
        self._scoring_path: scoring.ScoringPath | None = None if options.scoring == "auto" else options.scoring
        #: Seconds every endpoint may refuse connections before the waiting requests fail.
        self.max_outage = float(options.max_outage)
        urls = list(options.base_urls)
        for url in urls:
            register_url_credentials(url)  # a password in a URL never reaches a message, in any form
        self.model = str(model)
        self.api = options.api
        self.timeout = float(options.timeout)
        self.max_connections = options.max_connections
        self.logprobs = options.logprobs
        self.max_body_bytes = options.max_body_bytes
        self.api_key_env = api_key_env = options.api_key_env
        key = os.environ.get(api_key_env, "").strip()
        if not key:
            official = [clean_url(u) for u in urls if _is_official(u)]
            if official:
                raise BackendUnavailable(
                    f"set {api_key_env} to your OpenAI API key to use {official[0]} "
                    "(or pass base_url=... for a local OpenAI-compatible server)"
                )
            key = PLACEHOLDER_KEY
        if key != PLACEHOLDER_KEY:
            register_secret(key)  # nor does the key, nor any piece of it
        self.__key = key
        self._redact = Redactor()
        self._pool = EndpointPool(urls, eject_after=options.eject_after, cooldown=options.cooldown)
        self._http: Any = None
        #: What the server states about the weights (``start()``): the identity's revision and facts.
        self._facts = answers.ServerFacts()
        #: The logprob_token_ids route's labels' tokens, learned once per run from the server's tokenizer.
        self._learned = token_ids.Learned()
        #: Whether the server returns log-probs: None until decided (see the module docstring).
        self._server_logprobs: bool | None = options.logprobs

    def __repr__(self) -> str:
        urls = ", ".join(e.shown for e in self._endpoints)
        return f"OpenAIBackend(model={self.model!r}, base_urls=[{urls}], api={self.api!r})"

    @property
    def _endpoints(self) -> list[Endpoint]:
        return self._pool.endpoints

    @property
    def eject_after(self) -> int:
        return self._pool.eject_after

    @property
    def cooldown(self) -> float:
        return self._pool.cooldown

    # -- identity ----------------------------------------------------------------
    @property
    def identity(self) -> ModelIdentity:
        """Model name + first endpoint + what the server states about the weights; final once ``start()``
        has read the model list.

        All endpoints must serve the same weights under the same name, so they
        share one identity (and one cache). ``revision`` comes from the
        ``/models`` entry: its ``created`` date on the official API (a model
        release); on vLLM its ``root`` as ``answers.weights_statement`` gives
        it (a hub id or snapshot, or the folder's name: never a path on the
        server's machine), with ``max_model_len`` and the server's version
        (``/version``) in ``extra`` (``answers.ServerFacts``). Local servers'
        ``created`` is often the current time, and ``system_fingerprint`` only
        arrives with answers (after cache keys are needed) and changes with the
        provider's infrastructure, so neither is used.
        """
        extra: tuple[tuple[str, str], ...] = (("base_url", self._pool.first.shown), *self._facts.extra())
        if self._scoring_path in scoring.EXACT_PATHS:  # exact label scores never share keys with top-20 ones
            extra += (("label_scoring", str(self._scoring_path)),)
        return ModelIdentity(backend="openai", name=self.model, revision=self._facts.revision, extra=extra)

    @property
    def label_scoring(self) -> str:
        """How labels are scored, as the results record it (decided at ``start()``)."""
        route = scoring.exact_route(self._scoring_path)
        if route is not None and route.chat and not route.by_token_ids and self.is_chat:
            return scoring.CHAT_DESCRIPTION
        return scoring.DESCRIPTIONS[self._scoring_path or scoring.TOP_PATH]

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
        return self._pool.counts

    @property
    def endpoint_health(self) -> dict[str, str]:
        """Each endpoint's state: ``ok``, ``ejected`` or ``probing`` (credential-free URL -> state)."""
        return self._pool.health

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
            event_hooks={"response": [answers.body_limit_hook(http, self.max_body_bytes)]},
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
            importlib.import_module("openai")  # present, and importable
        except ImportError:
            raise BackendUnavailable("the openai backend needs the openai package: pip install openai") from None
        self._ensure_clients()
        try:
            found = await asyncio.gather(*(self._list_models(ep) for ep in self._endpoints), return_exceptions=True)
            for answer in found:
                if isinstance(answer, BaseException) and not isinstance(answer, _Unreachable):
                    raise answer
            reachable = [(ep, a) for ep, a in zip(self._endpoints, found) if not isinstance(a, _Unreachable)]
            if not reachable:
                raise BackendUnavailable(str(found[0])) from None
            for ep, answer in zip(self._endpoints, found):
                if isinstance(answer, _Unreachable):
                    log.warning("%s; carrying on with the other endpoints", answer)
                    ep.last_error, ep.failures = "unreachable at start", 1
                    self._pool.eject(ep)
        except BaseException:
            await self.close()  # a failed start leaves no open connections behind
            raise
        first, facts = reachable[0]
        assert isinstance(facts, answers.ServerFacts)
        if first.vllm:
            facts = replace(facts, server=await self._server_version(first))
        self._facts = facts
        if self._scoring_path is None:
            self._scoring_path = await self._detect_scoring(first)
        if self._scoring_path in scoring.EXACT_PATHS and self._server_logprobs is None:
            self._server_logprobs = True  # an exact route reads log-probs: nothing left for a start-up probe to ask

    async def _list_models(self, ep: Endpoint) -> answers.ServerFacts:
        """``GET /models`` on one endpoint: what it states about the model's weights (nothing, when it says nothing)."""
        import openai

        limit = min(self.timeout, 10.0)
        try:
            async with asyncio.timeout(limit):  # slow headers included
                raw = await ep.client.with_options(timeout=limit).models.with_raw_response.list()
                data = answers.json_body(raw.http_response, ep.shown)  # bounded, as every answer
        except TimeoutError:
            raise _Unreachable(f"cannot reach {ep.shown}: no complete answer to GET /models within {limit:g}s") from None
        except BodyTooLarge as exc:  # a model list is no reason to stop: the answers are checked one by one
            log.warning("GET %s/models: %s; carrying on", ep.shown, exc)
            return answers.ServerFacts()
        except openai.APIConnectionError as exc:
            raise _Unreachable(f"cannot reach {ep.shown}: is the server running? ({self._redact.reason(exc)})") from None
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
            return answers.ServerFacts()
        except (TransientBackendError, BadAnswerError) as exc:  # a model list that is not JSON: not fatal
            log.warning("GET %s/models sent an unreadable answer (%s); carrying on", ep.shown, exc)
            return answers.ServerFacts()
        listed = data.get("data")
        entries = [e for e in listed if isinstance(e, dict)] if isinstance(listed, list) else []
        if not entries:
            return answers.ServerFacts()
        ids = [str(e.get("id", "")) for e in entries]
        if self.model not in ids:
            shown = ", ".join(ids[:10]) + (", ..." if len(ids) > 10 else "")
            raise BackendUnavailable(
                f"model {self.model!r} is not served at {ep.shown} (it serves: {shown}): pass one of those names"
            )
        entry = entries[ids.index(self.model)]
        ep.vllm = entry.get("owned_by") == "vllm"
        if _is_official(ep.url):
            created = entry.get("created")
            return answers.ServerFacts(weights=f"created={created}" if created else "")
        root = answers.weights_statement(str(entry.get("root") or ""))
        length = entry.get("max_model_len")
        return answers.ServerFacts(
            weights=f"root={root}" if root and root != self.model else "",
            max_model_len=length if isinstance(length, int) and not isinstance(length, bool) and length > 0 else None)

    async def _server_version(self, ep: Endpoint) -> str:
        """vLLM's ``GET /version`` at the server root, as ``vllm X.Y.Z`` ("" when it does not say)."""
        limit = min(self.timeout, 10.0)
        try:
            async with asyncio.timeout(limit):
                response = await ep.client.with_options(timeout=limit).get(
                    token_ids.server_root_url(ep.url, "version"), cast_to=_http_module().Response)
                data = answers.json_body(response, ep.shown)
        except Exception as exc:  # noqa: BLE001 - an unanswered /version only leaves the version unknown
            log.debug("GET /version at %s: %s", ep.shown, self._redact(str(exc)))
            return ""
        version = data.get("version")
        return f"vllm {version}" if isinstance(version, str) and version.strip() and len(version) < 64 else ""

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None
            for ep in self._endpoints:
                ep.client = None

    # -- requests ------------------------------------------------------------------
    async def wait_until_ready(self) -> None:
        """While every endpoint refuses connections, wait for one (at most ``max_outage`` seconds)."""
        await self._pool.wait_until_reachable(self.max_outage)

    async def complete(self, request: Request) -> Completion:
        import openai

        self._ensure_clients()
        await self.wait_until_ready()
        ep, probe = self._pool.pick_for(request)
        if ep.down_since is not None and not probe:  # it refuses connections, and another request is testing it
            raise EndpointDown(f"{ep.shown} refuses connections ({ep.last_error}); waiting for it")
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
                if isinstance(exc, (openai.APIConnectionError, openai.APITimeoutError)) and _connect_failure(exc):
                    why = self._redact.reason(exc)
                    self._pool.mark_down(ep, why, self.max_outage)
                    raise EndpointDown(f"connection to {ep.shown} failed: {why}") from None
                raise map_error(exc, ep.shown, timeout=self.timeout, api_key_env=self.api_key_env,
                                redact=self._redact) from None
            outcome = True
            return out
        except EndpointDown:
            self._pool.avoid_next_time(request, ep)
            raise
        except TransientBackendError as exc:
            ep.last_error = str(exc)
            outcome = None if exc.status == 429 else False  # a busy server is not a broken one
            self._pool.avoid_next_time(request, ep)
            raise
        except asyncio.CancelledError:
            ep.last_error = "call cut short (timeout)"
            outcome = False  # the scheduler's --request-timeout gave up on this endpoint
            self._pool.avoid_next_time(request, ep)
            raise
        finally:
            ep.in_flight -= 1
            self._pool.settle(ep, outcome, probe)

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

    @contextlib.asynccontextmanager
    async def _deadline(self, ep: Endpoint) -> Any:
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

    async def _call(self, ep: Endpoint, request: Request, *, max_tokens: int, stop: Sequence[str],
                    want_logprobs: bool) -> tuple[dict[str, object], bool]:
        """One API call; returns (the answer's JSON object, whether the chat API was used).

        The body is read and checked here (``answers.json_body``), not by the SDK, so that an
        empty, cut-off, non-JSON or HTML answer is a transient failure, never a crash.
        """
        chat = self._use_chat(request)
        common: dict[str, object] = {
            "model": self.model, "max_tokens": max_tokens, "temperature": request.decoding.temperature,
        }
        if stop:
            common["stop"] = list(stop)
        async with self._deadline(ep):
            if chat:
                if want_logprobs:
                    common.update(logprobs=True, top_logprobs=scoring.TOP_LOGPROBS)
                raw = await ep.client.chat.completions.with_raw_response.create(messages=self._messages(request), **common)
            else:
                if want_logprobs:
                    common["logprobs"] = scoring.TOP_LOGPROBS
                raw = await ep.client.completions.with_raw_response.create(prompt=request.prompt or "", **common)
            return answers.json_body(raw.http_response, ep.shown), chat

    async def _generate(self, ep: Endpoint, request: Request) -> Completion:
        d = request.decoding
        data, chat = await self._call(ep, request, max_tokens=d.max_tokens, stop=d.stop, want_logprobs=False)
        text = answers.answer_text(answers.first_choice(data, ep.shown), chat, ep.shown)
        prompt_tokens, completion_tokens = answers.usage(data)
        return Completion(text=text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)

    # -- label scoring (scoring.py holds the routes) ----------------------------------------------------
    async def _score(self, ep: Endpoint, request: Request) -> Completion:
        route = scoring.exact_route(self._scoring_path)
        if route is not None and route.by_token_ids:
            self._use_chat(request)  # the same checks as every request (chat messages on api=completions)
            return await self._score_token_ids(ep, request)
        if route is not None:
            if not self._use_chat(request):
                return await self._score_exact(ep, request, route)
            if route.chat:
                return await self._score_exact_chat(ep, request)
        return await self._score_top(ep, request)

    async def _score_top(self, ep: Endpoint, request: Request) -> Completion:
        """The approximation: each label read from the first generated token's top-20 log-probs."""
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
                if self._server_logprobs is None and rejects_logprobs(exc):
                    # e.g. llama-cpp-python without --logits_all: HTTP 500 "logprobs is not supported"
                    self._decide_no_logprobs(ep, f"it refused them: {self._redact(detail(exc))}")
                    return await self._score(ep, request)
                raise
            choice = answers.first_choice(data, ep.shown)
            top = answers.top_logprobs(choice, chat)
            if top:
                answers.check_top_logprobs(top, ep.shown)
                if self._server_logprobs is None:
                    self._server_logprobs = True
                prompt_tokens, completion_tokens = answers.usage(data)
                scores = scoring.choice_logprobs_from_top(top, request.choices)
                answers.check_choice_logprobs(scores, request.choices, ep.shown)
                return Completion(choice_logprobs=scores, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
            if self._server_logprobs:
                raise TransientBackendError(f"malformed answer from {ep.shown}: no log-probabilities although they were asked for")
        self._decide_no_logprobs(ep, f"{PROBE_ANSWERS} answers in a row came without them")
        return await self._score(ep, request)

    async def _post_completions(self, ep: Endpoint, body: dict[str, object]) -> dict[str, object]:
        """POST ``body`` to the completions endpoint; the answer's JSON object (read as in ``_call``)."""
        known = {k: body[k] for k in ("model", "prompt", "echo", "logprobs", "max_tokens", "temperature") if k in body}
        extra = {k: v for k, v in body.items() if k not in known}
        async with self._deadline(ep):  # the same whole-request deadline as every other call
            raw = await ep.client.completions.with_raw_response.create(**known, **({"extra_body": extra} if extra else {}))
            return answers.json_body(raw.http_response, ep.shown)

    async def _detect_scoring(self, ep: Endpoint) -> scoring.ScoringPath:
        """Once, at start: the exact route the server allows for plain prompts, else the top-20 approximation."""
        import openai

        if self.logprobs is False:
            return scoring.TOP_PATH
        if ep.vllm:
            # A vLLM server (its /models says so): the route that keeps its prefix cache first, on chat too.
            # Its /version says whether it has the route (0.26+): then nothing is sent at start, so a run that
            # only generates asks nothing of label scoring. A server that does not say is probed (vLLM before
            # 0.26 ignores the field, which the probe's answer shows). Other servers are not asked (a refused
            # request at every start).
            served = token_ids.serves_token_ids(self._facts.server.removeprefix("vllm "))
            if served:
                return scoring.TokenIdsRoute.name
            if served is None:
                try:
                    if await self._probe_token_ids(ep):
                        return scoring.TokenIdsRoute.name
                except (openai.APIError, BackendError):
                    pass  # refused or unreadable: the next route
        if self.api != "completions":
            # Chat requests: only a vLLM server can score a label inside the model's own template, and
            # asking others costs a refused request at every start, so that route is opted into
            # (scoring=prompt_logprobs); the settings line and the records say "approximate".
            return scoring.TOP_PATH
        for path, body in scoring.probe_bodies(self.model):
            try:
                data = await self._post_completions(ep, body)
            except (openai.APIError, TransientBackendError):
                continue  # refused or unreadable: this route is not available here
            if scoring.accepts(path, data):
                return path
        log.warning("%s at %s scores no prompt tokens (neither echo+logprobs nor prompt_logprobs): labels are "
                    "read from the first token's top-20 log-probs, an approximation", self.model, ep.shown)
        return scoring.TOP_PATH

    async def _score_exact(self, ep: Endpoint, request: Request, route: scoring.ExactRoute) -> Completion:
        data = await self._post_completions(ep, route.body(self.model, request.prompt or "", request.choices))
        with _readable(ep):
            values = route.read(data, request.prompt or "", request.choices)
        prompt_tokens, _ = answers.usage(data)
        return Completion(choice_logprobs=values, prompt_tokens=prompt_tokens, completion_tokens=0)

    async def _score_exact_chat(self, ep: Endpoint, request: Request) -> Completion:
        """One chat request per label (a conversation cannot be a list); its prompt tokens are the sum
        over those requests, each billed on its own (the completions route's usage sums them too)."""
        messages = self._messages(request)

        async def one(label: str) -> tuple[float, int]:
            body = scoring.chat_body(self.model, messages, label)
            extra = {k: v for k, v in body.items() if k not in ("model", "messages", "max_tokens", "temperature")}
            raw = await ep.client.chat.completions.with_raw_response.create(
                model=body["model"], messages=body["messages"], max_tokens=1, temperature=0.0, extra_body=extra)
            data = answers.json_body(raw.http_response, ep.shown)
            with _readable(ep):
                value = scoring.read_chat(data, label)
            return value, answers.usage(data)[0]

        found = await asyncio.gather(*(one(label) for label in request.choices))
        return Completion(choice_logprobs=tuple(v for v, _ in found), prompt_tokens=sum(t for _, t in found), completion_tokens=0)

    # -- the logprob_token_ids route (token_ids.py holds its requests and answers) ----------------------
    async def _post_json(self, ep: Endpoint, url: str, body: dict[str, object]) -> dict[str, object]:
        """POST ``body`` to ``url`` (absolute: vLLM's /tokenize sits outside /v1) with this client's key and
        limits; the answer's JSON object, read as every other answer is."""
        async with self._deadline(ep):
            response = await ep.client.post(url, cast_to=_http_module().Response, body=body)
            return answers.json_body(response, ep.shown)

    async def _tokenize(self, ep: Endpoint, body: dict[str, object], *, most: int, what: str) -> list[int]:
        data = await self._post_json(ep, token_ids.tokenize_url(ep.url), body)
        with _readable(ep):
            return token_ids.read_tokens(data, most=most, max_model_len=self._facts.max_model_len, what=what)

    async def _score_token_ids(self, ep: Endpoint, request: Request) -> Completion:
        """A label set's tokens learned once (``token_ids.Learned``), then one request per sample: its text read
        at the generated position, the input's ids coming back with the labels' log-probs (module docstring of
        ``token_ids``). Labels of several tokens take one more request, for the positions inside them."""
        key: token_ids.LabelSetKey = (request.messages is not None, tuple(request.choices))
        tokenized: list[int] | None = None  # the input as /tokenize gave it, when this request learned from it
        if not self._learned.labels.get(key):
            async def first() -> list[int]:
                nonlocal tokenized
                tokenized = await self._learn(ep, request, key)
                return tokenized

            await token_ids.once(self._learned.learning, (key, None), first)
        root = self._learned.root_ids(key)
        context, values = await self._read_text(ep, request, root[: token_ids.MAX_IDS_PER_REQUEST])
        if tokenized is not None and tokenized != context:
            raise _unusable(ep, "the server tokenised the same input two ways (its /tokenize and its completions "
                                "route gave different token ids): its tokenizer is not deterministic")
        seam = token_ids.seam_of(context)
        labels = self._learned.labels[key].get(seam)
        if labels is None:  # an input that ends otherwise than those learned from: learn how labels continue it
            async def again() -> list[int]:
                return await self._learn(ep, request, key, context=context)

            await token_ids.once(self._learned.learning, (key, seam), again)
            labels = self._learned.labels[key][seam]
        nodes = trie_queries(labels)
        read: dict[TokenIds, dict[int, float]] = {(): values}
        rest = {p: ids for p, ids in nodes.items() if p != ()}
        unread = tuple(t for t in nodes.get((), ()) if t not in values)
        if unread:
            rest[()] = unread
        if rest:
            for prefix, found in (await self._read_token_ids(ep, context, rest)).items():
                read.setdefault(prefix, {}).update(found)
        for found in read.values():
            answers.check_mass(list(found.values()), ep.shown, "the labels' tokens")
        return Completion(choice_logprobs=sum_choice_logprobs(labels, read), prompt_tokens=len(context),
                          completion_tokens=0)

    async def _learn(self, ep: Endpoint, request: Request, key: token_ids.LabelSetKey, *,
                     context: list[int] | None = None) -> list[int]:
        """Tokenise the input, each label after it and each label alone (``/tokenize``), and keep each label's
        tokens for inputs ending like this one; the input's ids. ``context``: the ids the completions route
        gave for the same input, which /tokenize must give too. Labels whose tokens cannot tell them apart
        are refused (``check_label_ids``)."""
        chat = request.messages is not None
        messages = self._messages(request) if chat else None
        prompt = request.prompt or ""

        def body(label: str | None) -> dict[str, object]:
            if messages is not None:
                turns = messages if label is None else [*messages, {"role": "assistant", "content": label}]
                return token_ids.tokenize_body(self.model, messages=turns, continue_final=label is not None)
            return token_ids.tokenize_body(self.model, prompt=prompt + (label or ""))

        def most(label: str) -> int:
            return self._most_tokens(request, label)

        async def alone(label: str) -> list[int]:
            async def make() -> list[int]:
                return await self._tokenize(ep, token_ids.tokenize_body(self.model, prompt=label, special=False),
                                            most=token_ids.most_tokens(label), what=f"the label {label[:40]!r}")

            return await token_ids.once(self._learned.alone, label, make, keep=True)

        own, *found = await asyncio.gather(
            self._tokenize(ep, body(None), most=most(""), what="the input"),
            *(self._tokenize(ep, body(label), most=most(label), what="the input and a label") for label in request.choices),
            *(alone(label) for label in request.choices),
        )
        if context is not None and own != context:
            raise _unusable(ep, "the server tokenised the same input two ways (its /tokenize and its completions "
                                "route gave different token ids): its tokenizer is not deterministic")
        n = len(request.choices)
        labels = [continuation_ids(own, full, alone_ids) for full, alone_ids in zip(found[:n], found[n:])]
        check_label_ids(request.choices, labels)  # none without tokens, no two alike: else refused, never scored
        self._learned.labels.setdefault(key, {})[token_ids.seam_of(own)] = labels
        return own

    def _most_tokens(self, request: Request, label: str = "") -> int:
        """The most tokens any tokenizer makes of the request's input plus ``label``."""
        if request.messages is None:
            return token_ids.most_tokens((request.prompt or "") + label)
        text = "".join(m.content for m in request.messages) + label
        return token_ids.most_tokens(text, messages=len(request.messages) + 1)

    async def _read_text(self, ep: Endpoint, request: Request, ids: list[int]) -> tuple[list[int], dict[int, float]]:
        """One request with the input's text: the log-probs of ``ids`` at the generated position, and the input's
        token ids as the server tokenised them (completions for a prompt; the chat route for a conversation)."""
        if request.messages is not None:
            async with self._deadline(ep):
                raw = await ep.client.chat.completions.with_raw_response.create(
                    model=self.model, messages=self._messages(request), max_tokens=1, temperature=0.0, logprobs=True,
                    extra_body={"logprob_token_ids": ids, "return_tokens_as_token_ids": True, "return_token_ids": True})
                data = answers.json_body(raw.http_response, ep.shown)
        else:
            data = await self._post_completions(ep, token_ids.read_body(self.model, request.prompt or "", ids))
        with _readable(ep):
            return token_ids.read_text_answer(data, ids, chat=request.messages is not None,
                                              most=self._most_tokens(request), max_model_len=self._facts.max_model_len)

    async def _read_token_ids(self, ep: Endpoint, context: list[int],
                              nodes: dict[TokenIds, tuple[int, ...]]) -> dict[TokenIds, dict[int, float]]:
        """The log-prob of each node's ids at the position after context + node prefix (one request when
        the label set's ids fit one)."""
        read: dict[TokenIds, dict[int, float]] = {p: {} for p in nodes}
        for prefixes, ids in token_ids.chunks(nodes):
            body = token_ids.node_body(self.model, [context + list(p) for p in prefixes], ids)
            data = await self._post_completions(ep, body)
            keep = set(ids)
            wanted = [[t for t in nodes[p] if t in keep] for p in prefixes]
            with _readable(ep):
                values = token_ids.read_nodes(data, wanted)
            for prefix, value in zip(prefixes, values):
                read[prefix].update(value)
        return read

    async def _probe_token_ids(self, ep: Endpoint) -> bool:
        """Whether ``ep`` scores given token ids (a server that does not say its version): the probe request
        goes through the route itself, and every id it asks for must come back."""
        probe = Request("score_choices", prompt=token_ids.PROBE_INPUT, choices=token_ids.PROBE_LABELS)
        try:
            await self._score_token_ids(ep, probe)
        except (TransientBackendError, BadAnswerError):
            return False
        return True

    def _decide_no_logprobs(self, ep: Endpoint, why: str) -> None:
        self._server_logprobs = False
        log.warning("%s at %s returns no log-probabilities (%s): label scoring is off, answers are generated; "
                    "pass logprobs=false to skip this check", self.model, ep.shown, why)


@contextlib.contextmanager
def _readable(ep: Endpoint) -> Iterator[None]:
    """Reading a label-scoring answer: impossible numbers and token ids fail at once (a broken server sends
    them again), an input too long for the model fails at once, an answer without what the route needs is a
    malformed one (retried); none is ever scored."""
    try:
        yield
    except scoring.ImpossibleLogprob as exc:
        raise answers.impossible(ep.shown, "a label token", str(exc)) from None
    except scoring.ImpossibleTokens as exc:
        raise _unusable(ep, str(exc)) from None
    except token_ids.TooLong as exc:
        raise BackendError(f"{exc} (the server at {ep.shown})") from None
    except scoring.ScoringAnswerError as exc:
        raise TransientBackendError(f"malformed answer from {ep.shown}: {exc}") from None


def _unusable(ep: Endpoint, what: str) -> BadAnswerError:
    """Token ids no tokenizer gives: one line, never retried, scored or cached."""
    return BadAnswerError(f"impossible answer from {ep.shown}: {what}; a retry would get the same: check the "
                          "server, its model and version")
