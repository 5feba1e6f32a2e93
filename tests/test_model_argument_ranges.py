"""Every numeric model argument is judged by its range, in one place: the backend's options value
(issue 41 item 7: ``max_body_mb=1e308`` was an OverflowError traceback). An error repeats a bounded
piece of what it was given (issue 41: a 120 KB ``--model_args`` value was echoed whole)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from promptrobust.cli.main import main

LOCAL = "base_url=http://127.0.0.1:9/v1"
#: A model of each built-in backend, named so that nothing is loaded or reached to check its arguments.
MODELS = {"hf": ("org/some-model", ""), "openai": ("openai:m", LOCAL), "vllm": ("vllm:org/some-model", ""),
          "random": ("random:tiny-llama", "")}
HOSTILE = (math.nan, math.inf, -math.inf, -1, 1e308, 10**30)


def _numeric_arguments() -> list[tuple[str, str]]:
    """(backend, argument) of every numeric model argument the built-in backends' options declare."""
    from promptrobust.engine.serving.model_args import argument_rows
    from promptrobust.engine.serving.registry import backend_registration

    return [(backend, row.name) for backend in MODELS for row in argument_rows(backend_registration(backend).options)
            if "number" in row.takes]


NUMERIC = _numeric_arguments()


def test_every_builtin_backend_has_its_numeric_arguments_declared() -> None:
    assert {b for b, _ in NUMERIC} == set(MODELS)
    assert ("openai", "max_body_mb") in NUMERIC and ("hf", "prefix_cache_mb") in NUMERIC and ("vllm", "seed") in NUMERIC
    assert ("random", "seed") in NUMERIC and ("openai", "timeout") in NUMERIC


@pytest.mark.parametrize(("backend", "name"), NUMERIC)
def test_nan_inf_negative_and_overflowing_values_are_one_line(backend: str, name: str) -> None:
    from promptrobust.engine.serving.model_args import ModelArgsError, parse_model_args
    from promptrobust.engine.serving.registry import check_values, resolve_model

    model, base = MODELS[backend]
    for value in HOSTILE:
        args = parse_model_args(",".join(filter(None, [base, f"{name}={value}"])))
        with pytest.raises(ModelArgsError) as err:
            check_values(resolve_model(model, args))
        message = str(err.value)
        assert f"{name} must be" in message and "\n" not in message and err.value.setting == "model_args", message


@pytest.mark.parametrize(("model", "args", "name"), [
    ("openai:fake-model", f"{LOCAL},max_body_mb=1e308", "max_body_mb"),  # OverflowError traceback at e9519a0
    ("org/some-model", "prefix_cache_mb=1e308", "prefix_cache_mb"),  # OverflowError traceback at e9519a0
    ("openai:fake-model", f"{LOCAL},timeout=1e308", "timeout"),  # accepted at e9519a0
    ("vllm:org/some-model", "max_model_len=1000000000000000000000000000000", "max_model_len"),  # accepted at e9519a0
    ("random:tiny-llama", "seed=1000000000000000000000000000000", "seed"),  # accepted at e9519a0
])
def test_pre_run_refuses_an_out_of_range_number_in_one_line_with_exit_2(model: str, args: str, name: str, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--model", model, "--model-args", args, "--limit", "4", "--no-cache",
                 "--output-dir", str(tmp_path / "runs"), "--no-progress"])
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and f"{name}=" in line and f"{name} must be" in line and line.endswith("(--model-args)"), line
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.parametrize("model_args", [
    "dtype=" + "x" * 120_000,  # a value
    "x" * 120_000 + "=1",  # a name
    "y" * 120_000,  # not key=value
    ",".join(f"k{i}=1" for i in range(20_000)),  # many unknown names
    "batch_size=" + "9" * 5_000,  # a number too long to read as one
], ids=["value", "name", "not-key-value", "many-names", "long-number"])
def test_an_error_repeats_a_bounded_piece_of_a_huge_model_args_value(model_args: str, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--model", "org/some-model", "--model-args", model_args, "--limit", "4", "--no-cache",
                 "--output-dir", str(tmp_path / "runs"), "--no-progress"])
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(line) < 1_000, line[:300]
