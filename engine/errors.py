"""The one base class of errors a user can fix.

A ``PromptRobustError`` says what is wrong and what to do, in one line, and
may name the ``setting`` to change (an ``EvaluationSettings`` field, say
``limit``). The library never names command-line flags: the CLI turns the
setting into its flag (``limit`` -> ``--limit``) when it prints the error and
exits with code 2; a Python caller reads ``exc.setting``.
"""

from __future__ import annotations

import math

__all__ = ["PromptRobustError", "SettingsError", "require", "require_positive_or_none", "require_whole"]


class PromptRobustError(Exception):
    """Bad input or environment (not a bug): a one-line message with the fix."""

    setting: str | None = None
    """The setting to change, when one setting is the fix (the CLI names its flag)."""

    def __init__(self, message: str = "", *, setting: str | None = None) -> None:
        super().__init__(message)
        if setting is not None:
            self.setting = setting


class SettingsError(PromptRobustError, ValueError):
    """A setting with a bad value; the message names the field and what to use instead."""


def require(cond: bool, message: str) -> None:
    if not cond:
        raise SettingsError(message)


def require_whole(value: object, name: str, minimum: int) -> None:
    require(
        isinstance(value, int) and not isinstance(value, bool) and value >= minimum,
        f"{name} must be a whole number >= {minimum} (got {value!r})",
    )


def require_positive_or_none(value: object, name: str) -> None:
    require(
        value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 and math.isfinite(value)),
        f"{name} must be a positive number (got {value!r})",
    )
