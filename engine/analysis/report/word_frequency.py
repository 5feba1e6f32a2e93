"""Which words robust prompts use more than vulnerable ones, and the reverse.

The unit is one clean prompt (dataset + text): its PDR is the mean over the
attacked records of it (every model and attack), so a prompt attacked by
seven attacks does not weigh seven times. Prompts are split into a robust
group (PDR <= split) and a vulnerable group (PDR > split), where the split
is the median PDR unless a threshold is given; with many prompts at PDR 0
this puts every untouched prompt on the robust side, as it should.

A word's relative frequency in a group is its count divided by the number of
counted words in that group (after lowercasing and dropping punctuation,
numbers, one-letter tokens and stopwords). NLTK data is not available
offline, so the stopword list is built in.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from promptrobust.engine.analysis.report.tables import Table
from promptrobust.engine.errors import PromptRobustError

_STOPWORD_TEXT = """
    a about above after again against all also am an and any are as at be because been before being below
    between both but by can could did do does doing down during each either else few for from further had has
    have having he her here hers herself him himself his how i if in into is it its itself just let me more most
    my myself neither no nor not of off on once only or other our ours ourselves out over own same she
    should so some such than that the their theirs them themselves then there these they this those through to
    too under until up upon us very via was we were what when where whether which while who whom whose why will
    with would you your yours yourself yourselves shall may might must one ones whereas
    thus therefore s t
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())
_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*")


class WordFrequencyError(PromptRobustError, ValueError):
    """Too few prompts, or all on one side of the split: nothing to compare."""


def words(text: str) -> list[str]:
    """Lowercased content words of ``text``: no punctuation, numbers, stopwords or single letters."""
    out = []
    for w in _WORD.findall(text.lower()):
        w = w.replace("’", "'")
        if len(w) > 1 and w not in STOPWORDS:
            out.append(w)
    return out


@dataclass(frozen=True)
class WordFrequency:
    split: float
    """The PDR that separates the groups (robust: <= split)."""
    split_rule: str
    """"median" or "threshold"."""
    robust_prompts: int
    vulnerable_prompts: int
    rows: list[dict[str, Any]]
    """word, robust_count, vulnerable_count, robust_freq, vulnerable_freq, difference (sorted by word)."""
    top: int

    def robust_words(self) -> list[dict[str, Any]]:
        return sorted((r for r in self.rows if r["difference"] > 0), key=lambda r: (-r["difference"], r["word"]))[: self.top]

    def vulnerable_words(self) -> list[dict[str, Any]]:
        return sorted((r for r in self.rows if r["difference"] < 0), key=lambda r: (r["difference"], r["word"]))[: self.top]


def prompt_pdr(records: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, float]]:
    """(dataset, clean prompt, mean PDR) of every attacked clean prompt, sorted by PDR."""
    groups: dict[tuple[str, str], list[float]] = {}
    for r in records:
        if r.get("status", "attacked") == "attacked" and r.get("pdr") is not None:
            groups.setdefault((r["dataset"], r["clean_prompt"]), []).append(float(r["pdr"]))
    out = [(d, p, sum(v) / len(v)) for (d, p), v in groups.items()]
    return sorted(out, key=lambda t: (t[2], t[0], t[1]))


def _counts(texts: Iterable[str]) -> Counter[str]:
    c: Counter[str] = Counter()
    for t in texts:
        c.update(words(t))
    return c


def analyse(records: Iterable[Mapping[str, Any]], *, threshold: float | None = None, top: int = 15) -> WordFrequency:
    """Split clean prompts by PDR and compare word frequencies between the halves."""
    if top < 1:
        raise WordFrequencyError(f"words must be at least 1 (got {top})")
    prompts = prompt_pdr(records)
    if len(prompts) < 2:
        raise WordFrequencyError(f"word frequency needs at least 2 attacked prompts (found {len(prompts)})")
    split = statistics.median(p for _, _, p in prompts) if threshold is None else float(threshold)
    robust = [t for _, t, p in prompts if p <= split]
    vulnerable = [t for _, t, p in prompts if p > split]
    if not robust or not vulnerable:
        side = "robust" if not robust else "vulnerable"
        raise WordFrequencyError(f"no {side} prompts at split PDR {split:.3f}; every prompt falls on one side")
    rc, vc = _counts(robust), _counts(vulnerable)
    rn, vn = max(sum(rc.values()), 1), max(sum(vc.values()), 1)
    rows = [
        {"word": w, "robust_count": rc[w], "vulnerable_count": vc[w], "robust_freq": rc[w] / rn,
         "vulnerable_freq": vc[w] / vn, "difference": rc[w] / rn - vc[w] / vn}
        for w in sorted(set(rc) | set(vc))
    ]
    return WordFrequency(float(split), "median" if threshold is None else "threshold", len(robust), len(vulnerable), rows, top)


def tables(wf: WordFrequency, suffix: str = "", title_suffix: str = "") -> list[Table]:
    """Two tables: words more frequent in robust prompts, and in vulnerable ones."""
    note = (
        f"{wf.robust_prompts} robust prompts (mean PDR <= {wf.split:.3f}, {wf.split_rule}) vs "
        f"{wf.vulnerable_prompts} vulnerable prompts; frequency = count / words in the group"
    )
    out = []
    specs: Sequence[tuple[str, str, list[dict[str, Any]]]] = (
        ("words_robust", "Words more frequent in robust prompts", wf.robust_words()),
        ("words_vulnerable", "Words more frequent in vulnerable prompts", wf.vulnerable_words()),
    )
    for name, title, rows in specs:
        header = ["word", "robust freq", "vulnerable freq", "difference", "robust count", "vulnerable count"]
        display = [
            [r["word"], f"{r['robust_freq']:.3f}", f"{r['vulnerable_freq']:.3f}", f"{r['difference']:+.3f}",
             str(r["robust_count"]), str(r["vulnerable_count"])]
            for r in rows
        ]
        out.append(Table(name + suffix, title + title_suffix, header, display, rows, note,
                         statistic="relative word frequency in robust and in vulnerable prompts"))
    return out
