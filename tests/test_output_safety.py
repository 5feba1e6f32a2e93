"""Issue 20: reports safe in every viewer (spreadsheet, Markdown, terminal, plots, HTML word diff)."""

from __future__ import annotations

import csv
import io
import re
import shutil
import time
from pathlib import Path

import orjson
import pytest

from promptrobust.cli.main import main
from promptrobust.engine.analysis.report.html import CAPPED_NOTE, word_diff
from promptrobust.engine.safe_io.output_safety import SafeStream, csv_cell, markdown_text, terminal_text

FIXTURES = Path(__file__).parent / "fixtures" / "report"
FORMULA = "=cmd|' /C calc'!A0 Classify the review"
ANSI = "\x1b[2J\x1b]0;pwned\x07\x1b[31mred"
BIDI = "good\u202eevil\u2066x\u2069"
TEX = "$\\frac{1}{0}$ ^_^ $\\notacommand$"  # mathtext would raise ParseFatalException
HTML_ID = "<img src=x onerror=alert(1)>"


@pytest.mark.parametrize("value, safe", [
    ("=1+2", "'=1+2"), ("+SUM(A1)", "'+SUM(A1)"), ("-2+3 cmd", "'-2+3 cmd"), ("@SUM(1)", "'@SUM(1)"),
    ("\tx", "'\tx"), ("\rx", "'\rx"), ("plain", "plain"), ("-0.25", "-0.25"), (-0.25, -0.25), (None, None),
])
def test_csv_cells_that_look_like_formulas_get_an_apostrophe(value, safe):
    assert csv_cell(value) == safe


def test_markdown_and_terminal_text_neutralise_html_and_control_characters():
    assert markdown_text(HTML_ID) == "&lt;img src=x onerror=alert(1)&gt;"
    assert terminal_text(f"a{ANSI}b{BIDI}\x00\x07\r") == "aredbgoodevilx"
    out = io.StringIO()
    err = SafeStream(out, keep_own=True)
    err.write("\r\x1b[2Kprogress " + ANSI + "\n")  # our own erase-line passes, the rest does not
    assert out.getvalue() == "\r\x1b[2Kprogress red\n"


def _hostile_sweep(tmp_path: Path) -> Path:
    sweep = tmp_path / "sweep"
    shutil.copytree(FIXTURES / "sweep", sweep)
    for results in sweep.rglob("results.jsonl"):
        rows = [orjson.loads(line) for line in results.read_bytes().splitlines() if line.strip()]
        for i, row in enumerate(rows):
            if "adversarial_prompt" in row:
                row["adversarial_prompt"] = f"{FORMULA} {ANSI} {BIDI}" if i % 2 else f"+{row['adversarial_prompt']}"
                row["clean_prompt"] = f"@{row['clean_prompt']}"
                row["attack"] = TEX if i % 3 == 0 else f"{row['attack']}<b>"
                row["prompt_id"] = HTML_ID if i % 2 else f"-{row['prompt_id']}"
                if i % 4 == 1 and row.get("pdr") is not None:  # the attack helped: a "most helpful" prompt
                    row["pdr"] = -0.1
                    row["adversarial_score"] = row["clean_score"] * 1.1
        results.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return sweep


def test_a_report_of_hostile_names_and_prompts_is_safe_everywhere(tmp_path, capsys):
    sweep = _hostile_sweep(tmp_path)
    out = tmp_path / "rep"
    assert main(["report", str(sweep), "--output-dir", str(out), "--top", "20"]) == 0  # TeX names do not crash
    stdout = capsys.readouterr().out
    assert "\x1b" not in stdout and "\u202e" not in stdout and "<img" not in stdout
    csvs = list(out.glob("*.csv"))
    assert {p.stem.split("__")[0] for p in csvs} >= {"worst_prompts", "most_helpful_prompts"}
    for path in csvs:
        for row in csv.reader(io.StringIO(path.read_text(encoding="utf-8"))):
            for cell in row:
                if cell[:1] in ("=", "+", "-", "@", "\t", "\r"):
                    float(cell)  # only numbers may start that way
    assert "'=cmd|" in "".join(p.read_text(encoding="utf-8") for p in csvs)  # the text is kept, neutralised
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "<img" not in md and "<b>" not in md and "&lt;img" in md
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "<img src=x" not in html
    assert all(p.read_bytes()[:4] == b"\x89PNG" and p.stat().st_size > 1000 for p in out.glob("*.png"))


#: Markdown that would render as a link or a remote image: unescaped ``[text](url)``, ``![alt](url)``,
#: ``[text][ref]`` or a ``[ref]: url`` definition.
MD_LINK = re.compile(r"(?<!\\)!?\[[^\]\n]*(?<!\\)\](?:\(|\[|:)")
JS_LINK = "[click me](javascript:alert(1))"
REMOTE_IMAGE = "![x](https://evil.example/pixel.png)"


def test_markdown_text_keeps_link_and_image_syntax_as_text():
    """Issue 41 (weak point): link and image syntax in a name or prompt is text in report.md."""
    for text in (JS_LINK, REMOTE_IMAGE, "[ref]: https://evil.example", "[a][ref]", "\\[x](y)"):
        safe = markdown_text(text)
        assert not MD_LINK.search(safe), safe
    assert markdown_text(JS_LINK) == "\\[click me\\](javascript:alert(1))"  # shown as typed once rendered


