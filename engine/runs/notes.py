"""What a run says beside its results: ``Note``. Its own module so that the modules the run plan
imports (the run folder, lm-eval's argument mapping) can use it without importing the plan."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Note"]


@dataclass(frozen=True)
class Note:
    """Something a run says beside its results (a rule applied, a limit met); not an error."""

    text: str
    """One line; starts with the setting's name when ``setting`` is given."""
    setting: str | None = None
    """The setting the note is about (the CLI names its flag)."""
