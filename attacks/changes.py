"""What an adversarial prompt changed: the stretches of words that differ from the clean prompt.

Both prompts are cut into word / non-word tokens (``words.tokenize``); the
common start and end are set aside, and the middle is aligned: with
``difflib`` when it is short (the grouping every record so far was made
with), with Myers' O((N+M)D) diff when it is long (difflib's matching is
quadratic in the number of repeated tokens, minutes on a prompt of 10,000
words), and as one stretch when more than ``MAX_EDIT_TOKENS`` tokens differ.
Time and memory stay linear in the prompt for the few edits an attack makes.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from promptrobust.attacks.words import tokenize

_WORDLIKE = re.compile(r"\w")
#: Middles up to this many token pairs (len(a) * len(b)) are aligned by difflib.
_DIFFLIB_PAIRS = 250_000
#: Beyond this many inserted + deleted tokens the middle is one changed stretch.
MAX_EDIT_TOKENS = 500


@dataclass(frozen=True)
class Change:
    """One changed stretch: ``old`` at ``[old_start, old_end)`` of the clean
    prompt became ``new`` at ``[new_start, new_end)`` of the adversarial one
    (character offsets, surrounding spaces excluded)."""

    old: str
    new: str
    old_start: int
    old_end: int
    new_start: int
    new_end: int


def _span(tokens: Sequence[str], offsets: Sequence[int], lo: int, hi: int) -> tuple[str, int, int]:
    """The text of tokens [lo, hi) with its start and end, surrounding whitespace trimmed."""
    start = offsets[lo]
    text = "".join(tokens[lo:hi])
    stripped = text.strip()
    lead = len(text) - len(text.lstrip())
    return stripped, start + lead, start + lead + len(stripped)


def _offsets(tokens: Sequence[str]) -> list[int]:
    out = [0]
    for t in tokens:
        out.append(out[-1] + len(t))
    return out


def _myers(a: Sequence[str], b: Sequence[str], max_d: int) -> list[tuple[int, int, int, int]] | None:
    """The changed blocks (i1, i2, j1, j2) of a shortest edit script from ``a`` to
    ``b``, or None when it needs more than ``max_d`` insertions and deletions."""
    n, m = len(a), len(b)
    off = max_d + 1
    v = [0] * (2 * max_d + 3)  # furthest x on diagonal k = x - y, stored at v[off + k]
    trace: list[list[int]] = []  # v before each round d
    for d in range(max_d + 1):
        trace.append(list(v))
        for k in range(-d, d + 1, 2):
            x = v[off + k + 1] if k == -d or (k != d and v[off + k - 1] < v[off + k + 1]) else v[off + k - 1] + 1
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x, y = x + 1, y + 1
            v[off + k] = x
            if x >= n and y >= m:
                return _blocks(_path(trace, off, n, m))
    return None


def _path(trace: list[list[int]], off: int, n: int, m: int) -> list[tuple[int, int, int, int]]:
    """The moves (x0, y0, x1, y1) of the shortest edit path, from (0, 0) to (n, m)."""
    moves: list[tuple[int, int, int, int]] = []
    x, y = n, m
    for d in range(len(trace) - 1, -1, -1):
        v = trace[d]
        k = x - y
        pk = k + 1 if k == -d or (k != d and v[off + k - 1] < v[off + k + 1]) else k - 1
        px = v[off + pk]
        py = px - pk
        while x > px and y > py:  # equal tokens
            moves.append((x - 1, y - 1, x, y))
            x, y = x - 1, y - 1
        if d > 0:  # one insertion or deletion
            moves.append((px, py, x, y))
        x, y = px, py
    return moves[::-1]


def _blocks(moves: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int]]:
    """Runs of insertions and deletions between equal tokens, as (i1, i2, j1, j2)."""
    out: list[tuple[int, int, int, int]] = []
    run: list[int] | None = None
    for x0, y0, x1, y1 in moves:
        if x1 - x0 == 1 and y1 - y0 == 1:
            if run is not None:
                out.append((run[0], x0, run[1], y0))
                run = None
        elif run is None:
            run = [x0, y0]
    if run is not None and moves:
        out.append((run[0], moves[-1][2], run[1], moves[-1][3]))
    return out


def _joined(blocks: list[tuple[int, int, int, int]], a: Sequence[str]) -> list[tuple[int, int, int, int]]:
    """Blocks with a pure insertion or deletion joined to the change beside it
    when only spaces and punctuation lie between: a word split in two ("good"
    -> "g ood") is one change, as difflib groups it, not a change and an insertion."""
    out: list[tuple[int, int, int, int]] = []
    for block in blocks:
        if out:
            i1, i2, j1, j2 = out[-1]
            between = a[i2 : block[0]]
            pure = lambda b: b[0] == b[1] or b[2] == b[3]  # noqa: E731
            if all(not _WORDLIKE.search(t) for t in between) and (pure(out[-1]) or pure(block)):
                out[-1] = (i1, block[1], j1, block[3])
                continue
        out.append(block)
    return out


def changes(clean: str, adversarial: str) -> list[Change]:
    """Every changed stretch of words, in prompt order."""
    if clean == adversarial:
        return []
    a, b = list(tokenize(clean)), list(tokenize(adversarial))
    start = 0
    while start < len(a) and start < len(b) and a[start] == b[start]:
        start += 1
    end = 0
    while end < len(a) - start and end < len(b) - start and a[-1 - end] == b[-1 - end]:
        end += 1
    mid_a, mid_b = a[start : len(a) - end], b[start : len(b) - end]
    if len(mid_a) * len(mid_b) <= _DIFFLIB_PAIRS:
        matcher = difflib.SequenceMatcher(a=mid_a, b=mid_b, autojunk=False)
        blocks = [(i1, i2, j1, j2) for op, i1, i2, j1, j2 in matcher.get_opcodes() if op != "equal"]
    else:
        found = _myers(mid_a, mid_b, MAX_EDIT_TOKENS)
        blocks = _joined(found, mid_a) if found is not None else [(0, len(mid_a), 0, len(mid_b))]
    off_a, off_b = _offsets(a), _offsets(b)
    out: list[Change] = []
    for i1, i2, j1, j2 in blocks:
        old, o1, o2 = _span(a, off_a, start + i1, start + i2)
        new, n1, n2 = _span(b, off_b, start + j1, start + j2)
        if old or new:
            out.append(Change(old, new, o1, o2, n1, n2))
    return out


def substitutions(clean: str, adversarial: str) -> list[tuple[str, str]]:
    """(old, new) text of each changed stretch of words, in prompt order."""
    return [(c.old, c.new) for c in changes(clean, adversarial)]
