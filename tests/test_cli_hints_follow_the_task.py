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


def test_the_hint_keeps_the_prompt_the_user_chose(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 42 item 7: after `--prompt-text "Decide if ..."` the hint proposed a command without
    it, which ranks ten generic prompts instead."""
    text = "Decide if the review is positive or negative."
    with FakeOpenAIServer(answer=lambda question: "positive" if len(question) % 2 else "negative") as srv:
        for attack in ([], ["--attack", "stresstest", "--top-k", "1"]):
            assert main(["run", "--model", "openai:fake-model", "--model-args", f"base_url={srv.url}", "--limit", "6",
                         "--mode", "choices", "--prompt-text", text, "--sample-selection", "first", "--no-progress",
                         "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(tmp_path / "runs"), *attack]) == 0
            (hint,) = _hints(capsys.readouterr().err)
            commands = [build_parser().parse_args(words[1:]) for words in _commands(hint)]
            assert commands, hint
            assert all(p.prompt_text == text and p.sample_selection == "first" for p in commands), hint


def test_every_flag_that_chooses_what_is_measured_is_kept_by_hints() -> None:
    """A flag of `pre run`'s "what to evaluate", "how to query the model" or own-task groups is
    either kept by the hints or named here with why not: a new flag cannot be forgotten."""
    from promptrobust.cli.output import KEPT_FLAGS

    not_kept = {"help", "no_cache", "log_samples", "no_progress", "results_file",  # outputs, not what is measured
                "device",  # folded into --model-args by lm_eval.model_and_args, which is kept
                "prompt_type",  # kept, with its default "task" (the check below reads the destinations)
                "price_per_mtok"}  # what the run costs in dollars, not what it measures
    parser = build_parser()
    run = next(a for a in parser._subparsers._group_actions[0].choices.items() if a[0] == "run")[1]  # type: ignore[union-attr]
    groups = [g for g in run._action_groups
              if g.title and (g.title in ("what to evaluate", "how to query the model") or g.title.startswith("your own task"))]
    chosen = {a.dest for g in groups for a in g._group_actions}
    from dataclasses import fields

    from promptrobust.engine.serving.scheduler_settings import SchedulerSettings

    chosen -= {f.name for f in fields(SchedulerSettings)}  # how fast, not what: the next run keeps its own defaults
    kept = {attr for attr, _, _ in KEPT_FLAGS}
    assert chosen - kept - not_kept == set()
