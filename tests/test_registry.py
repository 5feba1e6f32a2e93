"""Model names and --model-args: typed values, per-backend checks."""

from __future__ import annotations

import pytest

from promptrobust.engine.serving.registry import ModelArgsError, build_backend, parse_model_args, resolve_model


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


def test_every_hf_lever_is_a_model_arg() -> None:
    """Each exact lever of the hf backend can be switched off from the command line (--model-args)."""
    levers = {"prefix_without_head": False, "short_tail_batches": False, "kv_views": False, "label_logsumexp": False,
              "length_order": False, "drop_finished": False, "head_kernel": "default", "linear_kernel": "onednn"}
    backend = build_backend(resolve_model("org/some-model", levers))
    assert all(getattr(backend, k) is False for k, v in levers.items() if v is False)
    assert (backend.head_kernel_request, backend.linear_kernel_request) == ("default", "onednn")
    on = build_backend(resolve_model("org/some-model"))
    assert on.prefix_without_head and on.short_tail_batches and on.kv_views and on.label_logsumexp
    assert on.head_kernel_request == "auto"
    with pytest.raises(ModelArgsError, match="head_kernel"):
        build_backend(resolve_model("org/some-model", {"head_kernel": "fast"}))
