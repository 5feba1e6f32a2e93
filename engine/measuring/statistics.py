"""Uncertainty of every number the benchmark reports: one module, one convention.

The method, and why each piece:

* **Clean / adversarial score** (``score_interval``): a score is a mean over
  the evaluated samples. For 0/1 scores (accuracy, exact match) the 95% Wilson
  score interval: unlike the normal approximation it stays inside [0, 1] and
  keeps close to its nominal coverage at the small sample sizes (50-200) and
  high accuracies typical here. For continuous per-sample scores (F1, BLEU
  contributions) a seeded percentile bootstrap over samples.
* **PDR** (``pdr_interval``): the clean and the adversarial prompt score the
  *same* samples in the same order, so their scores are paired. The bootstrap
  resamples sample indices once and applies them to both lists, which keeps
  the pairing (an easy sample stays easy for both prompts) and gives a much
  tighter, honest interval than treating the two scores as independent.
* **Paired test** (``mcnemar_p``): whether the adversarial prompt changed the
  answers more than chance would. Only the discordant samples carry
  information (right before / wrong after, and the reverse); under "no effect"
  each discordant sample is a fair coin, so the exact two-sided binomial test
  on them is McNemar's exact test. Defined for 0/1 scores only.
* **Chance** (``majority_rate``, ``is_at_chance``): always answering the most
  frequent gold label scores the majority-class rate. A clean score whose 95%
  interval contains that rate is not distinguishable from chance, and a drop
  from it says nothing about robustness (``AT_CHANCE_NOTE``).
* **APDR** (``summarize_pdrs``): the mean of the attacked records' PDRs, as in
  the paper. Its spread is the *sample* standard deviation (ddof=1), the one
  convention used everywhere (``pre eval``, ``pre report``, the library). Its
  95% interval is a two-level (hierarchical) bootstrap: resample the records
  (prompts) and, within each drawn record, its paired per-sample scores, so
  the interval reflects both which prompts were attacked and which samples
  they were scored on.

All bootstraps are seeded (``seed=0`` by default): the same records always
give the same interval.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from promptrobust.engine.errors import PromptRobustError

if TYPE_CHECKING:  # records imports this module
    from promptrobust.engine.measuring.records import AttackRecord, PromptSetStatistic

#: A record as the statistics read it: an ``AttackRecord``, or its row as read from a results file.
RecordLike: TypeAlias = "AttackRecord | Mapping[str, Any]"

__all__ = [
    "AT_CHANCE_NOTE",
    "PDRSummary",
    "StatisticsError",
    "is_at_chance",
    "majority_rate",
    "mcnemar_p",
    "pdr_interval",
    "score_interval",
    "summarize_pdrs",
]

AT_CHANCE_NOTE = "clean score is not above chance: its PDR is not meaningful"

#: two-sided 95% normal quantile
_Z95 = 1.959963984540054
_N_BOOT = 2000


class StatisticsError(PromptRobustError, ValueError):
    """Scores that cannot be summarised (empty, unequal lengths, not numbers)."""


def _as_array(scores: Sequence[float], name: str) -> np.ndarray:
    try:
        arr = np.asarray(list(scores), dtype=float)
    except (TypeError, ValueError) as exc:
        raise StatisticsError(f"{name} must be numbers, one per sample ({exc})") from None
    if arr.ndim != 1 or arr.size == 0:
        raise StatisticsError(f"{name} is empty; an interval needs at least one sample score")
    if not np.all(np.isfinite(arr)):
        raise StatisticsError(f"{name} holds a NaN or infinite score")
    return arr


def _is_binary(arr: np.ndarray) -> bool:
    return bool(np.all((arr == 0.0) | (arr == 1.0)))


def wilson_interval(successes: int, n: int, z: float = _Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``successes / n``."""
    if n <= 0:
        raise StatisticsError("a proportion needs at least one trial")
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo = 0.0 if successes == 0 else max(0.0, centre - half)
    hi = 1.0 if successes == n else min(1.0, centre + half)  # exact at the ends (no rounding residue)
    return (lo, hi)


