"""A person's meaning verdicts: the review sheet a report writes, and reading it back.

The paper's acceptable adversarial prompts (Appendix C.4) were judged by people. The
meaning check (``attacks.meaning_check``) is evidence a machine can give on every record,
but it is wrong on some pairs (docs/fidelity.md quotes its held-out error rates per
category). So every report with attacked records writes ``meaning_review.csv``: one row
per distinct (clean prompt, adversarial prompt) pair, the most damaging first, with the
check's verdict and reasons and an empty ``person`` column. A person fills it with
``kept`` or ``changed`` (rows left blank stay the check's), and ``pre report ...
--meaning-verdicts meaning_review.csv`` reads it back:

* a person's verdict replaces the check's in the acceptable-only tables, and those tables
  count how many verdicts a person gave;
* the agreement table says how often the check agreed with the person, with Wilson 95%
  intervals: the check's error rate on the user's own prompts, not on ours;
* the sheet written next is the filled one plus any new pairs, so a review grows run by run.

Rows are matched by ``pair_id`` (a digest of the two prompts), not by the prompts' text,
which the CSV writer may escape for spreadsheets. A prompt set of rewrites (Semantic) gets a
row per rewrite (its record's prompt scores give each one's PDR): the check cannot judge a
rewrite ("needs a human"), a person can, and the set's record is then acceptable through the
rewrites a person kept (``acceptable.acceptable_view``).
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from promptrobust.engine.analysis.report.acceptable import (
    PERSON_FIELD,
    PERSON_SET_FIELD,
    VERDICTS,
    check_reasons,
    check_verdict,
    is_rewrite,
)
from promptrobust.engine.analysis.report.load import ReportInputError
from promptrobust.engine.analysis.report.meaning import substitutions_text
from promptrobust.engine.analysis.report.tables import MISSING, Table
from promptrobust.engine.measuring.statistics import wilson_interval
from promptrobust.engine.safe_io.output_safety import csv_cell

#: The sheet's file name in a report folder.
SHEET_NAME = "meaning_review.csv"
COLUMNS = ("pair_id", "person", "person_note", "check", "check_reasons", "changes", "max_pdr", "records", "attacks",
           "clean_prompt", "adversarial_prompt")


@dataclass(frozen=True)
class PersonVerdict:
    """What a person said about one (clean, adversarial) pair."""

    verdict: str
    note: str = ""


def pair_id(clean: str, adversarial: str) -> str:
    """The key a sheet row is found by: the two prompts' digest (16 hex digits)."""
    return hashlib.sha256(f"{clean}\x00{adversarial}".encode("utf-8", "surrogatepass")).hexdigest()[:16]


def reviewable(r: Mapping[str, Any]) -> bool:
    """An attacked record of an attack's own search whose prompt changed."""
    return (r.get("status") == "attacked" and r.get("kind", "attack") == "attack"
            and r.get("adversarial_prompt") != r.get("clean_prompt"))


def rewrites(r: Mapping[str, Any]) -> list[tuple[str, float]]:
    """A prompt set's rewrites with each one's PDR (from its ``prompt_scores``); [] for any other record."""
    clean = r.get("clean_score")
    if not is_rewrite(r) or not clean:
        return []
    return [(str(x[1]), 1.0 - float(x[2]) / float(clean)) for x in r.get("prompt_scores") or []
            if isinstance(x, (list, tuple)) and len(x) >= 3]


def pairs_of(r: Mapping[str, Any]) -> list[tuple[str, float]]:
    """The (adversarial prompt, PDR) pairs of a record a person can judge: its adversarial prompt, or each
    rewrite of a prompt set (a set's record stands for all of them; one without prompt scores has none)."""
    if not reviewable(r):
        return []
    return rewrites(r) if is_rewrite(r) else [(str(r["adversarial_prompt"]), float(r["pdr"]))]


