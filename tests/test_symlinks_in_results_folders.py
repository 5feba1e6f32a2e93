"""Run and sweep folders are never written through a symbolic link (issue 32 item 7): a link
planted in a results folder could point anywhere, and a resumed sweep appends in place."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from promptrobust.engine.runs.run_folder import RunFolderError, SweepFolder, repair_torn_tail
from promptrobust.engine.runs.sweep.sharding import ShardError, merge_runs
from promptrobust.engine.safe_io import atomic_io
from promptrobust.engine.safe_io.atomic_io import OutputWriteError
from promptrobust.engine.safe_io.folder_lock import FolderLock
from tests.sweep_helpers import records, small_config

OUTSIDE = b'{"job_id": "theirs", "prompt_id": "p"}\n'


def _outside(tmp_path: Path, data: bytes = OUTSIDE) -> Path:
    target = tmp_path / "elsewhere" / "precious.jsonl"
    target.parent.mkdir(exist_ok=True)
    target.write_bytes(data)
    return target


@pytest.mark.parametrize("name", SweepFolder.FILES)
def test_a_sweep_refuses_a_folder_whose_files_are_links(tmp_path: Path, name: str) -> None:
    target = _outside(tmp_path)
    cfg = small_config(tmp_path / "runs", models=("openai:fake-a",))
    cfg.folder.mkdir(parents=True)
    (cfg.folder / name).symlink_to(target)
    with pytest.raises(RunFolderError, match=rf"{name} is a symbolic link: a sweep writes its files in place"):
        SweepFolder(cfg.folder)
    assert target.read_bytes() == OUTSIDE


def test_a_symlinked_results_file_in_a_sweep_folder_is_not_appended_to(tmp_path: Path) -> None:
    """Issue 32: the records of a resumed sweep were appended to the link's target."""
    from tests.test_sharding import _run

    target = _outside(tmp_path)
    cfg = small_config(tmp_path / "runs", cache=tmp_path / "c.sqlite", models=("openai:fake-a",))
    cfg.folder.mkdir(parents=True)
    (cfg.folder / "results.jsonl").symlink_to(target)
    with pytest.raises(RunFolderError, match="symbolic link"):
        _run(cfg)
    assert target.read_bytes() == OUTSIDE and (cfg.folder / "results.jsonl").is_symlink()


def test_the_cli_says_so_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from promptrobust.cli.main import main

    target = _outside(tmp_path)
    folder = tmp_path / "runs" / "linked"
    folder.mkdir(parents=True)
    (folder / "results.jsonl").symlink_to(target)
    config = tmp_path / "linked.toml"
    config.write_text(f'[sweep]\nname = "linked"\noutput_dir = "{tmp_path / "runs"}"\ncache = "{tmp_path / "c.sqlite"}"\n'
                      'limit = 2\n[grid]\nmodels = ["openai:fake"]\ndatasets = ["rotten_tomatoes"]\nattacks = ["checklist"]\n'
                      '[models."openai:fake"]\nmodel_args = "base_url=http://127.0.0.1:9/v1"\n')
    assert main(["sweep", str(config), "--quiet"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("pre: error")]
    assert len(err) == 1 and "symbolic link" in err[0]
    assert target.read_bytes() == OUTSIDE


def test_appends_and_repairs_never_follow_a_link(tmp_path: Path) -> None:
    target = _outside(tmp_path, b'{"a": 1}\n{"torn')
    link = tmp_path / "results.jsonl"
    link.symlink_to(target)
    with pytest.raises(OutputWriteError, match="is a symbolic link, and pre never writes through one") as err:
        atomic_io.append_bytes(link, b'{"b": 2}\n')
    assert err.value.errno == errno.ELOOP
    with pytest.raises(OutputWriteError, match="symbolic link"):
        repair_torn_tail(link)  # the torn tail is not cut in the link's target
    assert target.read_bytes() == b'{"a": 1}\n{"torn'


def test_a_lock_file_that_is_a_link_is_not_written_through(tmp_path: Path) -> None:
    target = _outside(tmp_path)
    lock_path = tmp_path / ".out.lock"
    lock_path.symlink_to(target)
    with pytest.raises(OutputWriteError, match="symbolic link"):
        FolderLock(lock_path, "folder out").try_acquire()
    assert target.read_bytes() == OUTSIDE


def test_a_merge_takes_nothing_through_a_link_and_keeps_other_links_as_links(tmp_path: Path) -> None:
    from tests.test_sharding import _shard_with_limit

    shard = _shard_with_limit(tmp_path, "a", 20, "j1")
    out = tmp_path / "out"
    out.mkdir()
    target = _outside(tmp_path)
    (out / "results.jsonl").symlink_to(target)
    with pytest.raises(ShardError, match="results.jsonl is a symbolic link"):
        merge_runs(out, [shard])
    (out / "results.jsonl").unlink()
    (out / "notes.jsonl").symlink_to(target)  # something else the user keeps there
    assert merge_runs(out, [shard]).added == 1
    assert (out / "notes.jsonl").is_symlink() and os.readlink(out / "notes.jsonl") == str(target)
    assert target.read_bytes() == OUTSIDE and [r["job_id"] for r in records(out)] == ["j1"]


@pytest.mark.parametrize("flag", ["--output-dir", "--output_path"])
def test_a_dangling_link_as_the_output_folder_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str) -> None:
    """Issue 41 (weak point): a link to nothing as the output folder said "(File exists)"; it names
    the link and its missing target, and nothing is asked of the model."""
    from promptrobust.cli.main import main
    from promptrobust.testing.fake_openai import FakeOpenAIServer

    link = tmp_path / "runs"
    link.symlink_to(tmp_path / "nowhere")
    with FakeOpenAIServer() as server:
        code = main(["run", "--model", "openai:fake-model", "--model-args", f"base_url={server.url}", "--limit", "2",
                     "--mode", "choices", flag, str(link), "--no-cache", "--no-progress"])
        sent = server.count("/v1/chat/completions") + server.count("/v1/completions")
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "symbolic link" in err and "nowhere" in err and "does not exist" in err and "File exists" not in err, err
    assert sent == 0 and not (tmp_path / "nowhere").exists()
