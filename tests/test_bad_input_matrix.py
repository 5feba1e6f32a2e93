"""The bad-input matrix: every case is one line naming the fix, exit 2, no traceback, nothing half-written.

Each case runs the real CLI in-process. Cases that would load a model use
arguments that fail before any weights are read; cases that need a server use
the project's own fake OpenAI server on 127.0.0.1.
"""

from __future__ import annotations

import os
import sqlite3
import textwrap
from pathlib import Path

import pytest

from promptrobust.cli.main import main
from promptrobust.testing.fake_openai import FakeOpenAIServer

OPENAI = ["--model", "openai:fake-model"]


def _assert_one_line(code: int, err: str, needles: tuple[str, ...]) -> None:
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("pre: warning")]
    assert code == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith("pre: error: "), err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], lines[0]


def _nothing_written(folder: Path) -> bool:
    return not folder.exists() or not any(folder.iterdir())


# (argv after the command's own name, needles in the error line)
RUN_CASES: list[tuple[list[str], tuple[str, ...]]] = [
    (["--limit", "0"], ("--limit",)),
    (["--limit", "-5"], ("--limit",)),
    (["--concurrency", "0"], ("--concurrency",)),
    (["--batch-size", "0"], ("--batch-size",)),
    (["--rpm", "-1"], ("--rpm",)),
    (["--tpm", "0"], ("--tpm",)),
    (["--max-retries", "-1"], ("--max-retries",)),
    (["--request-timeout", "0"], ("--request-timeout",)),
    (["--shots", "-1"], ("--shots",)),
    (["--seed", "-1"], ("--seed",)),
    (["--max-tokens", "0"], ("--max-tokens",)),
    (["--attack", "stresstest", "--top-k", "0"], ("--top-k",)),
    (["--attack", "stresstest", "--budget", "0"], ("--budget",)),
    (["--attack", "stresstest", "--budget", "lots"], ("--budget", "unlimited")),
    (["--attack", "stresstest", "--chunk-size", "0"], ("--chunk-size",)),
    (["--attack", "telekinesis"], ("telekinesis",)),
    (["--attack", ","], ("--attack",)),
    (["--attack", "stresstest", "--attack-option", "noequals"], ("KEY=VALUE",)),
    (["--attack", "stresstest", "--attack-option", "bogus=1"], ("bogus",)),
    (["--prompt-text", ""], ("--prompt-text",)),
    (["--prompt-text", "   "], ("--prompt-text",)),
    (["--prompt", "sst2-task-99"], ("sst2-task-99",)),
    (["--dataset", "imagenet"], ("imagenet",)),
    (["--dataset", "math", "--mode", "choices"], ("--mode choices cannot score math", "generate")),
    (["--model", "no-such-model"], ("no-such-model",)),
    (["--model-args", "dtype"], ("key=value",)),
    (["--model-args", "bogus=1"], ("bogus",)),
    (["--model-args", "batch_size=abc"], ("batch_size",)),
    (["--model-args", "batch_size=0"], ("batch_size",)),
    (["--model-args", "dtype=float99"], ("dtype",)),
    (["--model-args", "share_prefix=maybe"], ("share_prefix",)),
    (["--data-file", "/nonexistent/file.csv"], ("--data-file",)),
    (["--data-dir", "/nonexistent/dir"], ("--data-dir",)),
    (["--promptbench", "/nonexistent/promptbench"], ("--promptbench",)),
    ([*OPENAI, "--model-args", "base_url=notaurl"], ("base_url",)),
    ([*OPENAI, "--model-args", "base_url=ftp://example.invalid/v1"], ("base_url",)),
]


