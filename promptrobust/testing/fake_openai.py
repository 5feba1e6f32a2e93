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
(answer normally after S seconds); ``hang:S`` (no answer: close the connection
after S seconds); ``drop`` (close the connection without an
answer); or one of the garbage answers of ``FAULT_KINDS`` (``reset``,
``truncated``, ``malformed``, ``html``, ``empty``, ``no_content``,
``no_logprobs``, ``no_choices``, ``empty_choices``, and the impossible numbers of
``NUMBER_FAULTS``: ``positive_logprobs``, ``nan_logprobs``, ``inf_logprobs``; and
``nested_json``, a 200 answer of ``[`` x 200,000 then ``]`` x 200,000, under the
client's size limit). ``TRANSIENT_FAULTS`` are those a retry recovers from;
``BAD_ANSWER_FAULTS`` (the impossible numbers and the nested answer) are what a
broken server computes and would send again: a client fails them at once.

Random faults: ``faults=FaultPlan({"500": 0.2}, seed=1)`` gives each POST (after
the script is used up) the named fault with the given probability, from a
seeded generator; ``FaultPlan.spread(FAULT_KINDS, 0.2)`` spreads 20% over every
kind. ``key_faults={"key-1": plan}`` gives requests that carry that API key
(``Authorization: Bearer key-1``) their own plan and generator instead, so
several clients of one server (one URL, so one cache identity) can each see
their own faults. ``injected`` counts the faults sent per kind. ``lifetime=`` stops the
server by itself after that many seconds, and every wait inside a handler is
bounded, so a forgotten server never outlives a test run by much.

``echo_auth=True`` answers every POST with a 401 whose message repeats the
request's ``Authorization`` header whole and, after it, a piece of its
credential (as a misconfigured proxy may): what a client must keep out of
every message and file, in whatever form it arrives.

``rpm=`` makes the server enforce a requests-per-minute limit of its
own with 429 + Retry-After, like a real provider; ``latency=`` delays every
answer (for throughput benchmarks); ``logprobs=False`` omits log-probabilities
from answers and ``logprobs_error=500`` refuses requests that ask for them.

``vllm=True`` plays a vLLM 0.26+ server: ``/v1/models`` says ``owned_by: vllm``,
``POST /tokenize`` (at the root, as vLLM's) tokenises a prompt or a
conversation with a toy tokenizer (one token per word with its leading
whitespace; ids from a checksum of the text), and a completions request with
``logprob_token_ids`` (its prompt a list of token ids, or a list of them) is
answered with the exact log-probability of each listed id at the generated
position, under the same next-token distribution the top-20 route shows: the
answer 0.70, with a space 0.10, capitalised 0.05, then the vocabulary words
halving from 0.04, and the rest spread evenly over ``FAKE_VOCAB_SIZE`` other
tokens (``token_logprob`` computes it). A text prompt (or a list of them) and a
chat request with ``logprob_token_ids`` are tokenised the same way, and
``return_token_ids`` puts the ids the server used in the answer
(``prompt_token_ids``), as vLLM does. ``GET /version`` answers
``vllm_version`` (None: 404, a server too old to say) and ``/v1/models``
states ``root`` and ``max_model_len`` as vLLM's does. ``refuse=("logprob_token_ids",)``
answers such requests with HTTP 400, as a server that does not offer them.

Tokenizer quirks of real models, opt-in: ``byte_fallback=False`` maps every
piece with a non-ASCII character to one unknown token (``UNK_ID``), as a
tokenizer without byte fallback maps unknown words to ``[UNK]``;
``strips_format_chars=True`` removes format characters (zero-width spaces,
bidi marks: Unicode category Cf) before tokenising, as many normalisers do.
``tamper=`` makes the vLLM answers hostile, for the client's checks:
``excess_mass`` (every listed id at log-prob -0.001: probabilities adding up
to more than 1), ``extra_ids`` (``/tokenize`` adds 400,000 ids), ``huge_ids``
(``/tokenize`` ids of 10**30), ``unstable_ids`` (the same text gets other ids
at each ``/tokenize`` call).

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
import random
import re
import socket
import zlib
import struct
import threading
import time
import unicodedata
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["BAD_ANSWER_FAULTS", "FAKE_VOCAB_SIZE", "FAULT_KINDS", "NUMBER_FAULTS", "POSITIVE_WORDS", "TAMPER_KINDS",
           "TRANSIENT_FAULTS", "UNK_ID", "Action", "FakeOpenAIServer", "FaultPlan", "sentiment_answer", "toy_tokens"]

#: Every fault the server can inject: transport and status faults, then 200
#: answers that lack what the request needs.
FAULT_KINDS = (
    "429", "500", "503", "timeout", "reset", "truncated", "malformed", "html", "empty",
    "no_content", "no_logprobs", "no_choices", "empty_choices",
    "positive_logprobs", "nan_logprobs", "inf_logprobs", "nested_json",
)
#: Impossible numbers: the answer's log-probabilities made positive (3.5, 7.25, ...),
#: NaN for the answer's own token, or +infinity (sent as the JSON extensions NaN/Infinity).
NUMBER_FAULTS = ("positive_logprobs", "nan_logprobs", "inf_logprobs")
#: Answers a broken server computes and would send again: a client fails them at once, in one line.
BAD_ANSWER_FAULTS = (*NUMBER_FAULTS, "nested_json")
#: Faults a retry recovers from (busy or failing servers, damage in transit, answers missing a part).
TRANSIENT_FAULTS = tuple(k for k in FAULT_KINDS if k not in BAD_ANSWER_FAULTS)
#: Levels of the ``nested_json`` answer: deep enough to exhaust a recursive parser, 400 KB in all.
NESTED_LEVELS = 200_000
#: Faults that change or replace a 200 answer (the rest never reach the answer).
_BODY_FAULTS = frozenset({"truncated", "malformed", "html", "empty", "no_content", "no_logprobs", "no_choices",
                          "empty_choices", "nested_json", *NUMBER_FAULTS})

POSITIVE_WORDS = frozenset(
    ["good", "great", "love", "loved", "excellent", "wonderful", "best", "fun", "delightful", "enjoyable", "amazing", "brilliant"]
)


#: Tokens outside the answer table share the rest of the probability evenly, as if the vocabulary had this many.
FAKE_VOCAB_SIZE = 50_000
_BOS_ID = 1
#: The unknown token of ``byte_fallback=False``.
UNK_ID = 3
#: Hostile answers ``tamper=`` can make (see the module docstring).
TAMPER_KINDS = ("excess_mass", "extra_ids", "huge_ids", "unstable_ids")
#: The context the fake says it has (``max_model_len`` in /v1/models and /tokenize answers).
FAKE_MAX_MODEL_LEN = 8192
_PIECE = re.compile(r"\s*\S+|\s+")


def toy_tokens(text: str) -> list[str]:
    """The toy tokenizer of ``vllm=True``: each word with the whitespace before it ("a b " -> a, " b", " ")."""
    return _PIECE.findall(text)


def _toy_id(piece: str) -> int:
    return 1000 + zlib.crc32(piece.encode()) % (1 << 24)


def _toy_chat(messages: list[dict[str, Any]], *, generation_prompt: bool, continue_final: bool) -> str:
    """The toy chat template: ``<|role|>`` then the content on its own line."""
    turns = [f"<|{m.get('role', 'user')}|>\n{m.get('content') or ''}" for m in messages]
    text = "\n".join(turns) + ("" if continue_final else "\n")
    return text + ("<|assistant|>\n" if generation_prompt and not continue_final else "")


def sentiment_answer(text: str) -> str:
    """Default deterministic model: judge the last non-empty line of the input."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    last = lines[-1].lower() if lines else ""
    words = {w.strip(".,!?;:'\"()") for w in last.split()}
    return "positive" if words & POSITIVE_WORDS else "negative"


@dataclass(frozen=True)
class FaultPlan:
    """Random faults: ``rates`` maps a fault kind (``FAULT_KINDS``) to its probability per POST.

    ``retry_after`` is the Retry-After (seconds) sent with 429s; a ``timeout``
    fault holds its answer for ``hang`` seconds (longer than the client waits).
    With ``hang_up=True`` the server itself ends the hang: after ``hang``
    seconds it closes the connection without an answer, so the client sees a
    request that never got an answer whatever its own timeout and the load of
    the machine (deterministic tests give the client a timeout with lots of room).
    """

    rates: Mapping[str, float]
    seed: int = 0
    retry_after: float = 0.05
    hang: float = 3.0
    hang_up: bool = False
    _cumulative: tuple[tuple[float, str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.rates) - set(FAULT_KINDS))
        if unknown:
            raise ValueError(f"unknown fault kinds {unknown}: use {', '.join(FAULT_KINDS)}")
        if any(not 0.0 <= r <= 1.0 for r in self.rates.values()) or sum(self.rates.values()) > 1.0 + 1e-9:
            raise ValueError("fault rates must be probabilities that add up to at most 1")
        total, steps = 0.0, []
        for kind in FAULT_KINDS:  # a fixed order: the same seed gives the same faults
            if self.rates.get(kind):
                total += self.rates[kind]
                steps.append((total, kind))
        object.__setattr__(self, "_cumulative", tuple(steps))

    @classmethod
    def spread(cls, kinds: Iterable[str], rate: float, **kw: float | int | bool) -> FaultPlan:
        """``rate`` of all POSTs get a fault, spread evenly over ``kinds``."""
        kinds = list(kinds)
        return cls({k: rate / len(kinds) for k in kinds}, **kw)  # type: ignore[arg-type]

    def draw(self, rng: random.Random) -> str | None:
        """The fault for one request, or None."""
        r = rng.random()
        for bound, kind in self._cumulative:
            if r < bound:
                return kind
        return None


@dataclass(frozen=True)
class Action:
    kind: str  # "ok" | "status" | "slow" | "drop" | a fault kind of _BODY_FAULTS or "reset"
    status: int = 200
    retry_after: float | None = None
    retry_after_date: bool = False
    seconds: float = 0.0
    hang_up: bool = False  # "slow" only: after ``seconds``, close the connection instead of answering

    @classmethod
    def parse(cls, text: str) -> Action:
        parts = text.strip().lower().split(":")
        head = parts[0]
        if head == "ok":
            return cls("ok")
        if head == "drop":
            return cls("drop")
        if head == "reset" or head in _BODY_FAULTS:
            return cls(head)
        if head == "slow":
            return cls("slow", seconds=float(parts[1]))
        if head == "hang":
            return cls("slow", seconds=float(parts[1]), hang_up=True)
        if head.isdigit():
            if len(parts) == 3 and parts[1] == "date":
                return cls("status", status=int(head), retry_after=float(parts[2]), retry_after_date=True)
            ra = float(parts[1]) if len(parts) > 1 else None
            return cls("status", status=int(head), retry_after=ra)
        raise ValueError(
            f"unknown server action {text!r}: use ok, drop, slow:S, hang:S, a status like 429:2, or one of "
            + ", ".join(sorted(_BODY_FAULTS | {"reset"}))
        )

    @classmethod
    def of_fault(cls, kind: str, plan: FaultPlan) -> Action:
        """The action that injects fault ``kind`` (one of ``FAULT_KINDS``)."""
        if kind.isdigit():
            return cls("status", status=int(kind), retry_after=plan.retry_after if kind == "429" else None)
        if kind == "timeout":
            return cls("slow", seconds=plan.hang, hang_up=plan.hang_up)
        return cls(kind)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024  # the default backlog of 5 refuses bursts of concurrent clients

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._live: set[socket.socket] = set()  # open client connections (kept alive between requests)
        self._live_lock = threading.Lock()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Dropped connections are deliberate here; keep test output clean.
        pass

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._live_lock:
            self._live.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._live_lock:
            self._live.discard(request)
        super().shutdown_request(request)

    def open_connections(self) -> int:
        with self._live_lock:
            return len(self._live)

    def close_connections(self) -> None:
        """Hang up on every client, as a server that stops does (kept-alive connections included)."""
        with self._live_lock:
            live = list(self._live)
        for conn in live:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
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
        echo_auth: bool = False,
        latency: float = 0.0,
        created: int = 1_700_000_000,
        answer: Callable[[str], str] = sentiment_answer,
        vocab: tuple[str, ...] = ("positive", "negative", "neutral", "The", "I", "It", "This"),
        faults: FaultPlan | None = None,
        key_faults: Mapping[str, FaultPlan] | None = None,
        lifetime: float | None = 3600.0,
        port: int = 0,
        vllm: bool = False,
        refuse: Iterable[str] = (),
        vllm_version: str | None = "0.32.0",
        root: str | None = None,
        byte_fallback: bool = True,
        strips_format_chars: bool = False,
        tamper: Iterable[str] = (),
    ) -> None:
        self.model = model
        #: The port to listen on (0: any free one); a server started again on a stopped one's port
        #: plays that server coming back after an outage.
        self.requested_port = port
        self.logprobs = logprobs
        self.logprobs_error = logprobs_error
        self.rpm = rpm
        self.window = window
        self.api_key = api_key
        self.echo_auth = echo_auth
        self.latency = latency
        self.created = created
        self.answer = answer
        self.vocab = vocab
        self.faults = faults
        self.key_faults: dict[str, FaultPlan] = dict(key_faults or {})
        self.lifetime = lifetime
        self.vllm = vllm
        self.refuse = frozenset(refuse)
        #: What ``GET /version`` answers (vllm=True); None: 404.
        self.vllm_version = vllm_version
        #: The ``root`` of the /v1/models entry (vllm=True; vLLM's: where the weights came from).
        self.root = root if root is not None else model
        self.byte_fallback = byte_fallback
        self.strips_format_chars = strips_format_chars
        self.tamper = frozenset(tamper)
        unknown = sorted(self.tamper - set(TAMPER_KINDS))
        if unknown:
            raise ValueError(f"unknown tamper kinds {unknown}: use {', '.join(TAMPER_KINDS)}")
        self._tokenize_calls = 0
        #: Token id -> text for every piece the toy tokenizer gave, and what each tokenised input asks
        #: the answer function (a prompt's text; a conversation's last user message).
        self._pieces: dict[int, str] = {}
        self._inputs: dict[tuple[int, ...], str] = {}
        self.injected: Counter[str] = Counter()
        self.injected_by_key: dict[str, Counter[str]] = {}
        self._rng = random.Random(faults.seed if faults is not None else 0)
        self._key_rngs: dict[str, random.Random] = {}
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self._script: deque[Action] = deque()
        self._counts: Counter[str] = Counter()
        self._stamps: deque[float] = deque()
        self.bodies: list[tuple[str, dict[str, Any]]] = []
        self._outcomes: list[tuple[float, int]] = []
        self.stopping = threading.Event()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- the toy tokenizer and next-token distribution of vllm=True ----------------------------------------
    def tokenize(self, body: dict[str, Any]) -> dict[str, Any]:
        """vLLM's ``/tokenize`` answer for a prompt or a conversation (remembered for ``input_of``)."""
        ids = self.token_ids_of(body)
        with self._lock:
            self._tokenize_calls += 1
            calls = self._tokenize_calls
        if "extra_ids" in self.tamper:
            ids = ids + [_BOS_ID] * 400_000
        if "huge_ids" in self.tamper:
            ids = [10**30 for _ in ids]
        if "unstable_ids" in self.tamper:
            ids = [t + calls for t in ids]
        return {"count": len(ids), "max_model_len": FAKE_MAX_MODEL_LEN, "tokens": ids, "token_strs": None}

    def token_ids_of(self, body: dict[str, Any], *, chat_default_prompt: bool = True) -> list[int]:
        """The toy tokenizer's ids for a body's prompt (``prompt``, text) or conversation (``messages``), with
        vLLM's defaults for special tokens; remembered for ``input_of``."""
        if body.get("messages") is not None:
            messages = list(body["messages"])
            text = _toy_chat(messages, generation_prompt=bool(body.get("add_generation_prompt", chat_default_prompt)),
                             continue_final=bool(body.get("continue_final_message", False)))
            users = [m.get("content", "") for m in messages if m.get("role") == "user"]
            asked = users[-1] if users else ""
            special = bool(body.get("add_special_tokens", False))
        else:
            text = asked = str(body.get("prompt", ""))
            special = bool(body.get("add_special_tokens", True))
        if self.strips_format_chars:
            text = "".join(ch for ch in text if unicodedata.category(ch) != "Cf")
        pieces = toy_tokens(text)
        known = [self.byte_fallback or piece.isascii() for piece in pieces]
        ids = ([_BOS_ID] if special else []) + [_toy_id(p) if ok else UNK_ID for p, ok in zip(pieces, known)]
        with self._lock:
            self._pieces.update((_toy_id(p), p) for p, ok in zip(pieces, known) if ok)
            self._pieces[UNK_ID] = "[UNK]"
            self._inputs[tuple(ids)] = asked
        return ids

    def piece(self, token_id: int) -> str:
        with self._lock:
            return self._pieces.get(token_id, f"<{token_id}>")

    def input_of(self, ids: list[int]) -> str:
        """What the answer function reads for a token-id prompt: that of the longest tokenised input it starts
        with (the prompt itself, or the prompt plus a label prefix)."""
        with self._lock:
            for end in range(len(ids), max(0, len(ids) - 64), -1):  # a label prefix is a few tokens
                found = self._inputs.get(tuple(ids[:end]))
                if found is not None:
                    return found
            return "".join(self._pieces.get(t, "") for t in ids)

    def token_logprob(self, answer: str, token_id: int) -> float:
        """The exact log-probability of ``token_id`` next: the top-20 route's table (``_top``), else an even
        share of the rest over ``FAKE_VOCAB_SIZE`` tokens."""
        table = _answer_table(answer, self.vocab)
        text = self.piece(token_id)
        if text in table and _toy_id(text) == token_id:
            return math.log(table[text])
        return math.log((1.0 - sum(table.values())) / FAKE_VOCAB_SIZE)

    # -- lifecycle -----------------------------------------------------------
    def start(self) -> FakeOpenAIServer:
        outer = self

        class Handler(_Handler):
            server_state = outer

        self._httpd = _Server(("127.0.0.1", self.requested_port), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        if self.lifetime is not None:
            self._timer = threading.Timer(self.lifetime, self.stop)
            self._timer.daemon = True
            self._timer.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        with self._lock:
            httpd, self._httpd = self._httpd, None
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.cancel()
        if httpd is not None:
            httpd.shutdown()
            httpd.close_connections()
            httpd.server_close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

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

    def wait_until_idle(self, timeout: float = 10.0) -> bool:
        """Wait until no client connection is open (False if one still is after ``timeout`` s).

        A client killed mid-request may have left a request in its socket that a handler thread
        reads (and counts) only later: wait for this before ``reset_counts`` so that request is
        not counted as the next client's."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            httpd = self._httpd
            if httpd is None or httpd.open_connections() == 0:
                return True
            time.sleep(0.02)
        return False

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

    def set_key_faults(self, key: str, plan: FaultPlan) -> None:
        """Give requests with API key ``key`` their own fault plan (a fresh generator)."""
        with self._lock:
            self.key_faults[key] = plan
            self._key_rngs.pop(key, None)

    def _next_action(self, key: str = "") -> Action:
        with self._lock:
            if self._script:
                return self._script.popleft()
            plan, rng = self.faults, self._rng
            if key in self.key_faults:
                plan = self.key_faults[key]
                rng = self._key_rngs.setdefault(key, random.Random(plan.seed))
            if plan is not None:
                kind = plan.draw(rng)
                if kind is not None:
                    self.injected[kind] += 1
                    self.injected_by_key.setdefault(key, Counter())[kind] += 1
                    return Action.of_fault(kind, plan)
            return Action("ok")

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

    _fault: str | None = None  # a body fault to apply to this request's 200 answer

    # -- plumbing --------------------------------------------------------------
    def _send_json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        fault = self._fault if status == 200 else None
        if fault is not None:
            payload = _spoil(payload, fault)
        raw = json.dumps(payload).encode()
        content_type = "application/json"
        length = len(raw)
        if fault == "malformed":
            raw = raw[: max(1, len(raw) // 2)]  # valid HTTP, broken JSON
            length = len(raw)
        elif fault == "html":
            raw = b"<html><head><title>502 Bad Gateway</title></head><body><h1>Bad Gateway</h1></body></html>"
            content_type, length = "text/html", len(raw)
        elif fault == "empty":
            raw, length = b"", 0
        elif fault == "nested_json":
            raw = b"[" * NESTED_LEVELS + b"]" * NESTED_LEVELS
            length = len(raw)
        elif fault == "truncated":
            raw = raw[: len(raw) // 2]  # Content-Length promises the whole body; the connection ends early
        if self.command == "POST":
            self.server_state._note_outcome(getattr(self, "_arrived", time.monotonic()), status)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(length))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(raw)
        if fault == "truncated":
            self.wfile.flush()
            self._hang_up(reset=False)

    def _hang_up(self, *, reset: bool) -> None:
        """End the connection without (the rest of) an answer: a FIN, or a TCP reset."""
        self.close_connection = True
        try:
            if reset:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.connection.close()
            else:
                self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

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
        got = self.headers.get("Authorization", "")
        if self.server_state.echo_auth and self.command == "POST":
            credential = got.partition(" ")[2]
            self._error(401, f"unauthorized: raw header {got} key={credential[3:]}")
            return False
        if want is None:
            return True
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
            entry: dict[str, Any] = {"id": st.model, "object": "model", "created": st.created,
                                     "owned_by": "vllm" if st.vllm else "tests"}
            if st.vllm:  # what vLLM states about the weights: where they came from, the context it serves
                entry.update(root=st.root, parent=None, max_model_len=FAKE_MAX_MODEL_LEN)
            self._send_json(200, {"object": "list", "data": [entry]})
            return
        if st.vllm and path.rstrip("/") == "/version" and st.vllm_version is not None:
            self._send_json(200, {"version": st.vllm_version})
            return
        self._error(404, f"no route {path}")

    def do_POST(self) -> None:
        st = self.server_state
        self._arrived = time.monotonic()
        self._fault = None  # one handler serves every request of a kept-alive connection
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
        action = st._next_action(self.headers.get("Authorization", "").removeprefix("Bearer ").strip())
        if action.kind in ("drop", "reset"):
            self._hang_up(reset=action.kind == "reset")
            return
        if action.kind in _BODY_FAULTS:
            self._fault = action.kind
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
        if action.hang_up:
            self._hang_up(reset=False)
            return
        if st.logprobs_error is not None and (body.get("logprobs") or body.get("top_logprobs")):
            # Like llama-cpp-python started without --logits_all.
            self._error(st.logprobs_error, "logprobs is not supported for models created with logits_all=False")
            return
        if body.get("model") != st.model:
            self._error(404, f"The model `{body.get('model')}` does not exist")
            return
        refused = sorted(k for k in st.refuse if body.get(k) not in (None, False, []))
        if refused:
            self._error(400, f"Unrecognized request argument supplied: {refused[0]}")
            return
        if st.vllm and path == "/tokenize":
            self._send_json(200, st.tokenize(body))
            return
        if st.vllm and path in ("/v1/completions", "/v1/chat/completions") and body.get("logprob_token_ids"):
            self._token_ids(body, chat=path == "/v1/chat/completions")
            return
        if path == "/v1/chat/completions":
            self._chat(body)
        elif path == "/v1/completions":
            self._completions(body)
        else:
            self._error(404, f"no route {path}")

    # -- answers -----------------------------------------------------------------
    def _generate(self, text: str, body: dict[str, Any]) -> tuple[list[str], str]:
        """The answer's tokens (its words, each with the whitespace before it: newlines stay) up to
        ``max_tokens``, cut at the first stop sequence."""
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens") or 16
        tokens = toy_tokens(self.server_state.answer(text).strip())[: int(max_tokens)]
        out = "".join(tokens)
        stops = body.get("stop") or []
        for s in [stops] if isinstance(stops, str) else stops:
            if s and s in out:
                out = out[: out.index(s)]
        return tokens, out

    def _top(self, first: str, n: int) -> list[tuple[str, float]]:
        """Top-n next tokens: the answer, its spaced and capitalised variants, then the vocabulary."""
        probs = _answer_list(first, self.server_state.vocab)
        return [(tok, math.log(pr)) for tok, pr in probs[: max(0, n)]]

    def _token_ids(self, body: dict[str, Any], *, chat: bool = False) -> None:
        """vLLM's ``logprob_token_ids``: per prompt (token ids, or text the server tokenises; or the chat
        conversation), the listed ids' log-probs at the generated position; ``return_token_ids`` adds the
        prompt's ids to the answer."""
        st = self.server_state
        if body.get("logprobs") in (None, False):
            self._error(400, "when using `logprob_token_ids`, `logprobs` must be set.")
            return
        if chat:
            prompts = [st.token_ids_of({k: v for k, v in body.items() if k != "prompt"})]
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, str) or (isinstance(prompt, list) and prompt and isinstance(prompt[0], int)):
                prompt = [prompt]
            if not isinstance(prompt, list) or not all(isinstance(p, (list, str)) for p in prompt):
                self._error(400, "logprob_token_ids needs prompts of text or token ids")
                return
            special = body.get("add_special_tokens", True)
            prompts = [p if isinstance(p, list) else st.token_ids_of({"prompt": p, "add_special_tokens": special})
                       for p in prompt]
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        with_ids = bool(body.get("return_token_ids"))
        listed = [int(t) for t in body["logprob_token_ids"]]
        choices = []
        for i, ids in enumerate(prompts):
            answer = st.answer(st.input_of(ids)).split()[0]
            sampled = _toy_id(answer)
            values = {t: st.token_logprob(answer, t) for t in [sampled, *listed]}
            if "excess_mass" in st.tamper:
                values = {t: -0.001 for t in values}
            name = (lambda t: f"token_id:{t}") if as_ids else st.piece
            first = name(sampled) if as_ids else answer
            if chat:
                choice: dict[str, Any] = {"index": i, "message": {"role": "assistant", "content": answer},
                                          "finish_reason": "length", "logprobs": {"content": [{
                                              "token": first, "logprob": values[sampled], "bytes": None,
                                              "top_logprobs": [{"token": name(t), "logprob": v, "bytes": None}
                                                               for t, v in values.items()]}]}}
            else:
                choice = {"index": i, "text": answer, "finish_reason": "length", "logprobs": {
                    "tokens": [first], "token_logprobs": [values[sampled]],
                    "top_logprobs": [{name(t): v for t, v in values.items()}], "text_offset": [0]}}
                if with_ids:
                    choice.update(prompt_token_ids=list(ids), token_ids=[sampled])
            choices.append(choice)
        n = sum(len(p) for p in prompts)
        payload: dict[str, Any] = {
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{st.count()}", "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()), "model": st.model, "choices": choices,
            "usage": {"prompt_tokens": n, "completion_tokens": len(prompts), "total_tokens": n + len(prompts)}}
        if chat and with_ids:
            payload["prompt_token_ids"] = list(prompts[0])
        self._send_json(200, payload)

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