def score_interval(sample_scores: Sequence[float], *, binary: bool | None = None) -> tuple[float, float]:
    """95% interval of the mean of ``sample_scores``.

    ``binary`` (default: detected, all scores 0 or 1) picks the Wilson
    interval; otherwise a seeded percentile bootstrap over samples.
    """
    arr = _as_array(sample_scores, "sample_scores")
    if binary is None:
        binary = _is_binary(arr)
    if binary:
        if not _is_binary(arr):
            raise StatisticsError("binary=True but some sample scores are neither 0 nor 1")
        return wilson_interval(int(arr.sum()), arr.size)
    rng = np.random.default_rng(0)
    idx = rng.integers(0, arr.size, size=(_N_BOOT, arr.size))
    means = arr[idx].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return (float(lo), float(hi))


def _paired_pdr_replicates(clean: np.ndarray, adv: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Bootstrap PDRs over paired samples; resamples whose clean mean is 0
    (PDR undefined) are dropped, i.e. the bootstrap is conditional on a
    non-zero clean score, as the PDR itself is.

    For 0/1 scores a resample of n pairs is fully described by how many
    pairs of each kind (right/right, right/wrong, wrong/right, wrong/wrong)
    it holds, so it is drawn as one multinomial: the same distribution as
    resampling indices, at a cost independent of n.
    """
    n = clean.size
    if _is_binary(clean) and _is_binary(adv):
        kinds = np.array([np.sum((clean == 1) & (adv == 1)), np.sum((clean == 1) & (adv == 0)),
                          np.sum((clean == 0) & (adv == 1)), np.sum((clean == 0) & (adv == 0))], dtype=float)
        draws = rng.multinomial(n, kinds / n, size=n_boot)
        c = (draws[:, 0] + draws[:, 1]) / n
        a = (draws[:, 0] + draws[:, 2]) / n
    else:
        idx = rng.integers(0, n, size=(n_boot, n))
        c = clean[idx].mean(axis=1)
        a = adv[idx].mean(axis=1)
    ok = c != 0
    return 1.0 - a[ok] / c[ok]


def _paired(clean_scores: Sequence[float], adversarial_scores: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    clean = _as_array(clean_scores, "clean_scores")
    adv = _as_array(adversarial_scores, "adversarial_scores")
    if clean.size != adv.size:
        raise StatisticsError(
            f"clean and adversarial scores must be paired per sample: got {clean.size} and {adv.size} scores"
        )
    return clean, adv


def pdr_interval(
    clean_scores: Sequence[float],
    adversarial_scores: Sequence[float],
    *,
    n_boot: int = _N_BOOT,
    seed: int = 0,
) -> tuple[float, float] | None:
    """95% paired-bootstrap interval of PDR = 1 - mean(adv) / mean(clean).

    Both lists hold per-sample scores of the same samples in the same order.
    None when the clean mean is 0 (no PDR to bound).
    """
    clean, adv = _paired(clean_scores, adversarial_scores)
    if n_boot < 1:
        raise StatisticsError("n_boot must be at least 1")
    if clean.mean() == 0:
        return None
    reps = _paired_pdr_replicates(clean, adv, n_boot, np.random.default_rng(seed))
    lo, hi = np.percentile(reps, [2.5, 97.5])
    return (float(lo), float(hi))


def mcnemar_p(clean_scores: Sequence[float], adversarial_scores: Sequence[float]) -> float | None:
    """Exact two-sided McNemar p-value for paired 0/1 scores; None for
    continuous scores.

    b = samples right with the clean prompt and wrong with the adversarial one,
    c = the reverse; under no effect b ~ Binomial(b + c, 1/2), and
    p = min(1, 2 * P(X <= min(b, c))). No discordant sample gives p = 1.
    """
    clean, adv = _paired(clean_scores, adversarial_scores)
    if not (_is_binary(clean) and _is_binary(adv)):
        return None
    b = int(np.sum((clean == 1) & (adv == 0)))
    c = int(np.sum((clean == 0) & (adv == 1)))
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = math.fsum(math.comb(n, i) for i in range(k + 1)) / 2.0**n
    return min(1.0, 2.0 * tail)


def majority_rate(labels: Sequence[object]) -> float:
    """Share of the most frequent gold label: the score of always answering it."""
    items = list(labels)
    if not items:
        raise StatisticsError("majority_rate needs at least one label")
    counts = Counter(_hashable(label) for label in items)
    return counts.most_common(1)[0][1] / len(items)


def _hashable(value: Any) -> Any:
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def is_at_chance(ci95: Sequence[float] | None, chance: float | None) -> bool:
    """True when the score is not significantly above the chance rate: its 95%
    interval contains it, or lies wholly below it (a model that mostly fails to
    answer, e.g. unparseable generations, has no robustness to measure either).
    False when either is unknown."""
    if ci95 is None or chance is None:
        return False
    return float(ci95[0]) <= float(chance)


@dataclass(frozen=True)
class PDRSummary:
    """APDR over a group of attack records."""

    mean: float | None
    """Mean PDR of the attacked records (None when there are none)."""
    std: float | None
    """Sample standard deviation of their PDRs (ddof=1); None when n < 2."""
    ci95: tuple[float, float] | None
    """Hierarchical bootstrap interval over records and samples; None when n < 2."""
    n: int
    """Number of attacked records averaged."""
    n_prompts: int
    """Number of distinct clean prompts among them."""


def _get(record: RecordLike, key: str, default: Any = None) -> Any:
    if isinstance(record, Mapping):
        return record.get(key, default)
    return getattr(record, key, default)


def _finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def record_status(record: RecordLike) -> str:
    """A record's status; older records without one are inferred: an error
    means "failed", a clean score of 0 "skipped_clean_zero", else "attacked"."""
    status = _get(record, "status")
    if status:
        return str(status)
    if _get(record, "error"):
        return "failed"
    clean = _get(record, "clean_score")
    if clean is not None and float(clean) == 0.0:
        return "skipped_clean_zero"
    return "attacked"


def _record_pdr_replicates(record: Any, n_boot: int, seed: int) -> np.ndarray:
    """Bootstrap PDR replicates of one record from its paired sample scores,
    or its point PDR alone when it has none. The inner generator is seeded
    from the scores themselves, so a record gets the same replicates in
    whichever group (or program) it is summarised. A record that brings its own
    replicates (``pdr_replicates``: ``interval_replicates`` of a statistic kept only
    as a value and an interval) is drawn from those."""
    given = _get(record, "pdr_replicates")
    if given is not None and len(given):
        return np.asarray(given, dtype=float)
    clean = _get(record, "clean_sample_scores")
    adv = _get(record, "adversarial_sample_scores")
    if clean and adv and len(clean) == len(adv):
        c, a = _paired(clean, adv)
        if c.mean() != 0:
            reps = _cached_replicates(c.tobytes(), a.tobytes(), n_boot, seed)
            if reps.size:
                return reps
    return np.asarray([float(_get(record, "pdr"))])


@lru_cache(maxsize=4096)
def _cached_replicates(clean: bytes, adv: bytes, n_boot: int, seed: int) -> np.ndarray:
    c, a = np.frombuffer(clean), np.frombuffer(adv)
    digest = hashlib.sha256(clean + b"|" + adv).digest()
    rng = np.random.default_rng([seed, int.from_bytes(digest[:8], "little")])
    reps = _paired_pdr_replicates(c, a, n_boot, rng)
    reps.setflags(write=False)
    return reps


def interval_replicates(mean: float, ci95: Sequence[float], *, n_boot: int = _N_BOOT, seed: int = 0) -> np.ndarray:
    """Bootstrap replicates of a statistic known by its value and its 95% interval alone (a Semantic
    record's mean PDR over its prompt set: its own two-level bootstrap is kept as an interval, not as
    per-sample scores): normal draws centred on ``mean`` with s.d. = the interval's width / 3.92. Seeded
    by the numbers, so a record gets the same replicates wherever it is summarised; ``summarize_pdrs``
    draws a record's inner level from them (``pdr_replicates``)."""
    lo, hi = float(ci95[0]), float(ci95[1])
    digest = hashlib.sha256(np.asarray([mean, lo, hi], dtype=float).tobytes()).digest()
    rng = np.random.default_rng([seed, int.from_bytes(digest[:8], "little")])
    reps = rng.normal(float(mean), max(hi - lo, 0.0) / (2 * 1.959964), size=n_boot)
    reps.setflags(write=False)
    return reps


def _canonical_order(record: Any) -> tuple[Any, ...]:
    return (float(_get(record, "pdr")), str(_get(record, "clean_prompt") or ""), str(_get(record, "attack") or ""),
            str(_get(record, "model") or ""), str(_get(record, "dataset") or ""), str(_get(record, "run_key") or ""))


def summarize_pdrs(
    records: Iterable[RecordLike], *, n_boot: int = _N_BOOT, seed: int = 0
) -> PDRSummary:
    """APDR (mean PDR), its sample std (ddof=1) and a hierarchical bootstrap
    95% interval over the records whose status is "attacked".

    Records are mappings (or objects with the same attributes); their order
    does not matter. Reruns are not merged here: pass each measurement once.
    """
    # A record without a finite PDR (hand-made, damaged) has nothing to average; reports list it as invalid.
    attacked = [r for r in records if record_status(r) == "attacked" and _finite_number(_get(r, "pdr"))]
    n = len(attacked)
    prompts = {_get(r, "clean_prompt") or _get(r, "prompt_id") for r in attacked}
    if n == 0:
        return PDRSummary(None, None, None, 0, 0)
    pdrs = np.asarray([float(_get(r, "pdr")) for r in attacked])
    mean = float(math.fsum(pdrs) / n)
    if n < 2:
        return PDRSummary(mean, None, None, 1, len(prompts))
    std = float(np.std(pdrs, ddof=1))
    # A canonical order: the same records give the same interval in any order.
    attacked.sort(key=_canonical_order)
    rng = np.random.default_rng(seed)
    # Each record's own bootstrap distribution (inner level), then resample
    # records (outer level) and draw one replicate per drawn record.
    reps = [_record_pdr_replicates(r, n_boot, seed) for r in attacked]
    sizes = np.asarray([len(x) for x in reps])
    width = int(sizes.max())
    table = np.zeros((n, width))
    for i, x in enumerate(reps):
        table[i, : x.size] = x
    rows = rng.integers(0, n, size=(n_boot, n))
    cols = np.floor(rng.random((n_boot, n)) * sizes[rows]).astype(int)
    boot_means = table[rows, cols].mean(axis=1)
    lo, hi = np.percentile(boot_means, [2.5, 97.5])
    return PDRSummary(mean, std, (float(lo), float(hi)), n, len(prompts))


@dataclass(frozen=True)
class PairedDifference:
    """Mean of ``b - a`` over matched pairs, with a 95% percentile bootstrap interval over the pairs."""

    mean: float | None
    ci95: tuple[float, float] | None
    """None with fewer than 2 pairs."""
    n: int
    """Matched pairs."""


def paired_difference(a: Sequence[float], b: Sequence[float], *, n_boot: int = _N_BOOT, seed: int = 0) -> PairedDifference:
    """``b - a`` averaged over pairs (``a[i]`` and ``b[i]`` measured on the same unit, e.g. the APDR of one
    dataset, attack and prompt type on two models), its interval from resampling the pairs (seeded)."""
    if len(a) != len(b):
        raise StatisticsError(f"paired values need the same length ({len(a)} and {len(b)})")
    if not a:
        return PairedDifference(None, None, 0)
    diffs = np.asarray(b, dtype=float) - np.asarray(a, dtype=float)
    mean = float(diffs.mean())
    if len(diffs) < 2:
        return PairedDifference(mean, None, 1)
    rng = np.random.default_rng(seed)
    boot = diffs[rng.integers(0, len(diffs), size=(n_boot, len(diffs)))].mean(axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return PairedDifference(mean, (float(lo), float(hi)), len(diffs))


def prompt_set_pdr(clean_score: float, clean_sample_scores: Sequence[float],
                   prompts: Sequence[tuple[str, float, float, Sequence[float]]], *, seed: int = 0) -> PromptSetStatistic | None:
    """The statistic over a whole prompt set (Semantic): ``prompts`` holds (text, score, PDR against
    the clean prompt, per-sample scores) for each prompt of the set. The mean PDR over the prompts is
    an APDR over them (``summarize_pdrs``: sample std, the two-level bootstrap over prompts and their
    paired samples); the worst (highest) PDR is the selection the record's ``pdr`` reports. None for an
    empty set or a clean score of 0 (no PDR exists)."""
    if not prompts or clean_score == 0:
        return None
    rows = [{"prompt_id": text, "clean_score": clean_score, "pdr": pdr, "clean_sample_scores": list(clean_sample_scores),
             "adversarial_sample_scores": list(samples)} for text, _, pdr, samples in prompts]
    summary = summarize_pdrs(rows, seed=seed)
    pdrs = [pdr for _, _, pdr, _ in prompts]
    n = len(prompts)
    return {
        "statistic": f"mean PDR over the {n} prompts of the set, each against the clean prompt",
        "prompts": n,
        "mean": summary.mean,
        "std": summary.std,
        "ci95": list(summary.ci95) if summary.ci95 is not None else None,
        "interval": "95% two-level bootstrap: the set's prompts, then each one's paired samples",
        "worst": max(pdrs),
        "best": min(pdrs),
    }


# -- APDR rows over records (results.json, pre eval/transfer tables, reports) -------------


def field_of(record: RecordLike, key: str) -> object:
    """A record's value for a grouping key: a field, else its ``extra`` or ``settings`` entry."""
    if hasattr(record, key):
        return getattr(record, key)
    for holder in ("extra", "settings"):
        values = getattr(record, holder, None) or {}
        if key in values:
            return values[key]
    return None


def apdr_rows(records: Sequence[RecordLike], by: Sequence[str], *, get: Callable[[Any, str], Any] = field_of) -> list[dict[str, Any]]:
    """APDR per group (first-seen order): ``statistics.summarize_pdrs`` of each
    group's records, so the numbers equal what ``pre report`` prints."""
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for r in records:
        groups.setdefault(tuple(get(r, k) for k in by), []).append(r)
    out = []
    for key, members in groups.items():
        s = summarize_pdrs(members)
        out.append(
            {
                **dict(zip(by, key)), "n": s.n, "n_prompts": s.n_prompts, "skipped": len(members) - s.n,
                "pdr_mean": s.mean, "pdr_std": s.std,
                "pdr_ci95_low": s.ci95[0] if s.ci95 else None, "pdr_ci95_high": s.ci95[1] if s.ci95 else None,
            }
        )
    return out


def format_apdr(row: Mapping[str, Any], digits: int = 2) -> str:
    """'0.31 ± 0.12 [0.20, 0.43]' (mean ± sample std, 95% interval), the PDR
    alone for one record, '–' for none: the same text as a ``pre report`` cell."""
    mean, std = row.get("pdr_mean"), row.get("pdr_std")
    if mean is None:
        return "–"
    if std is None or row.get("n", 0) < 2:
        return f"{mean:.{digits}f}"
    lo, hi = row.get("pdr_ci95_low"), row.get("pdr_ci95_high")
    ci = "–" if lo is None else f"[{lo:.{digits}f}, {hi:.{digits}f}]"
    return f"{mean:.{digits}f} ± {std:.{digits}f} {ci}"
