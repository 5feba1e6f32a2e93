"""A label's tokens, and which log-probs score it: shared by the backends that read chosen token ids.

vLLM (in process, and its server's ``logprob_token_ids``) gives the
log-probabilities of listed token ids at one generated position. A label of
several tokens is scored along a trie: each inner node (the prompt plus a
label prefix) is one position to read, and a label's log-probability is the
sum over its tokens (``sum_choice_logprobs``).

Label scoring is exact only when the labels' tokens can tell them apart
(``check_label_ids``, every backend that scores by token ids): a label with no
tokens (a tokenizer whose normaliser drops it, or an empty label) would score
log 1 whatever the input, and two labels with the same tokens (a tokenizer
without byte fallback maps unknown words to one ``[UNK]``) would always tie.
Both are refused in one line (``IndistinctLabels``), never scored. And the
probabilities read at one position are of distinct tokens, so they add up to
at most 1 (``excess_mass``: beyond ``MASS_TOLERANCE``, the answer is one no
model gives).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from promptrobust.engine.serving.backends.base import MASS_TOLERANCE, BackendError

__all__ = ["MASS_TOLERANCE", "IndistinctLabels", "TokenIds", "check_label_ids", "continuation_ids", "excess_mass",
           "sum_choice_logprobs", "trie_queries"]

TokenIds = tuple[int, ...]


class IndistinctLabels(BackendError):
    """Labels whose tokens cannot tell them apart in this model's tokenizer (one line naming them and the way out)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, setting="mode")


def check_label_ids(labels: Sequence[str], ids: Sequence[Sequence[int]]) -> None:
    """Raise ``IndistinctLabels`` when a label has no tokens or two distinct labels have the same tokens."""
    seen: dict[tuple[int, ...], str] = {}
    for label, tokens in zip(labels, ids):
        key = tuple(tokens)
        if not key:
            raise IndistinctLabels(
                f"label {label!r} becomes no tokens after the input in this model's tokenizer, so it would score "
                "log-probability 0 (probability 1) on every sample: use mode generate, or label words the "
                "tokenizer keeps")
        other = seen.get(key)
        if other is not None and other != label:
            shown = list(key) if len(key) <= 8 else [*key[:8], "..."]
            raise IndistinctLabels(
                f"labels {other!r} and {label!r} have the same token ids {shown} in this model's tokenizer (it maps "
                "both to the same tokens), so label scoring cannot tell them apart: use mode generate, or label "
                "words the tokenizer knows")
        seen[key] = label


def excess_mass(logprobs: Iterable[float]) -> float | None:
    """The total probability of distinct tokens read at one position when it is more than 1 +
    ``MASS_TOLERANCE`` (no model gives that), else None."""
    total = math.fsum(math.exp(min(v, 50.0)) for v in logprobs if not math.isnan(v))
    return total if total > 1.0 + MASS_TOLERANCE else None


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
