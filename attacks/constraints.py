"""Constraints: which perturbed prompts are acceptable.

Every constraint implements ``attacks.base.Constraint``. Its ``reference``
attribute tells the search what ``original`` to pass: ``"clean"`` (the prompt
the attack started from: cumulative limits such as total edit distance or
meaning preservation) or ``"current"`` (the prompt before this step's
one-word change: local checks such as part of speech).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from promptrobust.attacks.pos import PosTagger, load_spacy_tagger, tag_at
from promptrobust.attacks.sentence import CachedEncoder, load_use

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


class SentenceSimilarity:
    """Candidates must stay at least ``threshold`` similar to the clean prompt
    under a sentence encoder (see ``attacks.sentence`` for what the numbers
    mean). All candidates of a step are encoded in one batch."""

    name = "sentence_similarity"
    reference: Reference = "clean"

    def __init__(
        self,
        threshold: float,
        *,
        encoder: CachedEncoder | None = None,
        metric: str = "cosine",
        loader: Callable[[], CachedEncoder] = load_use,
    ) -> None:
        if not -1.0 <= threshold <= 1.0:
            raise ValueError(
                f"similarity threshold must be in [-1, 1], got {threshold}"
            )
        self.threshold = threshold
        self.metric = metric
        self._encoder = encoder
        self._loader = loader

    @property
    def encoder(self) -> CachedEncoder:
        if self._encoder is None:
            self._encoder = self._loader()
        return self._encoder

    def allowed(self, original: str, candidates: Sequence[str]) -> list[bool]:
        if not candidates:
            return []
        sims = self.encoder.similarities(original, candidates, self.metric)
        return [bool(s >= self.threshold) for s in sims]


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
