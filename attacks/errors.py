"""Errors the attack side raises; the CLI maps every ``AttackError`` to exit code 2.

Messages give the fix in plain words; ``setting`` (``PromptRobustError``) names the
setting to change where one does, and the CLI prints its flag."""

from __future__ import annotations

from promptrobust.engine.errors import PromptRobustError


class AttackError(PromptRobustError):
    """Base class: a problem with how an attack was asked for or set up."""


class UnknownAttackError(AttackError, ValueError):
    """An attack name that the registry does not know."""


class AttackOptionError(AttackError, ValueError):
    """An attack option that does not exist or has a bad value."""


class AttackBudgetError(AttackError, ValueError):
    """The query budget is too small for the attack to score anything."""

    setting = "budget"


class AttackResourceError(AttackError, RuntimeError):
    """A resource an attack needs (word vectors, sentence encoder, tagger,
    masked LM) is not installed or cannot be loaded."""


class ScorerContractError(AttackError, RuntimeError):
    """The PromptScorer returned something its contract rules out."""


class PromptTooLongError(AttackError, ValueError):
    """The prompt to attack is longer than ``attack.MAX_PROMPT_WORDS``."""
