"""Semantic's two statistics side by side: the worst prompt of its set (the record's PDR, a
selection: the lowest of N scores on the same samples) and the mean PDR over the whole set (an
APDR over the set's prompts, the figure the paper's Semantic APDR is).

The mean comes from the record's ``prompt_set_pdr`` (with its two-level bootstrap interval); a
record made before that field existed has it derived here from its ``prompt_scores`` (the point
mean, no interval).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from promptrobust.attacks.registry import prompt_set_of
from promptrobust.engine.analysis.report.tables import MISSING, SET_MEAN_FIELD, Table
from promptrobust.engine.measuring.statistics import interval_replicates

SEMANTIC_STATISTIC = ("worst of N: the PDR of the set's worst prompt [95% paired bootstrap]; mean over the set: "
                      "mean PDR of all N prompts [95% two-level bootstrap over prompts and samples]")
SEMANTIC_NOTE = (
    "worst of N is the record's PDR: the minimum score over N prompts on the same samples, so it is biased upward "
    "by the selection; the mean over the set is the APDR over the set's prompts and selects nothing, and is what "
    "the APDR tables show for these records (marked). 'derived': a record made before the set statistic, its mean computed from the "
    "recorded prompt scores (no interval); '–': a record that kept neither (made before prompt scores were recorded)"
)


def set_statistic(r: Mapping[str, Any]) -> dict[str, Any] | None:
    """The record's statistic over its prompt set, or one derived from its ``prompt_scores``; None without either."""
    recorded = r.get("prompt_set_pdr")
    if isinstance(recorded, Mapping) and recorded.get("mean") is not None:
        return dict(recorded)
    clean = r.get("clean_score")
    scores = [float(x[2]) for x in r.get("prompt_scores") or [] if isinstance(x, (list, tuple)) and len(x) >= 3]
    if not scores or not clean:
        return None
    pdrs = [1.0 - s / clean for s in scores]
    return {"mean": sum(pdrs) / len(pdrs), "ci95": None, "prompts": len(pdrs), "worst": max(pdrs), "derived": True}


def is_prompt_set(r: Mapping[str, Any]) -> bool:
    """A record of a whole prompt set (Semantic's): it carries the set's statistic, or the prompt scores
    it is derived from, or names its set in its settings; a record older than all three is one when the
    recipe its attack names scores a given prompt set (the recipe's search, never the name itself)."""
    settings = r.get("settings")
    if set_statistic(r) is not None or (isinstance(settings, Mapping) and "prompt_set" in settings):
        return True
    return _recipe_scores_a_prompt_set(str(r.get("attack") or ""))


@lru_cache(maxsize=64)
def _recipe_scores_a_prompt_set(attack: str) -> bool:
    return prompt_set_of(attack) is not None  # None too for a name no recipe has (a pairs file's)


def set_mean_view(records: Sequence[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], int]:
    """``records`` as the APDR tables average them, and how many were left out: a prompt-set record
    enters as the mean PDR over its set (the paper's statistic), its own interval the set's two-level
    bootstrap interval, which pooled cells draw from (``statistics.interval_replicates``); marked by
    ``SET_MEAN_FIELD``. A record whose mean was derived (no interval) has no inner level, so the cells
    it is in show no interval; one that kept no prompt scores has no mean and is left out (its worst
    prompt stays in the Semantic table). Every other record is passed as it is."""
    out: list[Mapping[str, Any]] = []
    left_out = 0
    for r in records:
        stat = set_statistic(r) if r.get("status") == "attacked" else None
        if stat is None:
            if r.get("status") == "attacked" and is_prompt_set(r):
                left_out += 1
            else:
                out.append(r)
            continue
        out.append(as_set_mean(r, float(stat["mean"]), stat.get("ci95")))
    return out, left_out


def as_set_mean(r: Mapping[str, Any], mean: float, ci95: Sequence[float] | None = None) -> dict[str, Any]:
    """``r`` entered as a mean over prompts of its set (``SET_MEAN_FIELD``): no per-sample scores of its own,
    its interval (if any) drawn from as replicates (``statistics.interval_replicates``)."""
    return {**r, "pdr": mean, "pdr_ci95": list(ci95) if ci95 else None, SET_MEAN_FIELD: True,
            "clean_sample_scores": [], "adversarial_sample_scores": [], "has_sample_scores": bool(ci95),
            "pdr_replicates": interval_replicates(mean, ci95) if ci95 else None}


def left_out_note(n: int) -> str:
    return (f"{n} Semantic record(s) kept no prompt scores (made before they were recorded): no mean over the set, "
            "so they are left out of the APDR tables; their worst prompt is in the Semantic table")


def semantic_table(attacked: Sequence[Mapping[str, Any]], suffix: str = "", title_suffix: str = "") -> Table | None:
    """One row per prompt-set record (Semantic's): its worst prompt's PDR beside the mean PDR over its whole set."""
    rows = sorted((r for r in attacked if is_prompt_set(r)), key=lambda r: (r["model"], r["dataset"], r["prompt_id"]))
    if not rows:
        return None
    display: list[list[str]] = []
    long: list[dict[str, Any]] = []
    for r in rows:
        stat = set_statistic(r)
        ci = r.get("pdr_ci95")
        worst = f"{r['pdr']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
        if stat is None:
            mean, n = MISSING, MISSING
        else:
            sci = stat.get("ci95")
            mean = f"{stat['mean']:.3f}" + (f" [{sci[0]:.3f}, {sci[1]:.3f}]" if sci else " (derived)" if stat.get("derived") else "")
            n = str(stat.get("prompts"))
        display.append([r["model"], r["dataset"], r["prompt_id"], n, worst, mean])
        long.append({"model": r["model"], "dataset": r["dataset"], "prompt_id": r["prompt_id"],
                     "prompts": None if stat is None else stat.get("prompts"),
                     "worst_pdr": r["pdr"], "worst_pdr_ci95": list(ci) if ci else None,
                     "mean_pdr": None if stat is None else stat["mean"],
                     "mean_pdr_ci95": None if stat is None else stat.get("ci95"),
                     "mean_derived": bool(stat and stat.get("derived")),
                     "worst_prompt": r["adversarial_prompt"]})
    return Table("semantic_worst_and_mean" + suffix, "Semantic: the worst prompt of the set and the mean over the set"
                 + title_suffix, ["model", "dataset", "clean prompt", "N", "PDR worst of N [95%]",
                                  "PDR mean over the set [95%]"], display, long, SEMANTIC_NOTE,
                 statistic=SEMANTIC_STATISTIC)
