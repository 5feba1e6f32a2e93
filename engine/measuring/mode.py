"""The one decision of a run's mode: score label log-probs (``choices``) or generate and parse.

Two facts decide it, and they become known at different times:

- the task: free-text answers (translation, SQuAD, math) can only be generated. A run plan
  knows the task before any model loads and calls ``decide_mode`` without a backend; with
  ``strict`` (what a user asked for explicitly, ``pre run``) asking choices of such a task
  is an error naming the fix, otherwise (a sweep's grid, the Python API) it generates;
- the backend: a model that cannot score label log-probs (an API server without them,
  found when it starts) generates instead, said once per model. ``decide_target``
  (``engine.measuring.target``) decides the task's part when the plan is made; the workbench
  applies the started backend's part; the evaluator only checks the mode it is given
  (``check_mode``).

The mode that results is recorded in every result.
"""

from __future__ import annotations

import logging

from promptrobust.engine.errors import SettingsError
from promptrobust.engine.measuring.settings import Mode
from promptrobust.engine.serving.backends.base import Backend
from promptrobust.tasks.base import Task

__all__ = ["check_mode", "decide_mode", "warn_no_logprobs"]

#: Models already reported as unable to score label log-probs (one warning each).
_WARNED_NO_LOGPROBS: set[str] = set()


def decide_mode(requested: Mode, task: Task, backend: Backend | None = None, *, strict: bool = False) -> Mode:
    """The mode a run measures in: ``requested``, unless the task's answers are free text
    (``strict``: an error instead) or the started ``backend`` cannot score label log-probs."""
    if requested not in ("choices", "generate"):
        raise SettingsError(f"mode must be 'choices' or 'generate' (got {requested!r})")
    mode: Mode = requested
    if mode == "choices" and not task.supports_choices:
        if strict:
            raise SettingsError(
                f"mode choices cannot score {task.name}: its answers are free text; use mode generate", setting="mode"
            )
        mode = "generate"
    if mode == "choices" and backend is not None and not backend.supports_choice_scoring:
        warn_no_logprobs(backend.identity.name)
        mode = "generate"
    return mode


def check_mode(mode: Mode, task: Task, backend: Backend) -> None:
    """Fail with one line when ``mode`` cannot run on ``task`` with ``backend`` (a mode that was not
    decided by ``decide_mode``); nothing is decided here."""
    if mode not in ("choices", "generate"):
        raise SettingsError(f"mode must be 'choices' or 'generate' (got {mode!r})")
    if mode == "choices" and not task.supports_choices:
        raise SettingsError(f"mode choices cannot score {task.name}: its answers are free text; use mode generate",
                            setting="mode")
    if mode == "choices" and not backend.supports_choice_scoring:
        raise SettingsError(f"{backend.identity.name} cannot score label log-probs: use mode generate", setting="mode")


def warn_no_logprobs(name: str) -> None:
    """Say once per model and process (not per attack job) that it generates instead of scoring labels."""
    if name not in _WARNED_NO_LOGPROBS:
        _WARNED_NO_LOGPROBS.add(name)
        logging.getLogger(__name__).warning("%s cannot score label log-probs: evaluating with --mode generate", name)
