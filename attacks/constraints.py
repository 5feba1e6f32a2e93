"""Constraints: which perturbed prompts are acceptable.

Every constraint implements ``attacks.base.Constraint``. Its ``reference``
attribute tells the search what ``original`` to pass: ``"clean"`` (the prompt
the attack started from: cumulative limits such as total edit distance or
meaning preservation) or ``"current"`` (the prompt before this step's
one-word change: local checks such as part of speech).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

from promptrobust.attacks.pos import PosTagger, load_spacy_tagger, tag_at
from promptrobust.attacks.sentence import CachedEncoder, angular_similarity, load_use
from promptrobust.attacks.words import word_spans

Reference = Literal["clean", "current"]


def levenshtein(a: str, b: str, limit: int | None = None) -> int:
    """Edit distance (insert, delete, substitute one character).

    With ``limit``, any distance above ``limit`` is reported as ``limit + 1``
    and the distance is found diagonal by diagonal (Landau and Vishkin's
    furthest-reaching method, runs of equal characters compared as slices):
    time about O(limit^2 log n) plus the comparisons, memory O(limit), so the
    Levenshtein constraint stays cheap and linear in the prompt's length.
    """
    if a == b:
        return 0
    if limit is None:
        return _full_table(a, b)
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    return _furthest_reaching(a, b, limit)


def _full_table(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j - 1] + (ca != cb), prev[j] + 1, cur[j - 1] + 1)
        prev = cur
    return prev[len(b)]


def common_run(a: str, b: str, i: int, j: int) -> int:
    """How many characters ``a[i:]`` and ``b[j:]`` share from the start (slices
    compared in growing steps, then halved: C comparisons, not a Python loop)."""
    most = min(len(a) - i, len(b) - j)
    if most <= 0 or a[i] != b[j]:  # most diagonals stop at once: no slice made
        return 0
    done, step = 1, 8
    while done < most:
        hi = min(most, done + step)
        if a[i + done : i + hi] == b[j + done : j + hi]:
            done, step = hi, step * 2
            continue
        while hi - done > 1:  # the first difference lies in [done, hi)
            mid = (done + hi) // 2
            if a[i + done : i + mid] == b[j + done : j + mid]:
                done = mid
            else:
                hi = mid
        return done
    return done


def _furthest_reaching(a: str, b: str, limit: int) -> int:
    """The distance if it is <= ``limit``, else ``limit + 1``. ``reach[k]`` is the
    furthest row i of ``a`` reached on diagonal k = j - i with the edits so far."""
    n, m = len(a), len(b)
    target = m - n
    lowest = -(limit + 2)
    reach: dict[int, int] = {0: common_run(a, b, 0, 0)}
    if target == 0 and reach[0] >= n:
        return 0
    for d in range(1, limit + 1):
        nxt: dict[int, int] = {}
        # a diagonal more than the edits left away from the target diagonal cannot reach it
        for k in range(max(-d, -n, target - (limit - d)), min(d, m, target + (limit - d)) + 1):
            i = max(
                reach.get(k, lowest) + 1,  # substitute
                reach.get(k - 1, lowest),  # insert b[j]: j moves, i stays
                reach.get(k + 1, lowest) + 1,  # delete a[i]: i moves
            )
            i = min(i, n, m - k)
            if i < max(0, -k):
                continue
            i += common_run(a, b, i, i + k)
            nxt[k] = i
            if k == target and i >= n:
                return d
        reach = nxt
    return limit + 1


class MaxLevenshtein:
    """Total character edit distance from the clean prompt stays within a limit
    (DeepWordBug: 30)."""

    name = "levenshtein"
    reference: Reference = "clean"

    def __init__(self, max_distance: int = 30) -> None:
        if max_distance < 0:
            raise ValueError(f"max_distance must be >= 0, got {max_distance}")
        self.max_distance = max_distance

    def allowed(self, original: str, candidates: Sequence[str]) -> list[bool]:
        m = self.max_distance
        return [levenshtein(original, c, m) <= m for c in candidates]


def window_bounds(index: int, length: int, window: float) -> tuple[int, int]:
    """First and last word of a ``window``-word window centred on word
    ``index`` of a text of ``length`` words, shifted to stay inside the text
    (TextAttack's ``text_window_around_index``; ``inf`` = the whole text)."""
    half = (window - 1) / 2.0
    if index - half < 0:
        return 0, int(min(window - 1, length - 1))
    if index + half >= length:
        return int(max(0, length - window)), length - 1
    return index - math.ceil(half), index + math.floor(half)


def first_changed_word(a: list[str], b: list[str]) -> int | None:
    """Index of the first word where two word lists differ (None if equal)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _window_text(text: str, spans: list[tuple[int, int]], index: int, window: float) -> str:
    if not spans:
        return text
    index = min(index, len(spans) - 1)
    first, last = window_bounds(index, len(spans), window)
    return text[spans[first][0] : spans[last][1]]


class SentenceSimilarity:
    """Candidates must stay at least ``threshold`` similar to the reference
    prompt under a sentence encoder, as TextAttack's USE constraint measures it:

    * ``metric``: ``"cosine"`` or ``"angular"`` (1 - arccos(cos)/pi);
    * ``window``: number of words around the changed word compared in both
      texts (``None``: the whole text, from its first to its last word);
    * ``skip_shorter_than_window``: candidates with fewer words than the
      window pass without encoding (TextFooler: texts under 15 words);
    * ``reference``: ``"clean"`` (compare against the original prompt) or
      ``"current"`` (against the prompt before this step's change).

    All candidates of a step are encoded in one batch.
    """

    name = "sentence_similarity"

    def __init__(
        self,
        threshold: float,
        *,
        encoder: CachedEncoder | None = None,
        metric: str = "cosine",
        window: int | None = None,
        skip_shorter_than_window: bool = False,
        reference: Reference = "clean",
        loader: Callable[[], CachedEncoder] = load_use,
    ) -> None:
        if not -1.0 <= threshold <= 1.0:
            raise ValueError(
                f"similarity threshold must be in [-1, 1], got {threshold}"
            )
        if metric not in ("cosine", "angular"):
            raise ValueError(f"unknown similarity metric {metric!r}; use 'cosine' or 'angular'")
        if window is not None and window < 1:
            raise ValueError(f"similarity window must be >= 1 word or None, got {window}")
        if reference not in ("clean", "current"):
            raise ValueError(f"reference must be 'clean' or 'current', got {reference!r}")
        self.threshold = threshold
        self.metric = metric
        self.window = window
        self.skip_shorter_than_window = skip_shorter_than_window
        self.reference: Reference = reference
        self._encoder = encoder
        self._loader = loader

    @property
    def loader(self) -> Callable[[], CachedEncoder]:
        """Where the encoder comes from when none was given."""
        return self._loader

    @property
    def encoder(self) -> CachedEncoder:
        if self._encoder is None:
            self._encoder = self._loader()
        return self._encoder

    def describe(self) -> dict[str, object]:
        """The settings that decide what passes (for ``outcome.settings``)."""
        return {
            "threshold": self.threshold,
            "metric": self.metric,
            "window": self.window,
            "skip_shorter_than_window": self.skip_shorter_than_window,
            "compare_against": "original" if self.reference == "clean" else "previous step",
            "encoder": self.encoder.name if self._encoder is not None else "not loaded",
        }

    def similarities(self, original: str, candidates: Sequence[str]) -> list[float]:
        """The similarity of each candidate to ``original``, as the constraint
        measures it (1.0 for candidates the window rule skips)."""
        size = math.inf if self.window is None else self.window
        orig_spans = word_spans(original)
        orig_words = [original[a:b] for a, b in orig_spans]
        out: list[float | None] = []
        pairs: list[tuple[str, str]] = []
        for cand in candidates:
            spans = word_spans(cand)
            if self.skip_shorter_than_window and len(spans) < size:
                out.append(1.0)
                continue
            where = first_changed_word(orig_words, [cand[a:b] for a, b in spans])
            if where is None:
                out.append(1.0)
                continue
            pairs.append(
                (
                    _window_text(original, orig_spans, where, size),
                    _window_text(cand, spans, where, size),
                )
            )
            out.append(None)
        if pairs:
            emb = self.encoder.encode([t for pair in pairs for t in pair])
            cos = np.clip(np.sum(emb[0::2] * emb[1::2], axis=1), -1.0, 1.0)
            sims = angular_similarity(cos) if self.metric == "angular" else cos
            it = iter(float(x) for x in sims)
            out = [next(it) if v is None else v for v in out]
        return [float(v) for v in out]  # type: ignore[arg-type]

    def allowed(self, original: str, candidates: Sequence[str]) -> list[bool]:
        if not candidates:
            return []
        return [s >= self.threshold for s in self.similarities(original, candidates)]


def _changed_word_start(original: str, candidate: str) -> int:
    """Start offset of the word where ``candidate`` first differs."""
    p = 0
    n = min(len(original), len(candidate))
    while p < n and original[p] == candidate[p]:
        p += 1
    while p > 0 and (original[p - 1].isalnum() or original[p - 1] in "_'-"):
        p -= 1
    return p


class PartOfSpeechMatch:
    """The replacement word has the same (universal) part of speech, in
    context, as the word it replaces (TextFooler)."""

    name = "part_of_speech"
    reference: Reference = "current"

    def __init__(
        self,
        *,
        tagger: PosTagger | None = None,
        allow_noun_verb_swap: bool = False,
        loader: Callable[[], PosTagger] = load_spacy_tagger,
    ) -> None:
        self._tagger = tagger
        self._loader = loader
        self.allow_noun_verb_swap = allow_noun_verb_swap

    @property
    def tagger(self) -> PosTagger:
        if self._tagger is None:
            self._tagger = self._loader()
        return self._tagger

    def _same(self, a: str | None, b: str | None) -> bool:
        if a is None or b is None:
            return False
        if a == b:
            return True
        return self.allow_noun_verb_swap and {a, b} <= {"NOUN", "VERB"}

    def allowed(self, original: str, candidates: Sequence[str]) -> list[bool]:
        if not candidates:
            return []
        tagged = self.tagger.tag([original, *candidates])
        base = tagged[0]
        out = []
        for cand, spans in zip(candidates, tagged[1:]):
            start = _changed_word_start(original, cand)
            out.append(self._same(tag_at(base, start), tag_at(spans, start)))
        return out
