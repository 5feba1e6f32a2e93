"""The learned judge of a replaced word the meaning check's rules leave open (check v11).

The two encoders' cosine says how far the new word sits from the old one in context, but not in which
direction: a true synonym and a neighbour from the same field ("review" -> "inspection") can sit equally
far. Their whole vectors say more. For each encoder the judge reads the unit vectors of the old word in
the clean prompt and of the new word in the adversarial one, their elementwise absolute difference and
product, then the two cosines and the WordNet class the thresholds of checks v6-v10 used; a logistic
regression on those (standardised) gives the probability that the meaning changed, "changed" at
``CUT`` or more.

The regression is fitted by ``scripts/fit_meaning_judge.py`` on every labelled set of pairs
(``tests/fixtures/meaning``) and the offline word source's labelled candidates, and written to
``attacks/data/meaning_judge.json`` with the sets it saw (their sha256) and its regularisation;
docs/fidelity.md quotes its figures on each set left out of the fit in turn and on a set written after
it was fixed. Reading it needs numpy only.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson

from promptrobust.attacks.errors import AttackResourceError

JUDGE_FILE = Path(__file__).resolve().parent / "data" / "meaning_judge.json"
#: What the file's "format" says; a file of another format is refused.
FORMAT = "promptrobust meaning judge 1"
#: A probability of a change at or above this is a change.
CUT = 0.5
#: The WordNet relation classes the judge reads as close (``meaning_check.CLOSE_RELATIONS``' names).
CLOSE_CLASS, FAR_CLASS = "close", "far"


def features(vectors: Sequence[tuple[np.ndarray, np.ndarray]], close_relation: bool, threshold_class: str) -> np.ndarray:
    """What the judge reads of one replaced word: per encoder ``|a - b|`` and ``a * b`` of the unit vectors
    of the old (a) and new (b) word in context, then the encoders' cosines, whether WordNet relates the two
    words closely, and whether it does but the word is in a label's clause (held to the far threshold)."""
    parts: list[np.ndarray] = []
    cosines = []
    for old, new in vectors:
        a = old / (np.linalg.norm(old) + 1e-12)
        b = new / (np.linalg.norm(new) + 1e-12)
        parts += [np.abs(a - b), a * b]
        cosines.append(float(a @ b))
    label_clause = close_relation and threshold_class == FAR_CLASS
    parts.append(np.array([*cosines, float(close_relation), float(label_clause)]))
    return np.concatenate(parts).astype(np.float64)


@dataclass(frozen=True, eq=False)
class LearnedJudge:
    """A fitted logistic regression on standardised features (``features``)."""

    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    bias: float
    #: How records name it, e.g. "logistic regression (C 0.003) on 1,040 labelled pairs, meaning_judge.json 1a2b3c4d".
    name: str
    trained_on: dict[str, str] = field(default_factory=dict)

    def changed_probability(self, x: np.ndarray) -> float:
        if x.shape != self.mean.shape:
            raise ValueError(f"the judge reads {self.mean.shape[0]} features, not {x.shape[0]}")
        score = float(((x - self.mean) / self.scale) @ self.weights + self.bias)
        return float(1.0 / (1.0 + np.exp(-score)))


def to_json(judge: LearnedJudge, *, c: float, pairs: int) -> bytes:
    """The file ``read_judge`` reads back (floats as written by orjson: the judge's numbers exactly)."""
    return orjson.dumps({
        "format": FORMAT, "c": c, "pairs": pairs, "cut": CUT, "trained_on": judge.trained_on,
        "bias": judge.bias, "mean": judge.mean.tolist(), "scale": judge.scale.tolist(),
        "weights": judge.weights.tolist(),
    }, option=orjson.OPT_INDENT_2)


def read_judge(path: Path = JUDGE_FILE) -> LearnedJudge:
    """The judge written by ``scripts/fit_meaning_judge.py``; ``AttackResourceError`` naming the fix when the
    file is missing or not one."""
    try:
        raw = path.read_bytes()
        data = orjson.loads(raw)
        if data.get("format") != FORMAT:
            raise ValueError(f"format {data.get('format')!r}, not {FORMAT!r}")
        mean, scale, weights = (np.asarray(data[k], dtype=np.float64) for k in ("mean", "scale", "weights"))
        if not (mean.shape == scale.shape == weights.shape and mean.ndim == 1) or not np.all(scale > 0):
            raise ValueError("mean, scale and weights differ in length, or a scale is not positive")
        name = (f"logistic regression (C {data['c']}) on {data['pairs']:,} labelled pairs, {path.name} "
                f"{hashlib.sha256(raw).hexdigest()[:8]}")
        return LearnedJudge(mean, scale, weights, float(data["bias"]), name, dict(data.get("trained_on", {})))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise AttackResourceError(f"the meaning check's learned judge {path.name} cannot be read ({exc}); reinstall "
                                  "promptrobust or refit it with scripts/fit_meaning_judge.py --write") from exc


@functools.cache
def load_judge() -> LearnedJudge:
    """The shipped judge, once per process."""
    return read_judge(JUDGE_FILE)
