"""What an OpenAI-compatible server answers, read and checked before anything scores or caches it.

* a body over ``max_body_mb`` (default 4 MiB), refused from its Content-Length
  or while it is read -> ``BodyTooLarge`` (transient);
* a 200 answer that lacks what its request needs (a body that is empty, cut
  off, not JSON or an HTML page; no ``choices`` or an empty list; no message
  content or text) -> ``TransientBackendError``: retried, never scored, never
  cached;
* JSON nested deeper than ``MAX_JSON_DEPTH`` (an answer nests about 7 levels;
  a hostile ``[[[...]]]`` under the size limit would exhaust the parser's
  recursion) -> ``BadAnswerError`` at once, before it is parsed: a retry would
  get the same, so it is one line, not retried, never a traceback;
* a log-probability that is NaN, infinite or above 0 (beyond a 1e-3 rounding
  tolerance) (``check_top_logprobs``, ``check_choice_logprobs``) ->
  ``BadAnswerError`` at once: the server computed it and would send it again,
  so it is one line naming the number, never retried, scored or cached; so
  are distinct tokens at one position whose probabilities add up to more than
  1 + ``MASS_TOLERANCE`` (``check_mass``: each value alone may look fine); a
  label left without a score -> ``TransientBackendError``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any

import numpy as np

from promptrobust.engine.serving.backends.base import LOGPROB_TOLERANCE, BadAnswerError, TransientBackendError
from promptrobust.engine.serving.backends.label_tokens import MASS_TOLERANCE, excess_mass
from promptrobust.engine.serving.backends.openai.endpoints import clean_url

__all__ = ["LOGPROB_TOLERANCE", "MAX_BODY_MB", "MAX_JSON_DEPTH", "BodyTooLarge", "ServerFacts", "json_depth", "answer_text",
           "body_limit_hook", "check_choice_logprobs", "check_mass", "check_top_logprobs", "weights_statement", "first_choice", "impossible", "json_body", "logprob_problem", "top_logprobs", "usage"]

#: Largest answer body read (MiB; ``max_body_mb`` raises it): a label or a short
#: generation is a few KiB, so a bigger body is a broken or hostile server and
#: must not hold hundreds of MB per request in flight.
MAX_BODY_MB = 4.0
#: Deepest nesting of arrays and objects read: a chat answer with top-20 log-probs nests 7 levels,
#: vLLM's prompt_logprobs 5; anything near this bound is no answer of an OpenAI-compatible server.
MAX_JSON_DEPTH = 64
#: An escape inside a JSON string (``\"`` among them), removed first so that strings are plain ``"..."``.
_ESCAPE = re.compile(rb"\\.", re.DOTALL)
#: A JSON string once its escapes are gone: its brackets are text, not nesting.
_JSON_STRING = re.compile(rb'"[^"]*"')
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")
#: '[' and '{' open a level (+1), ']' and '}' close one (-1 as a signed byte).
_DEPTH_STEP = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


# -- bounded bodies -------------------------------------------------------------------------------
class BodyTooLarge(TransientBackendError):
    """An answer body over ``max_body_mb``: transient (a retry or another endpoint may answer well)."""


def body_limit_hook(http: Any, max_bytes: int) -> Any:
    """An HTTP client response hook that refuses bodies over ``max_bytes``: at once when the
    Content-Length says so, else while reading (never more than ``max_bytes`` plus one chunk held)."""

    class Limited(http.AsyncByteStream):
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


# -- the body's JSON and its parts --------------------------------------------------------------------
def json_body(response: Any, shown: str) -> dict[str, object]:
    """The answer's JSON object, or ``TransientBackendError`` naming what came instead."""
    status = getattr(response, "status_code", 200)
    content = response.content or b""
    kind = (response.headers.get("content-type") or "").split(";")[0].strip().lower()
    if not content.strip():
        raise TransientBackendError(f"malformed answer from {shown}: HTTP {status} with an empty body")
    depth = json_depth(content)
    if depth > MAX_JSON_DEPTH:
        raise BadAnswerError(
            f"unusable answer from {shown}: HTTP {status} sent JSON nested {depth} levels deep (an answer nests "
            f"about 7; at most {MAX_JSON_DEPTH} are read): the server is broken or hostile, check it"
        )
    try:
        data = json.loads(content)
    except (ValueError, UnicodeDecodeError):
        what = "an HTML page" if "html" in kind or content.lstrip()[:1] == b"<" else (
            "cut-off or invalid JSON" if "json" in kind else f"{kind or 'an untyped body'}, not JSON")
        raise TransientBackendError(f"malformed answer from {shown}: HTTP {status} sent {what}") from None
    if not isinstance(data, dict):
        raise TransientBackendError(f"malformed answer from {shown}: the JSON is a {type(data).__name__}, not an object")
    return data


def json_depth(content: bytes) -> int:
    """How deep arrays and objects nest in a JSON text, without parsing it (brackets in strings do not
    count): a few linear passes of C-speed regex and numpy over the bytes, whatever the text."""
    # once whole strings are gone, a quote left opens a string that runs to the end of a cut-off text
    outside, _, _ = _JSON_STRING.sub(b"", _ESCAPE.sub(b"", content)).partition(b'"')
    bare = _NOT_BRACKET.sub(b"", outside)
    if not bare:
        return 0
    steps = np.frombuffer(bare.translate(_DEPTH_STEP), dtype=np.int8)
    return int(np.cumsum(steps, dtype=np.int64).max())


