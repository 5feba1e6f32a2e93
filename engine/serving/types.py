"""Plain data that crosses the engine's boundaries.

A ``Request`` is what a job asks of a model: a rendered input (plain text for
completion models, chat messages for instruction-tuned ones) plus decoding
settings. A ``Completion`` is what comes back. Both are frozen dataclasses that
orjson serialises as they are, so they can be cached, logged and sent between
processes without adapters.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Literal

import orjson

RequestKind = Literal["generate", "score_choices"]


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: str
    content: str


@dataclass(frozen=True, slots=True)
class Decoding:
    """Decoding settings. Greedy (temperature 0) unless a user asks otherwise."""

    max_tokens: int = 16
    stop: tuple[str, ...] = ()
    temperature: float = 0.0


@dataclass(frozen=True, slots=True)
class Request:
    """One unit of model work.

    Exactly one of ``prompt`` (completion text) and ``messages`` (chat) is set.
    ``generate`` decodes up to ``decoding.max_tokens`` tokens; ``score_choices``
    returns the log-probability of each string in ``choices`` as a continuation
    of the input (summed over its tokens when a choice has several).
    """

    kind: RequestKind
    prompt: str | None = None
    messages: tuple[ChatMessage, ...] | None = None
    choices: tuple[str, ...] = ()
    decoding: Decoding = field(default_factory=Decoding)
    namespace: str = ""
    """Key material beyond the input (a user's task's definition hash): an edited task
    never reuses answers cached for the old one. Empty keys exactly as before it existed."""

    def __post_init__(self) -> None:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("a Request needs exactly one of prompt= or messages=")
        if self.kind == "score_choices" and not self.choices:
            raise ValueError("a score_choices Request needs at least one choice")
        if self.kind not in ("generate", "score_choices"):
            raise ValueError(f"unknown request kind {self.kind!r}")

    @property
    def is_chat(self) -> bool:
        return self.messages is not None

    def input_text(self) -> str:
        """The input as one string (chat turns joined); used for length estimates."""
        if self.prompt is not None:
            return self.prompt
        return "\n".join(m.content for m in self.messages or ())

    def content_key(self) -> bytes:
        """Canonical bytes of everything that determines the answer, model aside. An empty
        ``namespace`` is left out, so every key written before the field existed still matches."""
        if not self.namespace:  # the bytes orjson wrote for the five fields (in field order) before
            return orjson.dumps({"kind": self.kind, "prompt": self.prompt, "messages": self.messages,
                                 "choices": self.choices, "decoding": self.decoding})
        return orjson.dumps(self, option=orjson.OPT_SORT_KEYS)

    def estimated_tokens(self) -> int:
        """A cheap token estimate (about 4 characters a token) for rate limits."""
        out = self.decoding.max_tokens if self.kind == "generate" else 1
        return max(1, len(self.input_text()) // 4) + out


@dataclass(frozen=True, slots=True)
class Completion:
    """A model's answer to one Request.

    ``text`` is set for ``generate``; ``choice_logprobs`` (aligned with the
    request's ``choices``) for ``score_choices``. When a backend cannot score
    choices and generated instead, ``text`` holds the generation, the
    log-probabilities are None and ``note`` says so.
    """

    text: str | None = None
    choice_logprobs: tuple[float, ...] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    note: str | None = None

    def to_json(self) -> bytes:
        return orjson.dumps(self)

    @classmethod
    def from_json(cls, raw: bytes | str) -> "Completion":
        data = orjson.loads(raw)
        lp = data.get("choice_logprobs")
        return cls(
            text=data.get("text"),
            choice_logprobs=tuple(lp) if lp is not None else None,
            prompt_tokens=int(data.get("prompt_tokens", 0)),
            completion_tokens=int(data.get("completion_tokens", 0)),
            note=data.get("note"),
        )


@dataclass(frozen=True, slots=True)
class ModelIdentity:
    """Everything about a model that can change its answers.

    ``revision`` is a weights revision (git sha, file hash) when known; two
    models with the same name but different weights never share cache entries.
    """

    backend: str
    name: str
    revision: str = ""
    extra: tuple[tuple[str, str], ...] = ()

    def fingerprint(self) -> str:
        raw = orjson.dumps(self, option=orjson.OPT_SORT_KEYS)
        return hashlib.sha256(raw).hexdigest()[:16]


def request_key(model: ModelIdentity, request: Request) -> str:
    """The cache key: a hash of model identity, decoding settings, kind and input."""
    h = hashlib.sha256()
    h.update(orjson.dumps(model, option=orjson.OPT_SORT_KEYS))
    h.update(b"\x00")
    h.update(request.content_key())
    return h.hexdigest()
