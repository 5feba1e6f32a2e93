"""Reports over finished runs, as library code: ``build_report(paths)``.

A report is a list of sections, one per (kind, setting): clean scores, an
attack's own search, given pairs, transfers and defenses each get their own
sections, one per ``MeasurementSettings`` (mode, parser, generation length,
samples, sample selection, seed, and for attacks the budget and options);
records of different kinds or settings are never pooled. Clean sections list
every prompt's score with its interval and at-chance flag; attack sections
hold the paper's APDR grids (mean ± sample std and a 95% interval per cell),
the cost per attack and the word-frequency analysis; pairs, transfers (a
source x target matrix) and defenses (APDR without / with) their own tables.
Across sections come the most damaging and the most helpful adversarial
prompts, the records that were not averaged (skipped, failed, or invalid:
numbers that cannot be right, said once as a note: ``checks``) and, where
samples were logged, a page per record of its samples (``samples``).

    report = build_report(["runs/sweeps/embedded"])
    print(report.markdown())
    report.write("report/")            # md, csv, png/svg/pdf, html (+ samples/), latex
    open("tables.tex", "w").write(report.latex())
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from promptrobust.engine.analysis.report.build import build_sections, extremes_and_excluded, meta_and_notes
from promptrobust.engine.analysis.report.load import ReportInputError, RunData, load_runs
from promptrobust.engine.analysis.report.meaning import meaning_text
from promptrobust.engine.analysis.report.model import FORMATS, Report
from promptrobust.engine.analysis.report.parts import Figure, Section
from promptrobust.engine.analysis.report import review
from promptrobust.engine.analysis.report.tables import Table, column_value

#: The meaning review sheet's file name in a report folder (``review``).
REVIEW_SHEET = review.SHEET_NAME

__all__ = ["FORMATS", "REVIEW_SHEET", "Figure", "Report", "ReportInputError", "Section", "Table", "build_report",
           "meaning_text"]


def build_report(
    paths: Sequence[str | os.PathLike[str]] | str | os.PathLike[str],
    *,
    top: int = 10,
    words: int = 15,
    word_threshold: float | None = None,
    group_by: Sequence[str] = (),
    figures: bool = True,
    pool_searches: bool = False,
    meaning_verdicts: str | os.PathLike[str] | None = None,
) -> Report:
    """A report over every run under ``paths`` (run folders, sweep folders or results files).

    ``top``: adversarial prompts listed each way (most damaging, most helpful);
    ``words``: words listed each way in the word-frequency analysis, whose
    robust/vulnerable split is ``word_threshold`` (default: the median PDR);
    ``group_by``: record fields or extra columns (e.g. a pairs file's
    ``source_model``) for an extra APDR table; ``figures``: draw the figures (PNG, SVG, PDF);
    ``pool_searches``: records of raced and exhaustive searches in the same sections (kept apart
    by default: a raced search may keep another candidate), said in the report's notes;
    ``meaning_verdicts``: a filled review sheet (``review``): a person's kept/changed replaces the
    meaning check's in the acceptable-only tables, and an agreement table compares the two.
    The report carries a new review sheet either way (``Report.review_sheet``).
    Problems in the files (``checks``) are printed once each to stderr and kept as notes.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if top < 1:
        raise ReportInputError(f"top must be at least 1 (got {top})")
    if words < 1:
        raise ReportInputError(f"words must be at least 1 (got {words})")
    data = load_runs(paths)
    verdicts = review.read_verdicts(meaning_verdicts) if meaning_verdicts is not None else {}
    person_notes = _apply_person_verdicts(data, verdicts) if meaning_verdicts is not None else []
    pooled = pool_searches and _pool_searches(data)
    for problem in data.problems.notes():  # said once each, however many records have it
        print(f"pre: warning: report: {problem}", file=sys.stderr)
    _check_group_by(data, group_by)
    sections = build_sections(data, words=words, word_threshold=word_threshold, group_by=group_by, figures=figures)
    extremes, excluded, extreme_notes = extremes_and_excluded(data, top)
    meta, notes = meta_and_notes(data, sections)
    if pooled:
        notes.append(f"{pooled} records of raced searches are pooled with exhaustive ones (--pool-searches): a raced "
                     "search may keep another candidate than exhaustive scoring would, at its stated error rate")
    agreement = review.agreement_table(data.records)
    return Report(meta, notes + person_notes + extreme_notes, sections, extremes + ([agreement] if agreement else []),
                  excluded, records=data.records, review_sheet=review.sheet_bytes(data.records, verdicts))


def _apply_person_verdicts(data: RunData, verdicts: dict[str, review.PersonVerdict]) -> list[str]:
    """Put a review sheet's verdicts on the records; what the report's notes say about it."""
    given, unmatched = review.apply_verdicts(data.records, verdicts)
    notes = [f"meaning verdicts: a person's kept/changed on {given} adversarial prompt record(s) replaces the meaning "
             f"check's ({len(verdicts)} verdict(s) in the sheet)"]
    if unmatched:
        notes.append(f"meaning verdicts: {unmatched} of the sheet's verdicts match no record read (another run, or a "
                     "prompt changed since); they are kept in the new sheet")
    for note in notes:
        print(f"pre: report: {note}", file=sys.stderr)
    return notes


def _pool_searches(data: RunData) -> int:
    """Blank each record's search in its section key; how many records had one."""
    from dataclasses import replace

    pooled = 0
    for rec in data.records:
        if rec["setting"].search is not None:
            rec["setting"] = replace(rec["setting"], search=None)
            pooled += 1
    return pooled


def _check_group_by(data: RunData, columns: Sequence[str]) -> None:
    for col in columns:
        if not any(column_value(r, col) is not None for r in data.records):
            extras = sorted({k for r in data.records for k in r["extras"]})
            hint = f"extra columns in these records: {', '.join(extras)}" if extras else "these records carry no extra columns"
            raise ReportInputError(f"no record has a column {col!r} to group by ({hint})")

