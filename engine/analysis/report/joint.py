"""The joint attack on prompt and sample (the paper's AdvGLUE study, its Table 11 layout): for each
attacked prompt, three scores side by side (clean prompt on clean samples, clean prompt on
adversarial samples, adversarial prompt on adversarial samples) and the drops between them.

The clean samples are the dataset's own and the adversarial ones another set, so the drop from the
clean samples is a difference of two unpaired scores: it has no paired interval (each score's own
interval is in the record). The drop the prompt attack adds on adversarial samples is the record's
PDR, paired, with its interval.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from promptrobust.engine.analysis.report.tables import MISSING, Table, interval_text

JOINT_STATISTIC = ("scores of the clean prompt on clean samples, of the clean prompt and of the adversarial prompt on "
                   "adversarial samples; PDRs against the first (unpaired) and against the second (paired [95%])")
JOINT_NOTE = (
    "the paper's AdvGLUE table: 'samples' = clean prompt + adversarial samples against clean prompt + clean "
    "samples; 'prompt and samples' = adversarial prompt + adversarial samples against clean prompt + clean samples "
    "(both unpaired: different samples, no interval); 'prompt on adversarial samples' = the record's PDR, paired, "
    "with its 95% bootstrap interval"
)


def _drop(reference: float | None, score: float | None) -> float | None:
    return None if reference in (None, 0) or score is None else 1.0 - score / reference


def joint_table(attacked: Sequence[Mapping[str, Any]], suffix: str = "", title_suffix: str = "") -> Table | None:
    """One row per record of a joint attack (a record with ``clean_samples``); None when there is none."""
    rows = sorted((r for r in attacked if isinstance(r.get("clean_samples"), Mapping)),
                  key=lambda r: (r["model"], r["dataset"], r["attack"], r["prompt_id"]))
    if not rows:
        return None
    display: list[list[str]] = []
    long: list[dict[str, object]] = []
    for r in rows:
        clean = r["clean_samples"]
        base = clean.get("score")
        samples_drop, both_drop = _drop(base, r["clean_score"]), _drop(base, r["adversarial_score"])
        fmt = lambda x: MISSING if x is None else f"{x:.3f}"  # noqa: E731
        display.append([r["model"], r["dataset"], r["attack"], r["prompt_id"],
                        f"{fmt(base)} {interval_text(clean.get('ci95'), 3)}",
                        f"{fmt(r['clean_score'])} {interval_text(r.get('clean_ci95'), 3)}",
                        f"{fmt(r['adversarial_score'])} {interval_text(r.get('adversarial_ci95'), 3)}",
                        fmt(samples_drop), fmt(both_drop), f"{fmt(r['pdr'])} {interval_text(r.get('pdr_ci95'), 3)}"])
        long.append({"model": r["model"], "dataset": r["dataset"], "attack": r["attack"], "prompt_id": r["prompt_id"],
                     "clean_prompt_clean_samples": base, "clean_prompt_clean_samples_ci95": clean.get("ci95"),
                     "clean_samples": clean.get("samples"),
                     "clean_prompt_adversarial_samples": r["clean_score"],
                     "clean_prompt_adversarial_samples_ci95": r.get("clean_ci95"),
                     "adversarial_prompt_adversarial_samples": r["adversarial_score"],
                     "adversarial_prompt_adversarial_samples_ci95": r.get("adversarial_ci95"),
                     "adversarial_samples": r.get("samples"), "pdr_samples": samples_drop,
                     "pdr_prompt_and_samples": both_drop, "pdr_prompt_on_adversarial_samples": r["pdr"],
                     "pdr_prompt_on_adversarial_samples_ci95": r.get("pdr_ci95")})
    return Table("joint_prompt_and_samples" + suffix, "Joint attack on prompt and samples (the paper's AdvGLUE table)"
                 + title_suffix, ["model", "dataset", "attack", "prompt", "clean prompt + clean samples",
                                  "clean prompt + adv. samples", "adv. prompt + adv. samples", "PDR samples",
                                  "PDR prompt and samples", "PDR prompt on adv. samples [95%]"],
                 display, long, JOINT_NOTE, statistic=JOINT_STATISTIC)
