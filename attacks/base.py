"""The attack side's whole view of the world.

An attack = transformation (which prompts a change can produce) + constraints
(which changes are allowed) + search (which candidates to try next) + goal
(lower the task metric over the dataset): one frozen ``Recipe`` value, whose
parts are frozen ``Part`` values (``attacks.components``; the paper's seven
recipes are in ``attacks.recipes``). The search reaches the model only
through a ``PromptScorer``: an async callable that scores a list of prompts
over the whole dataset, in one batch, with exact early stopping.

Callers never name an attack to learn what it is: they ask its recipe
(``edits_words``, ``prompt_set``, ``worst_case_candidates``, ``extras``,
``resource``, ``promptbench_options``), and the recipe asks its parts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar, Literal, Protocol, Self

from promptrobust.attacks.deviations import Described

#: The goal of every recipe, as promptbench sets it: the target accuracy is 0,
#: so the goal never "succeeds" and the search walks every word.
GOAL = "lower the task score over the dataset; never 'succeeds' (target score 0)"

#: Kinds of resource a part loads (``Part.resources``).
ResourceKind = Literal["word vectors", "masked LM"]


@dataclass(frozen=True)
class Resource:
    """A resource a part loads by default: its kind and its name (a hub id, a vector set)."""

    kind: ResourceKind
    name: str


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


class WrittenPrompt(Protocol):
    """A prompt with its language (``tasks.base.Prompt`` is one)."""

    @property
    def language(self) -> str: ...

    @property
    def text(self) -> str: ...


#: One of Semantic's rewritten prompts as callers give it: the text (language unknown), a
#: (language, text) pair, or a prompt object (``components.semantic_entries`` reads each).
SemanticPrompt = str | tuple[str, str] | WrittenPrompt


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


class Part:
    """A frozen part of a recipe (transformation, constraint or search).

    Subclasses are frozen dataclasses. The defaults describe a part that takes
    no option, runs as declared, needs no resource and proposes no candidates
    of its own; a part overrides what it has."""

    #: Install extras (``promptrobust.extras``) its default resource comes from.
    extras: ClassVar[tuple[str, ...]] = ()
    #: A search that walks the prompt's words (and so needs the task's protected words).
    walks_words: ClassVar[bool] = False

    def options(self) -> dict[str, object]:
        """The options (``--attack-option``) this part takes, with their defaults."""
        return {}

    def configure(self, options: Mapping[str, object]) -> Self:
        """This part as a run uses it: the options applied, this implementation's facts in."""
        return self

    def describe(self, live: object | None = None) -> Described:
        """Record entries; ``live`` is the run's loaded resource (None: the value as declared)."""
        return {}

    def live(self) -> object | None:
        """The resource a run of this part needs (loaded lazily), made once per attack."""
        return None

    def summary(self) -> str:
        """A phrase for `pre list attacks`."""
        return ""

    def candidates_per_word(self) -> int | None:
        """Candidates a word-editing transformation proposes per word, at most (an estimate for
        planning); None: it does not edit words."""
        return None

    def candidate_count(self) -> int | None:
        """Candidates a transformation with a fixed set proposes per prompt; None: none fixed."""
        return None

    def prompt_set(self) -> str | None:
        """The type of the task's prompts the part scores instead of editing one (None: it edits)."""
        return None

    def resources(self) -> tuple[Resource, ...]:
        """The resources it loads by default."""
        return ()

    def promptbench_options(self, given: Mapping[str, object], checkout: str) -> dict[str, object] | None:
        """The options that take this part's reference data from a promptbench checkout (None: it
        reads nothing there, or the user's ``given`` options already decide it)."""
        return None

    def inserts(self) -> str | None:
        """What a transformation that only inserts text inserts ("tautologies"); None: it edits."""
        return None

    def only_inserts(self, clean: str, adversarial: str) -> bool:
        """Whether ``adversarial`` is ``clean`` with this part's insertion and nothing else changed."""
        return False


@dataclass(frozen=True)
class Recipe:
    """One attack as a value: what it may change, what a change must keep,
    which candidates it tries, and its goal."""

    name: str
    #: Where the recipe comes from (recorded as ``settings.recipe``).
    source: str
    transformation: Part
    constraints: tuple[Part, ...]
    search: Part
    goal: str = GOAL
    #: Candidate evaluations allowed: promptbench's goal function sets
    #: ``query_budget = float("inf")`` (None: unlimited).
    query_budget: int | None = None
    #: What the attack needs beyond the installed packages, and how to get it
    #: (`pre list attacks` prints it); "" when it runs offline as installed.
    requirements: str = ""

    @property
    def parts(self) -> tuple[Part, ...]:
        return (self.transformation, *self.constraints, self.search)

    @property
    def description(self) -> str:
        """One line for `pre list attacks`, from the recipe's own values."""
        return "; ".join(p for p in (c.summary() for c in self.parts) if p)

    def options(self) -> dict[str, object]:
        """Every option of the recipe's parts with its default (the recipe's value where it has one)."""
        out: dict[str, object] = {}
        for part in self.parts:
            for key, default in part.options().items():
                out.setdefault(key, default)
        return out

    def configure(self, options: Mapping[str, object]) -> Recipe:
        """The run's recipe: the same shape, with the options and this implementation's facts."""
        return replace(
            self,
            transformation=self.transformation.configure(options),
            constraints=tuple(c.configure(options) for c in self.constraints),
            search=self.search.configure(options),
        )

    def describe(self, lives: Sequence[object | None] | None = None) -> Described:
        """Every part's record entries (``lives``: the run's resources, one per part)."""
        out: Described = {"recipe": self.source}
        for part, live in zip(self.parts, lives or [None] * len(self.parts)):
            out.update(part.describe(live))
        out["goal"] = self.goal
        return out

    # -- what callers ask instead of naming the attack -------------------------------------

    @property
    def edits_words(self) -> bool:
        """Whether the search walks the prompt's words (a word attack: it needs the task's protected words)."""
        return self.search.walks_words

    @property
    def prompt_set(self) -> str | None:
        """The type of the task's prompts it scores as its candidates (Semantic's set); None: it edits the prompt."""
        return self.transformation.prompt_set()

    def worst_case_candidates(self, words: float) -> int:
        """Candidate prompts one attacked prompt of ``words`` words costs when every word is walked
        (the paper's unlimited budget): per word its candidates plus the word-importance one, else its set."""
        per_word = self.transformation.candidates_per_word()
        if per_word is not None:
            return round(words * (per_word + 1))
        return self.transformation.candidate_count() or 0

    @property
    def extras(self) -> tuple[str, ...]:
        """Install extras its default resources come from, in the order its parts load them."""
        return tuple(dict.fromkeys(extra for part in self.parts for extra in part.extras))

    def resource(self, kind: ResourceKind) -> str | None:
        """The name of the default resource of ``kind`` it loads (None: none of that kind)."""
        return next((r.name for part in self.parts for r in part.resources() if r.kind == kind), None)

    def promptbench_options(self, given: Mapping[str, object], checkout: str) -> dict[str, object] | None:
        """``given`` options with the recipe's reference data read from a promptbench checkout
        (CheckList's fixed strings); None when it reads nothing there or ``given`` decides it."""
        return next((o for o in (p.promptbench_options(given, checkout) for p in self.parts) if o is not None), None)
