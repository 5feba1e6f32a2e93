"""The self-contained HTML page: escaped prompts, word diffs, embedded images."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from promptrobust.cli.main import main
from promptrobust.engine.analysis.report.html import word_diff

FIXTURE = Path(__file__).parent / "fixtures" / "report" / "sweep"


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("html")
    assert main(["report", str(FIXTURE), "--output-dir", str(out), "--format", "html", "--quiet"]) == 0
    return (out / "report.html").read_text(encoding="utf-8")


def test_word_diff_marks_only_changed_words_and_escapes() -> None:
    left, right = word_diff("Read carefully and answer <yes>.", "Read caerfully and answer <yes>. a&b")
    assert left == "Read <del>carefully</del> and answer &lt;yes&gt;."
    assert right == "Read <ins>caerfully</ins> and answer &lt;yes&gt;. <ins>a&amp;b</ins>"


def test_word_diff_of_identical_prompts_has_no_marks() -> None:
    assert word_diff("same words", "same words") == ("same words", "same words")


def test_page_shows_worst_prompt_escaped_with_marks(page: str) -> None:
    # The worst record's adversarial prompt contains the literal text "<b>&amp;</b>".
    assert "<ins>reviw</ins>" in page
    assert "<ins>&lt;b&gt;&amp;amp;&lt;/b&gt;</ins>" in page
    assert "<b>&amp;</b>" not in page
    assert "<del>review</del>" in page
    rows = re.findall(r"<b>PDR ([0-9.]+)</b>", page)
    assert rows[:3] == ["0.900", "0.600", "0.500"] and len(rows) == 10


def test_page_embeds_images_as_data_uris_and_loads_nothing_external(page: str) -> None:
    sources = re.findall(r'<img src="([^"]+)"', page)
    assert len(sources) == 5  # 2 bar charts, 2 heat maps, word frequency
    for src in sources:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<script" not in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    assert "<style>" in page


def test_page_has_the_tables_and_word_section(page: str) -> None:
    for title in ("Clean scores by model and dataset", "APDR by attack and dataset", "APDR by prompt type and dataset",
                  "Attack cost per attacked prompt", "Words more frequent in robust prompts"):
        assert title in page
    # textbugger x sst2, no per-sample scores; the cell wraps only before its interval
    assert "0.60&nbsp;±&nbsp;0.22 (no interval: per-sample scores not recorded)" in page
    assert "Records not averaged" not in page  # nothing skipped or failed in the fixture
