"""Figures a paper can use (issue 31 item 5): SVG and PDF beside PNG from one drawing, heat-map
cells with n and interval, error bars for single records, tables that wrap instead of being cut."""

from __future__ import annotations

import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import orjson
import pytest

from promptrobust.cli.main import main
from promptrobust.engine.analysis.report import build_report
from promptrobust.engine.analysis.report.html import table_html

FIXTURES = Path(__file__).parent / "fixtures" / "report"


def rec(prompt: str, attack: str, pdr: float, ci: list[float] | None, **kw: Any) -> dict[str, Any]:
    return {"model": "m", "dataset": "sst2", "prompt_id": prompt, "prompt_type": "task", "shots": 0, "attack": attack,
            "clean_prompt": f"Classify {prompt}.", "clean_score": 0.8, "adversarial_prompt": f"Classify {prompt} now.",
            "adversarial_score": 0.8 * (1 - pdr), "pdr": pdr, "pdr_ci95": ci, "status": "attacked", "mode": "choices",
            "samples": 10, "seed": 0, "metric": "accuracy", **kw}


@pytest.fixture()
def runs(tmp_path: Path) -> Path:
    folder = tmp_path / "runs" / "a"
    folder.mkdir(parents=True)
    clean = [1] * 8 + [0] * 2
    rows = [rec("p1", "textfooler", 0.1, [-0.030, 0.231]),  # one record: its own interval is drawn
            rec("p1", "checklist", 0.25, [0.1, 0.4], clean_sample_scores=clean, adversarial_sample_scores=[0, 0] + clean[2:]),
            rec("p2", "checklist", 0.5, [0.3, 0.7], clean_sample_scores=clean, adversarial_sample_scores=[0] * 4 + clean[4:])]
    (folder / "results.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return tmp_path / "runs"


def test_svg_and_pdf_are_written_beside_png_and_open(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "rep"
    assert main(["report", str(runs), "--output-dir", str(out), "--format", "png,svg,pdf", "--quiet"]) == 0
    stems = {p.stem for p in out.glob("*.png")}
    assert stems and stems == {p.stem for p in out.glob("*.svg")} == {p.stem for p in out.glob("*.pdf")}
    for svg in out.glob("*.svg"):
        root = ET.fromstring(svg.read_bytes())  # well-formed XML
        assert root.tag == "{http://www.w3.org/2000/svg}svg" and float(root.get("width", "0pt").rstrip("pt")) > 100
    for pdf in out.glob("*.pdf"):
        data = pdf.read_bytes()
        assert data.startswith(b"%PDF-") and data.rstrip().endswith(b"%%EOF") and b"/Type /Page" in data
        if shutil.which("pdfinfo"):  # poppler opens it
            info = subprocess.run(["pdfinfo", str(pdf)], capture_output=True, text=True, check=True).stdout
            assert re.search(r"^Pages:\s+1$", info, re.M)


def test_the_same_report_gives_the_same_vector_files(runs: Path) -> None:
    a = {f.name: (f.svg, f.pdf) for f in build_report([runs]).figures}
    b = {f.name: (f.svg, f.pdf) for f in build_report([runs]).figures}
    assert a == b  # no creation date, fixed SVG ids


def test_a_single_record_bar_draws_its_own_interval(runs: Path) -> None:
    figure = next(f for f in build_report([runs]).figures if f.name == "apdr_by_attack").drawing
    ax = figure.axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["checklist (2)", "textfooler (1)"]
    from matplotlib.container import BarContainer

    bars = next(c for c in ax.containers if isinstance(c, BarContainer))
    segments = bars.errorbar.lines[2][0].get_segments()
    (x, low), (_, high) = segments[labels.index("textfooler (1)")]
    assert (low, high) == pytest.approx((-0.030, 0.231))  # TextFooler's own [-0.030, 0.231]
    assert "of one record: its own PDR interval" in ax.get_title()


def test_heatmap_cells_carry_apdr_interval_and_n(runs: Path) -> None:
    report = build_report([runs])
    figure = next(f for f in report.figures if f.name == "heatmap_attack_x_dataset").drawing
    texts = sorted(t.get_text() for t in figure.axes[0].texts)
    cell = next(r for r in report.table("apdr_attack_x_dataset").long if r["attack"] == "checklist" and r["dataset"] == "sst2")
    assert texts == ["0.10\n[-0.03, 0.23]\nn=1", f"0.38\n[{cell['ci_low']:.2f}, {cell['ci_high']:.2f}]\nn=2"]


def test_names_with_control_characters_still_give_valid_svg(tmp_path: Path) -> None:
    folder = tmp_path / "runs" / "a"
    folder.mkdir(parents=True)
    rows = [rec("p1", "evil\x00\u202eattack", 0.2, [0.1, 0.3]), rec("p2", "checklist", 0.3, None)]
    (folder / "results.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    for f in build_report([tmp_path / "runs"]).figures:
        ET.fromstring(f.svg)  # a NUL would make the XML ill-formed


def test_wide_tables_wrap_names_and_numbers_before_their_interval() -> None:
    report = build_report([FIXTURES / "sweep"], figures=False)
    clean = table_html(report.table(next(t.name for t in report.tables if t.name.startswith("clean_prompts"))))
    assert '<td class="text long">20250101-120000_alpha-lm_rte</td>' in clean  # a run folder may break anywhere
    assert '<td class="text short">rte</td>' in clean  # short names never break, left-aligned
    grid = table_html(report.table("apdr_attack_x_dataset"))
    assert re.search(r'<td class="num">\d\.\d\d&nbsp;±&nbsp;\d\.\d\d', grid)  # mean ± s.d. stays whole
    page = report.html()
    assert "td.num{text-align:right;font-variant-numeric:tabular-nums}" in page  # no nowrap: cells may wrap
    assert "td.long{overflow-wrap:anywhere}td.short{white-space:nowrap}" in page and ".scroll{overflow-x:auto" in page


def test_bars_and_cells_without_an_interval_say_so_instead_of_drawing_a_cap() -> None:
    """The sweep fixture's records hold no per-sample scores and no PDR intervals."""
    figures = {f.name: f.drawing for f in build_report([FIXTURES / "sweep"]).figures}
    ax = figures["apdr_by_attack"].axes[0]
    assert [t.get_text() for t in ax.texts] == ["0.14\nno interval", "0.47\nno interval"]
    from matplotlib.container import BarContainer

    bars = next(c for c in ax.containers if isinstance(c, BarContainer))
    assert all(seg.size == 0 for seg in bars.errorbar.lines[2][0].get_segments())  # no bar, no cap
    assert all("no interval" in t.get_text() for t in figures["heatmap_attack_x_dataset"].axes[0].texts)
