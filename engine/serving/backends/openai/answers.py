"""What an OpenAI-compatible server answers, read and checked before anything scores or caches it.

* a body over ``max_body_mb`` (default 4 MiB), refused from its Content-Length
  or while it is read -> ``BodyTooLarge`` (transient);
* a 200 answer that lacks what its request needs (a body that is empty, cut
  off, not JSON or an HTML page; no ``choices`` or an empty list; no message
  content or text) -> ``TransientBackendError``: retried, never scored, never
  cached;
* a log-probability that is NaN, infinite or above 0 (beyond a 1e-3 rounding
  tolerance), or a label left without a score (``check_top_logprobs``,
  ``check_choice_logprobs``) -> ``TransientBackendError`` too.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from promptrobust.engine.serving.backends.base import TransientBackendError
from promptrobust.engine.serving.backends.openai.endpoints import clean_url

__all__ = ["LOGPROB_TOLERANCE", "MAX_BODY_MB", "BodyTooLarge", "answer_text", "body_limit_hook", "check_choice_logprobs",
           "check_top_logprobs", "first_choice", "json_body", "logprob_problem", "top_logprobs", "usage"]

#: A log-probability may exceed 0 by this much (rounding in the server's softmax);
#: anything larger, NaN or infinite is an impossible number: a malformed answer.
LOGPROB_TOLERANCE = 1e-3
#: Largest answer body read (MiB; ``max_body_mb`` raises it): a label or a short
#: generation is a few KiB, so a bigger body is a broken or hostile server and
#: must not hold hundreds of MB per request in flight.
MAX_BODY_MB = 4.0


# -- bounded bodies -------------------------------------------------------------------------------
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


# -- the body's JSON and its parts --------------------------------------------------------------------
def json_body(response: Any, shown: str) -> dict[str, Any]:
    """The answer's JSON object, or ``TransientBackendError`` naming what came instead."""
    status = getattr(response, "status_code", 200)
    content = response.content or b""
    kind = (response.headers.get("content-type") or "").split(";")[0].strip().lower()
    if not content.strip():
        raise TransientBackendError(f"malformed answer from {shown}: HTTP {status} with an empty body")
    try:
        data = json.loads(content)
    except (ValueError, UnicodeDecodeError):
        what = "an HTML page" if "html" in kind or content.lstrip()[:1] == b"<" else (
            "cut-off or invalid JSON" if "json" in kind else f"{kind or 'an untyped body'}, not JSON")
        raise TransientBackendError(f"malformed answer from {shown}: HTTP {status} sent {what}") from None
    if not isinstance(data, dict):
        raise TransientBackendError(f"malformed answer from {shown}: the JSON is a {type(data).__name__}, not an object")
    return data


def first_choice(data: dict[str, Any], shown: str) -> dict[str, Any]:
    choices = data.get("choices")
    if not isinstance(choices, list):
        raise TransientBackendError(f"malformed answer from {shown}: no choices in the answer")
    if not choices or not isinstance(choices[0], dict):
        raise TransientBackendError(f"malformed answer from {shown}: an empty choices list")
    return choices[0]


def answer_text(choice: dict[str, Any], chat: bool, shown: str) -> str:
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


def usage(data: dict[str, Any]) -> tuple[int, int]:
    """(prompt tokens, completion tokens) the answer reports; 0 for what it does not (or not as a number)."""
    found = data.get("usage")
    if not isinstance(found, dict):
        return 0, 0

    def whole(v: Any) -> int:
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else 0

    return whole(found.get("prompt_tokens")), whole(found.get("completion_tokens"))


def top_logprobs(choice: dict[str, Any], chat: bool) -> list[tuple[str, float]]:
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
