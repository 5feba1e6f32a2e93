"""docs/coming-from.md: every lm-evaluation-harness and promptbench mapping is tested.

Table rows: both sides, as `pre run` flags, give the same settings. Commands: they parse, and
the offline ones run on the fake server (tests/test_docs_examples.py's runner). Python snippets:
executed with the fake model injected (the API's backend_factory).
"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from promptrobust.cli import aliases, gen_kwargs, lm_eval_model
from promptrobust.cli.main import build_parser
from promptrobust.testing.fake_openai import FakeOpenAIServer
from tests.sweep_helpers import hashed_answer, hashed_text_answer
from tests.test_docs_examples import _commands_in, _runnable_offline, run_offline_example

PAGE = (Path(__file__).resolve().parents[1] / "docs" / "coming-from.md").read_text(encoding="utf-8")


def _table_rows(title: str) -> list[tuple[str, str]]:
    section = PAGE.split(f"## {title}", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) >= 2 and cells[0].startswith("`--"):
            left = re.findall(r"`([^`]+)`", cells[0])[0]
            right = cells[1]
            rights = re.findall(r"`([^`]+)`", right)
            rows.append((left, left if right == "the same" else rights[0]))
    return rows


LM_EVAL_ROWS = _table_rows("lm-evaluation-harness")


def _settings(flags: str) -> dict[str, Any]:
    """What `pre run FLAGS` would measure: the model spec and every evaluation/scheduler setting."""
    from promptrobust.cli import flag_settings
    from promptrobust.engine.serving.registry import parse_model_args, resolve_model

    args = build_parser().parse_args(aliases.normalize_argv(["run", *shlex.split(flags)]))
    args.model, args.model_args = lm_eval_model.model_from_flags(args)
    spec = lm_eval_model.one_batch_size(lm_eval_model.chat_model_args(resolve_model(args.model, parse_model_args(args.model_args)), args), args)
    generation = gen_kwargs.apply_generation(args)
    evaluation = flag_settings.evaluation_settings(args, limit=args.limit).with_(**generation) if not isinstance(args.limit, float) else None
    return {
        "model": (spec.name, spec.backend, dict(spec.args)), "datasets": flag_settings.dataset_names(args.dataset),
        "evaluation": evaluation, "limit": args.limit, "scheduler": flag_settings.scheduler_settings(args),
        "output_dir": args.output_dir, "log_samples": args.log_samples, "cache": args.cache,
    }


def test_the_table_rows_were_found() -> None:
    assert len(LM_EVAL_ROWS) >= 14


@pytest.mark.parametrize(("theirs", "ours"), LM_EVAL_ROWS, ids=[r[0] for r in LM_EVAL_ROWS])
def test_each_lm_eval_row_means_the_same_run(theirs: str, ours: str) -> None:
    assert _settings(theirs) == _settings(ours)
    assert _settings(theirs) != _settings("--seed 999 --dataset math")  # the comparison can fail


COMMANDS = [c for block in re.findall(r"```bash\n(.*?)```", PAGE, re.S) for c in _commands_in(block)]


def test_the_two_spellings_of_the_same_run_agree() -> None:
    lm_eval, ours = COMMANDS[0], COMMANDS[1]
    assert _settings(lm_eval.removeprefix("pre run ")) == _settings(ours.removeprefix("pre run "))


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_parses(command: str) -> None:
    build_parser().parse_args(aliases.normalize_argv(shlex.split(command)[1:]))


@pytest.fixture(scope="module")
def server():
    with FakeOpenAIServer(answer=hashed_text_answer) as srv:
        yield srv


OFFLINE = [c for c in COMMANDS if _runnable_offline(c)]


def test_most_commands_run_offline() -> None:
    assert len(OFFLINE) >= 6


@pytest.mark.parametrize("command", OFFLINE)
def test_every_offline_command_runs(command: str, server: FakeOpenAIServer, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    run_offline_example(command, server, tmp_path, capsys)


README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
SNIPPETS = re.findall(r"```python\n(.*?)```", PAGE, re.S) + re.findall(r"```python\n(.*?)```", README, re.S)


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[f"snippet-{i}" for i in range(len(SNIPPETS))])
def test_every_python_snippet_runs(snippet: str, monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # noqa: ANN001
    """This page's snippets and the README's, with the fake model injected."""
    import promptrobust as pr
    from promptrobust.testing.backends import CountingBackend

    def fake(spec: Any) -> CountingBackend:
        return CountingBackend(answer=hashed_answer)

    for name in ("evaluate", "attack", "attack_top_k"):
        real = getattr(pr, name)
        monkeypatch.setattr(pr, name, lambda *a, _real=real, **kw: _real(*a, backend_factory=fake, use_cache=False, progress=False, **kw))
    exec(compile(snippet, "docs/coming-from.md", "exec"), {"__name__": "coming_from"})  # noqa: S102
    assert capsys.readouterr().out.strip()  # it printed its results
