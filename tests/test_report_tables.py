"""APDR and clean-score aggregation of reports, checked against hand-computed values.

The fixture (tests/fixtures/report/sweep) holds 2 models x 2 datasets x
2 attacks x 2 prompts with PDRs chosen by hand, a clean-only run, and an
unfinished ``.partial`` run whose record (PDR 1.0) must be ignored.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from statistics import mean, stdev

import orjson
import pytest

from promptrobust.engine.analysis.report.load import ReportInputError, load_runs
from promptrobust.engine.analysis.report.tables import (
    PROMPT_TYPE_ORDER,
    apdr_tables,
    clean_table,
    cost_table,
    extreme_prompts,
    grid_table,
)

FIXTURE = Path(__file__).parent / "fixtures" / "report" / "sweep"


@pytest.fixture(scope="module")
def data():
    return load_runs([str(FIXTURE)])


@pytest.fixture(scope="module")
def tables(data):
    return {t.name: t for t in apdr_tables(data.records)}


def cell_of(table, row: str, col: str) -> dict:
    key_r, key_c = list(table.long[0])[:2]
    hits = [r for r in table.long if r[key_r] == row and r[key_c] == col]
    assert len(hits) == 1, f"no single cell {row} x {col} in {table.name}"
    return hits[0]


def test_loads_every_finished_record_and_skips_partial_runs(data) -> None:
    assert len(data.records) == 16
    assert max(r["pdr"] for r in data.records) == pytest.approx(0.9)  # the .partial record has PDR 1.0


def test_attack_x_dataset_cells_match_hand_computed_mean_and_sample_std(tables) -> None:
    t = tables["apdr_attack_x_dataset"]
    tb_sst2 = [0.50, 0.40, 0.60, 0.90]  # alpha task, alpha role, beta task, beta role
    c = cell_of(t, "textbugger", "sst2")
    assert c["mean"] == pytest.approx(mean(tb_sst2))
    assert c["std"] == pytest.approx(stdev(tb_sst2))
    assert (c["count"], c["prompts"]) == (4, 2)
    # These fixture records carry no per-sample scores: no interval is claimed (issue 19).
    assert c["ci_low"] is None and c["ci_high"] is None
    cl_rte = [0.00, 0.05, 0.15, 0.20]
    c = cell_of(t, "checklist", "rte")
    assert (c["mean"], c["std"]) == (pytest.approx(mean(cl_rte)), pytest.approx(stdev(cl_rte)))
    checklist_all = [0.10, 0.20, 0.30, 0.10] + cl_rte
    c = cell_of(t, "checklist", "all")
    assert (c["mean"], c["std"], c["count"]) == (pytest.approx(mean(checklist_all)), pytest.approx(stdev(checklist_all)), 8)
    # Display: rows and columns sorted, 'all' last, cells as "mean ± std [low, high]".
    assert t.header == ["attack \\ dataset", "rte", "sst2", "all"]
    assert [r[0] for r in t.rows] == ["checklist", "textbugger"]
    assert t.rows[1][2] == f"{mean(tb_sst2):.2f} ± {stdev(tb_sst2):.2f} (no interval: per-sample scores not recorded)"


def test_model_tables(tables) -> None:
    beta_sst2 = [0.30, 0.60, 0.10, 0.90]
    c = cell_of(tables["apdr_model_x_dataset"], "beta-lm", "sst2")
    assert (c["mean"], c["std"]) == (pytest.approx(mean(beta_sst2)), pytest.approx(stdev(beta_sst2)))
    alpha_textbugger = [0.50, 0.40, 0.30, 0.25]
    c = cell_of(tables["apdr_model_x_attack"], "alpha-lm", "textbugger")
    assert (c["mean"], c["std"]) == (pytest.approx(mean(alpha_textbugger)), pytest.approx(stdev(alpha_textbugger)))


def test_prompt_type_groups_shots_and_prompt_set(tables) -> None:
    t = tables["apdr_prompt_type_x_dataset"]
    assert [r[0] for r in t.rows] == list(PROMPT_TYPE_ORDER)  # alpha-lm zero-shot, beta-lm 3-shot
    c = cell_of(t, "few-shot role", "sst2")
    assert (c["mean"], c["std"], c["count"]) == (pytest.approx(0.5), pytest.approx(stdev([0.10, 0.90])), 2)
    c = cell_of(t, "zero-shot task", "rte")
    assert (c["mean"], c["std"]) == (pytest.approx(0.15), pytest.approx(stdev([0.0, 0.30])))


def test_single_record_cell_shows_its_pdr_only() -> None:
    recs = [{"attack": a, "dataset": "x", "pdr": p, "clean_prompt": a + str(p), "status": "attacked"}
            for a, p in (("a", 0.2), ("a", 0.4), ("b", 0.4))]
    t = grid_table(recs, "attack", "dataset", name="t", title="t", row_title="attack", col_title="dataset")
    assert t.rows[1] == ["b", "0.40", "0.40"]
    assert t.rows[0][1].startswith("0.30 ± 0.14 [")
    b = cell_of(t, "b", "x")
    assert b["std"] is None and b["ci_low"] is None and b["count"] == 1


def test_clean_scores_from_both_kinds_of_results_json(data) -> None:
    t = clean_table(data.clean)
    assert list(t.long[0]) == ["model", "shots", "dataset", "mean", "std", "count"]
    cola = next(r for r in t.long if r["model"] == "alpha-lm" and r["dataset"] == "cola")
    assert (cola["mean"], cola["std"], cola["count"]) == (pytest.approx(0.6), pytest.approx(0.1), 3)
    beta = next(r for r in t.long if r["model"] == "beta-lm" and r["dataset"] == "sst2")
    scores = [0.95, 0.90, 0.92, 0.85]
    assert (beta["mean"], beta["std"], beta["shots"]) == (pytest.approx(mean(scores)), pytest.approx(stdev(scores)), 3)
    assert t.rows[1] == ["beta-lm (3-shot)", "–", "0.75 ± 0.05", f"{mean(scores):.2f} ± {stdev(scores):.2f}"]


def test_cost_table_means_per_attack_from_each_records_own_time(data) -> None:
    t = cost_table(data.records)
    row = next(r for r in t.long if r["attack"] == "textbugger")
    assert row["records"] == 8
    assert row["candidate_evaluations"] == pytest.approx(40.0)
    assert row["wall_seconds"] == pytest.approx(10.0)
    # The nested cost of new records is read too; its wall_seconds is the record's own.
    new = [{**data.records[0], "cost": {"candidate_evaluations": 3.0, "wall_seconds": 1.5}}]
    assert next(iter(cost_table(new).long))["wall_seconds"] == 1.5


def test_most_damaging_prompts_are_sorted_by_pdr_and_changed(data) -> None:
    worst = extreme_prompts(data.records, 3)
    assert [r["pdr"] for r in worst] == pytest.approx([0.9, 0.6, 0.5])
    assert all(r["adversarial_prompt"] != r["clean_prompt"] for r in worst)
    assert min(r["pdr"] for r in extreme_prompts(data.records, 100)) > 0
    assert extreme_prompts(data.records, 10, helpful=True) == []  # no PDR < 0 in this fixture


def test_same_run_reached_twice_counts_once(data) -> None:
    run = next(p for p in FIXTURE.iterdir() if p.name.endswith("beta-lm_sst2"))
    again = load_runs([str(FIXTURE), str(run)])
    assert len(again.records) == len(data.records)


def test_a_copied_run_is_a_rerun_and_counts_once(tmp_path: Path) -> None:
    run = next(p for p in FIXTURE.iterdir() if p.name.endswith("beta-lm_sst2"))
    shutil.copytree(run, tmp_path / "a")
    shutil.copytree(run, tmp_path / "b")
    d = load_runs([str(tmp_path)])
    assert len(d.records) == 4 and d.reruns_dropped == 4
    assert clean_table(d.clean).long[0]["count"] == 4


def test_attacked_list_in_results_json_is_used_when_jsonl_is_missing(tmp_path: Path) -> None:
    run = next(p for p in FIXTURE.iterdir() if p.name.endswith("alpha-lm_rte"))
    rows = [orjson.loads(line) for line in (run / "results.jsonl").read_bytes().splitlines()]
    summary = orjson.loads((run / "results.json").read_bytes())
    summary["attacked"] = rows
    (tmp_path / "results.json").write_bytes(orjson.dumps(summary))
    d = load_runs([str(tmp_path)])
    assert len(d.records) == 4
    assert sorted({c["shots"] for c in d.clean}) == [0]  # from the attacked records: no config.json here


def test_row_that_is_not_an_attack_record_is_refused(tmp_path: Path) -> None:
    (tmp_path / "results.jsonl").write_bytes(orjson.dumps({"model": "m", "dataset": "d", "attack": "a"}) + b"\n")
    with pytest.raises(ReportInputError, match="lacks 'clean_prompt'"):
        load_runs([str(tmp_path)])
