"""A label's tokens, and which log-probs score it: shared by the backends that read chosen token ids.

vLLM (in process, and its server's ``logprob_token_ids``) gives the
log-probabilities of listed token ids at one generated position. A label of
several tokens is scored along a trie: each inner node (the prompt plus a
label prefix) is one position to read, and a label's log-probability is the
sum over its tokens (``sum_choice_logprobs``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["TokenIds", "continuation_ids", "sum_choice_logprobs", "trie_queries"]

TokenIds = tuple[int, ...]


def continuation_ids(
    context_ids: Sequence[int], full_ids: Sequence[int], isolated_ids: Sequence[int]
) -> TokenIds:
    """Token ids of a choice as a continuation of the context.

    ``full_ids`` is the tokenisation of context+choice. When the context's own
    tokens are a prefix of it, the rest is the choice exactly as the model
    would see it in running text (this handles SentencePiece's word-start
    markers). When the boundary merged (e.g. the context ends in a space that
    the tokenizer glues to the next word), the context tokens are fixed (they
    are what the model conditions on, and what the prefix cache holds), so the
    choice's own tokenisation ``isolated_ids`` is appended instead.
    """
    n = len(context_ids)
    if len(full_ids) >= n and list(full_ids[:n]) == list(context_ids):
        return tuple(full_ids[n:])
    return tuple(isolated_ids)


def trie_queries(choices: Sequence[TokenIds]) -> dict[TokenIds, tuple[int, ...]]:
    """For each inner trie node (a choice prefix), the sorted next-token ids to read there.

    The empty prefix is the prompt itself; a single-token choice only needs it.
    """
    nodes: dict[TokenIds, set[int]] = {}
    for ids in choices:
        for i, tok in enumerate(ids):
            nodes.setdefault(tuple(ids[:i]), set()).add(tok)
    return {prefix: tuple(sorted(toks)) for prefix, toks in nodes.items()}


def sum_choice_logprobs(
    choices: Sequence[TokenIds], node_logprobs: Mapping[TokenIds, Mapping[int, float]]
) -> tuple[float, ...]:
    """Each choice's log-probability: the sum over its tokens of log p(token | prompt, earlier tokens)."""
    totals = []
    for ids in choices:
        totals.append(
            sum(node_logprobs[tuple(ids[:i])][tok] for i, tok in enumerate(ids))
        )
    return tuple(float(t) for t in totals)
