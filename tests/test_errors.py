"""One base class of library errors with a hint (issue 19): the library names the
setting to change, never a command-line flag; the CLI turns it into the flag."""

from __future__ import annotations

from pathlib import Path

import pytest

from promptrobust.cli.errors import one_line
from promptrobust.cli.main import main
from promptrobust.engine.errors import PromptRobustError
from promptrobust.engine.runs.run_folder import RunFolder, RunFolderError
from promptrobust.engine.measuring.settings import EvaluationSettings
from promptrobust.engine.errors import SettingsError
from tests.fixtures.analysis.fake_model import REVIEWS, patch_backend, rt_samples


def test_the_cli_maps_the_base_class_whatever_the_library_error(tmp_path: Path, capsys, monkeypatch) -> None:  # noqa: ANN001
    """A library error of a class the CLI has never heard of is still one line and exit 2, its
    setting named by its flag: the CLI maps ``PromptRobustError``, not a list of subclasses."""

    class BrandNewError(PromptRobustError):
        pass

    def refuse(args):  # noqa: ANN001, ANN202
        raise BrandNewError("the seed is cursed; pick another one", setting="seed")

    monkeypatch.setattr("promptrobust.cli.run.plan_from_args", refuse)
    code = main(["run", "--output-dir", str(tmp_path / "runs"), "--no-progress"])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines() == ["pre: error: the seed is cursed; pick another one (--seed)"]
    assert not (tmp_path / "runs").exists()


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


def test_library_messages_name_settings_and_the_cli_adds_each_flag(tmp_path: Path) -> None:
    """The setting names of tasks/, attacks/, the model registry and the Ray options, each
    turned into the flag the CLI really has (attack_options -> --attack-option via FLAG_OF)."""
    from promptrobust.attacks.embeddings import load_paragramcf
    from promptrobust.attacks.errors import AttackBudgetError
    from promptrobust.attacks.registry import get_attack
    from promptrobust.cli.main import build_parser
    from promptrobust.engine.runs.sweep.ray_executor import RayOptions, RayExecutorError
    from promptrobust.engine.serving.registry import ModelArgsError, parse_model_args
    from promptrobust.tasks import few_shot_examples, get_task
    from promptrobust.tasks.datafiles import read_rows, require_dir
    from promptrobust.tasks.errors import TaskError

    caught: list[BaseException] = []
    for call in (
        lambda: parse_model_args("dtype"),
        lambda: get_attack("checklist", nosuch=1),
        lambda: few_shot_examples(get_task("sst2"), seed=0, k=4),
        lambda: require_dir(tmp_path / "missing"),
        lambda: read_rows(tmp_path / "missing.jsonl"),
        lambda: RayOptions(unit_timeout=-1),
    ):
        with pytest.raises((TaskError, ModelArgsError, RayExecutorError, PromptRobustError)) as info:
            call()
        caught.append(info.value)
    caught.append(AttackBudgetError("the query budget allows no prompt of the set; raise the budget"))
    with pytest.raises(PromptRobustError) as info:
        load_paragramcf(str(tmp_path / "no-vectors"))  # the attack option embedding=PATH names a missing folder
    caught.append(info.value)
    flags = [one_line(e).rsplit(" (", 1)[1].rstrip(")") for e in caught]
    assert flags == ["--model-args", "--attack-option", "--shots", "--data-dir", "--data-file", "--unit-timeout", "--budget", "--attack-option"]
    assert not any("--" in str(e) for e in caught)  # the library itself names no flag
    parser_flags = {o for a in build_parser()._subparsers._group_actions[0].choices["run"]._actions for o in a.option_strings}  # noqa: SLF001
    assert {f for f in flags if f != "--unit-timeout"} <= parser_flags  # each flag exists on `pre run` (--unit-timeout: `pre sweep`)


@pytest.mark.parametrize(("args", "body", "flag"), [
    (["--model", "smollm2-135m-instruct", "--model-args", "bogus=1"], "model argument(s) bogus not understood by the hf backend", "(--model-args)"),
    (["--model", "openai:m", "--model-args", "base_url=http://127.0.0.1:9/v1,base_model=maybe"], "use base_model=true or base_model=false", "(--model-args)"),
    (["--model", "openai:m", "--model-args", "base_url=http://127.0.0.1:9/v1", "--dataset", "sst2", "--data-dir", "{tmp}"],
     "no sst2 evaluation file", "(--data-file)"),
])
def test_pre_run_appends_the_flag_to_a_library_error(tmp_path: Path, capsys, args: list[str], body: str, flag: str) -> None:  # noqa: ANN001
    code = main(["run", *[a.replace("{tmp}", str(tmp_path)) for a in args], "--no-cache", "--limit", "4",
                 "--output-dir", str(tmp_path / "runs"), "--no-progress"])
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and body in line and line.endswith(flag)
    assert line.count("--") == 1  # the flag once, appended by the CLI; the message itself names none
