"""Issue 35 item 4: `--no-progress` on every command that queries a model, and one name per model
everywhere (records, results.json, the report)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from promptrobust.cli.main import build_parser, main
from promptrobust.testing.fake_openai import FakeOpenAIServer
from tests.sweep_helpers import hashed_text_answer

#: Every command that queries a model, with the fewest arguments it parses with.
QUERYING = {
    "run": [],
    "eval": ["--prompts", "p.jsonl"],
    "transfer": ["--source", "runs", "--model", "openai:m"],
    "defend": ["--source", "runs"],
    "attention": ["--clean", "a", "--adversarial", "b"],
    "sweep": ["grid.toml"],
}


def _commands() -> set[str]:
    import argparse

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    return set(sub.choices)


def test_the_list_of_querying_commands_is_complete() -> None:
    # the commands that never query a model; a new command must be put in one list or the other
    assert _commands() - set(QUERYING) == {"report", "list", "cache", "bench"}


@pytest.mark.parametrize("command", sorted(QUERYING))
def test_no_progress_is_a_flag_of_every_command_that_queries_a_model(command: str) -> None:
    args = build_parser().parse_args([command, *QUERYING[command], "--no-progress"])
    assert args.no_progress is True
    assert build_parser().parse_args([command, *QUERYING[command]]).no_progress is False


def test_no_progress_quiets_a_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeOpenAIServer(answer=hashed_text_answer) as srv:
        config = tmp_path / "grid.toml"
        config.write_text(f'[sweep]\nname = "g"\noutput_dir = "{tmp_path / "sweeps"}"\ncache = "{tmp_path / "c.sqlite"}"\n'
                          'limit = 4\ntop_k = 1\nbudget = 4\nmode = "choices"\n[grid]\nmodels = ["openai:fake-model"]\n'
                          f'datasets = ["rotten_tomatoes"]\nattacks = ["checklist"]\n[models."openai:fake-model"]\nmodel_args = "base_url={srv.url}"\n')
        assert main(["sweep", str(config), "--no-progress"]) == 0
    err = capsys.readouterr().err
    # no line per record, as pre run --no-progress: only the last counts' status line (which may name the search's best PDR)
    assert [line for line in err.splitlines() if "PDR" in line and not line.startswith("pre: jobs 1/1 | requests")] == []
    assert sum("PDR" in line for line in err.splitlines()) <= 1


# -- one name per model ----------------------------------------------------------------------------


def test_one_model_has_one_name_in_records_results_and_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 35: clean rows were named `fake-model` (the server's name) and attack rows
    `openai:fake-model` (the user's): `pre report` listed two models and split their clean scores."""
    from promptrobust.engine.analysis.report import build_report

    with FakeOpenAIServer(answer=hashed_text_answer) as srv:
        assert main(["run", "--model", "openai:fake-model", "--model-args", f"base_url={srv.url}", "--mode", "choices",
                     "--attack", "checklist", "--top-k", "1", "--limit", "8", "--cache", str(tmp_path / "c.sqlite"),
                     "--output-dir", str(tmp_path / "runs"), "--no-progress"]) == 0
        assert main(["run", "--model", "openai:fake-model", "--model-args", f"base_url={srv.url}", "--mode", "choices",
                     "--limit", "8", "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(tmp_path / "runs"),
                     "--no-progress"]) == 0
    capsys.readouterr()
    names = set()
    for folder in (tmp_path / "runs").iterdir():
        document = orjson.loads((folder / "results.json").read_bytes())
        names.add(document["model"])
        assert [m["name"] for m in document["models"]] == ["fake-model"]  # the identity stays the server's
        if (folder / "results.jsonl").exists():
            names |= {orjson.loads(line)["model"] for line in (folder / "results.jsonl").read_bytes().splitlines()}
    assert names == {"openai:fake-model"}
    report = build_report([tmp_path / "runs"])
    assert [line for line in report.meta if line.startswith("models:")] == ["models: openai:fake-model"]
    assert "| fake-model" not in report.markdown()  # no second name splits the clean scores by model
