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


#: Exception classes of the library that are deliberately NOT ``PromptRobustError``s, each with why.
NOT_USER_ERRORS = {
    # a full disk or a read-only folder: its own exit code (atomic_io.EXIT_ENVIRONMENT), not 2
    "promptrobust.engine.safe_io.atomic_io.OutputWriteError",
    "promptrobust.engine.safe_io.folder_lock.LockHeld",
    # internal signals, always turned into a user error before they leave their module
    "promptrobust.engine.serving.backends.openai.scoring.ScoringAnswerError",
    "promptrobust.engine.serving.backends.openai.scoring.ImpossibleLogprob",
    "promptrobust.engine.serving.backends.openai.scoring.ImpossibleTokens",
    "promptrobust.engine.serving.backends.openai.token_ids.TooLong",
    "promptrobust.engine.runs.sweep.runner._AlreadySaid",
}


def _exception_classes() -> list[type]:
    """Every exception class defined in engine/, tasks/, attacks/ and promptrobust/extras.py."""
    import ast
    import importlib

    from tests.import_rules import module_name

    root = Path(__file__).resolve().parents[1]
    paths = [p for top in ("engine", "tasks", "attacks") for p in sorted((root / top).rglob("*.py"))]
    paths.append(root / "promptrobust" / "extras.py")
    found: list[type] = []
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
        if not names:
            continue
        module = importlib.import_module(module_name(root, path))
        found += [c for n in names if isinstance(c := getattr(module, n), type) and issubclass(c, BaseException)
                  and c.__module__ == module.__name__]
    return found


def test_every_library_error_a_user_can_fix_is_a_prompt_robust_error() -> None:
    """Issue 29 item 6: one base for every library error (the CLI maps the base); the exceptions
    to the rule are listed above with their reason, and none of them is left over."""
    classes = _exception_classes()
    names = {f"{c.__module__}.{c.__qualname__}" for c in classes}
    assert len(classes) > 30 and NOT_USER_ERRORS <= names  # the walk found them all, and no stale entry
    stray = sorted(n for c in classes if not issubclass(c, PromptRobustError)
                   and (n := f"{c.__module__}.{c.__qualname__}") not in NOT_USER_ERRORS)
    assert stray == []


def test_serving_and_sweep_errors_keep_their_old_bases_and_there_is_one_prompt_file_error() -> None:
    from promptrobust.engine.analysis import prompt_eval
    from promptrobust.engine.measuring.statistics import StatisticsError
    from promptrobust.engine.runs.sweep.config import SweepConfigError
    from promptrobust.engine.serving.prices import PriceTableError
    from promptrobust.engine.runs.sweep.sharding import ShardError
    from promptrobust.engine.serving.backends.base import BackendError, TransientBackendError
    from promptrobust.engine.serving.cache import CacheError
    from promptrobust.extras import MissingExtraError
    from promptrobust.tasks.errors import PromptFileError

    for cls in (StatisticsError, SweepConfigError, PriceTableError, ShardError):
        assert issubclass(cls, PromptRobustError) and issubclass(cls, ValueError)
    assert issubclass(MissingExtraError, ImportError)  # callers of 0.2 catch ImportError
    for cls in (BackendError, TransientBackendError, CacheError, MissingExtraError):
        assert issubclass(cls, PromptRobustError)
    assert not issubclass(TransientBackendError, BackendError)  # retried; a BackendError is not
    assert prompt_eval.PromptFileError is PromptFileError


def test_a_cache_error_reaches_the_user_as_one_line_and_exit_2(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    cache = tmp_path / "c.sqlite"
    cache.write_bytes(b"this is not a SQLite database, it is text" * 50)
    code = main(["run", "--model", "openai:m", "--model-args", "base_url=http://127.0.0.1:9/v1", "--cache", str(cache),
                 "--limit", "4", "--output-dir", str(tmp_path / "runs"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "c.sqlite" in err[0]
