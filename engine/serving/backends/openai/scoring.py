"""Label scoring over HTTP: the routes by which an OpenAI-compatible server scores a label.

The in-process backends score a label as the sum of its tokens' log-probabilities
after the input. Over an OpenAI-compatible server the same number comes from the
completions endpoint when the server scores the prompt's own tokens; each such
way is an ``ExactRoute`` in ``ROUTES`` (tried in that order at start-up):

* ``echo``: ``echo=true`` with ``logprobs`` (OpenAI's legacy completions,
  vLLM, llama.cpp; what lm-evaluation-harness's ``local-completions`` uses):
  the answer repeats the prompt's tokens with their log-probabilities;
* ``prompt_logprobs``: vLLM's own ``prompt_logprobs=0`` (the log-probability
  of each prompt token, nothing else).

Before them, on a vLLM server, ``logprob_token_ids`` (``TokenIdsRoute``, vLLM
0.26+): the labels' token ids read at generated positions, which keeps the
prefix cache; its requests are several per label set, so the backend drives
it (``token_ids.py``) rather than sending one ``body``.

One request per label set: ``prompt`` is the list ``[input + label, ...]``, one
completion each. Chat requests (instruction-tuned models) are scored exactly by
vLLM's chat endpoint, opted into with ``scoring=prompt_logprobs``: the label
goes in as the start of the assistant's answer (``continue_final_message``,
no generation prompt after it), one request per label, and the prompt
log-probs of the rendered conversation are read the same way (a route with
``chat = True``). The label's tokens are the last prompt tokens whose text
adds up to exactly the label; a token that straddles the seam between input
and label (the tokenizer merged them) makes the answer unusable rather than
approximate. Which route a server allows is decided once, at start-up
(:func:`probe_bodies`, :func:`accepts`); without any, the backend keeps the
top-20 first-token approximation (``TOP_PATH``, :func:`choice_logprobs_from_top`)
and records it.

A new route (another server's way of scoring given tokens) is a subclass of
``ExactRoute`` added to ``ROUTES``: its name becomes a value of the ``scoring``
model argument, its description what the results record, and the backend
sends its ``body`` and reads its answer with ``read`` like any other.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["CHAT_DESCRIPTION", "DESCRIPTIONS", "EXACT_PATHS", "MISSING_CHOICE_MARGIN", "ROUTES", "SCORING_ARGS",
           "TOP_LOGPROBS", "TOP_PATH", "ExactRoute", "ImpossibleLogprob", "ImpossibleTokens", "ScoringAnswerError",
           "ScoringPath",
           "TokenIdsRoute", "accepts", "body", "chat_body", "choice_logprobs_from_top", "completions_in_order",
           "exact_route", "probe_bodies", "read", "read_chat"]

#: A route's name: one of ``EXACT_PATHS``, or ``TOP_PATH``.
ScoringPath = str
#: The approximation: labels read from the first generated token's top-20 alternatives.
TOP_PATH = "top_logprobs"
#: How many alternatives the approximation asks for (the OpenAI API's maximum).
TOP_LOGPROBS = 20
#: A choice absent from the top list scores this far below the smallest listed
#: log-probability: its true value is lower than every listed one, by an
#: unknown amount; a fixed margin keeps it ranked last without inventing -inf.
MISSING_CHOICE_MARGIN = 1.0
# Byte-level BPE and SentencePiece word-start markers some servers leave in tokens.
_TOKEN_PREFIX_CHARS = " \t\n\u0120\u2581"

#: How the chat route is recorded in results.
CHAT_DESCRIPTION = ("exact: label tokens scored by the chat endpoint as the start of the answer "
                    "(vLLM prompt_logprobs + continue_final_message)")
_TOP_DESCRIPTION = ("approximate: labels read from the first token's top-20 log-probs (a label outside them gets a floor); "
                    "exact on vLLM 0.26+ (logprob_token_ids, found at start-up), with api=completions on a server that echoes "
                    "prompt log-probs, or scoring=prompt_logprobs on an older vLLM")

_PROBE_INPUT = "Question: is the sky blue? Answer:"
_PROBE_LABELS = (" yes", " no")


class ScoringAnswerError(ValueError):
    """An answer that does not hold what the route needs (never scored, never cached)."""


class ImpossibleLogprob(ScoringAnswerError):
    """A prompt token's log-probability that no model gives (NaN, infinite, above 0)."""


class ImpossibleTokens(ScoringAnswerError):
    """Token ids no tokenizer gives (ids beyond any vocabulary, far more tokens than the text has bytes,
    the same text tokenised two ways): a retry would get the same, so never retried, scored or cached."""


