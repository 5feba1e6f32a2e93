"""docs/coming-from.md: every lm-evaluation-harness and promptbench mapping is tested.

Table rows: both sides, as `pre run` flags, plan the same run (`pre run`'s own parser and plan
builder: cli/run.py plan_from_args). Commands: each plans what it says, and the offline ones run
on the fake server and write what they say (tests/test_docs_examples.py's runner). Python
snippets: executed with the fake model injected (the API's backend_factory).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from promptrobust.cli.errors import one_line, user_error_types
from promptrobust.cli.lm_eval import normalize_argv
from promptrobust.cli.main import build_parser
from promptrobust.cli.run import plan_from_args
from promptrobust.engine.runs.plan import RunPlan
from promptrobust.testing.fake_openai import FakeOpenAIServer
from tests.sweep_helpers import hashed_answer, hashed_text_answer
from tests.test_docs_examples import _commands_in, _runnable_offline, assert_ran, run_offline_example

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


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


_HAVE_CUDA = _cuda()


def _plan(flags: str) -> RunPlan:
    """The plan `pre run FLAGS` runs: its own parser and its own plan builder, nothing re-implemented
    (the table's URL placeholder stands for a local server, and cuda:0 for the CPU on a machine without
    a GPU, where `pre run` refuses it: the same on both sides)."""
    flags = flags.replace("URL", "http://127.0.0.1:9")
    if not _HAVE_CUDA:
        flags = flags.replace("cuda:0", "cpu")
    return plan_from_args(build_parser().parse_args(normalize_argv(["run", *shlex.split(flags)])))


def _settings(flags: str) -> dict[str, Any]:
    """What `pre run FLAGS` would measure and where it would write it (not how the flags were spelled);
    a model that cannot be reached from here (vllm not installed) is refused, in the same words both ways."""
    try:
        plan = _plan(flags)
    except user_error_types() as exc:
        return {"refused": one_line(exc)}
    return {
        "model": (plan.model.name, plan.model.backend, dict(plan.model.args)), "scheduler": plan.scheduler,
        "targets": [(t.task.name, t.evaluation, t.mode, t.shots, [p.id for p in t.prompts]) for t in plan.targets],
        "attacks": plan.attacks, "output": (plan.output.output_dir, plan.output.cache, plan.output.use_cache, plan.output.log_samples),
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
def test_every_command_plans_what_it_says(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each command is planned as `pre run` would plan it (no model loads), and the plan holds
    the datasets, sample limit, shots and outputs the command names."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")  # planning an API model reads its key, sends nothing
    args = build_parser().parse_args(normalize_argv(shlex.split(command)[1:]))
    plan = plan_from_args(args)
    words = normalize_argv(shlex.split(command))
    given = dict(zip(words, words[1:]))
    expected = given.get("--dataset", "rotten_tomatoes").split(",")
    assert [t.task.name for t in plan.targets] == expected
    assert all(t.evaluation.dataset == t.task.name for t in plan.targets)
    if "--limit" in given:
        assert plan.targets[0].evaluation.limit == (float(given["--limit"]) if "." in given["--limit"] else int(given["--limit"]))
    if "--shots" in given:
        assert {t.shots for t in plan.targets} == {int(given["--shots"])}
    assert plan.output.output_dir == given.get("--output-dir", "runs")
    assert plan.output.log_samples == ("--log-samples" in words)
    assert (plan.attacks is not None) == ("--attack" in words)


@pytest.fixture(scope="module")
def server():
    with FakeOpenAIServer(answer=hashed_text_answer) as srv:
        yield srv


OFFLINE = [c for c in COMMANDS if _runnable_offline(c)]


def test_most_commands_run_offline() -> None:
    assert len(OFFLINE) >= 6


@pytest.mark.parametrize("command", OFFLINE)
def test_every_offline_command_runs_and_writes_what_it_says(command: str, server: FakeOpenAIServer, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    assert_ran(command, run_offline_example(command, server, tmp_path, capsys), tmp_path)


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
