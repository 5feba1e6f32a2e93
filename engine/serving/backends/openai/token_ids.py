"""Exact label scores from a vLLM server by token ids: ``logprob_token_ids`` on its completions route.

vLLM's ``SamplingParams.logprob_token_ids`` (the in-process backend's way) reached
its OpenAI routes in vLLM 0.26.0 (vllm-project/vllm#43463; 0.25.1 and older
ignore the field, with a warning in the server's log): a request lists token
ids and the answer carries the log-probability of each one at the generated
position, normalised over the whole vocabulary, whatever its rank. Unlike
``echo`` and ``prompt_logprobs``, which score the prompt's own tokens and so skip
vLLM's prefix-cache reads, this reads a *generated* position: the shared
instruction and few-shot block stay cached across samples.

The client needs the server's token ids, so the server's own tokenizer renders
them (vLLM's ``POST /tokenize`` at the server root, which also renders a chat
conversation with the model's template):

1. the input's ids (a conversation with ``add_generation_prompt``), each
   label's ids as a continuation of it (``label_tokens.continuation_ids``);
2. one completions request whose ``prompt`` is the list of token-id prompts of
   the label trie's inner nodes (``label_tokens.trie_queries``: one prompt when
   every label is one token), ``max_tokens=1``, ``logprob_token_ids`` the ids to
   read and ``return_tokens_as_token_ids`` so the answer names them
   ``token_id:N``.

Chat requests are scored the same way: the conversation rendered by the
server's template, then the label's tokens read at generated positions through
the completions route (the chat route reads only the first generated position,
and a label of several tokens needs the positions inside it). The tokens the
model sees are exactly those the chat route would feed it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from promptrobust.engine.serving.backends.label_tokens import TokenIds
from promptrobust.engine.serving.backends.openai.scoring import ImpossibleLogprob, ScoringAnswerError, completions_in_order

__all__ = ["MAX_IDS_PER_REQUEST", "PROBE_INPUT", "PROBE_LABELS", "chunks", "node_body", "read_nodes",
           "read_tokens", "tokenize_body", "tokenize_url"]

#: vLLM's bound on ``logprob_token_ids`` per request (``MAX_LOGPROB_TOKEN_IDS``).
MAX_IDS_PER_REQUEST = 128
#: vLLM's placeholder for a token named by its id (``return_tokens_as_token_ids``).
_ID_PREFIX = "token_id:"

PROBE_INPUT = "Question: is the sky blue? Answer:"
PROBE_LABELS = (" yes", " no")


def tokenize_url(base_url: str) -> str:
    """vLLM's ``/tokenize`` for a base URL such as ``http://host:8000/v1`` (it sits at the server root)."""
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return urlunsplit((parts.scheme, parts.netloc, f"{path}/tokenize", "", ""))


def tokenize_body(model: str, *, prompt: str | None = None, messages: Sequence[Mapping[str, str]] | None = None,
                  continue_final: bool = False, special: bool = True) -> dict[str, Any]:
    """The ``/tokenize`` body for plain text (``special``: add BOS and the like) or a conversation
    (``continue_final``: the last message is the start of the answer; else a generation prompt follows)."""
    if messages is not None:
        return {"model": model, "messages": [dict(m) for m in messages], "add_special_tokens": False,
                "add_generation_prompt": not continue_final, "continue_final_message": continue_final}
    return {"model": model, "prompt": prompt or "", "add_special_tokens": special}


def read_tokens(data: Any) -> list[int]:
    """The token ids of a ``/tokenize`` answer."""
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0
                                               for t in tokens):
        raise ScoringAnswerError("a /tokenize answer without a list of token ids")
    return list(tokens)


def node_body(model: str, prompts: Sequence[Sequence[int]], token_ids: Sequence[int]) -> dict[str, Any]:
    """One completions body reading ``token_ids`` at the position after each token-id prompt."""
    return {"model": model, "prompt": [list(p) for p in prompts], "max_tokens": 1, "temperature": 0.0,
            "logprobs": 1, "logprob_token_ids": list(token_ids), "return_tokens_as_token_ids": True}


def read_nodes(data: Any, wanted: Sequence[Sequence[int]]) -> list[dict[int, float]]:
    """Per prompt of a ``node_body`` request, the log-prob of each wanted id at its generated position.

    An id the answer lacks means the server ignored ``logprob_token_ids`` (vLLM before 0.26 does, as
    does any server that does not know it): the answer is unusable, never approximated.
    """
    answers = completions_in_order(data, len(wanted), "token-id prompts")
    out = []
    for answer, ids in zip(answers, wanted):
        lp = answer.get("logprobs")
        tops = lp.get("top_logprobs") if isinstance(lp, dict) else None
        first = tops[0] if isinstance(tops, list) and tops else None
        if not isinstance(first, dict):
            raise ScoringAnswerError("no log-probs at the generated position")
        found: dict[int, float] = {}
        for tok in ids:
            value = first.get(f"{_ID_PREFIX}{tok}")
            if value is None:
                raise ScoringAnswerError(f"no log-prob for token id {tok} (the server ignored logprob_token_ids)")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value > 0:
                raise ImpossibleLogprob(f"not a log-probability: {value!r}")
            found[tok] = float(value)
        out.append(found)
    return out


def chunks(nodes: Mapping[TokenIds, Sequence[int]]) -> list[tuple[list[TokenIds], list[int]]]:
    """(node prefixes, ids) per request: every id of the label set in one request when they fit
    ``MAX_IDS_PER_REQUEST``, else the ids in slices, each request carrying the nodes that need them."""
    every = sorted({t for ids in nodes.values() for t in ids})
    out = []
    for start in range(0, len(every), MAX_IDS_PER_REQUEST):
        part = every[start: start + MAX_IDS_PER_REQUEST]
        keep = set(part)
        prefixes = [p for p, ids in nodes.items() if keep.intersection(ids)]
        out.append((prefixes, part))
    return out
