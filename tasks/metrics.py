"""The paper's metrics, all on the 0..1 scale.

Predictions are what ``Task.parse`` returns; None (unparseable) always scores
as wrong, also for an unanswerable SQuAD question.
"""

from __future__ import annotations

import collections
import math
import re
import string
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from promptrobust.tasks.base import Metric, Sample


class Accuracy(Metric):
    """1 when the parsed label equals the sample's label."""

    name = "accuracy"
    decomposable = True

    def sample_score(self, prediction: object, sample: Sample) -> float:
        return 1.0 if prediction is not None and prediction == sample.target else 0.0


class MacroF1(Metric):
    """The unweighted mean of per-label F1 over the labels that occur as a target
    or a prediction (scikit-learn's ``f1_score(average="macro")``); an unparseable
    answer is a miss for its sample's label and a false alarm for none.

    Not decomposable, so no early stopping. Its per-sample scores for intervals
    and paired tests are contributions whose mean is the corpus score: a right
    answer on a sample of label c adds ``2 / (C * D_c)`` to the sum, where C is
    the number of labels counted and D_c is how often c was predicted plus how
    often it is the target; a wrong answer adds 0. Resampling them holds each
    label's D_c fixed: the same linearised bootstrap BLEU's contributions get.
    """

    name = "macro_f1"
    decomposable = False

    def sample_score(self, prediction: object, sample: Sample) -> float:
        return 1.0 if prediction is not None and prediction == sample.target else 0.0

    @staticmethod
    def _denominators(predictions: Sequence[object], samples: Sequence[Sample]) -> dict[Any, int]:
        counts: collections.Counter[Any] = collections.Counter(s.target for s in samples)
        counts.update(p for p in predictions if p is not None)
        return dict(counts)

    def corpus_score(self, predictions: Sequence[object], samples: Sequence[Sample]) -> float:
        if not samples:
            return 0.0
        return math.fsum(self.sample_scores(predictions, samples)) / len(samples)

    def sample_scores(self, predictions: Sequence[object], samples: Sequence[Sample]) -> list[float]:
        denominators = self._denominators(predictions, samples)
        scale = 2.0 * len(samples) / max(1, len(denominators))
        return [scale / denominators[s.target] if p is not None and p == s.target else 0.0
                for p, s in zip(predictions, samples)]

    def majority_score(self, targets: Sequence[object]) -> float | None:
        """Always answering the most frequent label (share p) scores 2p / (1 + p) on it and 0
        on the other labels: macro-F1 = 2p / ((1 + p) * number of labels)."""
        if not targets:
            return None
        counts = collections.Counter(_hashable(t) for t in targets)
        p = max(counts.values()) / len(targets)
        return 2.0 * p / ((1.0 + p) * len(counts))


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