@pytest.mark.parametrize("argv, needles", RUN_CASES, ids=[" ".join(a) or "empty" for a, _ in RUN_CASES])
def test_pre_run_bad_input(capsys, tmp_path, argv, needles) -> None:  # noqa: ANN001
    out = tmp_path / "out"
    code = main(["run", *argv, "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(out), "--no-progress", "--limit", "2"]
                if "--limit" not in argv else
                ["run", *argv, "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(out), "--no-progress"])
    _assert_one_line(code, capsys.readouterr().err, needles)
    assert _nothing_written(out)


def test_device_cuda_without_a_gpu(capsys, tmp_path) -> None:  # noqa: ANN001
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    code = main(["run", "--model-args", "device=cuda", "--output-dir", str(tmp_path / "out"), "--limit", "2"])
    _assert_one_line(code, capsys.readouterr().err, ("device",))


def test_foreign_sqlite_file_is_refused_not_modified(capsys, tmp_path) -> None:  # noqa: ANN001
    foreign = tmp_path / "theirs.sqlite"
    with sqlite3.connect(foreign) as db:
        db.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        db.execute("INSERT INTO customers (name) VALUES ('ada')")
    before = foreign.read_bytes()
    with FakeOpenAIServer() as srv:
        code = main(["run", *OPENAI, "--model-args", f"base_url={srv.url}", "--cache", str(foreign),
                     "--output-dir", str(tmp_path / "out"), "--limit", "2", "--no-progress"])
    _assert_one_line(code, capsys.readouterr().err, ("--cache",))
    assert foreign.read_bytes() == before
    with sqlite3.connect(foreign) as db:
        assert [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")] == ["customers"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write a read-only file")
def test_read_only_cache_is_called_read_only(capsys, tmp_path) -> None:  # noqa: ANN001
    cache = tmp_path / "c.sqlite"
    with FakeOpenAIServer() as srv:
        assert main(["run", *OPENAI, "--model-args", f"base_url={srv.url}", "--cache", str(cache),
                     "--output-dir", str(tmp_path / "a"), "--limit", "2", "--no-progress", "--mode", "choices"]) == 0
        cache.chmod(0o444)
        code = main(["run", *OPENAI, "--model-args", f"base_url={srv.url}", "--cache", str(cache),
                     "--output-dir", str(tmp_path / "b"), "--limit", "2", "--no-progress"])
    _assert_one_line(code, capsys.readouterr().err, ("read-only",))


def test_read_only_cache_folder_is_called_read_only(capsys, tmp_path) -> None:  # noqa: ANN001
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    if os.access(folder, os.W_OK):
        pytest.skip("this user can write into a read-only folder (root)")
    code = main(["run", *OPENAI, "--model-args", "base_url=http://127.0.0.1:9/v1", "--cache", str(folder / "c.sqlite"),
                 "--output-dir", str(tmp_path / "out"), "--limit", "2"])
    _assert_one_line(code, capsys.readouterr().err, ("read-only",))


def test_limit_beyond_the_dataset_says_how_many_were_used(capsys, tmp_path) -> None:  # noqa: ANN001
    with FakeOpenAIServer() as srv:
        code = main(["run", *OPENAI, "--model-args", f"base_url={srv.url}", "--dataset", "rotten_tomatoes",
                     "--limit", "10000000", "--prompt", "sst2-task-01", "--mode", "choices",
                     "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 0
    assert "using all" in err and "--limit 10000000" in err


def _sweep(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "sweep.toml"
    path.write_text(textwrap.dedent(body))
    return path


SWEEP_CASES: list[tuple[str, tuple[str, ...]]] = [
    ('[sweep]\nname = "../../x"\n[grid]\nmodels=["smollm2-135m-instruct"]\ndatasets=["sst2"]\nattacks=["checklist"]\n', ("sweep.name",)),
    ('[sweep]\nname = "a/b"\n[grid]\nmodels=["smollm2-135m-instruct"]\ndatasets=["sst2"]\nattacks=["checklist"]\n', ("sweep.name",)),
    ('[sweep]\nbudget = 0\n[grid]\nmodels=["smollm2-135m-instruct"]\ndatasets=["sst2"]\nattacks=["checklist"]\n', ("budget",)),
    ('[sweep]\nlimit = "abc"\n[grid]\nmodels=["smollm2-135m-instruct"]\ndatasets=["sst2"]\nattacks=["checklist"]\n', ("limit",)),
    ('[sweep]\nmode = "telepathy"\n[grid]\nmodels=["smollm2-135m-instruct"]\ndatasets=["sst2"]\nattacks=["checklist"]\n', ("mode",)),
    ('[grid]\nmodels=["smollm2-135m-instruct"]\ndatasets=["sst2"]\nattacks=["checklist"]\nshots=[-1]\n', ("grid.shots",)),
    ('[grid]\nmodels=["smollm2-135m-instruct"]\ndatasets=["sst2"]\nattacks=["checklist"]\n[models."smollm2-135m-instruct"]\nconcurrency = 0\n', ("concurrency",)),
]


@pytest.mark.parametrize("body, needles", SWEEP_CASES, ids=[f"sweep-{i}" for i in range(len(SWEEP_CASES))])
def test_pre_sweep_bad_config(capsys, tmp_path, body, needles) -> None:  # noqa: ANN001
    code = main(["sweep", str(_sweep(tmp_path, body)), "--output-dir", str(tmp_path / "out")])
    _assert_one_line(code, capsys.readouterr().err, needles)
    assert _nothing_written(tmp_path / "out")


def test_sweep_config_that_does_not_exist(capsys, tmp_path) -> None:  # noqa: ANN001
    code = main(["sweep", str(tmp_path / "nope.toml")])
    _assert_one_line(code, capsys.readouterr().err, ("nope.toml",))


def test_report_of_a_folder_without_results(capsys, tmp_path) -> None:  # noqa: ANN001
    (tmp_path / "empty").mkdir()
    code = main(["report", str(tmp_path / "empty"), "--output-dir", str(tmp_path / "rep")])
    _assert_one_line(code, capsys.readouterr().err, ())
    assert _nothing_written(tmp_path / "rep")


def test_exhausted_retries_is_one_line(capsys, tmp_path) -> None:  # noqa: ANN001
    with FakeOpenAIServer() as srv:
        srv.script(*["500"] * 20)
        code = main(["run", *OPENAI, "--model-args", f"base_url={srv.url}", "--prompt", "sst2-task-01", "--limit", "1",
                     "--mode", "choices", "--max-retries", "1", "--cache", str(tmp_path / "c.sqlite"),
                     "--output-dir", str(tmp_path / "out"), "--no-progress"])
    _assert_one_line(code, capsys.readouterr().err, ("--max-retries",))
    assert _nothing_written(tmp_path / "out")


def test_an_input_longer_than_any_context_fails_before_scoring(capsys, tmp_path) -> None:  # noqa: ANN001
    data = tmp_path / "reviews.tsv"
    data.write_text("sentence\tlabel\nfine film .\t1\n" + "very " * 400_000 + "long .\t0\n")
    with FakeOpenAIServer() as srv:
        code = main(["run", *OPENAI, "--model-args", f"base_url={srv.url}", "--data-file", str(data),
                     "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(tmp_path / "out"), "--no-progress"])
        assert _posts_of(srv) == 0
    _assert_one_line(code, capsys.readouterr().err, ("characters", "data file"))
    assert _nothing_written(tmp_path / "out")


def _posts_of(srv: FakeOpenAIServer) -> int:
    return srv.count("/v1/chat/completions") + srv.count("/v1/completions")
