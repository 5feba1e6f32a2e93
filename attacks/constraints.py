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

    With ``limit``, only a diagonal band of the table is filled and any
    distance above ``limit`` is reported as ``limit + 1``, so long prompts
    cost O(len * limit) instead of O(len^2).
    """
    if a == b:
        return 0
    if len(a) < len(b):
        a, b = b, a
    if limit is not None and len(a) - len(b) > limit:
        return limit + 1
    if not b:
        return len(a)
    big = len(a) + len(b) + 1
    band = limit if limit is not None else big
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        lo = max(1, i - band)
        hi = min(len(b), i + band)
        cur = [big] * (len(b) + 1)
        if lo == 1:
            cur[0] = i
        ca = a[i - 1]
        best = cur[0] if lo == 1 else big
        for j in range(lo, hi + 1):
            cost = 0 if ca == b[j - 1] else 1
            v = min(prev[j - 1] + cost, prev[j] + 1, cur[j - 1] + 1)
            cur[j] = v
            best = min(best, v)
        if limit is not None and best > limit:
            return limit + 1
        prev = cur
    d = prev[len(b)]
    return d if limit is None or d <= limit else limit + 1


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
