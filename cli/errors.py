"""Bad input as one line naming the fix and exit code 2; signals that end a run as Ctrl-C does.

Every library error a user can fix is a ``PromptRobustError``: the CLI maps that base, and turns
the ``setting`` an error (or a note) names into its flag. SIGTERM (``kill``, ``timeout``, a batch
scheduler's preemption) becomes SIGINT, which asyncio answers by cancelling the work; the run
folder's context manager discards its ``.partial`` folder and ``main`` prints one line. Every
answer that finished is in the score cache, so a rerun sends only what is missing.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from promptrobust.engine.errors import PromptRobustError, SettingsError
from promptrobust.engine.safe_io import redact_text

EXIT_USAGE = 2
#: Exit codes a shell reports for a process ended by SIGINT / SIGTERM.
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143

#: Settings whose flag is not the setting's name with dashes.
FLAG_OF = {"max_new_tokens": "max-tokens", "attack_options": "attack-option", "attacks": "attack", "prompt": "prompt",
           "input_columns": "input-column"}


class UserError(PromptRobustError):
    """A problem with the command line itself that the user can fix; one line, exit code 2."""


def user_error_types() -> tuple[type[BaseException], ...]:
    """Every exception type that means 'bad input or environment', not a bug."""
    # Until the serving core's errors subclass PromptRobustError (being moved under it), they
    # are named here too; once they do, these two lines are redundant and can go.
    from promptrobust.engine.serving.backends.base import BackendError
    from promptrobust.engine.serving.cache import CacheError

    return PromptRobustError, FileNotFoundError, PermissionError, BackendError, CacheError


def flag_for(setting: str) -> str:
    """The flag that sets ``setting``: its name with dashes, unless ``FLAG_OF`` says otherwise."""
    return "--" + FLAG_OF.get(setting, setting.replace("_", "-"))


def with_flag(text: str, setting: str | None) -> str:
    """A library message with its ``setting`` turned into the flag: in place when the message
    starts with the setting's name ("limit must be ..." -> "--limit must be ..."), else appended."""
    if not setting:
        return text
    if text.startswith(setting + " "):
        return flag_for(setting) + text[len(setting):]
    return f"{text} ({flag_for(setting)})"


def one_line(exc: BaseException) -> str:
    """The error as one line, without credentials (URLs with user-info or keys, auth headers). A
    settings error names its field first; any library error may name the ``setting`` to change."""
    text = " ".join(redact_text(str(exc).strip() or type(exc).__name__).split())
    setting = getattr(exc, "setting", None)
    if not setting and isinstance(exc, SettingsError):
        setting = _leading_setting(text)
    return with_flag(text, setting if isinstance(setting, str) else None)


def _leading_setting(text: str) -> str | None:
    """The settings field a settings check names first ("limit must be ...")."""
    from dataclasses import fields

    from promptrobust.engine.measuring.settings import AttackSettings, EvaluationSettings
    from promptrobust.engine.serving.scheduler_settings import SchedulerSettings

    first = text.split(" ", 1)[0]
    known = {f.name for kind in (EvaluationSettings, AttackSettings, SchedulerSettings) for f in fields(kind)}
    return first if first in known | {"prompt_text", "prompt_type"} else None


def fail(message: str) -> int:
    print(f"pre: error: {message}", file=sys.stderr)
    return EXIT_USAGE


class SignalState:
    def __init__(self) -> None:
        self.terminated = False

    @property
    def exit_code(self) -> int:
        return EXIT_TERMINATED if self.terminated else EXIT_INTERRUPTED

    @property
    def verb(self) -> str:
        return "terminated" if self.terminated else "interrupted"


@contextmanager
def terminate_as_interrupt() -> Iterator[SignalState]:
    """Within the block, SIGTERM behaves like Ctrl-C (and says it was SIGTERM)."""
    state = SignalState()

    def on_term(signum: int, frame: FrameType | None) -> None:
        state.terminated = True
        signal.raise_signal(signal.SIGINT)

    try:
        previous = signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread (e.g. called from a notebook worker): leave signals alone
        yield state
        return
    try:
        yield state
    finally:
        signal.signal(signal.SIGTERM, previous)


def quiet_asyncio_teardown() -> None:
    """Drop asyncio's log lines about futures cancelled by an interrupt (one line is enough)."""
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
