"""The paper's metrics, all on the 0..1 scale.

Predictions are what ``Task.parse`` returns; None (unparseable) always scores
as wrong, also for an unanswerable SQuAD question.
"""

from __future__ import annotations

import collections
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

    def sample_score(self, prediction: Any, sample: Sample) -> float:
        return 1.0 if prediction is not None and prediction == sample.target else 0.0


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


class SquadF1(Metric):
    """SQuAD v2 F1: the best F1 over the reference answers.

    ``sample.target`` is the list of reference answers; an empty list means the
    question is unanswerable, and the right prediction is the empty string.
    """

    name = "squad_v2_f1"
    decomposable = True

    def sample_score(self, prediction: Any, sample: Sample) -> float:
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

    def sample_score(self, prediction: Any, sample: Sample) -> float:
        import sacrebleu

        hyp = "" if prediction is None else str(prediction)
        return sacrebleu.sentence_bleu(hyp, [str(sample.target)], tokenize=self.tokenize).score / 100.0

    def corpus_score(self, predictions: Sequence[Any], samples: Sequence[Sample]) -> float:
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

    def sample_score(self, prediction: Any, sample: Sample) -> float:
        if prediction is None:
            return 0.0
        pred = str(prediction)
        pred = _YES_NO.get(pred.strip().strip(".!").strip().lower(), pred)
        return 1.0 if normalize_math_answer(pred) == normalize_math_answer(str(sample.target)) else 0.0
