"""docs/your-task.md shows what the code prints (issue 42: its worked example still showed an
output of an older release, TextBugger's `Route -> Routе` at PDR 0.0417). Its outputs are blocks
written by scripts/your_task_outputs.py from real runs on the embedded Gemma 3 270M; the slow test
runs them again (`--check`) and fails when the doc and the code's output differ."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.script_modules import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "your_task_outputs.py"


def _script():  # noqa: ANN202
    return load_script("your_task_outputs")


def test_every_output_the_doc_shows_is_a_generated_block() -> None:
    script = _script()
    doc = (ROOT / "docs" / "your-task.md").read_text(encoding="utf-8")
    for name in ("run", "report", "python"):
        assert f"{script.MARKER.format(name=name)}\n```text\n" in doc, name
    # replacing the blocks with themselves changes nothing: each marker has exactly its block
    blocks = {name: doc.split(script.MARKER.format(name=name) + "\n```text\n", 1)[1].split("\n```", 1)[0]
              for name in ("run", "report", "python")}
    assert script.replace_blocks(doc, blocks) == doc


def test_the_comparison_masks_only_what_differs_between_two_runs() -> None:
    script = _script()
    row = "checklist    route-task-1      1.0000   0.9167  0.0833  [0.000, 0.208]          0.5    50   1200    85.7"
    assert script.masked(row) == script.masked(row.replace("85.7", "91.2")) != script.masked(row.replace("1200", "1100"))
    assert script.masked("runs/20261125-160156_gemma3-270m_tickets") == script.masked("runs/20270101-000000_gemma3-270m_tickets")
    line = ("pre: fallback: word vectors: glove-6b-50d (fallback; recipe: paragramcf) instead of TextAttack's counter-fitted "
            "paragramcf (cannot download paragramcf from https://x (<urlopen error>)); for the real ones run once online")
    assert script.shorten_fallbacks(line) == ("pre: fallback: word vectors: glove-6b-50d (fallback; recipe: paragramcf) instead "
                                              "of TextAttack's counter-fitted paragramcf (...)")


@pytest.mark.slow
def test_the_docs_outputs_are_what_the_code_prints() -> None:
    pytest.importorskip("transformers")
    from promptrobust.engine.serving.model_store import ModelNotInstalled, locate_embedded

    try:
        locate_embedded("gemma3-270m")
    except ModelNotInstalled as exc:
        pytest.skip(str(exc))
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], cwd=ROOT, capture_output=True, text=True, timeout=3000)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
