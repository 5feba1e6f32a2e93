"""Exact label scores from a vLLM server by token ids: ``logprob_token_ids`` on its completions route.

vLLM's ``SamplingParams.logprob_token_ids`` (the in-process backend's way) reached
its OpenAI routes in vLLM 0.26.0 (vllm-project/vllm#43463; 0.25.1 and older
ignore the field, with a warning in the server's log): a request lists token
ids and the answer carries the log-probability of each one at the generated
position, normalised over the whole vocabulary, whatever its rank. Unlike
``echo`` and ``prompt_logprobs``, which score the prompt's own tokens and so skip
vLLM's prefix-cache reads, this reads a *generated* position: the shared
instruction and few-shot block stay cached across samples (for whole KV blocks
of them: docs/scale.md section 7).

One HTTP request per sample, in steady state (the backend drives it):

1. a label set's tokens are learned once from the server's own tokenizer
   (vLLM's ``POST /tokenize`` at the server root, which also renders a
   conversation with the model's template): the input, each label as a
   continuation of it (``label_tokens.continuation_ids``) and each label alone;
   how a label continues an input depends on the input's last tokens (the
   *seam*, ``SEAM_TOKENS``: a template's "Answer:" or a chat template's
   generation prompt), so what is learned is kept per seam, and an input that
   ends otherwise is learned again (tokenised once more, then read again if
   its labels' tokens differ);
2. each sample is then one request with its *text* (``read_body``: a plain
   prompt on the completions route, a conversation on the chat route),
   ``max_tokens=1``, ``logprob_token_ids`` the labels' first tokens and
   ``return_token_ids``, so the answer carries both the labels' log-probs at
   the generated position and the input's ids as the server tokenised them
   (``read_text_answer``): the seam is read from them, and the first sample's
   are compared with ``/tokenize``'s (the same text tokenised two ways is an
   answer no tokenizer gives);
3. labels of several tokens need the positions inside them: one more request
   whose ``prompt`` is the list of token-id prompts of the label trie's inner
   nodes (``node_body``, ``label_tokens.trie_queries``).

Every id list a server sends is checked before use (``check_ids``): ids beyond
any vocabulary (``MAX_TOKEN_ID``), more tokens than the text has bytes (plus a
few special tokens; a chat template's per message) and inputs longer than the
server's ``max_model_len`` are refused in one line.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from promptrobust.engine.serving.backends.label_tokens import TokenIds
from promptrobust.engine.serving.backends.openai.scoring import (
    ImpossibleLogprob,
    ImpossibleTokens,
    ScoringAnswerError,
    completions_in_order,
)

__all__ = ["MAX_IDS_PER_REQUEST", "MAX_TOKEN_ID", "PROBE_INPUT", "PROBE_LABELS", "SEAM_TOKENS", "TOKEN_IDS_SINCE",
           "LabelSetKey", "Learned", "TooLong", "check_ids", "once", "seam_of", "chunks", "most_tokens", "node_body", "read_body", "read_nodes", "read_text_answer",
           "read_tokens", "serves_token_ids", "server_root_url", "tokenize_body", "tokenize_url"]

#: vLLM's bound on ``logprob_token_ids`` per request (``MAX_LOGPROB_TOKEN_IDS``).
MAX_IDS_PER_REQUEST = 128
#: Token ids are below this (vLLM keeps them in 32-bit tensors; the largest vocabularies have a few 100k).
MAX_TOKEN_ID = 2**31
#: Tokens a tokenizer may add to a plain text beyond one per byte (BOS, EOS and the like).
SPECIAL_TOKENS = 16
#: ... and per message of a conversation: the template's role markers, separators, a default system prompt.
TEMPLATE_TOKENS_PER_MESSAGE = 256
#: How many of an input's last tokens decide how a label's tokens continue it (the seam): a label's
#: tokens learned after one input are used after every input ending in the same tokens. Two cover a
#: template's "Answer" ":" or a chat template's "assistant" "\n" (a tokenizer merges a label with what
#: precedes it within a word at most); more would take a sample's own last word into the seam.
SEAM_TOKENS = 2
#: The first vLLM release whose OpenAI routes take ``logprob_token_ids`` (vllm-project/vllm#43463).
TOKEN_IDS_SINCE = (0, 26)
#: vLLM's placeholder for a token named by its id (``return_tokens_as_token_ids``).
_ID_PREFIX = "token_id:"

PROBE_INPUT = "Question: is the sky blue? Answer:"
PROBE_LABELS = (" yes", " no")


#: A label set as the route keys it: whether its inputs are conversations, and the labels.
LabelSetKey = tuple[bool, tuple[str, ...]]
T = TypeVar("T")


@dataclass
class Learned:
    """What the route learns once per run from the server's tokenizer (the backend keeps one)."""

    labels: dict[LabelSetKey, dict[tuple[int, ...], list[TokenIds]]] = field(default_factory=dict)
    """Per label set, per seam (``seam_of`` the input's ids): each label's tokens after such an input."""
    alone: dict[str, asyncio.Future[Any]] = field(default_factory=dict)
    """Each label's own tokens (no special tokens), tokenised once."""
    learning: dict[Hashable, asyncio.Future[Any]] = field(default_factory=dict)
    """Learning in flight, shared by every request that needs it."""

    def root_ids(self, key: LabelSetKey) -> list[int]:
        """The first tokens of every label of ``key``, over every seam learned (what one read asks for)."""
        return sorted({ids[0] for labels in self.labels.get(key, {}).values() for ids in labels if ids})


