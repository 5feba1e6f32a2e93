"""Issue 41, item 8: the flags form expresses a free-text task, as docs/your-task.md says
(``--target-column``, ``--metric`` and the instruction in ``--prompt-text``); it is the same
task as its task file (same cache keys: a run after the file's sends nothing). And a weak
point: ``--labels BIL=bill=ing`` is refused, not read as the answer word ``bill=ing``."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from promptrobust.cli.main import main
from promptrobust.engine.errors import PromptRobustError
from promptrobust.tasks import task_from_columns
from promptrobust.testing.fake_openai import FakeOpenAIServer

QA = "id,question,answer\nq1,What is two plus two?,4\nq2,Capital of France?,Paris\nq3,Colour of the sky?,blue\n"
QA_TOML = """\
name = "qa"
data = "qa.csv"
input = "question"
target = "answer"
metric = "exact_match"
id = "id"
prompts = ["Answer the question in one word."]
"""
FLAGS = ["--input-column", "question", "--target-column", "answer", "--metric", "exact_match", "--id-column", "id"]


def run(server: FakeOpenAIServer, folder: Path, out: str, *words: str) -> int:
    return main(["run", *words, "--model", "openai:fake-model", "--model-args", f"base_url={server.url}", "--mode", "generate",
                 "--output-dir", str(folder / out), "--cache", str(folder / "c.sqlite"), "--no-progress"])


def records(folder: Path) -> list[dict]:
    (run_dir,) = folder.iterdir()
    return [orjson.loads(line) for line in (run_dir / "results.jsonl").read_bytes().splitlines()]


def test_a_free_text_task_by_its_flags_runs_as_its_task_file_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "qa.csv").write_text(QA)
    (tmp_path / "qa.toml").write_text(QA_TOML)
    with FakeOpenAIServer() as server:
        assert run(server, tmp_path, "by-file", "--task", str(tmp_path / "qa.toml")) == 0, capsys.readouterr().err
        server.reset_counts()
        code = run(server, tmp_path, "by-flags", "--data-file", str(tmp_path / "qa.csv"), *FLAGS,
                   "--prompt-text", "Answer the question in one word.")
        assert code == 0, capsys.readouterr().err
        assert server.count("/v1/completions") + server.count("/v1/chat/completions") == 0  # all cached: the same task
    (by_file,), (by_flags,) = records(tmp_path / "by-file"), records(tmp_path / "by-flags")
    assert by_flags["dataset"] == by_file["dataset"] == "qa"
    assert by_flags["score"] == by_file["score"] and by_flags["sample_scores"] == by_file["sample_scores"]
    assert by_flags["prompt"] == by_file["prompt"] and by_flags["prompt_id"] == "custom"
    assert by_flags["samples"] == by_file["samples"] == 3


def test_a_free_text_task_without_its_instruction_names_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "qa.csv").write_text(QA)
    with FakeOpenAIServer() as server:
        code = run(server, tmp_path, "runs", "--data-file", str(tmp_path / "qa.csv"), *FLAGS)
        sent = server.count("/v1/completions") + server.count("/v1/chat/completions")
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and sent == 0, err
    assert "--prompt-text" in err and "--prompts" not in err, err


def test_labels_with_two_equals_signs_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "t.csv").write_text("body,queue\ncharged twice,BIL\napp crashes,TEC\n")
    with pytest.raises(PromptRobustError, match="'BIL=bill=ing' is not VALUE=WORD"):
        task_from_columns(data_file=str(tmp_path / "t.csv"), input_columns="body", label_column="queue",
                          labels="BIL=bill=ing,TEC=technical")
    with FakeOpenAIServer() as server:
        code = run(server, tmp_path, "runs", "--data-file", str(tmp_path / "t.csv"), "--input-column", "body",
                   "--label-column", "queue", "--labels", "BIL=bill=ing,TEC=technical")
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--labels" in err and "bill=ing" in err and len(err.splitlines()) == 1, err
