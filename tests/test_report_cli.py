"""`pre report` end to end: files written, stdout, and the user errors (exit code 2)."""

from __future__ import annotations

import re

import shutil
from pathlib import Path

import polars as pl
import pytest

from promptrobust.engine.analysis.report.load import ReportInputError
from promptrobust.cli.main import main
from promptrobust.engine.analysis.report.load import load_runs

FIXTURES = Path(__file__).parent / "fixtures" / "report"
PNG = b"\x89PNG\r\n\x1a\n"


def test_full_report_writes_every_format(tmp_path: Path, capsys) -> None:
    out = tmp_path / "rep"
    assert main(["report", str(FIXTURES / "sweep"), "--output-dir", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert "### APDR by attack and dataset" in stdout
    assert "| textbugger       | 0.34 ± 0.09 (no interval: per-sample scores not recorded) |" in stdout
    names = {p.name for p in out.iterdir()}
    # The fixture's clean-only cola run predates recorded modes: it gets a section of its own.
    names = {re.sub(r"__[^.]*", "", n) for n in names}
    assert {"report.md", "report.html", "apdr_attack_x_dataset.csv", "apdr_model_x_dataset.csv",
            "apdr_prompt_type_x_dataset.csv", "apdr_model_x_attack.csv", "clean_model_x_dataset.csv",
            "cost_by_attack.csv", "words_robust.csv", "words_vulnerable.csv", "worst_prompts.csv"} <= names
    pngs = sorted(p for p in out.iterdir() if p.suffix == ".png")
    assert [re.sub(r"__.*", "", p.stem) for p in pngs] == [
        "apdr_by_attack", "apdr_by_model", "heatmap_attack_x_dataset", "heatmap_model_x_attack", "word_frequency"]
    assert all(p.read_bytes()[:8] == PNG for p in pngs)
    csv = pl.read_csv(out / "apdr_attack_x_dataset.csv")  # one attack setting: no suffix
    assert csv.columns == ["attack", "dataset", "mean", "std", "ci_low", "ci_high", "count", "prompts"]
    assert csv.filter((pl.col("attack") == "textbugger") & (pl.col("dataset") == "sst2"))["mean"].item() == pytest.approx(0.6)
    assert "APDR by model and attack" in (out / "report.md").read_text(encoding="utf-8")


def test_default_output_is_next_to_the_first_run_dir_never_inside_and_formats_are_respected(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    shutil.copytree(FIXTURES / "sweep", sweep)
    before = sorted(p.relative_to(sweep) for p in sweep.rglob("*"))
    assert main(["report", str(sweep), "--format", "md,csv", "--quiet"]) == 0
    assert sorted(p.relative_to(sweep) for p in sweep.rglob("*")) == before  # nothing written where it reads
    names = {p.name.replace("__choices-n20-b100", "") for p in (tmp_path / "sweep-report").iterdir()}
    assert "report.md" in names and "cost_by_attack.csv" in names
    assert not any(n.endswith((".png", ".html")) for n in names)
    # The report folder is not mistaken for results on the next run.
    assert len(load_runs([str(sweep)]).records) == 16


def test_clean_only_run_reports_clean_scores_and_says_why_apdr_is_missing(tmp_path: Path, capsys) -> None:
    run = FIXTURES / "sweep" / "20250105-120000_alpha-lm_cola"
    assert main(["report", str(run), "--output", str(tmp_path), "--format", "md,html"]) == 0  # --output: old spelling
    stdout = capsys.readouterr().out
    assert "| alpha-lm (0-shot) | 0.60 ± 0.10 |" in stdout
    assert "no attacked records" in stdout
    assert "no attacked records" in (tmp_path / "report.html").read_text(encoding="utf-8")


def test_folder_without_results_is_a_user_error(capsys) -> None:
    empty = FIXTURES / "empty_sweep"
    with pytest.raises(ReportInputError, match=r"no results.jsonl or results.json under .*empty_sweep: run `pre run --attack \.\.\.` or `pre sweep` first"):
        load_runs([str(empty)])
    assert main(["report", str(empty)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pre: error: no results.jsonl or results.json under")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--format", "md,docx"], "unknown format 'docx'"),
        (["--top", "0"], "--top must be at least 1"),
        (["--words", "0"], "--words must be at least 1"),
        (["--group-by", "source_model"], "no record has a column 'source_model' to group by"),
    ],
)
def test_bad_options_exit_2_with_one_line(argv: list[str], message: str, capsys) -> None:
    assert main(["report", str(FIXTURES / "sweep"), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_missing_folder_and_wrong_file_are_user_errors(tmp_path: Path, capsys) -> None:
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    other = tmp_path / "notes.txt"
    other.write_text("x")
    assert main(["report", str(other)]) == 2
    assert "is not a results.jsonl or results.json file" in capsys.readouterr().err


def test_help_names_output_dir_and_meaningful_defaults(capsys) -> None:
    assert main(["report", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--output-dir DIR" in out and "--output DIR" not in out
    assert "(default: )" not in out and "default: the median PDR" in out


def test_the_default_report_of_the_runs_folder_is_ignored_in_a_checkout() -> None:
    """Issue 42 item 14: `pre report runs` (runs/: pre run's default folder, ignored) writes runs-report/
    beside it; a checkout ignores that too, so it never shows as untracked."""
    import argparse
    import subprocess

    from promptrobust.cli.report import output_folder

    root = Path(__file__).resolve().parents[1]
    folder = output_folder(argparse.Namespace(output_dir=None, run_dirs=[str(root / "runs")]))
    assert folder == root / "runs-report"
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("not a git checkout")
    for path in ("runs/x/results.jsonl", "runs-report/report.md"):
        assert subprocess.run(["git", "check-ignore", "-q", path], cwd=root).returncode == 0, path
