"""Errors the tasks package raises for bad input.

All are ``PromptRobustError`` (and ``ValueError``) subclasses with a one-line
message that names the file, column, dataset or id at fault and how to fix it,
in plain words; ``setting`` names the setting to change where one does (the
CLI prints its flag). The CLI maps them to exit code 2.
"""

from __future__ import annotations

from promptrobust.engine.errors import PromptRobustError


class TaskError(PromptRobustError, ValueError):
    """Base class of every tasks-package input error."""


class TaskDataError(TaskError):
    """A data file is missing, unreadable, malformed or lacks a column."""


class UnknownTaskError(TaskError):
    """No task has this name."""


class UnknownPromptError(TaskError):
    """No prompt has this id for the dataset."""


class PromptFileError(TaskError):
    """A prompt TOML file is malformed (bad TOML, missing key, duplicate id...)."""
