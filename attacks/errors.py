"""Errors the attack side raises; the CLI maps every ``AttackError`` to exit code 2."""

from __future__ import annotations


class AttackError(Exception):
    """Base class: a problem with how an attack was asked for or set up."""


class UnknownAttackError(AttackError, ValueError):
    """An attack name that the registry does not know."""


class AttackOptionError(AttackError, ValueError):
    """An attack option that does not exist or has a bad value."""


class AttackResourceError(AttackError, RuntimeError):
    """A resource an attack needs (word vectors, sentence encoder, tagger,
    masked LM) is not installed or cannot be loaded."""


class ScorerContractError(AttackError, RuntimeError):
    """The PromptScorer returned something its contract rules out."""
