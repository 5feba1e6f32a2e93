"""A person's meaning verdicts (engine/analysis/report/review.py): `pre report` writes a review
sheet of every edited adversarial prompt; filled and read back with --meaning-verdicts, a person's
kept/changed replaces the meaning check's in the acceptable-only tables, and the agreement table
compares the two."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from promptrobust.cli.main import main
from promptrobust.engine.analysis.report import build_report
from promptrobust.engine.analysis.report.review import SHEET_NAME, pair_id
from promptrobust.engine.measuring.records import AttackRecord, append_jsonl

LABELS = frozenset({"positive", "negative"})
CLEAN = "Is the writer of this sentence pleased or displeased? Answer positive or negative, reader {i}."


def _runs(tmp_path: Path) -> Path:
    """Four attacked records over three (clean, adversarial) pairs: the check says changed, kept, and
    (a record made before the check) nothing; the kept pair was also found by a second attack. The
    third clean prompt begins like a spreadsheet formula, so the sheet escapes it."""
    from promptrobust.attacks.meaning_check import meaning_verdict

    made = []
    for i, (attack, old, new, pdr, checked) in enumerate([
            ("textfooler", "sentence", "conviction", 0.5, True), ("textfooler", "writer", "author", 0.2, True),
            ("textfooler", "writer", "author", 0.1, False), ("bertattack", "writer", "author", 0.3, True)]):
        clean = CLEAN.format(i=i if i < 3 else 1)
        clean = "-" + clean if i == 2 else clean
        adv = clean.replace(old, new, 1)
        made.append(AttackRecord(model="m", dataset="rotten_tomatoes", prompt_id=f"sst2-task-0{min(i, 2) + 1}",
                                 attack=attack, clean_prompt=clean, clean_score=0.8, adversarial_prompt=adv,
                                 adversarial_score=0.8 * (1 - pdr), pdr=pdr, samples=100, mode="choices",
                                 substitutions=[[old, new]],
                                 meaning=meaning_verdict(clean, adv, LABELS).to_dict() if checked else None))
    assert [r.meaning["verdict"] if r.meaning else None for r in made] == ["changed", "kept", None, "kept"]
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    append_jsonl(run / "results.jsonl", made)
    return tmp_path / "runs"


def _rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.open(encoding="utf-8", newline="")))


def _fill(sheet: Path, out: Path, said: dict[str, tuple[str, str]]) -> None:
    """A person's pass over the sheet: ``said`` maps a phrase of the adversarial prompt to (person, note)."""
    rows = _rows(sheet)
    for row in rows:
        for phrase, (verdict, note) in said.items():
            if phrase in row["adversarial_prompt"]:
                row["person"], row["person_note"] = verdict, note
    with out.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_the_report_writes_a_review_sheet_of_each_edited_prompt_most_damaging_first(tmp_path: Path, capsys) -> None:
    runs = _runs(tmp_path)
    out = tmp_path / "rep"
    assert main(["report", str(runs), "--output-dir", str(out), "--format", "md,csv", "--quiet"]) == 0
    assert f"fill the person column of {out / SHEET_NAME}, then add --meaning-verdicts" in capsys.readouterr().err
    rows = _rows(out / SHEET_NAME)
    assert [(r["check"], r["max_pdr"], r["records"], r["attacks"], r["person"]) for r in rows] == [
        ("changed", "0.5000", "1", "textfooler", ""),
        ("kept", "0.3000", "2", "bertattack textfooler", ""),  # one pair, two records: judged once
        ("not checked", "0.1000", "1", "textfooler", "")]
    assert "another role" in rows[0]["check_reasons"] and rows[0]["changes"] == "sentence → conviction"
    assert rows[2]["clean_prompt"].startswith("'-Is the writer")  # escaped for a spreadsheet
    assert rows[2]["pair_id"] == pair_id("-" + CLEAN.format(i=2), "-" + CLEAN.format(i=2).replace("writer", "author", 1))
    assert "meaning_agreement" not in {t.name for t in build_report(runs, figures=False).tables}  # nobody judged yet