class ExactRoute:
    """One way a server scores each label's tokens exactly: the request that asks, and how to read the answer."""

    #: The ``scoring`` model argument that picks it (and its name in the cache identity).
    name: str = ""
    #: What the results record (``label_scoring``).
    description: str = ""
    #: Whether the chat endpoint takes it too (one request per label: a conversation cannot be a list).
    chat: bool = False
    #: Whether it scores token ids the server's tokenizer gave (``token_ids``: several requests,
    #: driven by the backend) rather than one text ``body``.
    by_token_ids: bool = False

    def body(self, model: str, prompt: str, choices: Sequence[str]) -> dict[str, object]:
        """The completions body that scores every label of ``choices`` after ``prompt`` in one request."""
        out: dict[str, object] = {"model": model, "prompt": [prompt + c for c in choices], "temperature": 0.0}
        out.update(self.extra_body())
        return out

    def extra_body(self) -> dict[str, object]:
        """What this route adds to a completions body."""
        raise NotImplementedError

    def prompt_tokens(self, answer: dict[str, object]) -> list[tuple[str, float | None]]:
        """(token text, log-prob) of the prompt's tokens, from one completion of the answer."""
        raise NotImplementedError

    def read(self, data: Any, prompt: str, choices: Sequence[str]) -> tuple[float, ...]:
        """Each label's log-probability (the sum over its tokens) from a ``body`` answer."""
        answers = completions_in_order(data, len(choices), "labels")
        out = []
        for answer, label in zip(answers, choices):
            if not label:
                out.append(0.0)  # an empty label: log 1, as the in-process backends score it
                continue
            out.append(_label_logprob(self.prompt_tokens(answer), label))
        return tuple(out)


class EchoRoute(ExactRoute):
    name = "echo"
    description = "exact: label tokens scored by the completions endpoint (echo + logprobs)"

    def extra_body(self) -> dict[str, object]:
        return {"echo": True, "logprobs": 1, "max_tokens": 1}  # some servers refuse max_tokens=0; the token is dropped

    def prompt_tokens(self, answer: dict[str, object]) -> list[tuple[str, float | None]]:
        """The echoed tokens minus the one generated."""
        lp = answer.get("logprobs")
        if not isinstance(lp, dict):
            raise ScoringAnswerError("no logprobs in an echo answer")
        tokens, values = lp.get("tokens"), lp.get("token_logprobs")
        if not isinstance(tokens, list) or not isinstance(values, list) or len(tokens) != len(values) or len(tokens) < 2:
            raise ScoringAnswerError("echo answer without the prompt's tokens and their log-probs")
        return [(str(t), _number(v)) for t, v in zip(tokens[:-1], values[:-1])]


class PromptLogprobsRoute(ExactRoute):
    name = "prompt_logprobs"
    description = "exact: label tokens scored by the completions endpoint (vLLM prompt_logprobs)"
    chat = True

    def extra_body(self) -> dict[str, object]:
        return {"prompt_logprobs": 0, "max_tokens": 1}

    def prompt_tokens(self, answer: dict[str, object]) -> list[tuple[str, float | None]]:
        """vLLM's ``prompt_logprobs``: one {id: {logprob, decoded_token}} per position."""
        return _prompt_tokens(answer)


class TokenIdsRoute(ExactRoute):
    """``logprob_token_ids``: several requests per label set (tokenize, then read), so the backend drives it
    (``by_token_ids``) instead of sending one ``body``."""

    name = "logprob_token_ids"
    description = ("exact: label tokens scored by vLLM's logprob_token_ids at generated positions "
                   "(the server's tokenizer; prefix cache kept)")
    chat = True
    by_token_ids = True

    def extra_body(self) -> dict[str, object]:
        raise TypeError("the logprob_token_ids route sends token-id prompts: see openai.token_ids.node_body")


#: The exact routes, in the order start-up tries them: the one that keeps vLLM's prefix cache first.
ROUTES: tuple[ExactRoute, ...] = (TokenIdsRoute(), EchoRoute(), PromptLogprobsRoute())
#: Paths that give each label's exact log-probability, tried in this order at start-up.
EXACT_PATHS: tuple[str, ...] = tuple(r.name for r in ROUTES)
#: What the ``scoring`` model argument accepts.
SCORING_ARGS = ("auto", *EXACT_PATHS, TOP_PATH)
#: How each path is recorded in results (``label_scoring``).
DESCRIPTIONS: dict[str, str] = {**{r.name: r.description for r in ROUTES}, TOP_PATH: _TOP_DESCRIPTION}


