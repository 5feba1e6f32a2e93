"""Paper-ready LaTeX and figures (issue 42 item 13): tables fitted to the line at 9 or 8 pt (never
shrunk), without bookkeeping columns; captions without notes about records the report does not hold;
p-values with the PDRs' digits; figures included with \\includegraphics; one colour scale (and one bar
axis) for every figure of a report; no heat map of a single cell; a single record's cell shows the same
interval in the table and in the figure. Compiled with pdfLaTeX where a TeX engine is installed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from promptrobust.engine.analysis.report import build_report
from promptrobust.engine.analysis.report.latex import FONT_SIZES, layout, paper_columns
from promptrobust.engine.analysis.report.tables import p_text

FIXTURES = Path(__file__).parent / "fixtures"
SWEEP = FIXTURES / "report" / "sweep"
V010 = FIXTURES / "run_folders" / "v010" / "runs"
TEX = shutil.which("pdflatex")


def rec(prompt: str, attack: str, pdr: float, ci: list[float] | None, dataset: str = "sst2", **kw: Any) -> dict[str, Any]:
    clean = [1] * 8 + [0] * 2
    flipped = round(pdr * 8)
    return {"model": "m", "dataset": dataset, "prompt_id": prompt, "prompt_type": "task", "shots": 0, "attack": attack,
            "clean_prompt": f"Classify {prompt}.", "clean_score": 0.8, "adversarial_prompt": f"Classify {prompt} now.",
            "adversarial_score": 0.8 * (1 - pdr), "pdr": pdr, "pdr_ci95": ci, "status": "attacked", "mode": "choices",
            "samples": 10, "seed": 0, "metric": "accuracy", "clean_sample_scores": clean,
            "adversarial_sample_scores": [0] * flipped + clean[flipped:], **kw}


def _write(folder: Path, rows: list[dict[str, Any]]) -> None:
    folder.mkdir(parents=True)
    (folder / "results.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))


@pytest.fixture()
def two_sections(tmp_path: Path) -> Path:
    """Three settings: 10 samples (a 2 x 2 grid), 20 (a single record), 30 (two small cells)."""
    _write(tmp_path / "runs" / "wide", [rec("p1", "checklist", 0.25, [0.1, 0.4], mcnemar_p=0.25),
                                        rec("p2", "checklist", 0.5, [0.3, 0.7], mcnemar_p=0.03125),
                                        rec("p1", "stresstest", 0.125, [0.0, 0.3], dataset="rte"),
                                        rec("p2", "stresstest", 0.0, [-0.1, 0.1], dataset="rte")])
    _write(tmp_path / "runs" / "one", [rec("p1", "checklist", 0.125, [-0.03, 0.23], samples=20)])
    _write(tmp_path / "runs" / "small", [rec("p1", "checklist", 0.125, [0.0, 0.3], samples=30),
                                         rec("p1", "stresstest", 0.0, [-0.1, 0.1], samples=30)])
    return tmp_path / "runs"


def _compile(folder: Path) -> str:
    """pdflatex twice (references); the log."""
    for _ in range(2):
        run = subprocess.run([str(TEX), "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", "report.tex"],
                             cwd=folder, capture_output=True, encoding="utf-8", errors="replace", timeout=300)
        assert run.returncode == 0, run.stdout[-3000:]
    return (folder / "report.log").read_text(encoding="utf-8", errors="replace")


def test_tables_fit_the_line_at_a_readable_size_and_are_never_shrunk(tmp_path: Path) -> None:
    report = build_report([SWEEP, V010], figures=False)
    doc = report.latex(None)
    assert r"\resizebox" not in doc and r"\scalebox" not in doc
    sizes = {size for size, _, _ in FONT_SIZES}
    for t in report.tables:
        lay = layout(*paper_columns(t))
        assert lay.fits and lay.size in sizes, t.name  # 9 pt, else 8 pt; nothing smaller
    assert re.findall(r"\\centering\\(\w+)", doc) and set(re.findall(r"\\centering\\(\w+)", doc)) <= sizes
    if TEX:
        (tmp_path / "report.tex").write_text(doc, encoding="utf-8")
        log = _compile(tmp_path)
        assert "Overfull \\hbox" not in log  # nothing wider than the line


def test_the_paper_table_leaves_out_bookkeeping_columns() -> None:
    report = build_report([V010], figures=False)
    clean = next(t for t in report.tables if t.name.startswith("clean_prompts"))
    assert {"scored as", "run"} <= set(clean.header) and set(clean.bookkeeping) == {"scored as", "run"}
    assert "| scored as" in report.markdown()  # the Markdown, HTML and CSV keep them
    header, rows = paper_columns(clean)
    assert "scored as" not in header and "run" not in header and len(rows[0]) == len(header)
    doc = report.latex(None)
    block = doc[doc.index(r"\label{tab:" + clean.name):]
    block = block[: block.index(r"\end{table}")]
    assert r"\textbf{run}" not in block and "scored" not in block and "20261124-094006" not in block


def test_no_note_about_records_the_report_does_not_hold() -> None:
    doc = build_report([SWEEP, V010], figures=False).latex(None)
    assert "Semantic" not in doc and r"\dag" not in doc and "prompt set" not in doc.lower().replace("prompt set (", "")


def test_p_values_have_the_digits_of_the_pdrs_beside_them(two_sections: Path) -> None:
    assert [p_text(x) for x in (0.25, 1.0, 0.0312, 0.0004, None)] == ["0.250", "1.000", "0.031", "< 0.001", "–"]
    report = build_report([two_sections], figures=False)
    worst = report.table("worst_prompts")
    j = worst.header.index("McNemar p")
    assert [r[j] for r in worst.rows][:2] == ["0.031", "0.250"]  # was '0.25' and '0.0312' beside PDRs of 3 decimals
    assert all(re.fullmatch(r"\d\.\d{3}|< 0\.001|–", r[j]) for r in worst.rows)
    assert all(re.fullmatch(r"-?\d\.\d{3}", r[1]) for r in worst.rows)  # the PDR beside it
    assert "McNemar p 0.031" in report.html()


def test_figures_are_included_from_their_files_and_the_document_compiles(two_sections: Path, tmp_path: Path) -> None:
    report = build_report([two_sections])
    out = tmp_path / "rep"
    report.write(out, ["latex", "pdf"])
    doc = (out / "report.tex").read_text(encoding="utf-8")
    assert report.figures
    for f in report.figures:
        assert (out / f"{f.name}.pdf").is_file()
        assert re.search(r"\\includegraphics\[width=[\d.]+in\]\{" + re.escape(f.name) + r"\.pdf\}", doc), f.name
    assert doc.count(r"\begin{figure}") == len(report.figures)
    assert "% Figures: " in doc.split(r"\documentclass")[0]  # the first lines say where they are
    if TEX:
        log = _compile(out)
        assert "Overfull \\hbox" not in log
        if shutil.which("pdftotext"):
            text = subprocess.run(["pdftotext", "report.pdf", "-"], cwd=out, capture_output=True, text=True).stdout
            assert "not found beside this file" not in text and "Figure 1:" in text
    alone = tmp_path / "tex-only"
    report.write(alone, ["latex"])  # no figure files: the document says how to get them, and still compiles
    doc = (alone / "report.tex").read_text(encoding="utf-8")
    assert "includegraphics" not in doc and "--format latex,pdf" in doc
    if TEX:
        _compile(alone)


def test_figures_share_one_scale_and_a_single_cell_draws_no_heat_map(two_sections: Path) -> None:
    report = build_report([two_sections])
    wide, one, small = [s for s in report.sections if s.kind == "attack"]  # 10, 20 and 30 samples
    heat = [f for f in report.figures if f.name.startswith("heatmap_")]
    assert len(heat) == 4 and not any(f in one.figures for f in heat)  # the single-record section draws none
    assert any("heat map attack x dataset not drawn: a single cell" in n for n in one.notes)
    # one colour scale: the largest |APDR| of any cell drawn (checklist on sst2 at 10 samples, 0.375), also for the
    # section whose own cells reach only 0.125 (it would have been as dark on a scale of its own)
    assert {f.drawing.axes[0].images[0].get_clim() for f in heat} == {(-0.375, 0.375)}
    assert sum(f in small.figures for f in heat) == 2
    bars = [f for f in report.figures if f.name.startswith("apdr_by_")]
    assert len(bars) == 6 and len({f.drawing.axes[0].get_ylim() for f in bars}) == 1  # one APDR axis
    assert all("shared by every" in f.note for f in heat + bars)


def test_a_single_record_shows_the_same_interval_in_table_and_figure(two_sections: Path) -> None:
    report = build_report([two_sections])
    one = [s for s in report.sections if s.kind == "attack"][1]
    grid = next(t for t in one.tables if t.name.startswith("apdr_attack_x_dataset"))
    assert grid.rows == [["checklist", "0.12 [-0.03, 0.23]", "0.12 [-0.03, 0.23]"]]
    (row,) = [r for r in grid.long if r["dataset"] == "sst2"]
    assert (row["ci_low"], row["ci_high"]) == (-0.03, 0.23)  # the CSV has it too
    bars = next(f for f in one.figures if f.name.startswith("apdr_by_attack")).drawing.axes[0]
    from matplotlib.container import BarContainer

    container = next(c for c in bars.containers if isinstance(c, BarContainer))
    ((_, low), (_, high)), = container.errorbar.lines[2][0].get_segments()
    assert (low, high) == pytest.approx((-0.03, 0.23))


def test_a_table_longer_than_a_page_is_a_longtable_that_fits_too(tmp_path: Path) -> None:
    _write(tmp_path / "runs" / "a", [{**rec(f"prompt-{i:02d}", "checklist", 0.125 * (i % 4), [0.0, 0.3]),
                                      "clean_sample_scores": [], "adversarial_sample_scores": []} for i in range(45)])
    report = build_report([tmp_path / "runs"], figures=False)
    doc = report.latex(None)
    assert doc.count(r"\begin{longtable}") == 1  # the 45 prompts' clean scores
    assert "no interval: per-sample" not in doc and "no interval" in doc  # the long remark shortened in the paper table
    if TEX:
        (tmp_path / "report.tex").write_text(doc, encoding="utf-8")
        assert "Overfull \\hbox" not in _compile(tmp_path)