def seam_of(context: Sequence[int]) -> tuple[int, ...]:
    """The input's last tokens, which decide how a label's tokens continue it."""
    return tuple(context[-SEAM_TOKENS:])


K = TypeVar("K", bound=Hashable)


async def once(table: dict[K, asyncio.Future[Any]], key: K, make: Callable[[], Awaitable[T]],
               *, keep: bool = False) -> T:
    """``make()`` run once for every concurrent caller with the same ``key``: the first runs it, the others
    wait for its result (or its error). ``keep``: the result stays for later callers; otherwise the entry
    goes once it is done (the caller keeps what it learned elsewhere). A cancelled first caller leaves the
    work to the next one."""
    while True:
        fut = table.get(key)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            table[key] = fut
            try:
                value = await make()
            except asyncio.CancelledError:
                table.pop(key, None)
                fut.cancel()  # the waiters try again, one of them first
                raise
            except BaseException as exc:
                table.pop(key, None)
                fut.set_exception(exc)
                fut.exception()  # retrieved: no "never retrieved" warning when nobody waits
                raise
            fut.set_result(value)
            if not keep:
                table.pop(key, None)
            return value
        try:
            result: T = await asyncio.shield(fut)
            return result
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if fut.cancelled() and (me is None or not me.cancelling()):
                continue  # the first caller was cancelled, not this one: look again
            raise


class TooLong(ScoringAnswerError):
    """An input longer than the model's context at the server (a fact of the input, not of the answer)."""


def serves_token_ids(version: str) -> bool | None:
    """Whether a vLLM server of this ``version`` (its ``/version``: "0.32.0", "0.26.0rc1", "0.11.1+cpu") takes
    ``logprob_token_ids`` on its OpenAI routes; None when the version cannot be read."""
    found = re.match(r"\s*v?(\d+)\.(\d+)", version or "")
    if found is None:
        return None
    return (int(found.group(1)), int(found.group(2))) >= TOKEN_IDS_SINCE


def server_root_url(base_url: str, route: str) -> str:
    """A route at vLLM's server root (``/tokenize``, ``/version``) for a base URL such as ``http://host:8000/v1``."""
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return urlunsplit((parts.scheme, parts.netloc, f"{path}/{route}", "", ""))


def tokenize_url(base_url: str) -> str:
    """vLLM's ``/tokenize`` for a base URL such as ``http://host:8000/v1`` (it sits at the server root)."""
    return server_root_url(base_url, "tokenize")


def most_tokens(text: str, messages: int = 0) -> int:
    """The most tokens any tokenizer makes of ``text`` (one per byte at worst, byte fallback), plus the
    special tokens around it and, for a conversation of ``messages`` messages, its template's."""
    return len(text.encode("utf-8", "surrogatepass")) + SPECIAL_TOKENS + TEMPLATE_TOKENS_PER_MESSAGE * messages


def check_ids(ids: Any, *, most: int, max_model_len: int | None, what: str) -> list[int]:
    """``ids`` as a list of token ids, if a tokenizer could have given them for ``what`` (at most ``most``
    tokens; ``TooLong`` past the server's ``max_model_len``); else ``ImpossibleTokens`` (or
    ``ScoringAnswerError`` for a list that is not ids at all)."""
    if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
        raise ScoringAnswerError(f"no list of token ids for {what}")
    if len(ids) > most:
        raise ImpossibleTokens(f"{len(ids):,} tokens for {what}, whose text gives at most {most:,} in any tokenizer")
    huge = next((t for t in ids if t >= MAX_TOKEN_ID), None)
    if huge is not None:
        shown = f"{huge:.3g}" if huge >= 10**9 else str(huge)
        raise ImpossibleTokens(f"token id {shown} for {what} is beyond any vocabulary (ids are below 2**31)")
    if max_model_len is not None and len(ids) > max_model_len:
        raise TooLong(f"{what} is {len(ids):,} tokens, longer than the model's context at the server "
                      f"(max_model_len {max_model_len:,}): shorten it")
    return list(ids)


