"""`pre report` shows each adversarial prompt's substitutions and similarity, and
held-out PDRs beside in-sample ones (engine/analysis/report/meaning.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from promptrobust.cli.main import main
from promptrobust.engine.measuring.records import AttackRecord, append_jsonl


def _record(attack: str, held: bool) -> AttackRecord:
    clean = "Is the writer of this sentence pleased or displeased? Answer positive or negative."
    adv = clean.replace("writer", "author").replace("sentence", "conviction")
    return AttackRecord(
        model="m", dataset="rotten_tomatoes", prompt_id="sst2-task-02", attack=attack, clean_prompt=clean,
        clean_score=0.8, adversarial_prompt=adv, adversarial_score=0.6, pdr=0.25, pdr_ci95=[0.1, 0.4], mcnemar_p=0.01,
        samples=100, mode="choices", substitutions=[["writer", "author"], ["sentence", "conviction"]],
        final_similarity={"angular": 0.8123, "cosine": 0.83, "encoder": "use"},
        held_out={"fraction": 0.5, "samples": 200, "clean_score": 0.75, "adversarial_score": 0.7, "pdr": 0.0667,
                  "pdr_ci95": [-0.02, 0.15], "mcnemar_p": 0.3} if held else None,
    )


def test_report_shows_meaning_checks_and_held_out_pdr(tmp_path: Path, capsys) -> None:
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    append_jsonl(run / "results.jsonl", [_record("textfooler", True), _record("textbugger", False)])
    out = tmp_path / "rep"
    assert main(["report", str(tmp_path / "runs"), "--output-dir", str(out), "--format", "md,html,csv"]) == 0
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "PDR in-sample and on held-out samples" in md
    assert "0.067" in md and "0.250" in md  # held-out beside in-sample
    assert "the APDR tables show in-sample PDRs" in md
    assert "writer → author; sentence → conviction" in md
    assert "0.812" in md
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "held-out PDR 0.067" in html and "USE angular similarity to the clean prompt 0.812" in html
    held_csv = (out / "held_out_pdr.csv").read_text(encoding="utf-8")
    assert "textfooler" in held_csv and "textbugger" not in held_csv  # only records made with --holdout


def test_report_without_the_new_fields_has_no_new_tables(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    rec = _record("stresstest", False)
    rec.substitutions, rec.final_similarity = [], {}
    append_jsonl(run / "results.jsonl", [rec])
    out = tmp_path / "rep"
    assert main(["report", str(tmp_path / "runs"), "--output-dir", str(out), "--format", "md"]) == 0
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "held-out" not in md and "how similar they stay" not in md


def test_report_shows_apdr_over_all_and_over_acceptable_prompts_with_counts(tmp_path: Path) -> None:
    """Issue 30: a run folder with an adversarial prompt whose meaning changed, one whose meaning was
    kept and one made before the check: both APDRs side by side, the unchecked one never passing."""
    from promptrobust.attacks.meaning_check import meaning_verdict

    labels = frozenset({"positive", "negative"})
    made = []
    for i, (old, new, pdr, checked) in enumerate([("sentence", "conviction", 0.5, True), ("writer", "author", 0.2, True),
                                                  ("writer", "author", 0.1, False)]):
        clean = f"Is the writer of this sentence pleased or displeased? Answer positive or negative, reader {i}."
        adv = clean.replace(old, new, 1)
        rec = AttackRecord(model="m", dataset="rotten_tomatoes", prompt_id=f"sst2-task-0{i + 1}", attack="textfooler",
                           clean_prompt=clean, clean_score=0.8, adversarial_prompt=adv, adversarial_score=0.8 * (1 - pdr),
                           pdr=pdr, samples=100, mode="choices", substitutions=[[old, new]],
                           meaning=meaning_verdict(clean, adv, labels).to_dict() if checked else None)
        made.append(rec)
    assert [r.meaning["verdict"] if r.meaning else None for r in made] == ["changed", "kept", None]
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    append_jsonl(run / "results.jsonl", made)
    out = tmp_path / "rep"
    assert main(["report", str(tmp_path / "runs"), "--output-dir", str(out), "--format", "md,csv,html"]) == 0
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "APDR over all adversarial prompts and over the acceptable ones" in md
    table = md[md.index("APDR over all adversarial prompts and over the acceptable ones"):]
    line = next(x for x in table.splitlines() if x.startswith("| textfooler"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[3] == "3" and cells[4].startswith("0.27 ± 0.21")  # all three: (0.5 + 0.2 + 0.1) / 3
    assert cells[5] == "1" and cells[6].startswith("0.20") and cells[7:] == ["1", "1"]  # the kept one; 1 changed, 1 not checked (no rewrite: no column for them)
    import csv

    (row,) = list(csv.DictReader((out / "apdr_acceptable.csv").open(encoding="utf-8")))
    assert (row["all_count"], row["acceptable_count"], row["changed"], row["not_checked"]) == ("3", "1", "1", "1")
    assert float(row["all_mean"]) == pytest.approx(0.8 / 3) and float(row["acceptable_mean"]) == pytest.approx(0.2)
    assert "changed: sentence → conviction: changes the instruction: another role" in md  # the left-out prompts, with why
    left_out = list(csv.DictReader((out / "not_acceptable.csv").open(encoding="utf-8")))
    assert sorted((r["prompt_id"], r["meaning_check"]) for r in left_out) == [("sst2-task-01", "changed"),
                                                                            ("sst2-task-03", "not checked")]


def test_acceptable_apdrs_of_different_meaning_checks_are_never_pooled(tmp_path: Path) -> None:
    """Records judged by the shipped check and by its MiniLM-alone fallback (a machine without MPNet),
    in one cell: a row per check, named, never one acceptable APDR over both."""
    import csv

    from promptrobust.attacks.meaning_check import CHECK_MINILM_ALONE, meaning_verdict

    labels = frozenset({"positive", "negative"})
    made = []
    for i, (pdr, fallback) in enumerate([(0.5, False), (0.1, True)]):
        clean = f"Is the writer of this sentence pleased or displeased? Answer positive or negative, reader {i}."
        adv = clean.replace("writer", "author", 1)
        verdict = meaning_verdict(clean, adv, labels).to_dict()
        assert verdict["verdict"] == "kept"
        if fallback:
            verdict["check"] = CHECK_MINILM_ALONE
        made.append(AttackRecord(model="m", dataset="rotten_tomatoes", prompt_id=f"sst2-task-0{i + 1}",
                                 attack="textfooler", clean_prompt=clean, clean_score=0.8, adversarial_prompt=adv,
                                 adversarial_score=0.8 * (1 - pdr), pdr=pdr, samples=100, mode="choices",
                                 substitutions=[["writer", "author"]], meaning=verdict))
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    append_jsonl(run / "results.jsonl", made)
    out = tmp_path / "rep"
    assert main(["report", str(tmp_path / "runs"), "--output-dir", str(out), "--format", "md,csv"]) == 0
    rows = list(csv.DictReader((out / "apdr_acceptable.csv").open(encoding="utf-8")))
    assert sorted((r["meaning_check"], r["acceptable_count"], float(r["acceptable_mean"])) for r in rows) == [
        ("v11", "1", pytest.approx(0.5)), ("v11, all-MiniLM-L6-v2 alone", "1", pytest.approx(0.1))]
    md = (out / "report.md").read_text(encoding="utf-8")
    table = md[md.index("APDR over all adversarial prompts and over the acceptable ones"):]
    header = next(line for line in table.splitlines() if line.startswith("| attack"))
    assert [c.strip() for c in header.strip("|").split("|")][:5] == ["attack", "model", "dataset", "meaning check", "n all"]
    assert "never pooled" in table
