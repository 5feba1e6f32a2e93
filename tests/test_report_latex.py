"""`pre report --format latex` (issue 31 item 5): booktabs tables with intervals, one per report
table, captions that state the statistic and the settings, everything TeX-escaped. Always parsed
(pylatexenc); compiled with pdfLaTeX where a TeX engine is installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import orjson
import pytest
from pylatexenc.latex2text import LatexNodes2Text
from pylatexenc.latexwalker import LatexEnvironmentNode, LatexMacroNode, LatexWalker

from promptrobust.cli.main import main
from promptrobust.engine.analysis.report import Report, build_report
from promptrobust.engine.safe_io.output_safety import latex_text

FIXTURES = Path(__file__).parent / "fixtures" / "report"
HOSTILE = "a_b%c&d#e $x$ ^~\\ {y} café ж 中 -- [1]\x00\u202eend"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    root = tmp_path_factory.mktemp("latex")
    shutil.copytree(FIXTURES / "sweep", root / "sweep")
    results = root / "sweep" / "20250102-120000_alpha-lm_sst2" / "results.jsonl"
    rows = [orjson.loads(line) for line in results.read_bytes().splitlines() if line.strip()]
    rows[0]["attack"] = HOSTILE  # a name from a pairs file can hold anything
    rows[0]["prompt_id"] = "[starts-with-a-bracket]"
    results.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return build_report([root / "sweep"], figures=False)


def _environments(nodes: list, names: tuple[str, ...], *, nested: bool = True) -> list[LatexEnvironmentNode]:
    """Environments named ``names``; ``nested=False``: not those inside another one found (a cell's
    two stacked lines are a tabular inside the table's own)."""
    found = []
    for node in nodes or []:
        if isinstance(node, LatexEnvironmentNode):
            if node.environmentname in names:
                found.append(node)
                if not nested:
                    continue
            found += _environments(node.nodelist, names, nested=nested)
        elif hasattr(node, "nodelist"):
            found += _environments(node.nodelist, names, nested=nested)
    return found


def _caption(env: LatexEnvironmentNode) -> str:
    """The text of the caption: the group that follows \\caption in the environment."""
    nodes = env.nodelist
    for i, node in enumerate(nodes):
        if isinstance(node, LatexMacroNode) and node.macroname == "caption":
            return LatexNodes2Text().nodelist_to_text([nodes[i + 1]])
    raise AssertionError("no caption")


def test_latex_text_escapes_every_special_character() -> None:
    assert latex_text("50% of a_b & c#1 $5") == r"50\% of a\_b \& c\#1 \$5"
    assert latex_text("\\{}^~") == r"\textbackslash{}\{\}\textasciicircum{}\textasciitilde{}"
    assert latex_text("café ± –") == r"café $\pm$ --"
    assert latex_text("ж\x00\u202e") == "{[}U+0436{]}{[}U+0000{]}{[}U+202E{]}"  # visible, never set as a glyph
    assert latex_text("a--b ``q''") == "a-{}-b `{}`q'{}'"  # no ligature turns them into dashes or quotes


def test_one_booktabs_table_per_report_table_with_statistic_and_settings(report: Report) -> None:
    doc = report.latex()
    nodes, _, _ = LatexWalker(doc, tolerant_parsing=False).get_latex_nodes()  # raises on unbalanced input
    tables = _environments(nodes, ("tabular", "longtable"), nested=False)
    assert len(tables) == len(report.tables)
    assert doc.count(r"\toprule") >= len(report.tables) and r"\usepackage{booktabs}" in doc
    floats = _environments(nodes, ("table", "longtable"))
    captions = [_caption(f) for f in floats]
    attack_caption = next(c for c in captions if c.startswith("APDR by attack and dataset"))
    assert "APDR: mean ± sample s.d. [95% bootstrap interval over prompts and samples]" in attack_caption
    assert attack_caption.endswith("Settings: Attacks (each attack's own search); mode choices, 20 samples, seed 0, "
                                   "budget 100; shots 0, 3; metric accuracy.")
    # the title without its section's settings: the caption states them once, after 'Settings:'
    assert any(c.startswith("Clean scores by model and dataset. Clean score: mean ± "
                            "sample s.d. over prompts. Settings: Clean scores; mode choices, 20 samples, seed 0") for c in captions)
    assert r"$\pm$" in doc and "{[}" in doc  # intervals kept, their brackets never read as arguments


def test_hostile_names_come_out_as_the_same_characters(report: Report) -> None:
    doc = report.latex()
    assert "\x00" not in doc and "\u202e" not in doc
    text = LatexNodes2Text().latex_to_text(doc)
    assert "a_b%c&d#e $x$" in text and "café" in text and "[U+0436] [U+4E2D]" in text
    assert "[U+0000][U+202E]end" in text and "[starts-with-a-bracket]" in text


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="no TeX engine here (apt-get install texlive-latex-recommended)")
def test_the_document_compiles_with_pdflatex(report: Report, tmp_path: Path) -> None:
    (tmp_path / "report.tex").write_text(report.latex(), encoding="utf-8")
    run = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", "report.tex"],
                         cwd=tmp_path, capture_output=True, encoding="utf-8", errors="replace", timeout=300)
    assert run.returncode == 0, run.stdout[-3000:]  # TeX logs 8-bit bytes of T1 text (é): replaced, never a crash
    pdf = (tmp_path / "report.pdf").read_bytes()
    assert pdf.startswith(b"%PDF-")
    if shutil.which("pdftotext"):
        text = subprocess.run(["pdftotext", "report.pdf", "-"], cwd=tmp_path, capture_output=True, text=True).stdout
        assert "a_b%c&d#e $x$" in text and "APDR by attack and dataset" in text


def test_cli_format_latex_writes_report_tex_only(tmp_path: Path) -> None:
    out = tmp_path / "rep"
    assert main(["report", str(FIXTURES / "sweep"), "--output-dir", str(out), "--format", "latex", "--quiet"]) == 0
    assert [p.name for p in out.iterdir()] == ["report.tex"]
    assert (out / "report.tex").read_text(encoding="utf-8").startswith("% promptrobust ")