def tokenize_body(model: str, *, prompt: str | None = None, messages: Sequence[Mapping[str, str]] | None = None,
                  continue_final: bool = False, special: bool = True) -> dict[str, object]:
    """The ``/tokenize`` body for plain text (``special``: add BOS and the like) or a conversation
    (``continue_final``: the last message is the start of the answer; else a generation prompt follows)."""
    if messages is not None:
        return {"model": model, "messages": [dict(m) for m in messages], "add_special_tokens": False,
                "add_generation_prompt": not continue_final, "continue_final_message": continue_final}
    return {"model": model, "prompt": prompt or "", "add_special_tokens": special}


def read_tokens(data: Any, *, most: int, max_model_len: int | None, what: str) -> list[int]:
    """The token ids of a ``/tokenize`` answer, checked (``check_ids``; the answer's own ``max_model_len``
    wins over the one given)."""
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if tokens is None:
        raise ScoringAnswerError("a /tokenize answer without a list of token ids")
    stated = data.get("max_model_len") if isinstance(data, dict) else None
    if isinstance(stated, int) and not isinstance(stated, bool) and stated > 0:
        max_model_len = stated
    return check_ids(tokens, most=most, max_model_len=max_model_len, what=what)


def read_body(model: str, prompt: str, token_ids: Sequence[int]) -> dict[str, object]:
    """One completions body reading ``token_ids`` at the position after the text ``prompt`` (tokenised by the
    server, special tokens added as ``/tokenize`` adds them), the ids it used returned with the answer."""
    return {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0.0, "logprobs": 1,
            "logprob_token_ids": list(token_ids), "return_tokens_as_token_ids": True, "return_token_ids": True}


def read_text_answer(data: Any, wanted: Sequence[int], *, chat: bool, most: int,
                     max_model_len: int | None) -> tuple[list[int], dict[int, float]]:
    """(the input's ids as the server tokenised them, the log-prob of each wanted id at the generated position)
    from the answer to ``read_body`` (or the chat route's equivalent: ids at the top, log-probs in
    ``logprobs.content``)."""
    answers = completions_in_order(data, 1, "inputs")
    answer = answers[0]
    ids = data.get("prompt_token_ids") if chat else answer.get("prompt_token_ids")
    if ids is None:
        raise ScoringAnswerError("no prompt_token_ids in the answer (the server ignored return_token_ids)")
    context = check_ids(ids, most=most, max_model_len=max_model_len, what="the input")
    lp = answer.get("logprobs")
    top: Mapping[str, Any] | None
    if chat:
        content = lp.get("content") if isinstance(lp, dict) else None
        first = content[0] if isinstance(content, list) and content and isinstance(content[0], dict) else None
        listed = first.get("top_logprobs") if first is not None else None
        if not isinstance(listed, list):
            raise ScoringAnswerError("no log-probs at the generated position")
        top = {str(e.get("token")): e.get("logprob") for e in listed if isinstance(e, dict)}
    else:
        tops = lp.get("top_logprobs") if isinstance(lp, dict) else None
        top = tops[0] if isinstance(tops, list) and tops and isinstance(tops[0], dict) else None
    if top is None:
        raise ScoringAnswerError("no log-probs at the generated position")
    return context, _listed_values(top, wanted)


def _listed_values(top: Mapping[str, Any], wanted: Sequence[int]) -> dict[int, float]:
    found: dict[int, float] = {}
    for tok in wanted:
        value = top.get(f"{_ID_PREFIX}{tok}")
        if value is None:
            raise ScoringAnswerError(f"no log-prob for token id {tok} (the server ignored logprob_token_ids)")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value > 0:
            raise ImpossibleLogprob(f"not a log-probability: {value!r}")
        found[tok] = float(value)
    return found


def node_body(model: str, prompts: Sequence[Sequence[int]], token_ids: Sequence[int]) -> dict[str, object]:
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
        out.append(_listed_values(first, ids))
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
