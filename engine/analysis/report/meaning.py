"""Report pieces of issue 23: what each adversarial prompt changed, how similar
it stays to the clean prompt, and its PDR on held-out samples.

``meaning_table``: one row per attacked record with a changed prompt (its
substitutions, the final prompt's sentence similarity, and the adversarial
prompt itself). ``held_out_table``: in-sample PDR beside the held-out one for
records made with ``--holdout``. ``meaning_text``: the same facts in one line,
for the HTML page's prompt list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from promptrobust.engine.analysis.report.tables import MISSING, Table, interval_text, p_text

IN_SAMPLE_NOTE = (
    "in-sample: measured on the samples the ranking and the search chose on (biased upward); "
    "held-out: the same prompts on samples neither saw (--holdout)"
)


def substitutions_text(subs: Sequence[Sequence[str]] | None, limit: int = 6) -> str:
    pairs = [f"{old or '∅'} → {new or '∅'}" for old, new in (subs or [])]
    more = f"; +{len(pairs) - limit} more" if len(pairs) > limit else ""
    return "; ".join(pairs[:limit]) + more if pairs else MISSING


def similarity_text(sim: Mapping[str, Any] | None) -> str:
    if not sim or sim.get("angular") is None:
        return MISSING
    return f"{sim['angular']:.3f}"


def meaning_text(r: Mapping[str, Any]) -> str:
    """Substitutions and similarity in one line ('' when the record has neither)."""
    parts = []
    if r.get("substitutions"):
        parts.append("changed: " + substitutions_text(r["substitutions"]))
    if r.get("final_similarity") and r["final_similarity"].get("angular") is not None:
        parts.append(f"USE angular similarity to the clean prompt {r['final_similarity']['angular']:.3f}")
    held = r.get("held_out")
    if isinstance(held, Mapping) and held.get("pdr") is not None:
        parts.append(f"held-out PDR {held['pdr']:.3f} {interval_text(held.get('pdr_ci95'), 3)} on {held.get('samples')} samples")
    stat = r.get("prompt_set_pdr")
    if isinstance(stat, Mapping) and stat.get("mean") is not None:  # Semantic: the record's PDR is the worst of the set
        parts.append(f"PDR worst of {stat.get('prompts')}; mean over the set {stat['mean']:.3f} "
                     f"{interval_text(stat.get('ci95'), 3)}")
    clean = r.get("clean_samples")
    if isinstance(clean, Mapping) and clean.get("score") is not None:  # the joint prompt + sample attack
        both = clean.get("pdr_both_adversarial")
        parts.append(f"clean prompt on {clean.get('samples')} clean samples {clean['score']:.3f} "
                     f"{interval_text(clean.get('ci95'), 3)}" + ("" if both is None else
                                                                f", PDR of prompt and samples together {both:.3f}"))
    return " | ".join(parts)


def meaning_table(records: Sequence[Mapping[str, Any]]) -> Table | None:
    rows = [r for r in records if r["status"] == "attacked" and r["adversarial_prompt"] != r["clean_prompt"]
            and (r.get("substitutions") or r.get("final_similarity"))]
    if not rows:
        return None
    rows = sorted(rows, key=lambda r: (r["model"], r["dataset"], r["attack"], r["prompt_id"]))
    display, long = [], []
    for r in rows:
        display.append([r["attack"], r["model"], r["dataset"], r["prompt_id"], f"{r['pdr']:.3f}",
                        similarity_text(r.get("final_similarity")), substitutions_text(r.get("substitutions")),
                        r["adversarial_prompt"]])
        sim = r.get("final_similarity") or {}
        long.append({"attack": r["attack"], "model": r["model"], "dataset": r["dataset"], "prompt_id": r["prompt_id"],
                     "pdr": r["pdr"], "similarity_angular": sim.get("angular"), "similarity_cosine": sim.get("cosine"),
                     "encoder": sim.get("encoder"), "substitutions": [list(s) for s in r.get("substitutions") or []],
                     "clean_prompt": r["clean_prompt"], "adversarial_prompt": r["adversarial_prompt"]})
    return Table("adversarial_prompts_meaning", "Adversarial prompts: what changed and how similar they stay",
                 ["attack", "model", "dataset", "prompt", "PDR", "similarity", "substitutions", "adversarial prompt"],
                 display, long,
                 "similarity: angular USE similarity of the whole final prompt to the clean one (1 = same; the "
                 "attacks' own check compares a window around each changed word)",
                 statistic="per-record PDR and the adversarial prompt's similarity to the clean one")


def held_out_table(records: Sequence[Mapping[str, Any]]) -> Table | None:
    rows = [r for r in records if r["status"] == "attacked" and isinstance(r.get("held_out"), Mapping)]
    if not rows:
        return None
    rows = sorted(rows, key=lambda r: (r["model"], r["dataset"], r["attack"], r["prompt_id"]))
    display, long = [], []
    for r in rows:
        h = r["held_out"]
        p_in, p_out = p_text(r.get("mcnemar_p")), p_text(h.get("mcnemar_p"))
        display.append([r["attack"], r["model"], r["dataset"], r["prompt_id"],
                        f"{r['pdr']:.3f}", interval_text(r.get("pdr_ci95"), 3), p_in, str(r.get("samples") or MISSING),
                        f"{h['pdr']:.3f}", interval_text(h.get("pdr_ci95"), 3), p_out, str(h.get("samples"))])
        long.append({"attack": r["attack"], "model": r["model"], "dataset": r["dataset"], "prompt_id": r["prompt_id"],
                     "in_sample_pdr": r["pdr"], "in_sample_pdr_ci95": r.get("pdr_ci95"), "in_sample_mcnemar_p": r.get("mcnemar_p"),
                     "in_sample_samples": r.get("samples"), "held_out_clean_score": h.get("clean_score"),
                     "held_out_adversarial_score": h.get("adversarial_score"), "held_out_pdr": h["pdr"],
                     "held_out_pdr_ci95": h.get("pdr_ci95"), "held_out_mcnemar_p": h.get("mcnemar_p"),
                     "held_out_samples": h.get("samples")})
    return Table("held_out_pdr", "PDR in-sample and on held-out samples",
                 ["attack", "model", "dataset", "prompt", "PDR in-sample", "95% interval", "p", "n",
                  "PDR held-out", "95% interval", "p", "n"], display, long, IN_SAMPLE_NOTE,
                 statistic="per-record PDR in-sample and on held-out samples [95% paired bootstrap intervals], McNemar p")
