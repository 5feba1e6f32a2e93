"""Assembling a report's sections from loaded runs (see ``build_report``)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import promptrobust.engine.analysis.report.word_frequency as wfq
from promptrobust.engine.analysis.report.checks import INVALID
from promptrobust.engine.analysis.report.load import RunData, Setting
from promptrobust.engine.analysis.report.parts import KIND_ORDER, Figure, Section
from promptrobust.engine.analysis.report.semantic import set_mean_view
from promptrobust.engine.analysis.report.tables import (
    Table,
    apdr_tables,
    at_chance_table,
    clean_prompts_table,
    clean_table,
    column_value,
    cost_table,
    defense_table,
    excluded_table,
    extreme_prompts,
    group_table,
    pair_tables,
    prompts_table,
    transfer_tables,
)
from promptrobust.engine.measuring.statistics import AT_CHANCE_NOTE





def section_keys(data: RunData) -> list[tuple[str, Setting]]:
    """(kind, settings) of every section: clean scores, then each kind of record; never pooled.
    A kind this version does not know gets no section (its records are listed, not averaged)."""
    keys = {("clean", c["setting"]) for c in data.clean}
    keys |= {(r["kind"], r["setting"]) for r in data.records if r["kind"] in KIND_ORDER}
    return sorted(keys, key=lambda k: (KIND_ORDER.index(k[0]), k[1].sort_key()))


def build_sections(
    data: RunData, *, words: int, word_threshold: float | None, group_by: Sequence[str], figures: bool
) -> list[Section]:
    keys = section_keys(data)
    several = {kind: sum(1 for k, _ in keys if k == kind) > 1 for kind in KIND_ORDER}
    sections: list[Section] = []
    pictures: list[_Pictures] = []  # drawn once every section is built: figures compared share one scale
    for kind, setting in keys:
        suffix = f"__{_short_slug(setting.slug())}" if several[kind] else ""
        title_suffix = f" ({setting.label()})" if several[kind] else ""
        section = Section(setting, kind=kind)
        if kind == "clean":
            clean = [c for c in data.clean if c["setting"] == setting]
            section.dimensions = _dimensions(clean, ("shots",))
            section.tables += [clean_prompts_table(clean, suffix, title_suffix), clean_table(clean, suffix, title_suffix)]
            chance = at_chance_table(clean, suffix, title_suffix)
            if chance is not None:
                section.tables.append(chance)
            sections.append(section)
            continue
        records = [r for r in data.records if r["kind"] == kind and r["setting"] == setting]
        attacked = [r for r in records if r["status"] == "attacked"]
        section.dimensions = _dimensions(attacked or records, ("shots", "metric"))
        if not attacked:
            why = "skipped, failed or invalid" if any(r["status"] == INVALID for r in records) else "skipped or failed"
            section.notes.append(f"no {kind} record has a PDR (all {why}: see the records not averaged)")
            sections.append(section)
            continue
        n_chance = sum(1 for r in attacked if r["at_chance"])
        if n_chance:
            section.notes.append(f"{n_chance} of {len(attacked)} records have a clean score at chance: {AT_CHANCE_NOTE}")
        if kind == "attack":
            drawn = _attack_tables(section, attacked, suffix, title_suffix, words=words, word_threshold=word_threshold)
            if figures:
                pictures.append(drawn)
        elif kind == "pair":
            section.tables += pair_tables(attacked, suffix, title_suffix)
        elif kind == "transfer":
            section.tables += transfer_tables(attacked, suffix, title_suffix)
            section.notes.append(transfer_selection_note(attacked))
        else:
            section.tables.append(defense_table(attacked, suffix, title_suffix))
        grouped = set_mean_view(attacked)[0] if kind == "attack" else attacked  # a prompt set as its mean
        section.tables += [group_table(grouped, [c], f"__{kind}{suffix}" if kind != "attack" else suffix, title_suffix)
                           for c in group_by if any(column_value(r, c) is not None for r in attacked)]
        sections.append(section)
    if pictures:
        _draw(pictures)
    return sections


@dataclass
class _Pictures:
    """What one attack section draws (``_draw``)."""

    section: Section
    grids: list[Table]
    words: Any
    suffix: str
    title_suffix: str


def _draw(pictures: Sequence[_Pictures]) -> None:
    """Every attack section's figures, on one scale (``plots.Scale``): a colour or a bar height is the
    same APDR in each. A heat map of a single cell is not drawn (the table holds it), said in a note."""
    import promptrobust.engine.analysis.report.plots as plots  # matplotlib: only when figures are drawn

    heat = [(p, name, g, rows, cols) for p in pictures for name, g, rows, cols in (
        ("attack_x_dataset", p.grids[0], "attack", "dataset"), ("model_x_attack", p.grids[3], "model", "attack"))]
    drawn_heat = [g for _, _, g, _, _ in heat if plots.cells_of(g) > 1]
    scale = plots.Scale.of(drawn_heat, [g for p in pictures for g in (p.grids[0], p.grids[1])])
    for p in pictures:
        by_attack, by_model = p.grids[0], p.grids[1]
        axis = f"APDR axis {scale.low:.2f} to {scale.high:.2f}, shared by every bar chart of this report."
        p.section.figures += [
            Figure("apdr_by_attack" + p.suffix, "APDR by attack" + p.title_suffix, plots.apdr_bars(by_attack, "attack", scale),
                   note=axis),
            Figure("apdr_by_model" + p.suffix, "APDR by model" + p.title_suffix, plots.apdr_bars(by_model, "model", scale),
                   note=axis),
        ]
        for q, name, grid, rows, cols in heat:
            if q is not p:
                continue
            if plots.cells_of(grid) < 2:
                p.section.notes.append(f"heat map {rows} x {cols} not drawn: a single cell (see the table)")
                continue
            p.section.figures.append(Figure(f"heatmap_{name}" + p.suffix, f"APDR heat map: {rows} x {cols}" + p.title_suffix,
                                            plots.heatmap(grid, rows, cols, scale),
                                            note=f"Colour scale ±{scale.colour:.2f}, shared by every heat map of this report."))
        if p.words is not None:
            p.section.figures.append(Figure("word_frequency" + p.suffix, "Relative frequency difference per word" + p.title_suffix,
                                            plots.word_bars(p.words.robust_words(), p.words.vulnerable_words())))


def transfer_selection_note(records: Sequence[dict[str, Any]]) -> str:
    """Which source records the transfers re-scored (``pre transfer``'s selection), as their settings say."""
    found = sorted({str(r["settings"].get("selection") or "all (made before the selection was recorded)")
                    for r in records})
    return ("transfer selection: " + "; ".join(found) + " (most_vulnerable: the paper's, the highest source PDR per "
            "source model, dataset, attack and prompt type; all: every attacked source record)")


def _short_slug(slug: str, limit: int = 80) -> str:
    """A settings slug short enough for a file name (a long mode or stop sequence gets a digest)."""
    if len(slug) <= limit:
        return slug
    return slug[: limit - 17] + "-" + hashlib.sha1(slug.encode("utf-8", "replace")).hexdigest()[:16]


def _dimensions(rows: Sequence[dict[str, Any]], names: Sequence[str]) -> dict[str, list[str]]:
    """The values each of ``names`` (fields the tables lay out, not the section key) takes in ``rows``."""
    return {n: sorted({str(r[n]) for r in rows if r.get(n) not in (None, "")}) for n in names}


def _attack_tables(section: Section, attacked: list[dict[str, Any]], suffix: str, title_suffix: str, *, words: int,
                   word_threshold: float | None) -> _Pictures:
    """The paper's tables for an attack's own search: APDR grids, cost and word frequency, and what its
    figures are drawn from (``_draw``).
    Every APDR table averages a prompt set's record (Semantic) as the mean over its set (``set_mean_view``)."""
    from promptrobust.engine.analysis.report.semantic import left_out_note, semantic_table

    averaged, no_mean = set_mean_view(attacked)  # issue 40: the paper's statistic in every grid
    if no_mean:
        section.notes.append(left_out_note(no_mean))
    grids = apdr_tables(averaged, suffix, title_suffix)
    section.tables += grids
    from promptrobust.engine.analysis.report.acceptable import acceptable_table, not_acceptable_table

    left_out = not_acceptable_table(attacked, suffix, title_suffix)  # issue 30: acceptable-only APDR
    section.tables += [acceptable_table(averaged, suffix, title_suffix), *([left_out] if left_out else [])]
    semantic = semantic_table(attacked, suffix, title_suffix)  # issue 30: the worst of the set beside its mean
    from promptrobust.engine.analysis.report.studies import size_table, tuning_table

    studies = (size_table(averaged, suffix, title_suffix), tuning_table(averaged, suffix, title_suffix))  # issue 30
    from promptrobust.engine.analysis.report.joint import joint_table

    joint = joint_table(attacked, suffix, title_suffix)  # issue 30: the AdvGLUE table
    section.tables += [t for t in (semantic, *studies, joint) if t is not None]
    section.tables.append(cost_table(attacked, suffix, title_suffix))
    wf = None
    try:
        wf = wfq.analyse(attacked, threshold=word_threshold, top=words)
        section.tables += wfq.tables(wf, suffix, title_suffix)
    except wfq.WordFrequencyError as exc:
        section.notes.append(f"word frequency skipped: {exc}")
    return _Pictures(section, grids, wf, suffix, title_suffix)


def extremes_and_excluded(data: RunData, top: int) -> tuple[list[Table], Table | None, list[str]]:
    notes: list[str] = []
    attacks = [r for r in data.records if r["kind"] == "attack"]  # prompts an attack found, not given ones
    damaging = extreme_prompts(attacks, top)
    helpful = extreme_prompts(attacks, top, helpful=True)
    tables = []
    if damaging:
        tables.append(prompts_table(damaging, helpful=False))
    elif any(r["status"] == "attacked" for r in attacks):
        notes.append("no attack lowered a score (every PDR <= 0): no damaging adversarial prompts to show")
    if helpful:
        tables.append(prompts_table(helpful, helpful=True))
    from promptrobust.engine.analysis.report.meaning import IN_SAMPLE_NOTE, held_out_table, meaning_table

    held, meaning = held_out_table(data.records), meaning_table(data.records)  # issue 23
    tables += [t for t in (held, meaning) if t is not None]
    if held is not None:
        notes.append("the APDR tables show in-sample PDRs; " + IN_SAMPLE_NOTE)
    return tables, excluded_table(data.records), notes


def meta_and_notes(data: RunData, sections: Sequence[Section]) -> tuple[list[str], list[str]]:
    runs = sorted({str(f.parent) for f in data.files})
    recs = data.records
    by_status = {s: sum(1 for r in recs if r["status"] == s) for s in ("attacked", "skipped_clean_zero", "failed", INVALID)}
    by_kind = [f"{sum(1 for r in recs if r['kind'] == k)} {k}" for k in KIND_ORDER[1:] if any(r["kind"] == k for r in recs)]
    invalid = f", {by_status[INVALID]} invalid" if by_status[INVALID] else ""
    nothing = sum(1 for r in recs if r["status"] == "nothing_to_change")  # an attack that could change no word
    invalid = (f", {nothing} with nothing to change" if nothing else "") + invalid
    meta = [
        f"{len(runs)} run folder(s), {len(recs)} record(s) ({by_status['attacked']} attacked, "
        f"{by_status['skipped_clean_zero']} skipped, {by_status['failed']} failed{invalid})"
        + (f"; by kind: {', '.join(by_kind)}" if by_kind else "") + f"; {len(data.clean)} clean prompt score(s)"
    ]
    for col in ("model", "dataset", "attack"):
        values = sorted({r[col] for r in recs} | ({c[col] for c in data.clean} if col != "attack" else set()))
        if values:
            meta.append(f"{col}s: " + ", ".join(values))
    if data.made_with:
        meta.append("made with: " + ", ".join(data.made_with))
    notes = ["each section holds one kind of measurement under one setting; kinds and settings are never pooled"]
    if not recs:
        notes.append("no attacked records: run `pre run --attack ...` for APDR, cost and word tables")
    if data.reruns_dropped:
        notes.append(f"{data.reruns_dropped} rerun record(s) of a measurement already read counted once (the latest kept)")
    notes += data.problems.notes()
    return meta, notes
