"""A real, scriptable OpenAI-compatible HTTP server for tests and benchmarks.

Importable from the installed package so `pre bench api` can start it;
Public as ``promptrobust.testing.FakeOpenAIServer``.

It listens on 127.0.0.1 (an ephemeral port) in a background thread and speaks
enough of the OpenAI API for our client: ``GET /v1/models``,
``POST /v1/chat/completions`` and ``POST /v1/completions``, with and without
log-probabilities. Answers are deterministic: the last line of the input is
read as a sentence and answered "positive" when it holds a positive word
(good, great, ...), else "negative"; pass ``answer=`` to change that.

Each test can script failures for the next POST requests, consumed in order::

    with FakeOpenAIServer() as srv:
        srv.script("429:2", "500", "slow:1.5", "drop")   # then normal answers
        ...
        assert srv.count("/v1/chat/completions") == 5

Actions: ``ok``; an HTTP status such as ``500`` or ``429:2`` (status with a
Retry-After of 2 s; ``429:date:2`` sends it as an HTTP-date); ``slow:S``
(answer normally after S seconds); ``drop`` (close the connection without an
answer). ``rpm=`` makes the server enforce a requests-per-minute limit of its
own with 429 + Retry-After, like a real provider; ``latency=`` delays every
answer (for throughput benchmarks); ``logprobs=False`` omits log-probabilities
from answers and ``logprobs_error=500`` refuses requests that ask for them.

Every answered POST is logged in ``outcomes`` as (time on
``time.monotonic()``, HTTP status), so a benchmark can count what the server
saw per time window: requests sent, 429s, and accepted requests. The time is
that of the rate-limit check (the window's own clock) for requests that reach
it, else their arrival.
"""

from __future__ import annotations

import email.utils
import json
import math
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["POSITIVE_WORDS", "Action", "FakeOpenAIServer", "sentiment_answer"]

POSITIVE_WORDS = frozenset(
    ["good", "great", "love", "loved", "excellent", "wonderful", "best", "fun", "delightful", "enjoyable", "amazing", "brilliant"]
)


