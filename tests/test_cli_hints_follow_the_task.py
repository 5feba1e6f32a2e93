"""Hints that work (issue 31 item 5): after `pre run --dataset rotten_tomatoes,math`, each
dataset's `next:` hint names that dataset alone and proposes label scoring (`--mode choices`)
only where its answers are labels (the one mode decision, engine.measuring.mode); every command
a hint proposes builds a run plan, i.e. it would start instead of failing."""

from __future__ import annotations

from pathlib import Path

import pytest

from promptrobust.cli.main import build_parser, main
from promptrobust.cli.run import plan_from_args
from promptrobust.testing.fake_openai import FakeOpenAIServer
from tests.test_cli_hints import _commands  # every `pre run ...` command of a hint


def _hints(err: str) -> list[str]:
    """Each target's `next:` hint (up to its `pre: results in` line)."""
    return [part.split("\npre: results in", 1)[0] for part in err.split("\nnext: ")[1:]]


@pytest.mark.parametrize("attack", [[], ["--attack", "stresstest", "--top-k", "1"]])
def test_each_datasets_hint_fits_that_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str], attack: list[str]) -> None:
    with FakeOpenAIServer(answer=lambda text: "negative") as srv:  # at chance on labels, wrong on math
        assert main(["run", "--model", "openai:fake-model", "--model-args", f"base_url={srv.url}",
                     "--dataset", "rotten_tomatoes,math", "--limit", "5", "--prompt-type", "task", "--no-progress",
                     "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(tmp_path / "runs"), *attack]) == 0
    sentiment, math = _hints(capsys.readouterr().err)
    assert "at chance" in sentiment  # math scores 0 (its prompts are skipped under an attack)
    for hint, dataset, choices in ((sentiment, "rotten_tomatoes", True), (math, "math", False)):
        commands = _commands(hint)
        assert commands, hint
        parsed = [build_parser().parse_args(words[1:]) for words in commands]
        assert all(p.dataset == dataset for p in parsed), hint  # this target's dataset alone
        assert any(p.mode == "choices" for p in parsed) == choices, hint
        for p in parsed:
            if p.model != "MODEL":  # "a stronger model" leaves the model to the user
                p.argv = ["pre", "run"]
                plan_from_args(p)  # decided as `pre run` would: no "math answers are free text" error
