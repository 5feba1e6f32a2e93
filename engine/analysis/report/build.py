"""Assembling a report's sections from loaded runs (see ``build_report``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from promptrobust.engine.analysis.report.load import RunData, Setting
from promptrobust.engine.analysis.report.tables import (
    Table,
    apdr_tables,
    at_chance_table,
    clean_table,
    cost_table,
    excluded_table,
    extreme_prompts,
    group_table,
    prompts_table,
)
from promptrobust.engine.analysis.statistics import AT_CHANCE_NOTE


def _settings(data: RunData) -> list[Setting]:
    """Settings of the records, then clean-only settings no record shares."""
    found = {r["setting"] for r in data.records}
    covered = {s.without_budget() for s in found}
    found |= {c["setting"] for c in data.clean if c["setting"] not in covered}
    return sorted(found, key=Setting.sort_key)


def build_sections(
    data: RunData, *, words: int, word_threshold: float | None, group_by: Sequence[str], figures: bool
) -> list[Any]:
    from promptrobust.engine.analysis.report import Figure, Section
    from promptrobust.engine.analysis.report import word_frequency as wfq

    settings = _settings(data)
    several = len(settings) > 1
    sections = []
    for setting in settings:
        suffix = f"__{setting.slug()}" if several else ""
        title_suffix = f" ({setting.label()})" if several else ""
        section = Section(setting if several else None)
        records = [r for r in data.records if r["setting"] == setting]
        attacked = [r for r in records if r["status"] == "attacked"]
        clean = [c for c in data.clean if c["setting"] == setting.without_budget()]
        if clean:
            section.tables.append(clean_table(clean, suffix, title_suffix))
            chance = at_chance_table(clean, suffix, title_suffix)
            if chance is not None:
                section.tables.append(chance)
        else:
            section.notes.append("no clean scores: no results.json with clean scores and no record with a clean score")
        if not attacked:
            section.notes.append("no attacked records: run `pre run --attack ...` for APDR, cost and word tables")
            sections.append(section)
            continue
        n_chance = sum(1 for r in attacked if r["at_chance"])
        if n_chance:
            section.notes.append(f"{n_chance} of {len(attacked)} attacked records have a clean score at chance: {AT_CHANCE_NOTE}")
        grids = apdr_tables(attacked, suffix, title_suffix)
        section.tables += grids
        section.tables += [group_table(attacked, [c], suffix, title_suffix) for c in group_by]
        section.tables.append(cost_table(attacked, suffix, title_suffix))
        wf = None
        try:
            wf = wfq.analyse(attacked, threshold=word_threshold, top=words)
            section.tables += wfq.tables(wf, suffix, title_suffix)
        except wfq.WordFrequencyError as exc:
            section.notes.append(f"word frequency skipped: {exc}")
        if figures:
            from promptrobust.engine.analysis.report import plots

            by_attack, by_model, _, model_attack = grids
            section.figures += [
                Figure("apdr_by_attack" + suffix, "APDR by attack" + title_suffix, plots.apdr_bars(by_attack, "attack")),
                Figure("apdr_by_model" + suffix, "APDR by model" + title_suffix, plots.apdr_bars(by_model, "model")),
                Figure("heatmap_attack_x_dataset" + suffix, "APDR heat map: attack x dataset" + title_suffix,
                       plots.heatmap(by_attack, "attack", "dataset")),
                Figure("heatmap_model_x_attack" + suffix, "APDR heat map: model x attack" + title_suffix,
                       plots.heatmap(model_attack, "model", "attack")),
            ]
            if wf is not None:
                section.figures.append(Figure("word_frequency" + suffix, "Relative frequency difference per word" + title_suffix,
                                              plots.word_bars(wf.robust_words(), wf.vulnerable_words())))
        sections.append(section)
    return sections


def extremes_and_excluded(data: RunData, top: int) -> tuple[list[Table], Table | None, list[str]]:
    notes: list[str] = []
    damaging = extreme_prompts(data.records, top)
    helpful = extreme_prompts(data.records, top, helpful=True)
    tables = []
    if damaging:
        tables.append(prompts_table(damaging, helpful=False))
    elif any(r["status"] == "attacked" for r in data.records):
        notes.append("no attack lowered a score (every PDR <= 0): no damaging adversarial prompts to show")
    if helpful:
        tables.append(prompts_table(helpful, helpful=True))
    from promptrobust.engine.analysis.report.meaning import IN_SAMPLE_NOTE, held_out_table, meaning_table

    held, meaning = held_out_table(data.records), meaning_table(data.records)  # issue 23
    tables += [t for t in (held, meaning) if t is not None]
    if held is not None:
        notes.append("the APDR tables show in-sample PDRs; " + IN_SAMPLE_NOTE)
    return tables, excluded_table(data.records), notes


def meta_and_notes(data: RunData, sections: Sequence[Any]) -> tuple[list[str], list[str]]:
    runs = sorted({str(f.parent) for f in data.files})
    recs = data.records
    by_status = {s: sum(1 for r in recs if r["status"] == s) for s in ("attacked", "skipped_clean_zero", "failed")}
    meta = [
        f"{len(runs)} run folder(s), {len(recs)} attack record(s) ({by_status['attacked']} attacked, "
        f"{by_status['skipped_clean_zero']} skipped, {by_status['failed']} failed), {len(data.clean)} clean prompt score(s)"
    ]
    for col in ("model", "dataset", "attack"):
        values = sorted({r[col] for r in recs} | ({c[col] for c in data.clean} if col != "attack" else set()))
        if values:
            meta.append(f"{col}s: " + ", ".join(values))
    notes = []
    if len(sections) == 1:
        only = _settings(data)[0]
        meta.append(f"setting: {only.label()}")
    else:
        notes.append(f"records of {len(sections)} settings (mode, parser, generation length, samples, budget) "
                     "are reported apart, never pooled")
    if data.reruns_dropped:
        notes.append(f"{data.reruns_dropped} rerun record(s) of a measurement already read counted once (the latest kept)")
    return meta, notes
