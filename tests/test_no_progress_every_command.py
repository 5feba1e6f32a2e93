"""`--no-progress` does what `--help` says on every command that has it (issue 31 item 4): no
phase line of its own, only the status line every $PRE_PROGRESS_EVERY seconds (30 by default)
that shows a long job is alive. The phases each command announced are read back from its
progress recording ($PRE_PROGRESS_RECORD), so none can slip through unnoticed."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from promptrobust.cli.main import build_parser, main
from promptrobust.testing.fake_openai import FakeOpenAIServer
from tests.sweep_helpers import hashed_text_answer


def test_every_command_with_no_progress_says_the_same_in_its_help() -> None:
    import argparse

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    helps = {name: next((a.help for a in p._actions if "--no-progress" in a.option_strings), None) for name, p in sub.choices.items()}
    having = {name: text for name, text in helps.items() if text}
    assert {"run", "eval", "transfer", "defend"} <= set(having)
    assert all("no progress line or phase lines" in text and "30 s" in text for text in having.values())


def _phases(record: Path) -> set[str]:
    lines = [orjson.loads(line) for line in record.read_bytes().splitlines() if line.strip()]
    return {line["event"]["text"] for line in lines if line.get("event", {}).get("type") == "Phase"}


def test_no_progress_drops_every_phase_line_and_keeps_the_status_line(tmp_path: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    monkeypatch.delenv("PRE_PROGRESS", raising=False)
    monkeypatch.setenv("PRE_PROGRESS_EVERY", "0.05")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Is this review positive or negative?\nLabel the review: positive or negative.\n")
    with FakeOpenAIServer(answer=hashed_text_answer, latency=0.02) as srv:
        model = ["--model", "openai:fake-model", "--model-args", f"base_url={srv.url}"]
        common = ["--mode", "choices", "--limit", "6", "--cache", str(tmp_path / "c.sqlite"), "--no-progress"]
        commands = {
            "run": ["run", *model, *common, "--output-dir", str(tmp_path / "clean")],
            "attack": ["run", *model, *common, "--output-dir", str(tmp_path / "attack"), "--attack", "stresstest", "--top-k", "1"],
            "eval": ["eval", "--prompts", str(prompts), *model, *common, "--output-dir", str(tmp_path / "eval")],
            "transfer": ["transfer", "--source", str(tmp_path / "attack"), *model, *common, "--output-dir", str(tmp_path / "t")],
            "defend": ["defend", "--source", str(tmp_path / "attack"), "--model-args", f"base_url={srv.url}", *common,
                       "--output-dir", str(tmp_path / "d")],
        }
        for name, argv in commands.items():
            record = tmp_path / f"{name}.progress.jsonl"
            monkeypatch.setenv("PRE_PROGRESS_RECORD", str(record))
            assert main(argv) == 0, name
            err = capsys.readouterr().err.splitlines()
            phases = _phases(record)
            assert phases, name  # the command did announce its steps
            said = [line for line in err if line.startswith("pre: ") and line[5:] in phases]
            assert not said, (name, said)  # none as a line of its own
            assert any(line.startswith("pre: ") and "elapsed" in line for line in err), (name, err)  # the alive line
