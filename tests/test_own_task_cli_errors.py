"""Bad input to a user's own task through the command line (issue 34, item 5): each case is one
line on stderr that names the file, the row or key and the fix, exit code 2, no run folder,
and no request sent. The library's own checks of the same cases: tests/test_own_task_errors.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from promptrobust.cli.main import main
from promptrobust.testing.fake_openai import FakeOpenAIServer

from tests.test_own_task_errors import CSV, TOML as LIBRARY_TOML

#: The library tests' task file, with room for extra keys before its [labels] table.
TOML = LIBRARY_TOML.replace("\n[labels]", "\n{extra}\n[labels]")
LABELS = "BIL=billing,TEC=technical,OTH=other"


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as srv:
        yield srv


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "tickets.csv").write_text(CSV)
    (tmp_path / "tickets.toml").write_text(TOML.format(extra=""))
    return tmp_path


def refused(folder: Path, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str], *words: str) -> str:
    """``pre run WORDS`` must exit 2 with one line on stderr, leave no run folder and send nothing; the line."""
    server.reset_counts()
    out = folder / "runs"
    code = main(["run", *words, "--model", "openai:fake-model", "--model-args", f"base_url={server.url}", "--mode", "choices",
                 "--attack", "checklist", "--top-k", "1", "--output-dir", str(out), "--cache", str(folder / "c.sqlite"),
                 "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("pre: error: "), err
    assert not out.exists() or not any(out.iterdir()), sorted(out.iterdir())
    assert server.count("/v1/chat/completions") == server.count("/v1/completions") == 0
    return err


def task_file(folder: Path, *, extra: str = "", csv: str | bytes | None = None, edit: Callable[[str], str] = lambda t: t) -> str:
    """The task file (with ``extra`` keys, ``edit`` applied) over ``csv``, written; its path."""
    (folder / "tickets.toml").write_text(edit(TOML.format(extra=extra)))
    if isinstance(csv, bytes):
        (folder / "tickets.csv").write_bytes(csv)
    elif csv is not None:
        (folder / "tickets.csv").write_text(csv)
    return str(folder / "tickets.toml")


def has(line: str, *needles: str) -> None:
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"


def test_a_missing_column(folder: Path, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(folder, server, capsys, "--task", task_file(folder, edit=lambda t: t.replace('input = "body"', 'input = "text"')))
    has(line, "tickets.toml: key 'input'", "column 'text' is not in", "tickets.csv", "'body'", "set input to the column")


def test_a_label_value_outside_the_mapping(folder: Path, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(folder, server, capsys, "--task", task_file(folder, csv=CSV + "T4,a new laptop,SALES\n"))
    has(line, "tickets.csv row 4", "label value 'SALES'", "(", "tickets.toml: key 'labels')", "or drop the row")


def test_an_empty_file(folder: Path, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(folder, server, capsys, "--task", task_file(folder, csv=""))
    has(line, "tickets.csv", "empty", "add a header and rows")
    assert "--data-file" not in line  # the task file names its data, not a flag


def test_duplicate_sample_ids(folder: Path, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(folder, server, capsys, "--task", task_file(folder, csv=CSV + "T1,charged again,BIL\n"))
    has(line, "tickets.toml: key 'id'", "tickets.csv row 4", "duplicate sample id 'T1'", "row 1", "ids must be unique")


def test_a_template_without_the_input(folder: Path, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(folder, server, capsys, "--task", task_file(folder, extra='template = "Classify the ticket."'))
    has(line, "tickets.toml: key 'template'", "never shows input column 'body'", "put {body} where it goes")


def test_an_unknown_metric(folder: Path, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(folder, server, capsys, "--task", task_file(folder, extra='metric = "f1"'))
    has(line, "tickets.toml: key 'metric'", "unknown metric 'f1'", "use one of accuracy, macro_f1")


def test_a_file_that_is_not_utf8(folder: Path, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(folder, server, capsys, "--task", task_file(folder, csv=CSV.encode() + "T4,caf\u00e9 bill,BIL\n".encode("latin-1")))
    has(line, "tickets.csv", "not UTF-8", "line 5", "save the file as UTF-8")


def test_a_file_too_large_for_memory(folder: Path, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    big = "ticket_id,body,queue\n" + "".join(f"T{i},ticket number {i},BIL\n" for i in range(40_000))
    path = task_file(folder, csv=big)
    monkeypatch.setenv("PRE_MAX_DATA_FILE_MB", "0.5")
    line = refused(folder, server, capsys, "--task", path)
    has(line, "tickets.csv", "all 40,000 rows would take at least", "more than pre's limit of 0.5 MB", "PRE_MAX_DATA_FILE_MB")


def test_a_name_that_collides_with_a_built_in(folder: Path, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(folder, server, capsys, "--task", task_file(folder, edit=lambda t: t.replace('"tickets"', '"sst2"', 1)))
    has(line, "tickets.toml: key 'name'", "'sst2' is the built-in dataset sst2", "choose another name")


def test_a_data_file_alone_is_never_read_as_another_task(folder: Path, server: FakeOpenAIServer,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(folder, server, capsys, "--data-file", str(folder / "tickets.csv"))  # not the default dataset's columns
    has(line, "tickets.csv: no column 'sentence'", "which rotten_tomatoes reads", "'body'", "a task of your own", "(--data-file)")
    line = refused(folder, server, capsys, "--data-file", str(folder / "tickets.csv"), "--dataset", "sst2")  # named: the same check
    has(line, "tickets.csv: no column 'sentence'", "which sst2 reads", "a task of your own")


def test_the_flags_form_names_its_flags(folder: Path, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 42, item 12: the columns form's errors name the flag to change, never a Python field
    (input_columns, few_shot_file, "task given by columns: data_file")."""
    csv = str(folder / "tickets.csv")
    lines = [
        refused(folder, server, capsys, "--data-file", csv, "--input-column", "text", "--label-column", "queue", "--labels", LABELS),
        refused(folder, server, capsys, "--data-file", csv, "--input-column", "body", "--label-column", "queue",
                "--labels", "BIL=billing,TEC=technical"),
        refused(folder, server, capsys, "--input-column", "body", "--label-column", "queue", "--labels", LABELS),
        refused(folder, server, capsys, "--data-file", csv, "--input-column", "body", "--label-column", "queue", "--labels", LABELS,
                "--few-shot-file", str(folder / "missing.csv")),
        refused(folder, server, capsys, "--data-file", str(folder / "missing.csv"), "--input-column", "body", "--label-column",
                "queue", "--labels", LABELS),
        refused(folder, server, capsys, "--data-file", csv, "--input-column", "body", "--label-column", "queue", "--labels", LABELS,
                "--metric", "bleu"),
        refused(folder, server, capsys, "--data-file", csv),
    ]
    has(lines[0], "--input-column: column 'text' is not in", "set --input-column to the column")
    has(lines[1], "tickets.csv row 3", "label value 'OTH'", "--labels")
    has(lines[2], "needs its data", "--data-file FILE", "--dataset hf:PATH")
    has(lines[3], "--few-shot-file: file", "missing.csv not found", "relative to the current folder")
    has(lines[4], "--data-file: ", "missing.csv not found", "relative to the current folder")
    has(lines[5], "--metric: unknown metric 'bleu'", "set --target-column")
    has(lines[6], "--input-column COLUMN", "--label-column COLUMN", "--labels VALUE=WORD", "--task FILE")
    python_names = ("input_columns", "few_shot_file", "data_file", "label_column", "target_column", "task given by columns",
                    "task file's folder")
    for line in lines:
        assert not any(name in line for name in python_names), line


def test_a_task_is_named_one_way(folder: Path, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    path = task_file(folder)
    has(refused(folder, server, capsys, "--task", path, "--dataset", "sst2"), "both name what to measure", "--task")
    has(refused(folder, server, capsys, "--task", path, "--input-column", "body"), "give one of them", "--task")
    has(refused(folder, server, capsys, "--task", str(folder / "tickets.csv")), "a task file is TOML", "--task")