def completions_in_order(data: Any, expected: int, of_what: str) -> list[dict[str, object]]:
    """The completions of an answer to a list of prompts, in the prompts' order (``index``), one per prompt."""
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
        raise ScoringAnswerError("no choices in the answer")
    answers = [c for c in data["choices"] if isinstance(c, dict)]
    if len(answers) != expected:
        raise ScoringAnswerError(f"{len(answers)} completions for {expected} {of_what}")
    if all(isinstance(c.get("index"), int) for c in answers):
        answers = sorted(answers, key=lambda c: c["index"])
    return answers


def exact_route(path: str | None) -> ExactRoute | None:
    """The exact route called ``path`` (None: the top-20 approximation, or undecided)."""
    return next((r for r in ROUTES if r.name == path), None)


def _route(path: str) -> ExactRoute:
    route = exact_route(path)
    if route is None:
        raise ValueError(f"{path!r} is not an exact scoring path")
    return route


def body(path: ScoringPath, model: str, prompt: str, choices: Sequence[str]) -> dict[str, object]:
    """The JSON body that scores every label of ``choices`` after ``prompt`` in one request."""
    return _route(path).body(model, prompt, choices)


def read(path: ScoringPath, data: Any, prompt: str, choices: Sequence[str]) -> tuple[float, ...]:
    """Each label's log-probability (the sum over its tokens) from a ``body`` answer."""
    return _route(path).read(data, prompt, choices)


def chat_body(model: str, messages: Sequence[dict[str, str]], label: str) -> dict[str, object]:
    """The vLLM chat body that scores ``label`` as the first words of the assistant's answer."""
    return {
        "model": model, "messages": [*messages, {"role": "assistant", "content": label}], "temperature": 0.0,
        "max_tokens": 1, "prompt_logprobs": 0, "add_generation_prompt": False, "continue_final_message": True,
    }


def read_chat(data: Any, label: str) -> float:
    """A label's log-probability from a ``chat_body`` answer (vLLM puts ``prompt_logprobs`` at the top)."""
    if not isinstance(data, dict):
        raise ScoringAnswerError("the answer is not an object")
    if not label:
        return 0.0
    return _label_logprob(_prompt_tokens(data), label)


def probe_bodies(model: str) -> list[tuple[ScoringPath, dict[str, object]]]:
    """(path, body) for the start-up check, most common path first."""
    return [(route.name, route.body(model, _PROBE_INPUT, _PROBE_LABELS)) for route in ROUTES if not route.by_token_ids]


def accepts(path: ScoringPath, data: Any) -> bool:
    """Whether the answer to ``probe_bodies``'s request for ``path`` can be read exactly."""
    try:
        read(path, data, _PROBE_INPUT, _PROBE_LABELS)
    except ScoringAnswerError:
        return False
    return True


def _logsumexp(values: Sequence[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def choice_logprobs_from_top(top: Sequence[tuple[str, float]], choices: Sequence[str]) -> tuple[float, ...]:
    """Each choice's log-probability read from the first token's top alternatives (the ``TOP_PATH``).

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


def _prompt_tokens(answer: dict[str, object]) -> list[tuple[str, float | None]]:
    """(token text, log-prob) from vLLM's ``prompt_logprobs``: one {id: {logprob, decoded_token}} per position."""
    positions = answer.get("prompt_logprobs")
    if not isinstance(positions, list) or len(positions) < 2:
        raise ScoringAnswerError("no prompt_logprobs in the answer")
    out: list[tuple[str, float | None]] = []
    for pos in positions:
        if pos is None:
            out.append(("", None))  # the first position has no context, hence no log-prob
            continue
        if not isinstance(pos, dict) or len(pos) != 1:
            # More than one entry: the prompt token cannot be told from its alternatives.
            raise ScoringAnswerError("prompt_logprobs lists alternatives, not the prompt token alone")
        (entry,) = pos.values()
        if not isinstance(entry, dict) or not isinstance(entry.get("decoded_token"), str):
            raise ScoringAnswerError("prompt_logprobs entry without decoded_token")
        out.append((entry["decoded_token"], _number(entry.get("logprob"))))
    return out


def _number(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value > 0:
        raise ImpossibleLogprob(f"not a log-probability: {value!r}")
    return float(value)


def _label_logprob(tokens: list[tuple[str, float | None]], label: str) -> float:
    """Sum the log-probs of the last tokens whose text is exactly ``label``."""
    text, total = "", 0.0
    for token, value in reversed(tokens):
        text = token + text
        if value is None:
            raise ScoringAnswerError("a label token without a log-probability")
        total += value
        if len(text) >= len(label):
            break
    if text != label:
        # Too long: a token spans the seam (input and label merged); different: the
        # server's text is not ours (normalised, or another prompt).
        raise ScoringAnswerError(f"the last prompt tokens read {text!r}, not the label {label!r}")
    return total
