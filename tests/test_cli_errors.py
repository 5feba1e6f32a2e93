"""Bad input: one clear line on stderr, exit code 2, nothing half-written."""

from __future__ import annotations

from pathlib import Path

import pytest

from promptrobust.cli.main import main


def run_cli(capsys, *argv: str) -> tuple[int, str]:  # noqa: ANN001
    code = main(list(argv))
    err = capsys.readouterr().err.strip()
    return code, err


def assert_one_clear_line(code: int, err: str, *needles: str) -> None:
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("pre: error: ")
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0]


def nothing_written(folder: Path) -> bool:
    return not folder.exists() or not any(folder.iterdir())


def test_unknown_model(capsys, tmp_path) -> None:  # noqa: ANN001
    code, err = run_cli(capsys, "run", "--model", "no-such-model", "--output-dir", str(tmp_path / "out"))
    assert_one_clear_line(code, err, "no-such-model", "pre list models")
    assert nothing_written(tmp_path / "out")


def test_unknown_dataset(capsys, tmp_path) -> None:  # noqa: ANN001
    code, err = run_cli(capsys, "run", "--dataset", "imagenet", "--output-dir", str(tmp_path / "out"))
    assert_one_clear_line(code, err, "imagenet")
    assert nothing_written(tmp_path / "out")


def test_unknown_prompt_id(capsys, tmp_path) -> None:  # noqa: ANN001
    code, err = run_cli(capsys, "run", "--prompt", "sst2-task-99", "--output-dir", str(tmp_path / "out"))
    assert_one_clear_line(code, err, "sst2-task-99")


def test_unwritable_output_folder(capsys, tmp_path) -> None:  # noqa: ANN001
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code, err = run_cli(
        capsys, "run", "--model", "openai:m", "--model-args", "base_url=http://127.0.0.1:9/v1",
        "--output-dir", str(blocker / "runs"), "--limit", "2", "--cache", str(tmp_path / "c.sqlite"),
    )
    assert_one_clear_line(code, err, "--output-dir")


def test_corrupt_cache_file(capsys, tmp_path) -> None:  # noqa: ANN001
    bad = tmp_path / "scores.sqlite"
    bad.write_bytes(b"garbage" * 500)
    out = tmp_path / "out"
    code, err = run_cli(
        capsys, "run", "--model", "openai:m", "--model-args", "base_url=http://127.0.0.1:9/v1",
        "--cache", str(bad), "--output-dir", str(out), "--limit", "2",
    )
    assert_one_clear_line(code, err, "not a usable SQLite database", "--cache")
    assert nothing_written(out)  # the partial run folder was removed


def test_unreachable_endpoint(capsys, tmp_path) -> None:  # noqa: ANN001
    out = tmp_path / "out"
    code, err = run_cli(
        capsys, "run", "--model", "openai:m", "--model-args", "base_url=http://127.0.0.1:9/v1",
        "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(out), "--limit", "2", "--no-progress",
    )
    assert_one_clear_line(code, err, "127.0.0.1:9")
    assert nothing_written(out)


def test_missing_api_key(capsys, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    out = tmp_path / "out"
    code, err = run_cli(
        capsys, "run", "--model", "gpt-4", "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(out),
        "--limit", "2", "--no-progress",
    )
    assert_one_clear_line(code, err, "OPENAI_API_KEY")
    assert nothing_written(out)


def test_api_key_never_printed(capsys, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    secret = "sk-test-SECRET-0123456789"
    monkeypatch.setenv("MY_KEY", secret)
    code, err = run_cli(
        capsys, "run", "--model", "openai:m", "--model-args", "base_url=http://127.0.0.1:9/v1,api_key_env=MY_KEY",
        "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(tmp_path / "out"), "--limit", "2",
    )
    assert code == 2 and secret not in err


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["run", "--limit", "0"], "--limit"),
        (["run", "--concurrency", "0"], "--concurrency"),
        (["run", "--model-args", "dtype"], "key=value"),
        (["run", "--model", "smollm2-135m-instruct", "--model-args", "bogus=1"], "bogus"),
        (["run", "--data-file", "/nonexistent/file.csv"], "--data-file"),
        (["list", "prompts"], "--dataset"),
    ],
)
def test_bad_flags(capsys, argv, needle) -> None:  # noqa: ANN001
    code, err = run_cli(capsys, *argv)
    assert_one_clear_line(code, err, needle)


def test_argparse_errors_exit_2(capsys) -> None:  # noqa: ANN001
    assert main(["run", "--mode", "telepathy"]) == 2
    assert main(["frobnicate"]) == 2
