"""`pr.attack` in a real Jupyter kernel (issue 31 item 1): progress as plain text lines, no
`TqdmWarning: IProgress not found` (ipywidgets is not installed), no transformers
FutureWarning; the cell's own output arrives as usual."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("ipykernel")
jupyter_client = pytest.importorskip("jupyter_client.manager")
pytest.importorskip("transformers")

CELL = """
import promptrobust as pr
record = pr.attack("Is this review positive or negative? Answer with one word.", "stresstest",
                   model="smollm2-135m-instruct", limit=4, mode="choices", cache={cache!r})
print("PDR", record.pdr)
"""


def run_cell(code: str, cwd: Path, timeout: float = 540) -> list[tuple[str, str]]:
    """(stream name or message type, text) of every output of one cell, in order."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "PRE_DEBUG", "PRE_PROGRESS")}
    if "ipywidgets" in sys.modules or _installed("ipywidgets"):
        pytest.skip("ipywidgets is installed: tqdm would draw widgets, not warn")
    manager, client = jupyter_client.start_new_kernel(kernel_name="python3", cwd=str(cwd), env=env)
    try:
        msg_id = client.execute(code)
        outputs: list[tuple[str, str]] = []
        while True:
            msg = client.get_iopub_msg(timeout=timeout)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                outputs.append((content["name"], content["text"]))
            elif kind == "error":
                outputs.append(("error", "\n".join(content["traceback"])))
            elif kind == "status" and content["execution_state"] == "idle":
                return outputs
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def _installed(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


@pytest.mark.slow
def test_an_attack_in_a_notebook_shows_plain_progress_lines_and_no_library_warnings(tmp_path: Path) -> None:
    outputs = run_cell(CELL.format(cache=str(tmp_path / "c.sqlite")), tmp_path)
    assert not [text for name, text in outputs if name == "error"], outputs
    stderr = "".join(text for name, text in outputs if name == "stderr")
    stdout = "".join(text for name, text in outputs if name == "stdout")
    assert "Warning" not in stderr and "ipywidgets" not in stderr and "past_key_values" not in stderr, stderr
    assert "pre: loading smollm2-135m-instruct" in stderr and "pre: requests " in stderr  # progress, as lines
    assert "\r" not in stderr and "\x1b" not in stderr  # no terminal redrawing in a notebook
    assert stdout.startswith("PDR ")