def sentiment_answer(text: str) -> str:
    """Default deterministic model: judge the last non-empty line of the input."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    last = lines[-1].lower() if lines else ""
    words = {w.strip(".,!?;:'\"()") for w in last.split()}
    return "positive" if words & POSITIVE_WORDS else "negative"


@dataclass(frozen=True)
class Action:
    kind: str  # "ok" | "status" | "slow" | "drop"
    status: int = 200
    retry_after: float | None = None
    retry_after_date: bool = False
    seconds: float = 0.0

    @classmethod
    def parse(cls, text: str) -> Action:
        parts = text.strip().lower().split(":")
        head = parts[0]
        if head == "ok":
            return cls("ok")
        if head == "drop":
            return cls("drop")
        if head == "slow":
            return cls("slow", seconds=float(parts[1]))
        if head.isdigit():
            if len(parts) == 3 and parts[1] == "date":
                return cls("status", status=int(head), retry_after=float(parts[2]), retry_after_date=True)
            ra = float(parts[1]) if len(parts) > 1 else None
            return cls("status", status=int(head), retry_after=ra)
        raise ValueError(f"unknown server action {text!r}: use ok, drop, slow:S, or a status like 429:2")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024  # the default backlog of 5 refuses bursts of concurrent clients

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Dropped connections are deliberate here; keep test output clean.
        pass


class FakeOpenAIServer:
    """See the module docstring. Thread-safe; use as a context manager."""

    def __init__(
        self,
        *,
        model: str = "fake-model",
        logprobs: bool = True,
        logprobs_error: int | None = None,
        rpm: float | None = None,
        window: float = 60.0,
        api_key: str | None = None,
        latency: float = 0.0,
        created: int = 1_700_000_000,
        answer: Callable[[str], str] = sentiment_answer,
        vocab: tuple[str, ...] = ("positive", "negative", "neutral", "The", "I", "It", "This"),
    ) -> None:
        self.model = model
        self.logprobs = logprobs
        self.logprobs_error = logprobs_error
        self.rpm = rpm
        self.window = window
        self.api_key = api_key
        self.latency = latency
        self.created = created
        self.answer = answer
        self.vocab = vocab
        self._lock = threading.Lock()
        self._script: deque[Action] = deque()
        self._counts: Counter[str] = Counter()
        self._stamps: deque[float] = deque()
        self.bodies: list[tuple[str, dict[str, Any]]] = []
        self._outcomes: list[tuple[float, int]] = []
        self.stopping = threading.Event()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------
    def start(self) -> FakeOpenAIServer:
        outer = self

        class Handler(_Handler):
            server_state = outer

        self._httpd = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        """Base URL for an OpenAI client (ends in /v1)."""
        return f"http://127.0.0.1:{self.port}/v1"

    # -- scripting and counters ------------------------------------------------
    def script(self, *actions: str) -> None:
        """Queue actions for the next POST requests (after them: normal answers)."""
        parsed = [Action.parse(a) for a in actions]
        with self._lock:
            self._script.extend(parsed)

    def count(self, path: str | None = None) -> int:
        """Requests received (all paths, or one path such as /v1/completions)."""
        with self._lock:
            return self._counts[path] if path else sum(self._counts.values())

    def reset_counts(self) -> None:
        with self._lock:
            self._counts.clear()
            self.bodies.clear()
            self._outcomes.clear()

    @property
    def outcomes(self) -> list[tuple[float, int]]:
        """(arrival time, HTTP status) of every answered POST, in answer order."""
        with self._lock:
            return list(self._outcomes)

    def status_count(self, status: int) -> int:
        """POST requests answered with ``status`` (e.g. 429)."""
        with self._lock:
            return sum(1 for _, s in self._outcomes if s == status)

    # -- used by the handler -----------------------------------------------------
    def _record(self, path: str, body: dict[str, Any] | None) -> None:
        with self._lock:
            self._counts[path] += 1
            if body is not None:
                self.bodies.append((path, body))

    def _note_outcome(self, arrived: float, status: int) -> None:
        with self._lock:
            self._outcomes.append((arrived, status))

    def _next_action(self) -> Action:
        with self._lock:
            return self._script.popleft() if self._script else Action("ok")

    def _rate_limited(self) -> tuple[float | None, float]:
        """(seconds to wait if this request exceeds the rpm limit, else None; the time of the check).

        An admitted request is recorded in the window at that time.
        """
        if self.rpm is None:
            return None, time.monotonic()
        with self._lock:
            now = time.monotonic()
            while self._stamps and self._stamps[0] <= now - self.window:
                self._stamps.popleft()
            if len(self._stamps) >= self.rpm:
                return max(0.0, self._stamps[0] + self.window - now), now
            self._stamps.append(now)
            return None, now


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_state: FakeOpenAIServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # -- plumbing --------------------------------------------------------------
    def _send_json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        raw = json.dumps(payload).encode()
        if self.command == "POST":
            self.server_state._note_outcome(getattr(self, "_arrived", time.monotonic()), status)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(raw)

    def _error(self, status: int, message: str, *, retry_after: float | None = None, as_date: bool = False) -> None:
        headers = {}
        if retry_after is not None:
            if as_date:
                headers["Retry-After"] = email.utils.formatdate(time.time() + retry_after, usegmt=True)
            else:
                headers["Retry-After"] = f"{retry_after:g}"
        kind = "rate_limit_exceeded" if status == 429 else "server_error" if status >= 500 else "invalid_request_error"
        self._send_json(status, {"error": {"message": message, "type": kind, "code": kind}}, headers)

    def _authorised(self) -> bool:
        want = self.server_state.api_key
        if want is None:
            return True
        got = self.headers.get("Authorization", "")
        if got == f"Bearer {want}":
            return True
        token = got.removeprefix("Bearer ")
        # Real providers echo part of a wrong key; the client must redact it.
        shown = f"{token[:5]}***{token[-4:]}" if len(token) > 9 else "***"
        self._error(401, f"Incorrect API key provided: {shown}. You can find your API key at the dashboard.")
        return False

    # -- endpoints -------------------------------------------------------------
    def do_GET(self) -> None:
        st = self.server_state
        path = self.path.split("?")[0]
        st._record(path, None)
        if not self._authorised():
            return
        if path.rstrip("/") == "/v1/models":
            self._send_json(200, {"object": "list", "data": [
                {"id": st.model, "object": "model", "created": st.created, "owned_by": "tests"}
            ]})
            return
        self._error(404, f"no route {path}")

    def do_POST(self) -> None:
        st = self.server_state
        self._arrived = time.monotonic()
        path = self.path.split("?")[0].rstrip("/")
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            st._record(path, None)
            self._error(400, "body is not JSON")
            return
        st._record(path, body)
        if not self._authorised():
            return
        action = st._next_action()
        if action.kind == "drop":
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        if action.kind == "status":
            self._error(action.status, f"scripted {action.status}", retry_after=action.retry_after,
                        as_date=action.retry_after_date)
            return
        # From here on the outcome is logged at the limit check's time: the window's own clock.
        wait, self._arrived = st._rate_limited()
        if wait is not None:
            self._error(429, "Rate limit reached for requests per min", retry_after=math.ceil(wait * 1000) / 1000)
            return
        delay = st.latency + (action.seconds if action.kind == "slow" else 0.0)
        if delay > 0 and st.stopping.wait(delay):
            return
        if st.logprobs_error is not None and (body.get("logprobs") or body.get("top_logprobs")):
            # Like llama-cpp-python started without --logits_all.
            self._error(st.logprobs_error, "logprobs is not supported for models created with logits_all=False")
            return
        if body.get("model") != st.model:
            self._error(404, f"The model `{body.get('model')}` does not exist")
            return
        if path == "/v1/chat/completions":
            self._chat(body)
        elif path == "/v1/completions":
            self._completions(body)
        else:
            self._error(404, f"no route {path}")

    # -- answers -----------------------------------------------------------------
    def _generate(self, text: str, body: dict[str, Any]) -> tuple[list[str], str]:
        words = self.server_state.answer(text).split()
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens") or 16
        tokens = [w if i == 0 else " " + w for i, w in enumerate(words)][: int(max_tokens)]
        out = "".join(tokens)
        stops = body.get("stop") or []
        for s in [stops] if isinstance(stops, str) else stops:
            if s and s in out:
                out = out[: out.index(s)]
        return tokens, out

    def _top(self, first: str, n: int) -> list[tuple[str, float]]:
        """Top-n next tokens: the answer, its spaced and capitalised variants, then the vocabulary."""
        probs = [(first, 0.70), (" " + first, 0.10), (first.capitalize(), 0.05)]
        p = 0.04
        for word in self.server_state.vocab:
            if word.lower() != first.lower():
                probs.append((word, p))
                p /= 2
        return [(tok, math.log(pr)) for tok, pr in probs[: max(0, n)]]

    def _usage(self, text: str, completion_tokens: int) -> dict[str, int]:
        prompt_tokens = max(1, len(text.split()))
        return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens}

    def _chat(self, body: dict[str, Any]) -> None:
        st = self.server_state
        users = [m.get("content", "") for m in body.get("messages", []) if m.get("role") == "user"]
        text = users[-1] if users else ""
        tokens, out = self._generate(text, body)
        logprobs = None
        if body.get("logprobs") and st.logprobs and tokens:
            n = int(body.get("top_logprobs") or 0)
            top = self._top(tokens[0], n)
            logprobs = {"content": [{
                "token": tokens[0], "logprob": math.log(0.70), "bytes": list(tokens[0].encode()),
                "top_logprobs": [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in top],
            }]}
        self._send_json(200, {
            "id": f"chatcmpl-{st.count()}", "object": "chat.completion", "created": int(time.time()),
            "model": st.model, "system_fingerprint": "fp_fake",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": out},
                         "logprobs": logprobs, "finish_reason": "stop"}],
            "usage": self._usage(text, len(tokens)),
        })

    def _completions(self, body: dict[str, Any]) -> None:
        st = self.server_state
        prompt = body.get("prompt", "")
        text = prompt[0] if isinstance(prompt, list) else str(prompt)
        tokens, out = self._generate(text, body)
        logprobs = None
        n = body.get("logprobs")
        if n is not None and st.logprobs and tokens:
            top = self._top(tokens[0], int(n))
            logprobs = {"tokens": tokens[:1], "token_logprobs": [math.log(0.70)],
                        "top_logprobs": [dict(top)], "text_offset": [0]}
        self._send_json(200, {
            "id": f"cmpl-{st.count()}", "object": "text_completion", "created": int(time.time()),
            "model": st.model, "system_fingerprint": "fp_fake",
            "choices": [{"index": 0, "text": out, "logprobs": logprobs, "finish_reason": "stop"}],
            "usage": self._usage(text, len(tokens)),
        })
