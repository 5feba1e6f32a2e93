"""One base class of library errors with a hint (issue 19): the library names the
setting to change, never a command-line flag; the CLI turns it into the flag."""

from __future__ import annotations

from pathlib import Path

import pytest

from promptrobust.cli.errors import one_line, user_error_types
from promptrobust.cli.main import main
from promptrobust.engine.analysis.report import ReportInputError
from promptrobust.engine.analysis.scoring import AnalysisInputError
from promptrobust.engine.errors import PromptRobustError
from promptrobust.engine.run_folder import RunFolder, RunFolderError
from promptrobust.engine.settings import EvaluationSettings, SettingsError
from promptrobust.engine.workbench import InputTooLongError
from tests.fixtures.analysis.fake_model import REVIEWS, patch_backend, rt_samples


@pytest.mark.parametrize("cls", [SettingsError, AnalysisInputError, ReportInputError, RunFolderError, InputTooLongError])
def test_library_errors_share_the_base_class(cls: type) -> None:
    assert issubclass(cls, PromptRobustError) and issubclass(cls, ValueError)  # ValueError: callers of 0.1 still catch them
    assert PromptRobustError in user_error_types()


def test_the_library_names_the_setting_and_the_cli_its_flag(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(RunFolderError) as caught:
        RunFolder(blocker / "runs", ["x"])
    assert caught.value.setting == "output_dir" and "--" not in str(caught.value)
    assert one_line(caught.value).endswith("(--output-dir)")
    assert one_line(PromptRobustError("too long", setting="max_new_tokens")).endswith("(--max-tokens)")
    with pytest.raises(SettingsError):
        EvaluationSettings(limit=0)


def test_pre_eval_prints_the_flag_of_the_setting_to_change(tmp_path: Path, monkeypatch, capsys) -> None:
    patch_backend(monkeypatch, rt_samples(8, seed=0))
    prompts = tmp_path / "p.txt"
    prompts.write_text("Is this review positive or negative?\n")
    code = main(["eval", "--prompts", str(prompts), "--prompt-type", "role", "--model", "hf:fake", "--data-file",
                 str(REVIEWS), "--limit", "8", "--no-cache", "--output-dir", str(tmp_path / "runs"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "no prompt of type 'role'" in err[0] and err[0].endswith("(--prompt-type)")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
