"""Every command is registered, imports cleanly and explains itself."""

from __future__ import annotations

import pytest

from promptrobust.cli.main import OPTIONAL_COMMANDS, build_parser, main

COMMANDS = ["run", "list", "sweep", "report", "eval", "transfer", "defend", "attention"]


def test_every_command_module_exists() -> None:
    import importlib.util

    missing = [m for m in OPTIONAL_COMMANDS if importlib.util.find_spec(m) is None and m != "promptrobust.cli.bench"]
    assert not missing


@pytest.mark.parametrize("command", COMMANDS)
def test_help_teaches_with_examples(command, capsys) -> None:  # noqa: ANN001
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args([command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert f"usage: pre {command}" in out
    if command in ("run", "sweep", "list"):
        assert "example" in out.lower()


def test_bare_pre_prints_help(capsys) -> None:  # noqa: ANN001
    assert main([]) == 0
    out = capsys.readouterr().out
    for command in COMMANDS:
        assert command in out


def test_list_models_and_datasets(capsys) -> None:  # noqa: ANN001
    assert main(["list", "models"]) == 0
    out = capsys.readouterr().out
    for name in ("smollm2-135m-instruct", "gemma3-270m", "flan-t5-large", "llama2-13b-chat", "gpt-4"):
        assert name in out
    assert main(["list", "datasets"]) == 0
    out = capsys.readouterr().out
    for name in ("sst2", "mmlu", "squad_v2", "iwslt", "un_multi", "math", "rotten_tomatoes"):
        assert name in out


def test_list_prompts_shows_ids_and_text(capsys) -> None:  # noqa: ANN001
    assert main(["list", "prompts", "--dataset", "sst2", "--type", "role"]) == 0
    out = capsys.readouterr().out
    assert "sst2-role-01" in out and "sst2-task-01" not in out
