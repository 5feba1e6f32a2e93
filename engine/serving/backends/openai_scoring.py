"""Exact label scoring over HTTP: each label's tokens scored from the completions endpoint.

The in-process backends score a label as the sum of its tokens' log-probabilities
after the input. Over an OpenAI-compatible server the same number comes from the
completions endpoint when the server scores the prompt's own tokens:

* ``echo``: ``echo=true`` with ``logprobs`` (OpenAI's legacy completions,
  vLLM, llama.cpp; what lm-evaluation-harness's ``local-completions`` uses):
  the answer repeats the prompt's tokens with their log-probabilities;
* ``prompt_logprobs``: vLLM's own ``prompt_logprobs=0`` (the log-probability
  of each prompt token, nothing else).

One request per label set: ``prompt`` is the list ``[input + label, ...]``, one
completion each. Chat requests (instruction-tuned models) are scored exactly by
vLLM's chat endpoint, opted into with ``scoring=prompt_logprobs``: the label
goes in as the start of the assistant's answer (``continue_final_message``,
no generation prompt after it), one request per label, and the prompt
log-probs of the rendered conversation are read the same way. The label's tokens are the last prompt tokens whose text
adds up to exactly the label; a token that straddles the seam between input
and label (the tokenizer merged them) makes the answer unusable rather than
approximate. Which path a server allows is decided once, at start-up
(:func:`probe_bodies`, :func:`accepts`); without either, the backend keeps the
top-20 first-token approximation (``TOP_PATH``) and records it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

ScoringPath = Literal["echo", "prompt_logprobs", "top_logprobs"]
#: The approximation: labels read from the first generated token's top-20 alternatives.
TOP_PATH: ScoringPath = "top_logprobs"
#: Paths that give each label's exact log-probability, tried in this order at start-up.
EXACT_PATHS: tuple[ScoringPath, ...] = ("echo", "prompt_logprobs")
#: What the ``scoring`` model argument accepts.
SCORING_ARGS = ("auto", "echo", "prompt_logprobs", "top_logprobs")

#: How the chat path is recorded in results.
CHAT_DESCRIPTION = ("exact: label tokens scored by the chat endpoint as the start of the answer "
                    "(vLLM prompt_logprobs + continue_final_message)")
#: How each path is recorded in results (``label_scoring``).
DESCRIPTIONS: dict[str, str] = {
    "echo": "exact: label tokens scored by the completions endpoint (echo + logprobs)",
    "prompt_logprobs": "exact: label tokens scored by the completions endpoint (vLLM prompt_logprobs)",
    "top_logprobs": ("approximate: labels read from the first token's top-20 log-probs (a label outside them gets a floor); "
                     "exact with api=completions on a server that echoes prompt log-probs, or scoring=prompt_logprobs on vLLM"),
}

_PROBE_INPUT = "Question: is the sky blue? Answer:"
_PROBE_LABELS = (" yes", " no")


class ScoringAnswerError(ValueError):
    """An answer that does not hold what the path needs (never scored, never cached)."""


def body(path: ScoringPath, model: str, prompt: str, choices: Sequence[str]) -> dict[str, Any]:
    """The JSON body that scores every label of ``choices`` after ``prompt`` in one request."""
    if path not in EXACT_PATHS:
        raise ValueError(f"{path!r} is not an exact scoring path")
    out: dict[str, Any] = {"model": model, "prompt": [prompt + c for c in choices], "temperature": 0.0}
    if path == "echo":
        # max_tokens=1: some servers refuse 0; the one generated token is dropped.
        out.update(echo=True, logprobs=1, max_tokens=1)
    else:
        out.update(prompt_logprobs=0, max_tokens=1)
    return out


def chat_body(model: str, messages: Sequence[dict[str, str]], label: str) -> dict[str, Any]:
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


def probe_bodies(model: str) -> list[tuple[ScoringPath, dict[str, Any]]]:
    """(path, body) for the start-up check, most common path first."""
    return [(path, body(path, model, _PROBE_INPUT, _PROBE_LABELS)) for path in EXACT_PATHS]


def accepts(path: ScoringPath, data: Any) -> bool:
    """Whether the answer to ``probe_bodies``'s request for ``path`` can be read exactly."""
    try:
        read(path, data, _PROBE_INPUT, _PROBE_LABELS)
    except ScoringAnswerError:
        return False
    return True


def read(path: ScoringPath, data: Any, prompt: str, choices: Sequence[str]) -> tuple[float, ...]:
    """Each label's log-probability (the sum over its tokens) from a ``body`` answer."""
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
        raise ScoringAnswerError("no choices in the answer")
    answers = [c for c in data["choices"] if isinstance(c, dict)]
    if len(answers) != len(choices):
        raise ScoringAnswerError(f"{len(answers)} completions for {len(choices)} labels")
    if all(isinstance(c.get("index"), int) for c in answers):
        answers = sorted(answers, key=lambda c: c["index"])
    out = []
    for answer, label in zip(answers, choices):
        if not label:
            out.append(0.0)  # an empty label: log 1, as the in-process backends score it
            continue
        tokens = _echo_tokens(answer) if path == "echo" else _prompt_tokens(answer)
        out.append(_label_logprob(tokens, label))
    return tuple(out)


def _echo_tokens(answer: dict[str, Any]) -> list[tuple[str, float | None]]:
    """(token text, log-prob) of the prompt's tokens: the echoed tokens minus the one generated."""
    lp = answer.get("logprobs")
    if not isinstance(lp, dict):
        raise ScoringAnswerError("no logprobs in an echo answer")
    tokens, values = lp.get("tokens"), lp.get("token_logprobs")
    if not isinstance(tokens, list) or not isinstance(values, list) or len(tokens) != len(values) or len(tokens) < 2:
        raise ScoringAnswerError("echo answer without the prompt's tokens and their log-probs")
    return [(str(t), _number(v)) for t, v in zip(tokens[:-1], values[:-1])]


def _prompt_tokens(answer: dict[str, Any]) -> list[tuple[str, float | None]]:
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
        raise ScoringAnswerError(f"not a log-probability: {value!r}")
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
