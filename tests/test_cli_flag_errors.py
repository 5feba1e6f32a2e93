"""A flag given a value of the wrong type (`--limit 1.5`, `--seed x`), an unknown flag or a
missing one is one line naming the mistake and exit code 2, on every command (issue 31 item 4):
argparse's own errors no longer print the usage block first."""

from __future__ import annotations

import argparse

import pytest

from promptrobust.cli.main import build_parser, main


def _typed_flags() -> list[tuple[str, str]]:
    """(command, flag) of every option of every command that converts its value (int, float, --limit's rule...)."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = []
    for command, child in sub.choices.items():
        for action in child._actions:
            if action.option_strings and action.type not in (None, str) and action.nargs is None:
                out.append((command, action.option_strings[0]))
    return out


TYPED = _typed_flags()


def test_the_typed_flags_are_found() -> None:
    assert ("run", "--limit") in TYPED and ("run", "--seed") in TYPED and ("run", "--concurrency") in TYPED
    assert len({command for command, _ in TYPED}) >= 4


@pytest.mark.parametrize("command,flag", TYPED)
def test_a_value_of_the_wrong_type_is_one_line(command: str, flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, flag, "not-a-number"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pre: error: argument ") and flag in lines[0], captured.err
    assert "usage:" not in captured.err and captured.out == ""


@pytest.mark.parametrize("argv,said", [
    (["run", "--limit", "1.5"], "'1.5': give a whole number of samples >= 1 or a fraction between 0 and 1"),
    (["run", "--limit"], "argument --limit: expected one argument"),
    (["run", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["run", "--mode", "fast"], "argument --mode: invalid choice: 'fast'"),
    (["eval", "--limit", "2"], "one of the arguments --prompts --promptbench-adv is required"),
    (["nonsense"], "invalid choice: 'nonsense'"),
])
def test_every_argparse_mistake_is_one_line_naming_the_help(argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err and "usage:" not in err, err
    command = argv[0] if argv[0] in ("run", "eval") else None
    assert err.rstrip().endswith(f"(see `pre {command} --help`)" if command else "(see `pre --help`)")


def test_max_tokens_beyond_any_answer_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path) -> None:  # noqa: ANN001
    """Issue 41 (weak point): 10^11 new tokens is a mistake, as in a task file (tasks.base.MAX_NEW_TOKENS)."""
    assert main(["run", "--max-tokens", "100000000000", "--model", "openai:fake-model", "--model-args",
                 "base_url=http://127.0.0.1:9/v1", "--output-dir", str(tmp_path), "--no-cache", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--max-tokens" in err and "32768" in err, err