def test_a_report_of_link_and_image_syntax_renders_neither(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    shutil.copytree(FIXTURES / "sweep", sweep)
    for results in sweep.rglob("results.jsonl"):
        rows = [orjson.loads(line) for line in results.read_bytes().splitlines() if line.strip()]
        for i, row in enumerate(rows):
            if "adversarial_prompt" in row:
                row["adversarial_prompt"] = f"{REMOTE_IMAGE} {row['adversarial_prompt']}"
                row["prompt_id"] = JS_LINK if i % 2 else f"{REMOTE_IMAGE}{i}"
                row["attack"] = f"{row['attack']}[x](javascript:void(0))"
        results.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    out = tmp_path / "rep"
    assert main(["report", str(sweep), "--output-dir", str(out), "--top", "20"]) == 0
    capsys.readouterr()
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "javascript:" in md and "evil.example" in md  # the text is kept...
    assert not MD_LINK.search(md), MD_LINK.search(md)  # ...as text: no link, no image


def test_the_word_diff_is_capped_with_a_note_and_stays_fast():
    words = [f"w{i % 997}x{i % 13}" for i in range(20_000)]
    clean = " ".join(words)
    adversarial = " ".join(reversed(words))
    started = time.process_time()
    left, right = word_diff(clean, adversarial)
    assert CAPPED_NOTE in right and "<del>" in left and "<ins>" in right
    huge = "word " * 2_000_000
    left, right = word_diff(huge, huge + "tail")
    assert "more characters not shown" in left and len(right) < 1_000_000
    # Generous: the quadratic diff took minutes here; linear work takes well under a second.
    assert time.process_time() - started < 60


def test_a_small_change_is_still_diffed_word_by_word():
    left, right = word_diff("Judge the <review> below, then answer.", "Judge teh <review> below, then answer. Now.")
    assert left == "Judge <del>the</del> &lt;review&gt; below, then answer."
    assert right == "Judge <ins>teh</ins> &lt;review&gt; below, then answer. <ins>Now.</ins>"


def test_records_whose_pdr_disagrees_with_their_sample_scores_do_not_crash_the_plots(tmp_path, capsys):
    """Sample scores say PDR 0, the record says 0.9 (a hand-edited or foreign file): the
    interval from the samples does not contain the mean; the error bars must not go negative."""
    sweep = tmp_path / "sweep"
    shutil.copytree(FIXTURES / "sweep", sweep)
    for results in sweep.rglob("results.jsonl"):
        rows = [orjson.loads(line) for line in results.read_bytes().splitlines() if line.strip()]
        for row in rows:
            if row.get("pdr") is not None:
                row["pdr"] = 0.9
                row["clean_sample_scores"] = [1.0, 1.0, 0.0, 1.0] * 5
                row["adversarial_sample_scores"] = [1.0, 1.0, 0.0, 1.0] * 5
        results.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    out = tmp_path / "rep"
    assert main(["report", str(sweep), "--output-dir", str(out), "--quiet"]) == 0, capsys.readouterr().err
    # the bar charts are drawn; the one sound record left is a single cell, so no heat map (issue 42)
    assert {p.name for p in out.glob("*.png")} >= {"apdr_by_attack.png", "apdr_by_model.png"}


def test_nul_and_bidi_controls_are_shown_not_kept_in_csv_html_and_latex(tmp_path):
    """A U+202E in an attack name would make the rest of an HTML line read backwards, and a
    NUL stops CSV readers: both are written as [U+XXXX] (issue 32 item 7)."""
    from promptrobust.engine.safe_io.output_safety import html_text, latex_text, visible_controls

    assert visible_controls("a\x00b\u202ec\u2066d\u200fe\tf\ng") == "a[U+0000]b[U+202E]c[U+2066]d[U+200F]e\tf\ng"
    assert csv_cell("\x00=1") == "[U+0000]=1" and csv_cell("=\u202e") == "'=[U+202E]"
    assert html_text("<b>\u202e</b>") == "&lt;b&gt;[U+202E]&lt;/b&gt;"
    assert latex_text("\u202e") == "{[}U+202E{]}"
    sweep = tmp_path / "sweep"
    shutil.copytree(FIXTURES / "sweep", sweep)
    results = sweep / "20250102-120000_alpha-lm_sst2" / "results.jsonl"
    rows = [orjson.loads(line) for line in results.read_bytes().splitlines() if line.strip()]
    for row in rows:
        row["attack"] = "nul\x00" + row["attack"] + "\u202eright-to-left"
    results.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    out = tmp_path / "rep"
    assert main(["report", str(sweep), "--output-dir", str(out), "--format", "csv,html,latex", "--quiet"]) == 0
    for path in out.iterdir():
        text = path.read_text(encoding="utf-8")
        assert "\x00" not in text and "\u202e" not in text, path.name
    csv_text = "".join(p.read_text(encoding="utf-8") for p in out.glob("*.csv"))
    assert "nul[U+0000]checklist[U+202E]right-to-left" in csv_text
    for row in csv.reader(io.StringIO((out / "apdr_attack_x_dataset.csv").read_text(encoding="utf-8"))):
        assert len(row) == 8  # Python's csv module reads every line (a NUL would stop it)
    assert "nul[U+0000]checklist[U+202E]right-to-left" in (out / "report.html").read_text(encoding="utf-8")
