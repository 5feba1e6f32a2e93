"""Bad input as one line naming the fix and exit code 2; signals that end a run as Ctrl-C does.

Every library error a user can fix is a ``PromptRobustError``: the CLI maps that base, and turns
the ``setting`` an error (or a note) names into its flag.

SIGTERM (``kill``, ``timeout``, a batch scheduler's preemption) and SIGHUP (a closed terminal or
SSH session) stop a command as Ctrl-C does, whatever SIGINT's disposition: a shell script's
``cmd &`` and ``nohup`` start it with SIGINT ignored, so the signal is never routed through SIGINT.
The stop calls SIGINT's own handler when one is installed (asyncio's, which cancels the work
and then raises ``KeyboardInterrupt``; or Python's default) and raises ``KeyboardInterrupt``
itself when SIGINT is ignored. Either way the run folder's context manager discards its
``.partial`` folder, ``main`` prints one line and exits 143 (TERM) or 129 (HUP), as a shell
reports a process those signals end. Every answer that finished is in the score cache, so a
rerun sends only what is missing. A SIGHUP that was ignored when pre started (``nohup``) stays
ignored: that is what the user asked for.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from promptrobust.engine.errors import PromptRobustError, SettingsError
from promptrobust.engine.safe_io import redact_text

EXIT_USAGE = 2
#: Exit codes a shell reports for a process ended by SIGINT / SIGTERM / SIGHUP (128 + the signal's number).
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143
EXIT_HANGUP = 129

#: Settings whose flag is not the setting's name with dashes.
FLAG_OF = {"max_new_tokens": "max-tokens", "attack_options": "attack-option", "attacks": "attack", "prompt": "prompt",
           "input_columns": "input-column", "stop": "gen_kwargs"}


class UserError(PromptRobustError):
    """A problem with the command line itself that the user can fix; one line, exit code 2."""


def user_error_types() -> tuple[type[BaseException], ...]:
    """Every exception type that means 'bad input or environment', not a bug (the serving
    core's backend and cache errors included: they subclass ``PromptRobustError``)."""
    return PromptRobustError, FileNotFoundError, PermissionError


def flag_for(setting: str) -> str:
    """The flag that sets ``setting``: its name with dashes, unless ``FLAG_OF`` says otherwise."""
    return "--" + FLAG_OF.get(setting, setting.replace("_", "-"))


def with_flag(text: str, setting: str | None) -> str:
    """A library message with its ``setting`` turned into the flag: in place when the message
    starts with the setting's name ("limit must be ..." -> "--limit must be ..."), else appended
    (not when the message names a flag already: the column form's messages name theirs)."""
    if not setting or text.startswith("--") or flag_for(setting) in text:
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

    from promptrobust import AttackSettings, EvaluationSettings, SchedulerSettings

    first = text.split(" ", 1)[0]
    known = {f.name for kind in (EvaluationSettings, AttackSettings, SchedulerSettings) for f in fields(kind)}
    return first if first in known | {"prompt_text", "prompt_type"} else None


def fail(message: str) -> int:
    print(f"pre: error: {message}", file=sys.stderr)
    return EXIT_USAGE


#: Signals that stop a command as Ctrl-C does: (exit code a shell reports for them, what pre says).
STOP_SIGNALS: dict[signal.Signals, tuple[int, str]] = {
    signal.SIGTERM: (EXIT_TERMINATED, "terminated"),
    signal.SIGHUP: (EXIT_HANGUP, "hung up (SIGHUP)"),
}


class SignalState:
    """Which stop signal (if any) ended the command; None: Ctrl-C (SIGINT) or nothing."""

    def __init__(self) -> None:
        self.signal: signal.Signals | None = None

    @property
    def terminated(self) -> bool:
        return self.signal is not None

    @property
    def exit_code(self) -> int:
        return STOP_SIGNALS[self.signal][0] if self.signal is not None else EXIT_INTERRUPTED

    @property
    def verb(self) -> str:
        return STOP_SIGNALS[self.signal][1] if self.signal is not None else "interrupted"


@contextmanager
def terminate_as_interrupt() -> Iterator[SignalState]:
    """Within the block, SIGTERM and SIGHUP behave like Ctrl-C in every disposition of SIGINT
    (and say which signal it was); see the module docstring."""
    state = SignalState()

    def on_stop(signum: int, frame: FrameType | None) -> None:
        if state.signal is None:
            state.signal = signal.Signals(signum)
        interrupt = signal.getsignal(signal.SIGINT)
        if callable(interrupt):  # asyncio's handler (cancel the work first) or Python's default
            interrupt(signal.SIGINT, frame)
            return
        # SIGINT ignored: stop all the same. Inside an event loop the interrupt is raised by a
        # loop callback, so no coroutine that guards its work with `except BaseException` can
        # swallow it; asyncio.run then cancels every task (the run folder is discarded).
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise KeyboardInterrupt from None
        loop.call_soon_threadsafe(_interrupt)

    previous: dict[signal.Signals, Any] = {}
    try:
        for signum in STOP_SIGNALS:
            if signum == signal.SIGHUP and signal.getsignal(signum) == signal.SIG_IGN:
                continue  # nohup: the user asked for hang-ups to be ignored
            previous[signum] = signal.signal(signum, on_stop)
    except ValueError:  # not the main thread (e.g. called from a notebook worker): leave signals alone
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        yield state
        return
    try:
        yield state
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _interrupt() -> None:
    raise KeyboardInterrupt


def quiet_asyncio_teardown() -> None:
    """Drop asyncio's log lines about futures cancelled by an interrupt (one line is enough)."""
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
