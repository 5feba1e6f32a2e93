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


def test_list_serve_prints_the_exact_vllm_serve_command_and_the_run_against_it(tmp_path, capsys) -> None:  # noqa: ANN001
    """Issue 43 item 1: how to serve a model with vLLM, from pre itself (a local folder here; an embedded
    model is served from its converted folder in the model store)."""
    import shlex

    folder = tmp_path / "my model"
    folder.mkdir()
    assert main(["list", "serve", "--model", str(folder), "--port", "8123"]) == 0
    lines = capsys.readouterr().out.splitlines()
    serve = shlex.split(lines[0].removeprefix("serve:  "))
    assert serve[:3] == ["vllm", "serve", str(folder)]  # the path quoted: it has a space
    assert serve[3:] == ["--served-model-name", "my model", "--port", "8123", "--max-model-len", "2048"]
    module = shlex.split(lines[1].removeprefix("   or:  "))
    assert module[:4] == ["python", "-m", "vllm.entrypoints.openai.api_server", "--model"] and module[5:] == serve[3:]
    run = shlex.split(lines[2].removeprefix("then:   "))
    assert run[:4] == ["pre", "run", "--model", "openai:my model"]
    assert run[5].startswith("base_url=http://127.0.0.1:8123/v1")
    assert main(["list", "serve"]) == 2 and "--model NAME" in capsys.readouterr().err


def test_list_prompts_shows_ids_and_text(capsys) -> None:  # noqa: ANN001
    assert main(["list", "prompts", "--dataset", "sst2", "--type", "role"]) == 0
    out = capsys.readouterr().out
    assert "sst2-role-01" in out and "sst2-task-01" not in out


def test_each_setting_is_spelled_once_its_flag_derived_from_its_field() -> None:
    """The scheduler's flags are SchedulerSettings' fields: name, default and help (its docstring);
    the parsed flags build the settings value itself."""
    from dataclasses import fields

    from promptrobust.cli import flags
    from promptrobust.engine.measuring.settings import AttackSettings, EvaluationSettings
    from promptrobust.engine.serving.scheduler_settings import SchedulerSettings

    run = build_parser()._subparsers._group_actions[0].choices["run"]  # noqa: SLF001
    by_dest = {a.dest: a for a in run._actions}  # noqa: SLF001
    # the price is the one scheduler setting spelled otherwise: --price-per-mtok IN,OUT (parsed into a Price)
    assert by_dest["price_per_mtok"].default is None and SchedulerSettings().price is None
    for kind, names in ((SchedulerSettings, [f.name for f in fields(SchedulerSettings) if f.name != "price"]),
                        (EvaluationSettings, ["seed", "shots", "mode", "parser", "max_new_tokens", "sample_selection"]),
                        (AttackSettings, ["top_k", "early_stopping", "chunk_size", "holdout"])):
        defaults = kind()
        for name in names:
            action = by_dest[name]
            assert action.default == getattr(defaults, name), name
            doc = flags.field_docs(kind)[name]
            assert doc.split()[1] in action.help, (name, action.help)  # the help is the field's docstring
    args = run.parse_args(["--concurrency", "3", "--max-wait-ms", "1.5", "--request-timeout", "9", "--max-tokens", "7"])
    assert flags.scheduler_settings(args) == SchedulerSettings(concurrency=3, max_wait_ms=1.5, request_timeout=9.0)
    assert flags.evaluation_settings(args).max_new_tokens == 7


def test_a_named_command_builds_only_its_own_parser() -> None:
    """`pre report ...` does not import the other commands' modules (the engine's settings, the
    attack catalogue): only `pre`, `pre --help` and unknown names build every parser."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from promptrobust.cli.main import COMMAND_MODULES, build_parser, _commands_for\n"
        "assert _commands_for(['report', 'runs/x']) == ['report']\n"
        "assert _commands_for(['--version']) == []\n"
        "assert _commands_for([]) is None and _commands_for(['--help']) is None and _commands_for(['bogus']) is None\n"
        "parser = build_parser(['report'])\n"
        "assert parser.parse_args(['report', 'runs/x']).command == 'report'\n"
        "others = [m for name, m in COMMAND_MODULES.items() if name != 'report' and m in sys.modules]\n"
        "print(others)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_an_unknown_command_lists_the_known_ones(capsys) -> None:  # noqa: ANN001
    assert main(["bogus"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice" in err and "report" in err and "run" in err
