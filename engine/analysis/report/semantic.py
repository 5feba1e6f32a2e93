"""Semantic's two statistics side by side: the worst prompt of its set (the record's PDR, a
selection: the lowest of N scores on the same samples) and the mean PDR over the whole set (an
APDR over the set's prompts, the figure the paper's Semantic APDR is).

The mean comes from the record's ``prompt_set_pdr`` (with its two-level bootstrap interval); a
record made before that field existed has it derived here from its ``prompt_scores`` (the point
mean, no interval).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from promptrobust.attacks.registry import prompt_set_of
from promptrobust.engine.analysis.report.tables import MISSING, Table

SEMANTIC_STATISTIC = ("worst of N: the PDR of the set's worst prompt [95% paired bootstrap]; mean over the set: "
                      "mean PDR of all N prompts [95% two-level bootstrap over prompts and samples]")
SEMANTIC_NOTE = (
    "worst of N is the record's PDR (and the Semantic cells of the APDR tables): the minimum score over N prompts "
    "on the same samples, so it is biased upward by the selection; the mean over the set is the APDR over the set's "
    "prompts and selects nothing. 'derived': a record made before the set statistic, its mean computed from the "
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


def semantic_table(attacked: Sequence[Mapping[str, Any]], suffix: str = "", title_suffix: str = "") -> Table | None:
    """One row per Semantic record: its worst prompt's PDR beside the mean PDR over its whole set."""
    rows = sorted((r for r in attacked if prompt_set_of(r["attack"]) is not None),
                  key=lambda r: (r["model"], r["dataset"], r["prompt_id"]))
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
