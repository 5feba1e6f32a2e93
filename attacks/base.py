"""The attack side's whole view of the world.

An attack = transformation (which prompts a change can produce) + constraints
(which changes are allowed) + search (which candidates to try next) + goal
(lower the task metric over the dataset). The search reaches the model only
through a ``PromptScorer``: an async callable that scores a list of prompts
over the whole dataset, in one batch, with exact early stopping.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class CandidateScore:
    """The metric of one candidate prompt over the dataset.

    ``complete`` is False when early stopping abandoned the candidate; then
    ``score`` is a lower bound (the best it could still have reached), which is
    enough to know it cannot win.
    """

    prompt: str
    score: float
    complete: bool = True
    samples_evaluated: int = 0


class PromptScorer(Protocol):
    """Scores candidate prompts; lower is better for the attacker.

    Contract (what makes early stopping exact): every candidate whose exact
    score is strictly below ``to_beat`` and strictly below every candidate
    before it in the list is returned ``complete``. So taking the first
    complete candidate with the minimum score gives the same answer as scoring
    every candidate on every sample. With ``to_beat=None`` nothing is stopped
    early: every candidate comes back complete with its exact score (what a
    word-importance ranking needs). ``incumbent``: the prompt whose exact score
    ``to_beat`` is (the search's current prompt), for a scorer that compares
    candidates with it sample by sample.

    A racing scorer (``engine.measuring.racing``) relaxes the first sentence to a
    stated error rate: the candidate it returns complete is the one exhaustive
    scoring would choose unless a test erred; its score is still exact.
    """

    async def __call__(
        self, prompts: Sequence[str], *, to_beat: float | None = None, incumbent: str | None = None
    ) -> list[CandidateScore]: ...


@dataclass(frozen=True)
class WordSite:
    """A word of a prompt that an attack may change, with its context."""

    tokens: tuple[str, ...]  # the prompt as alternating word / non-word tokens
    index: int  # position of the word in ``tokens``

    @property
    def word(self) -> str:
        return self.tokens[self.index]

    def with_word(self, replacement: str) -> str:
        """The whole prompt with this word replaced (or removed when empty)."""
        parts = list(self.tokens)
        parts[self.index] = replacement
        return "".join(parts)


class WordTransformation(Protocol):
    """Proposes replacements for one word (character edits, synonyms, ...)."""

    name: str

    def replacements(self, site: WordSite) -> list[str]: ...


class Constraint(Protocol):
    """Decides whether candidate prompts are acceptable perturbations of the original."""

    name: str

    def allowed(self, original: str, candidates: Sequence[str]) -> list[bool]: ...
