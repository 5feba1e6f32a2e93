"""Defense: how much of an attack does spell-checking the prompt undo?

For each attacked source record, the clean prompt, the adversarial prompt and
the spell-corrected adversarial prompt are scored on the same model and
samples. The record written has the corrected prompt as its adversarial
prompt (so its PDR is the PDR *with* the defense, with its paired interval and
McNemar's p); the undefended prompt, score and PDR stay in its settings.
Character-level attacks (TextBugger, DeepWordBug) should recover most of
their drop; word-level ones (TextFooler, BertAttack) produce real words and
should not.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from promptrobust.engine.analysis.scoring import (
    prepare,
    sample_rows,
    score_prompts,
)
from promptrobust.engine import progress as events
from promptrobust.engine.measuring.statistics import apdr_rows
from promptrobust.engine.measuring.target import decide_target
from promptrobust.engine.analysis.sources import (
    SourceRecord,
    SourceSettings,
    group_by_evaluation,
    load_source_records,
    source_fields,
)
from promptrobust.engine.measuring.records import AttackRecord, records_summary
from promptrobust.engine.measuring.records import now
from promptrobust.engine.measuring.records import RecordFrames
from promptrobust.engine.runs.run_results import identities, records_document, task_provenances
from promptrobust.engine.runs.run_folder import ResultsDocument, WrittenAsResults, WrittenWith

if TYPE_CHECKING:
    from promptrobust.engine.runs.session import Session

__all__ = ["DefenseResult", "defend", "defense_row"]


@dataclass
class DefenseResult(RecordFrames, WrittenAsResults):
    """Defended records (one per source record) and the PDR without/with the
    defense per (model, attack)."""

    defense: str
    records: list[AttackRecord]
    summary: list[dict[str, object]]
    notes: list[str] = field(default_factory=list)
    sample_log: list[dict[str, object]] = field(default_factory=list)
    wall_seconds: float = 0.0
    models: list[dict[str, object]] = field(default_factory=list)
    started: str = ""
    tasks: list[dict[str, object]] = field(default_factory=list)
    """The provenance of each user's own task the records were measured on (results.json's ``tasks``)."""

    def __repr__(self) -> str:
        undefended = [r.settings["undefended_pdr"] for r in self.records
                      if r.status == "attacked" and isinstance(r.settings.get("undefended_pdr"), (int, float))]
        without = f"; without the defense {sum(undefended) / len(undefended):.3f}" if undefended else ""
        return f"DefenseResult(defense={self.defense!r}, {records_summary(self.records)}{without})"

    def rows(self) -> list[dict[str, object]]:
        return [defense_row(r) for r in self.records]

    def document(self, run: WrittenWith = WrittenWith()) -> ResultsDocument:
        return records_document(
            run, records=self.records, models=self.models, started=self.started, wall_seconds=self.wall_seconds, apdr=self.summary, clean_from="defense",
            extra_results={"defense": self.defense, "notes": self.notes}, tasks=self.tasks,
        )


def defense_row(r: AttackRecord) -> dict[str, object]:
    u = r.settings
    return {
        "model": r.model, "dataset": r.dataset, "attack": r.attack, "prompt_id": r.prompt_id,
        "clean": r.clean_score, "adversarial": u["undefended_score"], "defended": r.adversarial_score,
        "pdr_without": u["undefended_pdr"], "pdr_with": r.pdr, "pdr_with_ci95": r.pdr_ci95,
        "mcnemar_p_with": r.mcnemar_p, "at_chance": r.at_chance, "corrections": len(u["corrections"]),
    }


async def defend(
    session: Session,
    sources: Sequence[SourceRecord | str | Path],
    *,
    model: str | None = None,
    model_args: Mapping[str, object] | None = None,
    settings: SourceSettings | None = None,
    distance: int = 2,
    keep_samples: bool = False,
) -> DefenseResult:
    """Spell-correct the adversarial prompts of ``sources`` and score all three
    prompts on ``model`` (None: each record on the model that produced it)."""
    from promptrobust.attacks.defense import SpellCheckDefense
    from promptrobust.engine.measuring.workbench import protected_words

    settings = settings or SourceSettings()
    paths = [s for s in sources if not isinstance(s, SourceRecord)]
    loaded = [s for s in sources if isinstance(s, SourceRecord)] + (load_source_records(paths) if paths else [])
    chosen, notes = settings.select(loaded)
    by_model: dict[str, list[SourceRecord]] = {}
    for s in chosen:
        by_model.setdefault(model if model is not None else s.record.model, []).append(s)

    plan = []  # (bench, members, defense)
    for name, members in by_model.items():
        spec = session.resolve(name, model_args)
        for key, group in group_by_evaluation(members, settings, base_model=spec.base_model).items():
            bench = await prepare(session, spec, decide_target(key, base_model=spec.base_model))
            plan.append((bench, group, SpellCheckDefense(protected=protected_words(bench.task), distance=distance)))
    corrected = [{s.record.adversarial_prompt: d.correct(s.record.adversarial_prompt) for s in group} for _, group, d in plan]
    total = sum(
        len({t for s in group for t in (s.record.clean_prompt, s.record.adversarial_prompt)} | {c.text for c in fixes.values()})
        * len(bench.samples)
        for (bench, group, _), fixes in zip(plan, corrected)
    )
    events.phase(f"defend: {total} requests")
    started, began = time.monotonic(), now()
    records: list[AttackRecord] = []
    log: list[dict[str, object]] = []
    for (bench, group, defense), fixes in zip(plan, corrected):
        texts = [t for s in group for t in (s.record.clean_prompt, s.record.adversarial_prompt)]
        scores = await score_prompts(bench, texts + [c.text for c in fixes.values()], keep_samples=keep_samples)
        for s in group:
            r = s.record
            fixed = fixes[r.adversarial_prompt]
            clean, adv = scores[r.clean_prompt].clean, scores[r.adversarial_prompt].clean
            undefended = bench.pair(prompt_id=r.prompt_id, attack=r.attack, clean=clean, adversarial=adv,
                                     kind="defense", defense="none")
            records.append(
                bench.pair(prompt_id=r.prompt_id, attack=r.attack, prompt_type=r.prompt_type,
                    clean=clean, adversarial=scores[fixed.text].clean, extra=dict(r.extra),
                    kind="defense", defense=defense.name, source_model=r.model,
                    settings={
                        "analysis": "defense", "defense": defense.name, "distance": distance,
                        "undefended_prompt": r.adversarial_prompt, "undefended_score": adv.score,
                        "undefended_pdr": undefended.pdr, "undefended_pdr_ci95": undefended.pdr_ci95,
                        "undefended_mcnemar_p": undefended.mcnemar_p,
                        "corrections": [list(c) for c in fixed.changes],
                        **source_fields(s),
                    },
                )
            )
        if keep_samples:
            log += [
                {"model": bench.spec.name, "dataset": bench.task.name, "prompt": t, **row}
                for t, scored in scores.items() for row in sample_rows(scored)
            ]
    return DefenseResult(
        defense="spellcheck", records=records, summary=summarize_defense(records), notes=notes, sample_log=log,
        wall_seconds=round(time.monotonic() - started, 3), models=identities([b for b, _, _ in plan]), started=began,
        tasks=task_provenances([b for b, _, _ in plan]),
    )


def _undefended_view(r: AttackRecord) -> dict[str, object]:
    """The record as it was before the defense (for the "without" APDR)."""
    return {
        "model": r.model, "attack": r.attack, "status": r.status, "clean_prompt": r.clean_prompt,
        "pdr": r.settings["undefended_pdr"],
    }


def summarize_defense(records: Sequence[AttackRecord]) -> list[dict[str, object]]:
    """Per (model, attack): APDR without and with the defense (``summarize_pdrs``
    of each) and the share of the drop the defense recovered."""
    without = apdr_rows([_undefended_view(r) for r in records], ["model", "attack"], get=lambda r, k: r.get(k))
    with_ = apdr_rows(records, ["model", "attack"])
    out = []
    for a, b in zip(without, with_):
        drop = a["pdr_mean"]
        out.append(
            {
                "model": a["model"], "attack": a["attack"], "n": b["n"],
                "pdr_without": drop, "pdr_without_std": a["pdr_std"],
                "pdr_with": b["pdr_mean"], "pdr_with_std": b["pdr_std"],
                "pdr_with_ci95_low": b["pdr_ci95_low"], "pdr_with_ci95_high": b["pdr_ci95_high"],
                "recovered": (drop - b["pdr_mean"]) / drop if drop and drop > 0 and b["pdr_mean"] is not None else None,
            }
        )
    return out