def test_a_persons_verdicts_replace_the_checks_and_are_compared_with_it(tmp_path: Path, capsys) -> None:
    runs = _runs(tmp_path)
    out = tmp_path / "rep"
    assert main(["report", str(runs), "--output-dir", str(out), "--format", "csv", "--quiet"]) == 0
    filled = tmp_path / "filled.csv"
    # The person overrules the check on both pairs it judged, and judges the unchecked one (escaped prompt).
    _fill(out / SHEET_NAME, filled, {"conviction": ("kept", "a sentence is a conviction here?"),
                                    "author of this sentence pleased or displeased? Answer positive or negative, reader 1":
                                        ("Changed", ""), "reader 2": ("kept", "")})
    again = tmp_path / "rep2"
    assert main(["report", str(runs), "--output-dir", str(again), "--format", "md,csv", "--quiet",
                 "--meaning-verdicts", str(filled)]) == 0
    assert "a person's kept/changed on 4 adversarial prompt record(s)" in capsys.readouterr().err
    table = {r["attack"]: r for r in _rows(again / "apdr_acceptable.csv")}
    # TextFooler's acceptable prompts now: the 0.5 record and the 0.1 one (the person's kept); its 0.2 record changed.
    row = table["textfooler"]
    assert (row["acceptable_count"], row["changed"], row["not_checked"], row["by_a_person"]) == ("2", "1", "0", "3")
    assert float(row["acceptable_mean"]) == pytest.approx(0.3)
    row = table["bertattack"]  # the same pair as TextFooler's 0.2 record: the person's verdict applies to both
    assert (row["acceptable_count"], row["changed"], row["by_a_person"]) == ("0", "1", "1")
    left_out = _rows(again / "not_acceptable.csv")
    assert sorted((r["attack"], r["meaning_check"], r["judged_by"]) for r in left_out) == [
        ("bertattack", "changed", "person"), ("textfooler", "changed", "person")]
    md = (again / "report.md").read_text(encoding="utf-8")
    assert "changed by a person (the check said kept)" in md
    agreement = {r["measure"]: r for r in _rows(again / "meaning_agreement.csv")}
    # Two pairs both judged (the unchecked one is not compared): the check was wrong on both.
    assert agreement["check changed, person kept"]["value"] == "1" and agreement["check kept, person changed"]["value"] == "1"
    assert float(agreement["agreement (accuracy)"]["value"]) == 0.0 and agreement["agreement (accuracy)"]["count"] == "2"
    assert float(agreement["agreement (accuracy)"]["ci_high"]) == pytest.approx(0.658, abs=1e-3)  # Wilson, 0 of 2
    assert float(agreement["recall of changed: the person's changed the check also found"]["value"]) == 0.0
    sheet = {r["check"]: r for r in _rows(again / SHEET_NAME)}  # the next sheet keeps what the person said
    assert sheet["changed"]["person"] == "kept" and sheet["changed"]["person_note"] == "a sentence is a conviction here?"
    assert sheet["kept"]["person"] == "changed" and sheet["not checked"]["person"] == "kept"


def test_a_sheet_saved_with_semicolons_by_a_spreadsheet_is_read(tmp_path: Path) -> None:
    """A spreadsheet in a locale whose decimal mark is a comma saves CSV with semicolons."""
    runs = _runs(tmp_path)
    report = build_report(runs, figures=False)
    rows = list(csv.DictReader(report.review_sheet.decode("utf-8").splitlines()))
    rows[0]["person"] = "Kept"  # as typed, capital and all
    sheet = tmp_path / "saved.csv"
    with sheet.open("w", encoding="utf-8-sig", newline="") as fh:  # with the byte-order mark Excel writes
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]), delimiter=";")
        writer.writeheader()
        writer.writerows(rows)
    judged = build_report(runs, figures=False, meaning_verdicts=sheet)
    (long,) = [r for r in judged.table("apdr_acceptable").long if r["attack"] == "textfooler"]
    assert long["by_a_person"] == 1 and long["changed"] == 0  # the check's changed, overruled


def test_a_verdict_on_a_pair_no_record_has_is_said_and_kept(tmp_path: Path, capsys) -> None:
    runs = _runs(tmp_path)
    sheet = tmp_path / "sheet.csv"
    sheet.write_text("pair_id,person,person_note\n0123456789abcdef,changed,from another run\n", encoding="utf-8")
    report = build_report(runs, figures=False, meaning_verdicts=sheet)
    assert any("1 of the sheet's verdicts match no record read" in n for n in report.notes)
    assert report.review_sheet is not None
    rows = list(csv.DictReader(report.review_sheet.decode("utf-8").splitlines()))
    assert rows[-1]["pair_id"] == "0123456789abcdef" and rows[-1]["person"] == "changed"
    assert "match no record read" in capsys.readouterr().err


@pytest.mark.parametrize(("content", "said"), [
    (None, "no file"),
    ("pair,verdict\nx,kept\n", "has no column 'pair_id'"),
    ("pair_id,person\nabc,maybe\n", "row 2: person is 'maybe': write kept or changed"),
    ("pair_id,person\n,kept\n", "row 2: no pair_id"),
])
def test_a_sheet_that_cannot_be_read_is_one_line_and_exit_2(tmp_path: Path, capsys, content: str | None, said: str) -> None:
    runs = _runs(tmp_path)
    sheet = tmp_path / "sheet.csv"
    if content is not None:
        sheet.write_text(content, encoding="utf-8")
    out = tmp_path / "rep"
    assert main(["report", str(runs), "--output-dir", str(out), "--meaning-verdicts", str(sheet), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0] and "--meaning-verdicts" in err[0]
    assert not out.exists()  # nothing half-written
