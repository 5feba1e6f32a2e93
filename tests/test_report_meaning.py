"""`pre report` shows each adversarial prompt's substitutions and similarity, and
held-out PDRs beside in-sample ones (engine/analysis/report/meaning.py)."""

from __future__ import annotations

from pathlib import Path

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
