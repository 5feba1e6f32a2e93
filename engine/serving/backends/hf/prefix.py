"""Prefix reuse in the hf backend: prefix groups, the window's plan, and the persistent key/value cache.

The requests of one candidate prompt start with the same tokens (chat
template, instruction, few-shot block) and differ from the sample on. Those
tokens are computed once per candidate, kept as key/value tensors, and reused
by every later batch of the same candidate; the cache is an LRU bounded by a
byte budget.

The backend does not know where an instruction ends, so groups are found on
the token ids alone (``prefix_groups``): split a set of sequences by the token
after their common prefix, recursively, and stop at the level where the split
would leave at least half of the sequences alone. Two candidates differ
somewhere in their instruction, so a split between candidates leaves each
sequence with the rest of its candidate; the samples of one candidate diverge
right after the instruction, so that split leaves most of them alone: that is
where the group's prefix ends.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

#: A cached prefix this many tokens shorter than the one asked for is used as it is
#: (the few extra tokens run in each row's tail) instead of storing a near copy.
PREFIX_SLACK = 8
#: Shorter common prefixes are not worth a separate forward pass.
MIN_SHARED_PREFIX = 8


@dataclass
class PrefixEntry:
    """One prefix's key/value tensors: per layer (keys, values), each (1, heads, length, head_dim)."""

    tokens: tuple[int, ...]
    layers: list[tuple[Any, Any]]
    nbytes: int

    @classmethod
    def of(cls, tokens: tuple[int, ...], layers: list[tuple[Any, Any]]) -> "PrefixEntry":
        """An entry owning ``layers``, its size counted from the tensors."""
        nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in layers)
        return cls(tokens, layers, nbytes)


@dataclass
class PrefixStats:
    hits: int = 0
    partial_hits: int = 0
    misses: int = 0
    evictions: int = 0
    #: prefix positions computed (a miss computes only what no cached prefix already covers)
    positions: int = 0


def common_prefix_length(seqs: Sequence[Sequence[int]]) -> int:
    return len(os.path.commonprefix([list(s) for s in seqs])) if seqs else 0


def prefix_groups(seqs: Sequence[Sequence[int]], idx: Sequence[int] | None = None) -> list[tuple[int, list[int]]]:
    """Groups of sequences that share a candidate's prefix: (prefix length, indices sorted by token ids).

    A group's prefix always leaves each of its sequences at least one token of
    its own; a lone sequence forms a group with prefix length 0.
    """
    order = sorted(range(len(seqs)) if idx is None else idx, key=lambda i: list(seqs[i]))
    out: list[tuple[int, list[int]]] = []
    _split(seqs, order, out)
    return out


def _split(seqs: Sequence[Sequence[int]], order: list[int], out: list[tuple[int, list[int]]]) -> None:
    if list(seqs[order[0]]) == list(seqs[order[-1]]):  # one sequence (maybe repeated: one per choice)
        out.append((0, order))
        return
    shortest = min(len(seqs[i]) for i in order)
    # sorted order: the common prefix of all is that of the first and the last
    shared = min(common_prefix_length([seqs[order[0]], seqs[order[-1]]]), shortest - 1)
    children: list[list[int]] = []
    for i in order:
        if children and seqs[children[-1][0]][shared] == seqs[i][shared]:
            children[-1].append(i)
        else:
            children.append([i])
    alone = sum(1 for c in children if list(seqs[c[0]]) == list(seqs[c[-1]]))
    if len(children) == 1 or 2 * alone >= len(order):
        out.append((shared, order))
        return
    for c in children:
        _split(seqs, c, out)


