"""`pre attention --task FILE` (issue 34, round two): word importance on a user's own task's
sample, with the tiny randomly initialised model of tests/test_analysis_attention.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from tests.test_analysis_attention import attention_on_tiny_model, llama, tok  # noqa: E402, F401 - its fixtures

DOCS = Path(__file__).resolve().parents[1] / "docs" / "examples" / "tickets"


def test_attention_on_a_users_own_task(tmp_path: Path, tok, llama) -> None:  # noqa: ANN001, F811
    """The sample and the answer word are the task's own (a label's answer word, not its value)."""
    shutil.copytree(DOCS, tmp_path / "tickets")
    args = attention_on_tiny_model(tmp_path, tok, llama, "--task", str(tmp_path / "tickets" / "tickets.toml"), "--shots", "0")
    assert args.handler(args) == 0
    (out,) = [p for p in (tmp_path / "out").iterdir() if not p.name.startswith(".")]
    data = orjson.loads((out / "attention.json").read_bytes())
    assert data["dataset"] == "tickets" and data["sample_id"].startswith("tickets:T")
    assert data["target"] in ("billing", "technical", "other")
