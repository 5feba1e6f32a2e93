"""The one base class of errors a user can fix.

A ``PromptRobustError`` says what is wrong and what to do, in one line, and
may name the ``setting`` to change (an ``EvaluationSettings`` field, say
``limit``). The library never names command-line flags: the CLI turns the
setting into its flag (``limit`` -> ``--limit``) when it prints the error and
exits with code 2; a Python caller reads ``exc.setting``.
"""

from __future__ import annotations

__all__ = ["PromptRobustError"]


class PromptRobustError(Exception):
    """Bad input or environment (not a bug): a one-line message with the fix."""

    setting: str | None = None
    """The setting to change, when one setting is the fix (the CLI names its flag)."""

    def __init__(self, message: str = "", *, setting: str | None = None) -> None:
        super().__init__(message)
        if setting is not None:
            self.setting = setting