class PrefixCache:
    """LRU of prefix key/value tensors within ``budget_bytes`` (0: compute every time, keep nothing)."""

    def __init__(self, budget_bytes: int) -> None:
        if budget_bytes < 0:
            raise ValueError("prefix cache budget must be >= 0 bytes")
        self.budget_bytes = budget_bytes
        self.entries: OrderedDict[tuple[int, ...], PrefixEntry] = OrderedDict()
        self.bytes = 0
        self.stats = PrefixStats()

    def clear(self) -> None:
        self.entries.clear()
        self.bytes = 0

    def longest_within(self, tokens: tuple[int, ...], minimum: int) -> PrefixEntry | None:
        """The longest start of ``tokens`` that some cached entry holds (at least ``minimum`` tokens).

        A cached prefix's first k positions are valid for any input that
        starts with the same k tokens (attention is causal), so an entry is
        sliced to the common part: another candidate of the same instruction
        reuses everything before the first changed word.
        """
        best: PrefixEntry | None = None
        best_n = minimum - 1
        for key, entry in self.entries.items():
            n = common_prefix_length([key, tokens])
            if n > best_n:
                best, best_n = entry, n
        if best is None:
            return None
        self.entries.move_to_end(best.tokens)
        return best if best_n == len(best.tokens) else _sliced(best, best_n)

    def obtain(
        self,
        tokens: tuple[int, ...],
        compute: Callable[[tuple[int, ...], PrefixEntry | None], PrefixEntry],
        minimum: int,
    ) -> PrefixEntry:
        """The entry for ``tokens`` or a slightly shorter cached one; computes (from the longest cached start) on a miss."""
        entry = self.entries.get(tokens)
        if entry is not None:
            self.entries.move_to_end(tokens)
            self.stats.hits += 1
            return entry
        start = self.longest_within(tokens, minimum)
        if start is not None and len(tokens) - len(start.tokens) <= PREFIX_SLACK:
            self.stats.partial_hits += 1
            return start
        self.stats.misses += 1
        entry = compute(tokens, start)
        self.stats.positions += len(tokens) - (len(start.tokens) if start is not None else 0)
        self.put(entry)
        return entry

    def missing(self, wanted: Sequence[tuple[int, ...]], minimum: int) -> list[tuple[tuple[int, ...], PrefixEntry | None]]:
        """The prefixes of ``wanted`` that ``obtain`` would compute, each with the cached start it would continue from.

        Lets the backend compute several missing prefixes in one forward pass
        (then ``add_computed`` each) instead of one pass per prefix.
        """
        out: list[tuple[tuple[int, ...], PrefixEntry | None]] = []
        for tokens in sorted(set(wanted)):
            if tokens in self.entries:
                continue
            start = self.longest_within(tokens, minimum)
            if start is not None and len(tokens) - len(start.tokens) <= PREFIX_SLACK:
                continue
            # as ``obtain`` one after another would: a prefix planned just before may serve this one
            if out and len(tokens) - common_prefix_length([out[-1][0], tokens]) <= PREFIX_SLACK:
                continue
            out.append((tokens, start))
        return out

    def add_computed(self, entry: PrefixEntry, start: PrefixEntry | None) -> None:
        """Store an entry computed outside ``obtain`` (a miss that computed ``entry`` past ``start``)."""
        self.stats.misses += 1
        self.stats.positions += len(entry.tokens) - (len(start.tokens) if start is not None else 0)
        self.put(entry)

    def put(self, entry: PrefixEntry) -> None:
        if entry.nbytes > self.budget_bytes or entry.tokens in self.entries:
            return
        self.entries[entry.tokens] = entry
        self.bytes += entry.nbytes
        while self.bytes > self.budget_bytes:
            _, old = self.entries.popitem(last=False)
            self.bytes -= old.nbytes
            self.stats.evictions += 1


def plan_prefixes(encoded: Sequence[Sequence[int]]) -> tuple[dict[tuple[int, ...], int], list[tuple[int, int]]]:
    """The prefix each input of a window runs after, and its place in the window's length order.

    Returns (input tokens -> length of its candidate's prefix, for inputs whose
    group shares at least ``MIN_SHARED_PREFIX`` tokens; and per input the sort key
    (length after its prefix, group number)).
    """
    planned: dict[tuple[int, ...], int] = {}
    sort_key: list[tuple[int, int]] = [(0, 0)] * len(encoded)
    for g, (shared, rows) in enumerate(prefix_groups(encoded)):
        shares = len(rows) >= 2 and shared >= MIN_SHARED_PREFIX
        for i in rows:
            if shares:
                planned[tuple(encoded[i])] = shared
            sort_key[i] = (len(encoded[i]) - (shared if shares else 0), g)
    return planned, sort_key


def _sliced(entry: PrefixEntry, n: int) -> PrefixEntry:
    """The first ``n`` positions of a cached entry (views, never stored)."""
    layers = [(k[:, :, :n], v[:, :, :n]) for k, v in entry.layers]
    return PrefixEntry(entry.tokens[:n], layers, 0)


__all__ = ["MIN_SHARED_PREFIX", "PREFIX_SLACK", "PrefixCache", "PrefixEntry", "PrefixStats", "common_prefix_length",
           "plan_prefixes", "prefix_groups"]