def read_verdicts(path: str | os.PathLike[str]) -> dict[str, PersonVerdict]:
    """A filled sheet's verdicts by ``pair_id`` (blank rows skipped). ``ReportInputError`` names
    the row and the fix for a file that is missing, not a sheet, or holds another word."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8-sig")  # a spreadsheet may save a byte-order mark
    except FileNotFoundError:
        raise ReportInputError(f"--meaning-verdicts: no file {file}: pass the {SHEET_NAME} a report wrote") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportInputError(f"--meaning-verdicts: cannot read {file} ({exc}): save the sheet as UTF-8 CSV") from None
    header = text.split("\n", 1)[0]
    # A spreadsheet set to a locale whose decimal mark is a comma saves with semicolons (or tabs).
    delimiter = max(",;\t", key=header.count)
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)
    missing = [c for c in ("pair_id", "person") if c not in (reader.fieldnames or [])]
    if missing:
        raise ReportInputError(f"--meaning-verdicts: {file} has no column {missing[0]!r}: pass the {SHEET_NAME} a "
                               "report wrote, with its header row kept")
    out: dict[str, PersonVerdict] = {}
    for row_number, row in enumerate(reader, start=2):  # as a spreadsheet numbers rows (the header is row 1)
        said = (row.get("person") or "").strip().lower()
        if not said:
            continue
        if said not in VERDICTS:
            raise ReportInputError(f"--meaning-verdicts: {file} row {row_number}: person is {said!r}: write kept or "
                                   "changed, or leave it blank")
        key = (row.get("pair_id") or "").strip()
        if not key:
            raise ReportInputError(f"--meaning-verdicts: {file} row {row_number}: no pair_id: keep the column as the "
                                   "report wrote it")
        out[key] = PersonVerdict(said, (row.get("person_note") or "").strip())
    return out


def apply_verdicts(records: Sequence[dict[str, Any]], verdicts: Mapping[str, PersonVerdict]) -> tuple[int, int]:
    """Put each person's verdict on the records of its pair; (records given one, sheet verdicts
    that match no record read)."""
    used: set[str] = set()
    given = 0
    for r in records:
        pairs = pairs_of(r)
        keys = [pair_id(str(r["clean_prompt"]), text) for text, _ in pairs]
        found = [(pdr, verdicts[key]) for (_, pdr), key in zip(pairs, keys) if key in verdicts]
        if not found:
            continue
        used.update(k for k in keys if k in verdicts)
        given += 1
        if is_rewrite(r):
            r[PERSON_SET_FIELD] = {"kept_pdrs": [pdr for pdr, v in found if v.verdict == "kept"],
                                   "changed": sum(v.verdict == "changed" for _, v in found), "prompts": len(pairs)}
        else:
            ((_, person),) = found
            r[PERSON_FIELD] = {"verdict": person.verdict, "note": person.note}
    return given, len(set(verdicts) - used)


def sheet_bytes(records: Sequence[Mapping[str, Any]], earlier: Mapping[str, PersonVerdict] | None = None) -> bytes | None:
    """The review sheet (None when no record has an edited prompt); ``earlier``: verdicts already given,
    written back into their rows (rows of pairs no record read are kept at the end)."""
    earlier = earlier or {}
    pairs: dict[str, dict[str, Any]] = {}
    for r in records:
        for text, pdr in pairs_of(r):
            key = pair_id(str(r["clean_prompt"]), text)
            row = pairs.get(key)
            if row is None:
                changes = "" if is_rewrite(r) else substitutions_text(r.get("substitutions"), limit=12)
                row = pairs[key] = {"pair_id": key, "check": check_verdict(r), "check_reasons": check_reasons(r),
                                    "changes": "" if changes == MISSING else changes, "max_pdr": pdr,
                                    "records": 0, "attacks": set(), "clean_prompt": r["clean_prompt"],
                                    "adversarial_prompt": text}
            row["records"] += 1
            row["attacks"].add(str(r.get("attack")))
            row["max_pdr"] = max(row["max_pdr"], pdr)
    if not pairs:
        return None
    fh = io.StringIO(newline="")
    writer = csv.DictWriter(fh, fieldnames=list(COLUMNS))
    writer.writeheader()
    for row in sorted(pairs.values(), key=lambda x: (-x["max_pdr"], x["pair_id"])):  # the most damaging first
        person = earlier.get(row["pair_id"])
        row.update(person=person.verdict if person else "", person_note=person.note if person else "",
                   attacks=" ".join(sorted(row["attacks"])), max_pdr=f"{row['max_pdr']:.4f}")
        writer.writerow({k: csv_cell(v) for k, v in row.items()})
    for key in sorted(set(earlier) - set(pairs)):  # a verdict on a pair this report did not read is not lost
        writer.writerow({"pair_id": key, "person": earlier[key].verdict, "person_note": csv_cell(earlier[key].note),
                         "check": "", "check_reasons": "no record of this report has this pair"})
    return fh.getvalue().encode("utf-8")


def agreement_table(records: Sequence[Mapping[str, Any]]) -> Table | None:
    """How the meaning check's verdicts compare with a person's, over distinct pairs both judged
    (None when a person judged none)."""
    both: dict[str, tuple[str, str]] = {}
    for r in records:
        person = r.get(PERSON_FIELD)
        check = check_verdict(r)
        if isinstance(person, Mapping) and check in VERDICTS:
            both[pair_id(str(r["clean_prompt"]), str(r["adversarial_prompt"]))] = (check, str(person["verdict"]))
    if not both:
        return None
    counts = {(c, p): sum(1 for v in both.values() if v == (c, p)) for c in VERDICTS for p in VERDICTS}
    n = len(both)
    right = counts[("kept", "kept")] + counts[("changed", "changed")]
    changed = counts[("kept", "changed")] + counts[("changed", "changed")]
    said_changed = counts[("changed", "kept")] + counts[("changed", "changed")]

    def share(k: int, of: int) -> tuple[str, dict[str, Any]]:
        if not of:
            return "-", {"value": None, "ci_low": None, "ci_high": None, "count": 0}
        lo, hi = wilson_interval(k, of)
        return f"{k / of:.3f} [{lo:.3f}, {hi:.3f}] ({k}/{of})", {"value": k / of, "ci_low": lo, "ci_high": hi, "count": of}

    measures = [("agreement (accuracy)", *share(right, n)),
                ("recall of changed: the person's changed the check also found", *share(counts[("changed", "changed")], changed)),
                ("precision of changed: the check's changed the person agreed with", *share(counts[("changed", "changed")], said_changed))]
    display = [[f"check {c}, person {p}", str(counts[(c, p)])] for c in VERDICTS for p in VERDICTS]
    display += [[name, text] for name, text, _ in measures]
    long: list[dict[str, Any]] = [{"measure": f"check {c}, person {p}", "value": counts[(c, p)], "count": n}
                                  for c in VERDICTS for p in VERDICTS]
    long += [{"measure": name, **numbers} for name, _, numbers in measures]
    return Table("meaning_agreement", "The meaning check against a person's verdicts", ["", "pairs / share [95% Wilson]"],
                 display, long,
                 f"over the {n} distinct (clean, adversarial) pairs that both the check (kept or changed) and a person "
                 f"(--meaning-verdicts) judged; the person's verdict is the one the acceptable-only tables use",
                 statistic="counts and proportions with Wilson 95% intervals")
