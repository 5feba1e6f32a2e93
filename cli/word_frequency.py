"""Which words robust prompts use more than vulnerable ones, and the reverse.

The unit is one clean prompt (dataset + text): its PDR is the mean over all
records that attacked it (every model and attack), so a prompt attacked by
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
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import polars as pl

from promptrobust.cli.errors import UserError
from promptrobust.cli.report_tables import Table

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
    split: float  # the PDR that separates the groups (robust: <= split)
    split_rule: str  # "median" | "threshold"
    robust_prompts: int
    vulnerable_prompts: int
    frame: pl.DataFrame  # word, robust_count, vulnerable_count, robust_freq, vulnerable_freq, difference
    top: int

    def robust_words(self) -> pl.DataFrame:
        return self.frame.filter(pl.col("difference") > 0).sort(["difference", "word"], descending=[True, False]).head(self.top)

    def vulnerable_words(self) -> pl.DataFrame:
        return self.frame.filter(pl.col("difference") < 0).sort(["difference", "word"]).head(self.top)


def prompt_pdr(records: pl.DataFrame) -> pl.DataFrame:
    """Mean PDR per clean prompt (dataset + text), sorted for determinism."""
    return (
        records.select("dataset", "clean_prompt", pl.col("pdr").cast(pl.Float64))
        .drop_nulls()
        .group_by("dataset", "clean_prompt")
        .agg(pl.col("pdr").mean())
        .sort("pdr", "dataset", "clean_prompt")
    )


def _counts(texts: Iterable[str]) -> Counter[str]:
    c: Counter[str] = Counter()
    for t in texts:
        c.update(words(t))
    return c


def analyse(records: pl.DataFrame, *, threshold: float | None = None, top: int = 15) -> WordFrequency:
    """Split clean prompts by PDR and compare word frequencies between the halves.

    Raises ValueError when one group is empty (nothing to compare); the report
    shows the reason instead of the section.
    """
    if top < 1:
        raise UserError(f"--words must be at least 1 (got {top})")
    prompts = prompt_pdr(records)
    if prompts.height < 2:
        raise ValueError(f"word frequency needs at least 2 attacked prompts (found {prompts.height})")
    split = float(prompts["pdr"].median()) if threshold is None else float(threshold)
    robust = prompts.filter(pl.col("pdr") <= split)
    vulnerable = prompts.filter(pl.col("pdr") > split)
    if robust.height == 0 or vulnerable.height == 0:
        side = "robust" if robust.height == 0 else "vulnerable"
        raise ValueError(f"no {side} prompts at split PDR {split:.3f}; every prompt falls on one side")
    rc, vc = _counts(robust["clean_prompt"]), _counts(vulnerable["clean_prompt"])
    rn, vn = max(sum(rc.values()), 1), max(sum(vc.values()), 1)
    vocab = sorted(set(rc) | set(vc))
    frame = pl.DataFrame(
        {
            "word": vocab,
            "robust_count": [rc[w] for w in vocab],
            "vulnerable_count": [vc[w] for w in vocab],
            "robust_freq": [rc[w] / rn for w in vocab],
            "vulnerable_freq": [vc[w] / vn for w in vocab],
        },
        schema={"word": pl.Utf8, "robust_count": pl.Int64, "vulnerable_count": pl.Int64, "robust_freq": pl.Float64, "vulnerable_freq": pl.Float64},
    ).with_columns((pl.col("robust_freq") - pl.col("vulnerable_freq")).alias("difference"))
    return WordFrequency(split, "median" if threshold is None else "threshold", robust.height, vulnerable.height, frame, top)


def tables(wf: WordFrequency) -> list[Table]:
    """Two tables: words more frequent in robust prompts, and in vulnerable ones."""
    note = (
        f"{wf.robust_prompts} robust prompts (mean PDR <= {wf.split:.3f}, {wf.split_rule}) vs "
        f"{wf.vulnerable_prompts} vulnerable prompts; frequency = count / words in the group"
    )
    out = []
    for name, title, frame in (
        ("words_robust", "Words more frequent in robust prompts", wf.robust_words()),
        ("words_vulnerable", "Words more frequent in vulnerable prompts", wf.vulnerable_words()),
    ):
        header = ["word", "robust freq", "vulnerable freq", "difference", "robust count", "vulnerable count"]
        rows = [
            [r["word"], f"{r['robust_freq']:.3f}", f"{r['vulnerable_freq']:.3f}", f"{r['difference']:+.3f}", str(r["robust_count"]), str(r["vulnerable_count"])]
            for r in frame.iter_rows(named=True)
        ]
        out.append(Table(name, title, header, rows, frame, note))
    return out
