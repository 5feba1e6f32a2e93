"""APDR and clean-score aggregation of `pre report`, checked against hand-computed values.

The fixture (tests/fixtures/report/sweep) holds 2 models x 2 datasets x
2 attacks x 2 prompts with PDRs chosen by hand, a clean-only run, and an
unfinished ``.partial`` run whose record (PDR 1.0) must be ignored.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from statistics import mean, stdev

import orjson
import polars as pl
import pytest

from promptrobust.cli.errors import UserError
from promptrobust.cli.report import load_runs
from promptrobust.cli.report_tables import (
    PROMPT_TYPE_ORDER,
    apdr_tables,
    clean_table,
    cost_table,
    grid_table,
    worst_prompts,
)

FIXTURE = Path(__file__).parent / "fixtures" / "report" / "sweep"


@pytest.fixture(scope="module")
def data():
    return load_runs([str(FIXTURE)])


@pytest.fixture(scope="module")
def tables(data):
    return {t.name: t for t in apdr_tables(data.records)}


def cell_of(table, row: str, col: str) -> dict:
    key_r, key_c = table.frame.columns[:2]
    hits = table.frame.filter((pl.col(key_r) == row) & (pl.col(key_c) == col)).to_dicts()
    assert len(hits) == 1, f"no single cell {row} x {col} in {table.name}"
    return hits[0]


def test_loads_every_finished_record_and_skips_partial_runs(data) -> None:
    assert data.records.height == 16
    assert data.records["pdr"].max() == pytest.approx(0.9)  # the .partial record has PDR 1.0


def test_attack_x_dataset_cells_match_hand_computed_mean_and_sample_std(tables) -> None:
    t = tables["apdr_attack_x_dataset"]
    tb_sst2 = [0.50, 0.40, 0.60, 0.90]  # alpha task, alpha role, beta task, beta role
    c = cell_of(t, "textbugger", "sst2")
    assert c["mean"] == pytest.approx(mean(tb_sst2))
    assert c["std"] == pytest.approx(stdev(tb_sst2))
    assert c["count"] == 4
    cl_rte = [0.00, 0.05, 0.15, 0.20]
    c = cell_of(t, "checklist", "rte")
    assert (c["mean"], c["std"]) == (pytest.approx(mean(cl_rte)), pytest.approx(stdev(cl_rte)))
    checklist_all = [0.10, 0.20, 0.30, 0.10] + cl_rte
    c = cell_of(t, "checklist", "all")
    assert (c["mean"], c["std"], c["count"]) == (pytest.approx(mean(checklist_all)), pytest.approx(stdev(checklist_all)), 8)
    # Display: rows and columns sorted, 'all' last, cells as "mean ± std".
    assert t.header == ["attack \\ dataset", "rte", "sst2", "all"]
    assert [r[0] for r in t.rows] == ["checklist", "textbugger"]
    assert t.rows[1][2] == f"{mean(tb_sst2):.2f} ± {stdev(tb_sst2):.2f}"


def test_model_tables(tables) -> None:
    beta_sst2 = [0.30, 0.60, 0.10, 0.90]
    c = cell_of(tables["apdr_model_x_dataset"], "beta-lm", "sst2")
    assert (c["mean"], c["std"]) == (pytest.approx(mean(beta_sst2)), pytest.approx(stdev(beta_sst2)))
    alpha_textbugger = [0.50, 0.40, 0.30, 0.25]
    c = cell_of(tables["apdr_model_x_attack"], "alpha-lm", "textbugger")
    assert (c["mean"], c["std"]) == (pytest.approx(mean(alpha_textbugger)), pytest.approx(stdev(alpha_textbugger)))


def test_prompt_type_groups_shots_and_prompt_set(tables) -> None:
    t = tables["apdr_prompt_type_x_dataset"]
    # alpha-lm runs are zero-shot, beta-lm runs 3-shot.
    assert [r[0] for r in t.rows] == list(PROMPT_TYPE_ORDER)
    few_role_sst2 = [0.10, 0.90]  # beta-lm, sst2-role-02, checklist and textbugger
    c = cell_of(t, "few-shot role", "sst2")
    assert (c["mean"], c["std"], c["count"]) == (pytest.approx(0.5), pytest.approx(stdev(few_role_sst2)), 2)
    c = cell_of(t, "zero-shot task", "rte")
    assert (c["mean"], c["std"]) == (pytest.approx(0.15), pytest.approx(stdev([0.0, 0.30])))


def test_single_record_cell_shows_mean_only_and_empty_std() -> None:
    frame = pl.DataFrame({"attack": ["a", "a", "b"], "dataset": ["x", "x", "x"], "pdr": [0.2, 0.4, 0.4]})
    t = grid_table(frame, "attack", "dataset", "pdr", name="t", title="t", note="")
    assert t.rows == [["a", "0.30 ± 0.14", "0.30 ± 0.14"], ["b", "0.40", "0.40"]]
    b = cell_of(t, "b", "x")
    assert b["std"] is None and b["count"] == 1


def test_clean_scores_from_both_kinds_of_results_json(data) -> None:
    t = clean_table(data.clean)
    assert t.frame.columns == ["model", "shots", "dataset", "mean", "std", "count"]
    cola = t.frame.filter((pl.col("model") == "alpha-lm") & (pl.col("dataset") == "cola")).to_dicts()[0]
    assert (cola["mean"], cola["std"], cola["count"]) == (pytest.approx(0.6), pytest.approx(0.1), 3)
    beta = t.frame.filter((pl.col("model") == "beta-lm") & (pl.col("dataset") == "sst2")).to_dicts()[0]
    scores = [0.95, 0.90, 0.92, 0.85]
    assert (beta["mean"], beta["std"], beta["shots"]) == (pytest.approx(mean(scores)), pytest.approx(stdev(scores)), 3)
    assert t.rows[1] == ["beta-lm (3-shot)", "–", "0.75 ± 0.05", f"{mean(scores):.2f} ± {stdev(scores):.2f}"]


def test_cost_table_means_per_attack(data) -> None:
    t = cost_table(data.records)
    row = t.frame.filter(pl.col("attack") == "textbugger").to_dicts()[0]
    assert row["records"] == 8
    assert row["candidate_evaluations"] == pytest.approx(40.0)
    assert row["wall_seconds"] == pytest.approx(10.0)
    assert t.frame.columns == [
        "attack", "records", "candidate_evaluations", "model_requests", "requests_sent",
        "cache_hits", "saved_by_early_stopping", "wall_seconds",
    ]


def test_worst_prompts_are_sorted_by_pdr_and_changed(data) -> None:
    worst = worst_prompts(data.records, 3)
    assert worst["pdr"].to_list() == pytest.approx([0.9, 0.6, 0.5])
    assert all(a != c for a, c in zip(worst["adversarial_prompt"], worst["clean_prompt"]))
    assert worst_prompts(data.records, 100)["pdr"].min() > 0  # the unchanged-score checklist record (PDR 0) is left out


def test_same_run_reached_twice_counts_once(data) -> None:
    run = next(p for p in FIXTURE.iterdir() if p.name.endswith("beta-lm_sst2"))
    again = load_runs([str(FIXTURE), str(run)])
    assert again.records.height == data.records.height


def test_clean_prompt_scored_by_two_runs_counts_once(tmp_path: Path) -> None:
    run = next(p for p in FIXTURE.iterdir() if p.name.endswith("beta-lm_sst2"))
    shutil.copytree(run, tmp_path / "a")
    shutil.copytree(run, tmp_path / "b")
    d = load_runs([str(tmp_path)])
    assert d.records.height == 8  # two runs, both kept
    c = clean_table(d.clean).frame.to_dicts()[0]
    assert c["count"] == 4


def test_attacked_list_in_results_json_is_used_when_jsonl_is_missing(tmp_path: Path) -> None:
    run = next(p for p in FIXTURE.iterdir() if p.name.endswith("alpha-lm_rte"))
    rows = [orjson.loads(line) for line in (run / "results.jsonl").read_bytes().splitlines()]
    summary = orjson.loads((run / "results.json").read_bytes())
    summary["attacked"] = rows
    (tmp_path / "results.json").write_bytes(orjson.dumps(summary))
    d = load_runs([str(tmp_path)])
    assert d.records.height == 4
    assert d.clean["shots"].to_list() == [0, 0, 0]  # from the attacked records: no config.json here


def test_record_without_pdr_is_a_user_error(tmp_path: Path) -> None:
    (tmp_path / "results.jsonl").write_bytes(orjson.dumps({"model": "m", "dataset": "d", "attack": "a"}) + b"\n")
    with pytest.raises(UserError, match="lacks 'pdr'"):
        load_runs([str(tmp_path)])
