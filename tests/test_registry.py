"""Model names and --model-args: typed values, per-backend checks."""

from __future__ import annotations

import pytest

from promptrobust.engine.registry import ModelArgsError, build_backend, parse_model_args, resolve_model


def test_model_args_are_typed() -> None:
    assert parse_model_args("dtype=bfloat16, batch_size=8,share_prefix=false,chat=yes") == {
        "dtype": "bfloat16", "batch_size": 8, "share_prefix": False, "chat": True,
    }


def test_hf_backend_takes_share_prefix_and_rejects_unknown_args() -> None:
    backend = build_backend(resolve_model("org/some-model", {"share_prefix": False, "batch_size": 4}))
    assert backend.share_prefix is False and backend.batch_size == 4  # constructed, nothing loaded
    assert build_backend(resolve_model("org/some-model")).share_prefix is True
    with pytest.raises(ModelArgsError, match="share_prefix"):  # the message lists what it takes
        build_backend(resolve_model("org/some-model", {"prefix": 1}))
