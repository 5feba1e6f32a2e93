"""A clean-only `pre run` writes results.jsonl and results.parquet like every run (issue 31 item 4):
one row per prompt, kind "clean", holding its results.json clean entry plus what a row read alone
needs; reports read the clean scores once, and transfer/defense pass over such rows."""

from __future__ import annotations

from pathlib import Path

import orjson
import polars as pl
import pytest

from promptrobust.cli.main import main
from promptrobust.engine.measuring.records import CLEAN_KIND
from promptrobust.testing.fake_openai import FakeOpenAIServer
from tests.sweep_helpers import hashed_text_answer


@pytest.fixture()
def server():  # noqa: ANN201
    with FakeOpenAIServer(answer=hashed_text_answer) as srv:
        yield srv


def _run(server, tmp_path: Path, out: Path, *extra: str) -> Path:  # noqa: ANN001
    before = set(out.iterdir()) if out.exists() else set()
    assert main(["run", "--model", "openai:fake-model", "--model-args", f"base_url={server.url}", "--mode", "choices",
                 "--limit", "6", "--prompt", "sst2-task-01,sst2-task-02,sst2-task-03", "--no-progress",
                 "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(out), *extra]) == 0
    (folder,) = set(out.iterdir()) - before
    return folder


def test_a_clean_run_writes_one_row_per_prompt_beside_results_json(tmp_path: Path, server) -> None:  # noqa: ANN001
    folder = _run(server, tmp_path, tmp_path / "runs")
    rows = [orjson.loads(line) for line in (folder / "results.jsonl").read_bytes().splitlines()]
    summary = orjson.loads((folder / "results.json").read_bytes())
    assert [r["prompt_id"] for r in rows] == ["sst2-task-01", "sst2-task-02", "sst2-task-03"]
    assert {r["kind"] for r in rows} == {CLEAN_KIND}
    for row, clean in zip(rows, summary["results"]["clean"]):
        assert {k: row[k] for k in clean} == clean  # the results.json entry, unchanged
        assert row["model"] == "openai:fake-model" and row["dataset"] == "rotten_tomatoes"
        assert row["mode"] == "choices" and row["samples"] == 6 and row["chance_rate"] == summary["chance_rate"]
        assert len(row["sample_scores"]) == 6 and sum(row["sample_scores"]) / 6 == pytest.approx(row["score"])
    table = pl.read_parquet(folder / "results.parquet")
    assert table.height == 3 and table["score"].to_list() == [r["score"] for r in rows]


def test_reports_count_clean_rows_once_and_sources_pass_over_them(tmp_path: Path, server, capsys) -> None:  # noqa: ANN001
    from promptrobust.engine.analysis.report.load import load_runs
    from promptrobust.engine.analysis.sources import load_source_records

    runs = tmp_path / "runs"
    clean_only = _run(server, tmp_path, runs)
    attacked = _run(server, tmp_path, runs, "--attack", "stresstest", "--top-k", "1")
    data = load_runs([clean_only])
    assert not data.records and sorted(c["prompt_id"] for c in data.clean) == ["sst2-task-01", "sst2-task-02", "sst2-task-03"]
    both = load_runs([runs])
    assert {r["source"] for r in both.records} == {str(attacked)}  # the clean rows are no records
    assert [r.run_dir for r in load_source_records([runs])] == [attacked]
    assert main(["report", str(runs), "--output-dir", str(tmp_path / "report"), "--format", "md", "--quiet"]) == 0