# --- SQuAD v2 -----------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def squad_normalize(text: str) -> str:
    """Lowercase, drop punctuation and the articles a/an/the, squeeze spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def squad_f1(prediction: str, reference: str) -> float:
    """Token-level F1 of two answers; an empty answer means "unanswerable"."""
    pred = squad_normalize(prediction).split()
    ref = squad_normalize(reference).split()
    if not pred or not ref:
        return 1.0 if pred == ref else 0.0
    common = collections.Counter(pred) & collections.Counter(ref)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(pred)
    recall = overlap / len(ref)
    return 2 * precision * recall / (precision + recall)


def references(target: object) -> list[str]:
    """A target as a list of reference answers (a string is one reference)."""
    if isinstance(target, (list, tuple)):
        return [str(t) for t in target]
    return [str(target)]


class ExactMatch(Metric):
    """1 when the answer equals one of the references after SQuAD's normalisation
    (lowercase, punctuation and the articles a/an/the dropped, spaces squeezed):
    the exact match of SQuAD's evaluation script, for a user's free-text task."""

    name = "exact_match"
    decomposable = True

    def sample_score(self, prediction: object, sample: Sample) -> float:
        if prediction is None:
            return 0.0
        answer = squad_normalize(str(prediction))
        return 1.0 if any(answer == squad_normalize(ref) for ref in references(sample.target)) else 0.0


class SquadF1(Metric):
    """SQuAD v2 F1: the best F1 over the reference answers.

    ``sample.target`` is the list of reference answers; an empty list means the
    question is unanswerable, and the right prediction is the empty string.
    """

    name = "squad_v2_f1"
    decomposable = True

    def sample_score(self, prediction: object, sample: Sample) -> float:
        if prediction is None:
            return 0.0
        refs = list(sample.target) or [""]
        return max(squad_f1(str(prediction), ref) for ref in refs)


# --- BLEU ---------------------------------------------------------------------


class CorpusBleu(Metric):
    """Corpus BLEU from sacrebleu, divided by 100, as promptbench computes it:
    13a tokens, n-grams up to 4, one reference, no smoothing (a corpus with no
    matching 4-gram scores 0).

    Not decomposable: corpus BLEU is not a mean of per-sample scores, so a
    partial corpus bounds nothing. ``sample_score`` gives sentence BLEU for
    per-sample logs only.
    """

    name = "bleu"
    decomposable = False

    def __init__(self, tokenize: str = "13a") -> None:
        self.tokenize = tokenize

    def sample_score(self, prediction: object, sample: Sample) -> float:
        import sacrebleu

        hyp = "" if prediction is None else str(prediction)
        return sacrebleu.sentence_bleu(hyp, [str(sample.target)], tokenize=self.tokenize).score / 100.0

    def corpus_score(self, predictions: Sequence[object], samples: Sequence[Sample]) -> float:
        import sacrebleu

        if not samples:
            return 0.0
        hyps = ["" if p is None else str(p) for p in predictions]
        refs = [str(s.target) for s in samples]
        return sacrebleu.corpus_bleu(hyps, [refs], tokenize=self.tokenize, smooth_method="none").score / 100.0


# --- Math exact match ---------------------------------------------------------

_NUMBER_RE = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_FRACTION_RE = re.compile(r"^[+-]?\d+/[+-]?\d+$")


def normalize_math_answer(answer: str) -> str:
    """Canonical form of a math answer, so equal values compare equal.

    Numbers (integers, decimals, fractions such as ``1/2``, thousands
    separators) become an exact rational written ``n`` or ``n/d``, so ``3.0``,
    ``3`` and ``6/2`` agree; booleans become ``true``/``false``; anything else
    (expressions, option letters, base-n numbers) is lowercased with spaces
    and trailing periods removed.
    """
    text = answer.strip().strip("$").strip()
    while text.endswith(".") and not _NUMBER_RE.match(text):
        text = text[:-1].rstrip()
    compact = "".join(text.split())
    low = compact.lower()
    if low in ("true", "false"):
        return low
    number = _as_fraction(compact.replace(",", "") if re.fullmatch(r"[+-]?\d{1,3}(,\d{3})+(\.\d+)?", compact) else compact)
    if number is not None:
        return str(number)
    return low


def _as_fraction(text: str) -> Fraction | None:
    if _NUMBER_RE.match(text) or _FRACTION_RE.match(text):
        try:
            return Fraction(text)
        except (ValueError, ZeroDivisionError):
            return None
    return None


#: The paper's evaluation reads a "yes"/"no" answer as True/False.
_YES_NO = {"yes": "True", "no": "False"}


class MathExactMatch(Metric):
    """1 when the normalised prediction equals the normalised answer; a
    prediction of "yes"/"no" counts as True/False, as in promptbench."""

    name = "exact_match"
    decomposable = True

    def sample_score(self, prediction: object, sample: Sample) -> float:
        if prediction is None:
            return 0.0
        pred = str(prediction)
        pred = _YES_NO.get(pred.strip().strip(".!").strip().lower(), pred)
        return 1.0 if normalize_math_answer(pred) == normalize_math_answer(str(sample.target)) else 0.0
