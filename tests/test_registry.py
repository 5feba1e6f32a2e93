"""Model names and --model-args: typed values, per-backend checks."""

from __future__ import annotations

import pytest

from promptrobust.engine.errors import SettingsError
from promptrobust.engine.serving.backends.hf import HFOptions
from promptrobust.engine.serving.backends.hf.options import OPTION_NAMES
from promptrobust.engine.serving.registry import ModelArgsError, build_backend, parse_model_args, resolve_model


def test_model_args_are_typed() -> None:
    assert parse_model_args("dtype=bfloat16, batch_size=8,share_prefix=false,chat=yes") == {
        "dtype": "bfloat16", "batch_size": 8, "share_prefix": False, "chat": True,
    }


def test_hf_backend_takes_share_prefix_and_rejects_unknown_args() -> None:
    backend = build_backend(resolve_model("org/some-model", {"share_prefix": False, "batch_size": 4}))
    assert backend.options.share_prefix is False and backend.batch_size == 4  # constructed, nothing loaded
    assert build_backend(resolve_model("org/some-model")).options.share_prefix is True
    with pytest.raises(ModelArgsError, match="share_prefix"):  # the message lists what it takes
        build_backend(resolve_model("org/some-model", {"prefix": 1}))


def test_every_hf_lever_is_a_model_arg() -> None:
    """Each exact lever of the hf backend can be switched off from the command line (--model-args)."""
    levers = {"prefix_without_head": False, "short_tail_batches": False, "kv_views": False, "label_logsumexp": False,
              "length_order": False, "drop_finished": False, "head_kernel": "default", "linear_kernel": "onednn"}
    backend = build_backend(resolve_model("org/some-model", levers))
    assert backend.options == HFOptions(**levers)  # every model argument lands in the one options value
    on = build_backend(resolve_model("org/some-model"))
    assert on.options == HFOptions() and all(on.options.levers().values())
    with pytest.raises(ModelArgsError, match="head_kernel"):
        build_backend(resolve_model("org/some-model", {"head_kernel": "fast"}))


def test_hf_options_are_built_from_model_args_in_one_place() -> None:
    """The model-argument names are the options' fields, and the early value check is the options' own."""
    from promptrobust.engine.serving.registry import backend_registration, check_values

    assert backend_registration("hf").argument_names == OPTION_NAMES
    assert set(HFOptions.levers(HFOptions())) <= set(OPTION_NAMES)
    for bad, words in [({"dtype": "float99"}, "dtype must be one of auto, float32"), ({"batch_size": 0}, "batch_size must be"),
                       ({"kv_views": 3}, "kv_views must be true or false"), ({"prefix_cache_mb": -1}, "MiB from 0 to")]:
        with pytest.raises(ModelArgsError) as early:
            check_values(resolve_model("org/some-model", bad))
        with pytest.raises(SettingsError) as built:
            HFOptions.from_model_args(bad)
        assert str(early.value) == str(built.value) and words in str(early.value)  # judged once, in the same words
        with pytest.raises(ModelArgsError, match=words):
            build_backend(resolve_model("org/some-model", bad))
    with pytest.raises(SettingsError, match="not understood by the hf backend"):
        HFOptions.from_model_args({"bogus": 1})
    with pytest.raises(ModelArgsError, match="seed not understood by the hf backend"):  # a random model's own argument
        check_values(resolve_model("org/some-model", {"seed": 3}))


def test_a_repeated_model_argument_is_refused_in_one_line() -> None:
    """Issue 32: base_url=a,base_url=b used to keep b silently."""
    with pytest.raises(ModelArgsError) as err:
        parse_model_args("base_url=http://127.0.0.1:8000/v1,base_url=http://u:S3cretPassw0rd@127.0.0.1:8001/v1")
    message = str(err.value)
    assert "base_url is given twice" in message and "base_url=URL1|URL2" in message and "\n" not in message
    assert "S3cretPassw0rd" not in message and err.value.setting == "model_args"
    with pytest.raises(ModelArgsError, match="batch_size is given twice"):
        parse_model_args("batch_size=8, dtype=float32, batch_size=16")
    assert parse_model_args("base_url=http://a:1/v1|http://b:2/v1")["base_url"] == "http://a:1/v1|http://b:2/v1"


def test_pre_run_refuses_a_repeated_model_argument_with_exit_2(tmp_path, capsys) -> None:  # noqa: ANN001
    from promptrobust.cli.main import main

    code = main(["run", "--model", "openai:m", "--model-args", "base_url=http://127.0.0.1:9/v1,base_url=http://127.0.0.1:10/v1",
                 "--limit", "4", "--no-cache", "--output-dir", str(tmp_path / "runs"), "--no-progress"])
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "base_url is given twice" in line and line.endswith("(--model-args)")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