def _answer_list(first: str, vocab: Iterable[str]) -> list[tuple[str, float]]:
    """The next tokens the server shows, most likely first: the answer, its spaced and capitalised variants,
    then the vocabulary halving from 0.04 (a text may repeat: "7" capitalised is "7")."""
    probs = [(first, 0.70), (" " + first, 0.10), (first.capitalize(), 0.05)]
    p = 0.04
    for word in vocab:
        if word.lower() != first.lower():
            probs.append((word, p))
            p /= 2
    return probs


def _answer_table(first: str, vocab: Iterable[str]) -> dict[str, float]:
    """``_answer_list`` as one probability per token text (a repeated text's shares added)."""
    table: dict[str, float] = {}
    for text, p in _answer_list(first, vocab):
        table[text] = table.get(text, 0.0) + p
    return table


def _spoil(payload: dict[str, Any], fault: str) -> dict[str, Any]:
    """A 200 answer that lacks what the request needs (the JSON-level faults)."""
    payload = json.loads(json.dumps(payload))  # a deep copy
    choices = payload.get("choices") or []
    if fault == "no_content":
        for c in choices:
            if "message" in c:
                c["message"]["content"] = None
            c.pop("text", None)
    elif fault == "no_logprobs":
        for c in choices:
            c["logprobs"] = None
    elif fault == "no_choices":
        payload.pop("choices", None)
    elif fault == "empty_choices":
        payload["choices"] = []
    elif fault in NUMBER_FAULTS:
        for c in choices:
            _spoil_numbers(c.get("logprobs"), fault)
    return payload


def _spoil_numbers(logprobs: Any, fault: str) -> None:
    """Make a choice's log-probabilities impossible, in place (chat and completions shapes)."""
    if not isinstance(logprobs, dict):
        return

    def bad(value: float, rank: int) -> float:
        if fault == "positive_logprobs":
            return 7.25 - 3.75 * min(rank, 1) - 0.5 * max(rank - 1, 0)  # 7.25, 3.5, 3.0, ...
        if fault == "nan_logprobs":
            return math.nan if rank == 0 else value
        return math.inf if rank == 0 else value

    for entry in logprobs.get("content") or []:  # chat
        entry["logprob"] = bad(entry["logprob"], 0)
        for rank, alt in enumerate(entry.get("top_logprobs") or []):
            alt["logprob"] = bad(alt["logprob"], rank)
    if logprobs.get("token_logprobs"):  # completions
        logprobs["token_logprobs"] = [bad(v, 0) for v in logprobs["token_logprobs"]]
        logprobs["top_logprobs"] = [{tok: bad(v, rank) for rank, (tok, v) in enumerate(top.items())}
                                    for top in logprobs.get("top_logprobs") or []]