def first_choice(data: dict[str, object], shown: str) -> dict[str, object]:
    choices = data.get("choices")
    if not isinstance(choices, list):
        raise TransientBackendError(f"malformed answer from {shown}: no choices in the answer")
    if not choices or not isinstance(choices[0], dict):
        raise TransientBackendError(f"malformed answer from {shown}: an empty choices list")
    return choices[0]


def answer_text(choice: dict[str, object], chat: bool, shown: str) -> str:
    """The generated text of a choice (a chat message's content, or its refusal; a completion's text)."""
    if chat:
        message = choice.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if content is None and isinstance(message, dict) and isinstance(message.get("refusal"), str):
            content = message["refusal"]  # the model's own answer, even if it declines
        if not isinstance(content, str):
            raise TransientBackendError(f"malformed answer from {shown}: no message content")
        return content
    text = choice.get("text")
    if not isinstance(text, str):
        raise TransientBackendError(f"malformed answer from {shown}: no text")
    return text


def usage(data: dict[str, object]) -> tuple[int, int]:
    """(prompt tokens, completion tokens) the answer reports; 0 for what it does not (or not as a number)."""
    found = data.get("usage")
    if not isinstance(found, dict):
        return 0, 0

    def whole(v: Any) -> int:
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else 0

    return whole(found.get("prompt_tokens")), whole(found.get("completion_tokens"))


def top_logprobs(choice: dict[str, object], chat: bool) -> list[tuple[str, float]]:
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


# -- the numbers a server sends ---------------------------------------------------------------------
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


def impossible(shown: str, what: str, problem: str) -> BadAnswerError:
    """The one-line error of an impossible number in an answer from ``shown``."""
    return BadAnswerError(f"impossible answer from {shown}: log-probability of {what}: {problem}; the server computes "
                          "impossible numbers (a retry would get the same): check its model, dtype and version")


def check_top_logprobs(top: Sequence[tuple[str, float]], shown: str) -> None:
    """Raise BadAnswerError (never retried, scored or cached) when any listed alternative's
    log-probability is impossible, or when the alternatives (distinct tokens at one position) have
    probabilities adding up to more than 1 (``check_mass``)."""
    for token, value in top:
        problem = logprob_problem(value)
        if problem is not None:
            raise impossible(shown, f"token {token[:40]!r}", problem)
    check_mass([value for _, value in top], shown, "the listed alternatives")


def check_mass(logprobs: Sequence[float], shown: str, what: str) -> None:
    """BadAnswerError when distinct tokens read at one position have probabilities adding up to more
    than 1 + ``MASS_TOLERANCE`` (each value alone may look possible)."""
    mass = excess_mass(logprobs)
    if mass is not None:
        raise BadAnswerError(
            f"impossible answer from {shown}: {what} at one position have probabilities that add up to {mass:.4g} "
            f"(distinct tokens add up to at most {1 + MASS_TOLERANCE:g}); the server computes impossible numbers "
            "(a retry would get the same): check its model, dtype and version")


def check_choice_logprobs(scores: Sequence[float], choices: Sequence[str], shown: str) -> None:
    """Every label accounted for (else TransientBackendError), each with a possible log-probability
    (else BadAnswerError)."""
    if len(scores) != len(choices):
        raise TransientBackendError(
            f"malformed answer from {shown}: {len(scores)} label log-probabilities for {len(choices)} labels"
        )
    for label, value in zip(choices, scores):
        problem = logprob_problem(value)
        if problem is not None:
            raise impossible(shown, f"label {label[:40]!r}", problem)


# -- what a server states about the model it serves ---------------------------------------------------
@dataclass(frozen=True)
class ServerFacts:
    """What a server says about the weights behind a model name: its ``/models`` entry and, for vLLM,
    ``/version``. It names the model's identity (``revision`` and ``extra``), so two servers of the same
    weights share cache entries wherever they keep them, and no machine path is ever published."""

    weights: str = ""
    """``weights_statement`` of vLLM's ``root`` (a hub id, a hub snapshot, a folder's name), or the
    official API's ``created`` date as ``created=N``; "" when the server says nothing."""
    max_model_len: int | None = None
    """The context the server serves the model with (vLLM's /models entry)."""
    server: str = ""
    """The serving software and its version, e.g. ``vllm 0.32.0`` (vLLM's ``/version``); "" when unknown."""

    @property
    def revision(self) -> str:
        return self.weights

    def extra(self) -> tuple[tuple[str, str], ...]:
        out: tuple[tuple[str, str], ...] = ()
        if self.max_model_len is not None:
            out += (("max_model_len", str(self.max_model_len)),)
        if self.server:
            out += (("server", self.server),)
        return out


def weights_statement(root: str) -> str:
    """What vLLM's ``root`` (where the server loaded the weights from) says about them, without saying where
    they lie on its machine: a hub id as it is (``google/gemma-3-270m``); a local path as the hub snapshot it
    is (``org/name@commit``, from a Hugging Face cache path) or else as its folder's name (in pre's model store
    that name is the weights' sha256 prefix)."""
    root = (root or "").strip()
    if not root:
        return ""
    local = root.startswith(("/", "~", ".", "\\")) or re.match(r"^[A-Za-z]:[\\/]", root) is not None
    if not local:
        return root
    snapshot = re.search(r"models--([^/\\]+?)--([^/\\]+)[/\\]snapshots[/\\]([0-9a-fA-F]{7,64})", root)
    if snapshot is not None:
        return f"{snapshot.group(1)}/{snapshot.group(2)}@{snapshot.group(3)}"
    path = PureWindowsPath(root) if "\\" in root else PurePosixPath(root)
    return path.name or root.strip("/\\")
