"""Turning bad input into one clear line and exit code 2."""

from __future__ import annotations

import sys

EXIT_USAGE = 2


class UserError(Exception):
    """A problem the user can fix; printed as one line, exit code 2."""


def user_error_types() -> tuple[type[BaseException], ...]:
    """Every exception type that means 'bad input or environment', not a bug.

    Imported when needed so that `pre --help` does not pay for them.
    """
    from promptrobust.attacks.errors import AttackError
    from promptrobust.engine.analysis.report.load import ReportInputError
    from promptrobust.engine.analysis.scoring import AnalysisInputError
    from promptrobust.engine.measuring.statistics import StatisticsError
    from promptrobust.engine.serving.backends.base import BackendError
    from promptrobust.engine.errors import PromptRobustError
    from promptrobust.engine.serving.cache import CacheError
    from promptrobust.engine.serving.registry import ModelArgsError, UnknownModelError
    from promptrobust.engine.runs.run_folder import RunFolderError
    from promptrobust.engine.measuring.workbench import InputTooLongError
    from promptrobust.engine.errors import SettingsError
    from promptrobust.engine.runs.sweep.config import SweepConfigError
    from promptrobust.tasks.errors import TaskError  # unknown task/prompt, bad data or prompt files

    return (
        UserError, FileNotFoundError, PermissionError, BackendError, CacheError, ReportInputError, AnalysisInputError, StatisticsError, ModelArgsError,
        UnknownModelError, SweepConfigError, TaskError, AttackError, SettingsError, InputTooLongError, RunFolderError,
        PromptRobustError,
    )


#: Settings whose flag is not the setting's name with dashes.
FLAG_OF = {"max_new_tokens": "max-tokens", "attack_options": "attack-option"}


def one_line(exc: BaseException) -> str:
    """The error as one line, without credentials (URLs with user-info or keys, auth headers); a
    library error naming the ``setting`` to change (``PromptRobustError``) gets its flag appended."""
    from promptrobust.engine.safe_io.redact import redact_text

    text = " ".join(redact_text(str(exc).strip() or type(exc).__name__).split())
    setting = getattr(exc, "setting", None)
    if isinstance(setting, str) and setting:
        text += f" ({flag_for(setting)})"
    return text


def flag_for(setting: str) -> str:
    """The flag that sets ``setting``: its name with dashes, unless ``FLAG_OF`` says otherwise."""
    return "--" + FLAG_OF.get(setting, setting.replace("_", "-"))


def fail(message: str) -> int:
    print(f"pre: error: {message}", file=sys.stderr)
    return EXIT_USAGE
