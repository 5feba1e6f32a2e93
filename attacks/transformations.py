"""Word transformations (``attacks.base.WordTransformation``).

Randomness: a transformation made with ``seed`` draws its random choices from
a ``random.Random`` seeded by (seed, transformation, word position, word), so
what it proposes for a word never depends on which other words were visited
before, and the same seed always gives the same candidates.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from promptrobust.attacks.base import WordSite
from promptrobust.attacks.chars import CharEdit
from promptrobust.attacks.embeddings import WordEmbedding, is_antonym, load_glove
from promptrobust.attacks.words import match_case


def site_rng(seed: int, name: str, site: WordSite) -> random.Random:
    """A generator that depends only on the seed, the transformation and the site."""
    return random.Random(f"{seed}|{name}|{site.index}|{site.word}")


class CharacterEdits:
    """Applies each character edit once to the word (one random draw each)."""

    def __init__(
        self, edits: Sequence[CharEdit], *, seed: int = 0, name: str = "char_edits"
    ) -> None:
        if not edits:
            raise ValueError("CharacterEdits needs at least one edit")
        self.edits = tuple(edits)
        self.seed = seed
        self.name = name

    def replacements(self, site: WordSite) -> list[str]:
        word = site.word
        rng = site_rng(self.seed, self.name, site)
        out: list[str] = []
        for edit in self.edits:
            for new in edit(word, rng):
                if new and new != word and new not in out:
                    out.append(new)
        return out


class EmbeddingNeighbours:
    """Nearest words in a word-vector space (TextBugger: top 5; TextFooler:
    50 with cosine >= 0.6). Listed antonyms are dropped; the replacement gets
    the original word's capitalisation."""

    def __init__(
        self,
        *,
        k: int,
        min_cos: float | None = None,
        embedding: WordEmbedding | None = None,
        loader: Callable[[], WordEmbedding] = load_glove,
        filter_antonyms: bool = True,
        name: str = "embedding_neighbours",
    ) -> None:
        if k <= 0:
            raise ValueError(f"number of neighbours must be positive, got {k}")
        self.k = k
        self.min_cos = min_cos
        self._embedding = embedding
        self._loader = loader
        self.filter_antonyms = filter_antonyms
        self.name = name

    @property
    def embedding(self) -> WordEmbedding:
        if self._embedding is None:
            self._embedding = self._loader()
        return self._embedding

    def replacements(self, site: WordSite) -> list[str]:
        word = site.word
        out: list[str] = []
        for cand, _cos in self.embedding.neighbours(word.lower(), self.k, self.min_cos):
            if self.filter_antonyms and is_antonym(word, cand):
                continue
            new = match_case(word, cand)
            if new != word and new not in out:
                out.append(new)
        return out
