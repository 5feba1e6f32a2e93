"""Honest reports (issue 11 item 6): settings never pooled, reruns counted once,
helpful attacks listed, `pre eval` clean scores shown, skipped/failed records
listed but not averaged, at-chance scores flagged, torn lines warned about."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from promptrobust.engine.analysis.report import ReportInputError, build_report
from promptrobust.engine.measuring.statistics import AT_CHANCE_NOTE, summarize_pdrs


def rec(**kw: Any) -> dict[str, Any]:
    base = {
        "model": "m", "backend": "hf", "dataset": "sst2", "prompt_id": "p1", "prompt_type": "task", "shots": 0,
        "attack": "stresstest", "clean_prompt": "Classify the review.", "clean_score": 0.8,
        "adversarial_prompt": "Classify the review and true is true.", "adversarial_score": 0.6, "pdr": 0.25,
        "status": "attacked", "mode": "choices", "parser": None, "max_new_tokens": None, "samples": 10, "seed": 0,
        "budget": None, "metric": "accuracy", "cost": {"candidate_evaluations": 3, "wall_seconds": 1.0},
    }
    row = {**base, **kw}
    if "pdr" in kw and "adversarial_score" not in kw and isinstance(kw["pdr"], float):
        row["adversarial_score"] = row["clean_score"] * (1 - kw["pdr"])  # a record's PDR agrees with its scores
    return row


def write_run(folder: Path, records: list[dict[str, Any]], summary: dict[str, Any] | None = None) -> Path:
    folder.mkdir(parents=True)
    (folder / "results.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    if summary is not None:
        (folder / "results.json").write_bytes(orjson.dumps(summary))
    return folder


def test_records_of_different_modes_are_reported_apart_never_pooled(tmp_path: Path) -> None:
    choices = [rec(prompt_id=f"c{i}", clean_prompt=f"Prompt {i}.", pdr=p) for i, p in enumerate((0.1, 0.3))]
    generate = [rec(prompt_id=f"g{i}", clean_prompt=f"Prompt {i}.", pdr=p, mode="generate", parser="last_word",
                    max_new_tokens=20) for i, p in enumerate((0.7, 0.9))]
    write_run(tmp_path / "a", choices + generate)
    report = build_report([tmp_path], figures=False)
    assert [s.kind for s in report.sections] == ["clean", "clean", "attack", "attack"]
    assert any("never pooled" in n for n in report.notes)
    titles = [s.title for s in report.sections if s.kind == "attack"]
    assert titles == ["Attacks (each attack's own search): mode choices, 10 samples, seed 0, budget unlimited",
                      "Attacks (each attack's own search): mode generate, parser last_word, max_new_tokens 20, "
                      "10 samples, seed 0, budget unlimited"]
    by_choice = report.table("apdr_attack_x_dataset__choices-n10-s0-bunl").long[0]
    by_generate = report.table("apdr_attack_x_dataset__generate-last_word-t20-n10-s0-bunl").long[0]
    assert (by_choice["mean"], by_choice["count"]) == (pytest.approx(0.2), 2)
    assert (by_generate["mean"], by_generate["count"]) == (pytest.approx(0.8), 2)
    assert all(t.long == [] or t.long[0].get("mean") != pytest.approx(0.5) for t in report.tables)  # no pooled cell
    md = report.markdown()
    assert "## Attacks (each attack's own search): mode choices" in md and "## Attacks (each attack's own search): mode generate" in md


def test_sample_size_and_generation_length_also_split(tmp_path: Path) -> None:
    write_run(tmp_path / "a", [rec(samples=10), rec(samples=50, prompt_id="p2", clean_prompt="Other.")])
    write_run(tmp_path / "b", [rec(mode="generate", parser="last_word", max_new_tokens=8),
                               rec(mode="generate", parser="last_word", max_new_tokens=20)])
    assert sum(s.kind == "attack" for s in build_report([tmp_path], figures=False).sections) == 4


def test_a_rerun_counts_once_by_run_key_and_the_latest_is_kept(tmp_path: Path) -> None:
    write_run(tmp_path / "20250101-run", [rec(run_key="k1", pdr=0.1), rec(run_key="k2", prompt_id="p2", clean_prompt="B.", pdr=0.5)])
    write_run(tmp_path / "20250102-rerun", [rec(run_key="k1", pdr=0.3)])
    report = build_report([tmp_path], figures=False)
    cell = report.table("apdr_attack_x_dataset").long[0]
    assert cell["count"] == 2 and cell["mean"] == pytest.approx((0.3 + 0.5) / 2)
    assert any("1 rerun record(s)" in n for n in report.notes)


def test_old_records_without_run_key_are_matched_on_the_measurement(tmp_path: Path) -> None:
    write_run(tmp_path / "a", [rec(pdr=0.1)])
    write_run(tmp_path / "b", [rec(pdr=0.1), rec(pdr=0.4, seed=1)])  # a different seed is a new measurement
    report = build_report([tmp_path], figures=False)
    assert report.table("apdr_attack_x_dataset__choices-n10-s0-bunl").long[0]["count"] == 1  # the rerun counted once
    assert report.table("apdr_attack_x_dataset__choices-n10-s1-bunl").long[0]["count"] == 1  # reported apart


def test_most_damaging_and_most_helpful_are_both_listed(tmp_path: Path) -> None:
    write_run(tmp_path / "a", [
        rec(prompt_id="hurt", pdr=0.5, adversarial_score=0.4),
        rec(prompt_id="help", clean_prompt="Say it.", adversarial_prompt="Say it and true is true.", pdr=-0.25, adversarial_score=1.0),
    ])
    report = build_report([tmp_path], figures=False)
    damaging = report.table("worst_prompts")
    helpful = report.table("most_helpful_prompts")
    assert [r["prompt_id"] for r in damaging.long] == ["hurt"]
    assert [r["prompt_id"] for r in helpful.long] == ["help"] and helpful.long[0]["pdr"] == -0.25
    html = report.html()
    assert "Most helpful adversarial prompts" in html and "PDR -0.250" in html


def test_eval_runs_show_their_clean_scores(tmp_path: Path) -> None:
    """`pre eval` of pairs writes records and a results.json with "pairs" but no clean_scores."""
    pairs = [rec(prompt_id="p1", attack="given", clean_score=0.9, pdr=0.1, prompt_type="given"),
             rec(prompt_id="p2", attack="given", clean_prompt="B.", clean_score=0.7, pdr=0.2, prompt_type="given")]
    summary = {"model": "m", "dataset": "sst2", "mode": "choices", "samples": 10, "shots": 0,
               "pairs": [{"id": "p1", "clean": 0.9}, {"id": "p2", "clean": 0.7}]}
    write_run(tmp_path / "eval", pairs, summary)
    report = build_report([tmp_path], figures=False)
    clean = report.table("clean_model_x_dataset")
    assert clean.rows == [["m (0-shot)", "0.80 ± 0.14"]]
    assert not any("no clean scores" in n for s in report.sections for n in s.notes)


def test_eval_of_single_prompts_shows_clean_scores(tmp_path: Path) -> None:
    (tmp_path / "eval").mkdir()
    summary = {"model": "m", "dataset": "sst2", "mode": "choices", "samples": 10, "shots": 0,
               "prompts": [{"id": "p1", "score": 0.5, "prompt": "A."}, {"id": "p2", "score": 0.7, "prompt": "B."}]}
    (tmp_path / "eval" / "results.json").write_bytes(orjson.dumps(summary))
    report = build_report([tmp_path], figures=False)
    assert report.table("clean_model_x_dataset").rows == [["m (0-shot)", "0.60 ± 0.14"]]


def test_skipped_and_failed_records_are_listed_not_averaged(tmp_path: Path) -> None:
    write_run(tmp_path / "a", [
        rec(pdr=0.2),
        rec(prompt_id="zero", clean_prompt="Z.", clean_score=0.0, pdr=None, status="skipped_clean_zero", adversarial_prompt=""),
        rec(prompt_id="bad", clean_prompt="F.", pdr=None, status="failed", error="backend timed out after 3 retries"),
        rec(prompt_id="old", clean_prompt="O.", clean_score=0.0, pdr=0.0, status=None),  # old writer: clean 0 averaged as PDR 0
    ])
    report = build_report([tmp_path], figures=False)
    cell = report.table("apdr_attack_x_dataset").long[0]
    assert (cell["count"], cell["mean"]) == (1, pytest.approx(0.2))
    excluded = report.table("records_not_averaged")
    assert sorted((r["prompt_id"], r["status"]) for r in excluded.long) == [
        ("bad", "failed"), ("old", "skipped_clean_zero"), ("zero", "skipped_clean_zero")]
    assert "backend timed out after 3 retries" in excluded.markdown()
    assert "1 attacked, 2 skipped, 1 failed" in report.meta[0]


def test_at_chance_clean_scores_are_flagged_with_the_note(tmp_path: Path) -> None:
    write_run(tmp_path / "a", [
        rec(clean_score=0.55, clean_ci95=[0.43, 0.66], chance_rate=0.5, at_chance=True, pdr=0.1),
        rec(prompt_id="p2", clean_prompt="B.", clean_score=0.9, clean_ci95=[0.8, 0.95], chance_rate=0.5, pdr=0.3),
    ])
    report = build_report([tmp_path], figures=False)
    chance = report.table("clean_at_chance")
    assert [r["prompt_id"] for r in chance.long] == ["p1"] and chance.note == AT_CHANCE_NOTE
    assert any(AT_CHANCE_NOTE in n and "1 of 2" in n for s in report.sections for n in s.notes)
    assert "yes" in report.table("worst_prompts").rows[1]  # the at-chance record is marked in the list


def test_extra_pairs_file_columns_group_the_apdr(tmp_path: Path) -> None:
    write_run(tmp_path / "a", [
        rec(prompt_id="1", clean_prompt="A.", pdr=0.1, source_model="llama"),
        rec(prompt_id="2", clean_prompt="B.", pdr=0.3, source_model="llama"),
        rec(prompt_id="3", clean_prompt="C.", pdr=0.6, extra={"source_model": "vicuna"}),
    ])
    report = build_report([tmp_path], group_by=["source_model"], figures=False)
    t = report.table("apdr_by_source_model")
    rows = {r["source_model"]: r for r in t.long}
    assert rows["llama"]["mean"] == pytest.approx(0.2) and rows["llama"]["count"] == 2
    assert rows["vicuna"]["mean"] == pytest.approx(0.6)
    with pytest.raises(ReportInputError, match="no record has a column 'nope'.*source_model"):
        build_report([tmp_path], group_by=["nope"], figures=False)


def test_apdr_cell_is_summarize_pdrs_of_its_records(tmp_path: Path) -> None:
    clean = [1, 1, 1, 1, 0, 1, 1, 0, 1, 1]
    records = [rec(prompt_id=str(i), clean_prompt=f"P{i}.", pdr=p, clean_sample_scores=clean,
                   adversarial_sample_scores=[0] * i + clean[i:]) for i, p in ((1, 0.125), (2, 0.25), (4, 0.375))]
    write_run(tmp_path / "a", records)
    cell = build_report([tmp_path], figures=False).table("apdr_attack_x_dataset").long[0]
    s = summarize_pdrs(records)
    assert (cell["mean"], cell["std"], (cell["ci_low"], cell["ci_high"])) == (s.mean, s.std, s.ci95)


def test_a_torn_last_line_is_warned_about_on_stderr(tmp_path: Path, capsys) -> None:
    run = write_run(tmp_path / "a", [rec(pdr=0.2), rec(prompt_id="p2", clean_prompt="B.", pdr=0.4)])
    with open(run / "results.jsonl", "ab") as fh:
        fh.write(orjson.dumps(rec(prompt_id="p3", clean_prompt="C."))[:40])  # a crash mid-write
    report = build_report([tmp_path], figures=False)
    assert report.table("apdr_attack_x_dataset").long[0]["count"] == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "results.jsonl" in err[0] and "line 3" in err[0]


def test_report_api_writes_tables_and_figures(tmp_path: Path) -> None:
    write_run(tmp_path / "runs" / "a", [rec(prompt_id=str(i), clean_prompt=f"Prompt number {i}.", pdr=p)
                                         for i, p in enumerate((-0.1, 0.2, 0.4))])
    report = build_report(tmp_path / "runs")
    assert {f.name for f in report.figures} >= {"apdr_by_attack", "apdr_by_model"}
    assert not any(f.name.startswith("heatmap_") for f in report.figures)  # one attack on one dataset: 1 x 1, not drawn
    written = report.write(tmp_path / "out", formats=("md", "csv", "png"))
    names = {p.name for p in written}
    assert {"report.md", "apdr_attack_x_dataset.csv", "apdr_by_model.png", "most_helpful_prompts.csv"} <= names
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in written if p.suffix == ".png")


def test_run_summary_clean_list_keeps_intervals_and_the_runs_chance_rate(tmp_path: Path) -> None:
    """A results.json "clean" list (pre run / pre eval) with per-prompt intervals and one chance rate per run."""
    (tmp_path / "run").mkdir()
    summary = {"model": "m", "dataset": "sst2", "mode": "choices", "samples": 30, "shots": 0, "chance_rate": 0.53,
               "clean": [{"prompt_id": "a", "score": 0.6, "ci95": [0.42, 0.75], "at_chance": True},
                         {"prompt_id": "b", "score": 0.9, "ci95": [0.74, 0.97], "at_chance": False}]}
    (tmp_path / "run" / "results.json").write_bytes(orjson.dumps(summary))
    report = build_report([tmp_path], figures=False)
    chance = report.table("clean_at_chance")
    assert chance.rows == [["m", "sst2", "a", "0.60", "[0.42, 0.75]", "0.53"]]
    assert report.table("clean_model_x_dataset").rows == [["m (0-shot)", "0.75 ± 0.21"]]
