"""Transfer: do adversarial prompts found on one model hurt another? (the
paper's Table 6)

The source records are chosen as the paper chose them (``SourceSettings.selection``,
default ``most_vulnerable``: per source model, dataset, attack and prompt type, the
adversarial prompt with the highest source PDR), or all of them (``all``). Each
chosen record's (clean, adversarial) pair is re-scored on the target model on the
same samples as the source (its dataset, sample count, seed, shots, mode unless
``SourceSettings`` says otherwise). Each gives a
target-model record with the transfer PDR, its paired interval and McNemar's
p; the APDR per (source model -> target model, attack) is
``statistics.summarize_pdrs`` of those records.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from promptrobust.engine import progress as events
from promptrobust.engine.analysis.scoring import prepare, sample_rows, score_prompts
from promptrobust.engine.measuring.target import decide_target
from promptrobust.engine.measuring.statistics import apdr_rows
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
    from promptrobust.engine.serving.registry import ModelSpec

__all__ = ["TransferResult", "transfer", "transfer_apdr", "transfer_row"]

GROUP = ("source_model", "model", "attack")


@dataclass
class TransferResult(RecordFrames, WrittenAsResults):
    """Target-model records (one per source record) and the transfer APDR."""

    target_model: str
    records: list[AttackRecord]
    apdr: list[dict[str, object]]
    """One row per (source_model, model (the target), attack)."""
    notes: list[str] = field(default_factory=list)
    sample_log: list[dict[str, object]] = field(default_factory=list)
    wall_seconds: float = 0.0
    models: list[dict[str, object]] = field(default_factory=list)
    """The identity of the target model."""
    started: str = ""
    tasks: list[dict[str, object]] = field(default_factory=list)
    """The provenance of each user's own task the records were measured on (results.json's ``tasks``)."""

    def __repr__(self) -> str:
        sources = sorted({str(r.source_model) for r in self.records})
        return f"TransferResult(target_model={self.target_model!r}, sources={sources}, {records_summary(self.records)})"

    def rows(self) -> list[dict[str, object]]:
        return [transfer_row(r) for r in self.records]

    def document(self, run: WrittenWith = WrittenWith()) -> ResultsDocument:
        return records_document(
            run, records=self.records, models=self.models, started=self.started, wall_seconds=self.wall_seconds,
            apdr=self.apdr, clean_from="transfer",
            extra_results={"target_model": self.target_model, "notes": self.notes}, tasks=self.tasks,
        )


def transfer_row(r: AttackRecord) -> dict[str, object]:
    return {
        "source_model": r.settings.get("source_model"), "target_model": r.model, "dataset": r.dataset,
        "attack": r.attack, "prompt_id": r.prompt_id, "source_pdr": r.settings.get("source_pdr"),
        "clean": r.clean_score, "adversarial": r.adversarial_score, "pdr": r.pdr, "pdr_ci95": r.pdr_ci95,
        "mcnemar_p": r.mcnemar_p, "at_chance": r.at_chance, "status": r.status,
    }


async def transfer(
    session: Session,
    sources: Sequence[SourceRecord | str | Path],
    *,
    model: str | ModelSpec,
    model_args: Mapping[str, object] | None = None,
    settings: SourceSettings | None = None,
    keep_samples: bool = False,
) -> TransferResult:
    """Re-score the adversarial prompts of ``sources`` (records, or run folders
    to read them from) on the target ``model``; ``settings.selection`` chooses among them (default:
    the paper's, ``most_vulnerable``; choosing again among records a plan chose keeps them all)."""
    settings = transfer_settings(settings)
    spec = session.resolve(model, model_args)
    chosen, notes = settings.select(_as_sources(sources))
    groups = group_by_evaluation(chosen, settings, base_model=spec.base_model)
    benches = {key: await prepare(session, spec, decide_target(key, base_model=spec.base_model)) for key in groups}
    total = sum(len(_texts(members)) * len(benches[key].samples) for key, members in groups.items())
    events.phase(f"transfer: {total} requests")
    started, began = time.monotonic(), now()
    records: list[AttackRecord] = []
    log: list[dict[str, object]] = []
    for key, members in groups.items():
        bench = benches[key]
        scores = await score_prompts(bench, _texts(members), keep_samples=keep_samples)
        for s in members:
            r = s.record
            records.append(
                bench.pair(prompt_id=r.prompt_id, attack=r.attack, prompt_type=r.prompt_type,
                    clean=scores[r.clean_prompt].clean, adversarial=scores[r.adversarial_prompt].clean,
                    settings={"analysis": "transfer", "selection": settings.selection, **source_fields(s)},
                    extra=dict(r.extra),
                    kind="transfer", source_model=r.model,
                )
            )
        if keep_samples:
            log += [{"dataset": bench.task.name, "prompt": t, **row} for t, scored in scores.items() for row in sample_rows(scored)]
    return TransferResult(
        target_model=spec.name, records=records, apdr=transfer_apdr(records), notes=notes, sample_log=log,
        wall_seconds=round(time.monotonic() - started, 3), models=identities(list(benches.values())), started=began,
        tasks=task_provenances(list(benches.values())),
    )


def transfer_settings(settings: SourceSettings | None) -> SourceSettings:
    """``settings`` with the transfer's own default selection (the paper's: most_vulnerable) filled in."""
    settings = settings or SourceSettings()
    return settings if settings.selection is not None else replace(settings, selection="most_vulnerable")


def transfer_apdr(records: Sequence[AttackRecord]) -> list[dict[str, object]]:
    """APDR per (source model -> target model, attack)."""
    rows = apdr_rows(records, GROUP)
    return [{"source_model": r["source_model"], "target_model": r["model"], **{k: v for k, v in r.items() if k not in ("source_model", "model")}} for r in rows]


def _texts(members: Sequence[SourceRecord]) -> list[str]:
    return list(dict.fromkeys(t for s in members for t in (s.record.clean_prompt, s.record.adversarial_prompt)))


def _as_sources(sources: Sequence[SourceRecord | str | Path]) -> list[SourceRecord]:
    paths = [s for s in sources if not isinstance(s, SourceRecord)]
    records = [s for s in sources if isinstance(s, SourceRecord)]
    return records + (load_source_records(paths) if paths else [])
