"""Seeded selection of evaluation samples.

A selection is a seeded random order of the chosen items: ``--limit N`` takes
its first N, so a small limit is a random sample too (data files are often
sorted by label: a prefix in file order would hold one label only), a larger
limit only appends, and the same seed gives the same samples everywhere.

``first=True`` is the paper's own selection instead: the first items in source
order (per group for stratified tasks), whatever the seed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

T = TypeVar("T")


def seeded_subset(items: Sequence[T], k: int | None, seed: int, *, first: bool = False) -> list[T]:
    """``k`` items drawn with ``seed`` (all when ``k`` is None or too large), in a seeded
    random order; with ``first`` the first ``k`` in source order, as promptbench takes them."""
    n = len(items) if k is None else min(k, len(items))
    if first:
        return list(items[:n])
    chosen = random.Random(seed).sample(range(len(items)), n)
    return [items[i] for i in chosen]


def seeded_positions(n: int, k: int | None, seed: int, limit: int, *, first: bool = False) -> list[int]:
    """The first ``limit`` positions of ``seeded_subset(range(n), k, seed, first=first)``, in its
    order, computed in memory for ``limit`` positions, not ``n``: a data file's rows can be read
    by position, only those a ``--limit`` uses, and still be the samples a full read draws.

    ``seeded_subset`` draws with ``random.Random(seed).sample``; this replays that draw's steps
    (CPython's two methods: a partial shuffle of a pool when the population is small next to the
    sample, else rejection of repeats from a set), stopping after ``limit`` of them, with the pool
    kept as a dict of the positions it swapped. ``tests/test_data_file_bounds.py`` checks it
    against ``random.sample`` over populations, sample sizes, seeds and limits."""
    size = n if k is None else min(k, n)
    limit = max(0, min(limit, size))
    if first:
        return list(range(limit))
    rng = random.Random(seed)
    out: list[int] = []
    setsize = 21
    if size > 5:
        setsize += 4 ** math.ceil(math.log(size * 3, 4))
    if n <= setsize:  # random.sample's pool: a partial Fisher-Yates shuffle
        swapped: dict[int, int] = {}
        for i in range(limit):
            j = rng.randrange(n - i)  # randrange(m) is random's _randbelow(m)
            out.append(swapped.get(j, j))
            swapped[j] = swapped.get(n - i - 1, n - i - 1)
        return out
    seen: set[int] = set()
    for _ in range(limit):  # random.sample's set: draw again on a repeat
        j = rng.randrange(n)
        while j in seen:
            j = rng.randrange(n)
        seen.add(j)
        out.append(j)
    return out


def stratified_subset(
    items: Sequence[T],
    key: Callable[[T], Hashable],
    total: int | None,
    seed: int,
    *,
    per_group_cap: int | None = None,
    first: bool = False,
) -> list[T]:
    """``total`` items spread as evenly as possible over the groups ``key`` defines.

    Groups that are too small give their share to the others; ``per_group_cap``
    bounds every group (MMLU: at most 10 per subject). The result is in a
    seeded random order, so any prefix is mixed across groups. With ``first``:
    the first items of each group in source order, groups in order of first
    appearance (a remainder goes to the earliest groups), no shuffling.
    """
    groups: dict[Hashable, list[int]] = {}
    for i, item in enumerate(items):
        groups.setdefault(key(item), []).append(i)
    order = list(groups) if first else sorted(groups, key=repr)
    rng = random.Random(seed)
    caps = {g: len(groups[g]) if per_group_cap is None else min(per_group_cap, len(groups[g])) for g in order}
    want = sum(caps.values()) if total is None else min(total, sum(caps.values()))
    quota = {g: 0 for g in order}
    remaining = want
    open_groups = [g for g in order if caps[g] > 0]
    while remaining > 0 and open_groups:
        share, extra = divmod(remaining, len(open_groups))
        if first:
            lucky = set(open_groups[:extra])
        else:
            lucky = set(rng.sample(open_groups, extra)) if extra else set()
        for g in open_groups:
            add = min(share + (1 if g in lucky else 0), caps[g] - quota[g])
            quota[g] += add
            remaining -= add
        open_groups = [g for g in open_groups if quota[g] < caps[g]]
    chosen: list[int] = []
    for g in order:
        chosen.extend(groups[g][: quota[g]] if first else rng.sample(groups[g], quota[g]))
    if not first:
        rng.shuffle(chosen)
    return [items[i] for i in chosen]
