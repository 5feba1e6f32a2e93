"""Turning bad input into one clear line and exit code 2."""

from __future__ import annotations

import sys

EXIT_USAGE = 2


class UserError(Exception):
    """A problem the user can fix; printed as one line, exit code 2."""


def user_error_types() -> tuple[type[BaseException], ...]:
    """Every exception type that means 'bad input or environment', not a bug.

    Imported lazily so `pre --help` stays fast and optional modules may be absent.
    """
    types: list[type[BaseException]] = [UserError, FileNotFoundError, PermissionError]
    from engine.backends.base import BackendUnavailable
    from engine.cache import CacheError
    from engine.registry import ModelArgsError, UnknownModelError

    types += [BackendUnavailable, CacheError, ModelArgsError, UnknownModelError]
    for module, names in (
        ("tasks.errors", ("TaskError", "TaskDataError", "UnknownTaskError", "UnknownPromptError", "PromptFileError")),
        ("tasks.registry", ("UnknownTaskError",)),
        ("tasks.prompt_sets", ("UnknownPromptError", "PromptFileError")),
        ("attacks.registry", ("UnknownAttackError",)),
        ("attacks.errors", ("AttackError",)),
        ("engine.sweep", ("SweepConfigError",)),
    ):
        try:
            mod = __import__(module, fromlist=list(names))
        except ImportError:
            continue
        for name in names:
            exc = getattr(mod, name, None)
            if isinstance(exc, type) and issubclass(exc, BaseException):
                types.append(exc)
    return tuple(dict.fromkeys(types))


def one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())


def fail(message: str) -> int:
    print(f"pre: error: {message}", file=sys.stderr)
    return EXIT_USAGE
