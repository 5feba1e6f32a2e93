"""What a recipe is, and how a run is told apart from it.

A recipe is one frozen value: ``Recipe(goal, constraints, transformation,
search)``, composed of the frozen components in ``attacks.components`` whose
fields hold the reference values (the paper's, TextAttack's, promptbench's),
each stated once in ``attacks.recipes`` beside the sentence or setting that
fixes it.

A run configures that value with the user's options and with the facts of
this implementation (``Component.configure``): the run's value has the same
shape. Each component describes itself as ``{record key: value}``; a value is
either plain (a description nothing is compared with) or a ``Setting``,
compared with the recipe's setting of the same key. ``compare`` turns the two
descriptions into what every record carries: the run's values, a differing
one written ``ours (recipe: theirs)``, and the keys that differ under
``deviations``. Nobody keeps that list by hand.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

#: The goal of every recipe, as promptbench sets it: the target accuracy is 0,
#: so the goal never "succeeds" and the search walks every word.
GOAL = "lower the task score over the dataset; never 'succeeds' (target score 0)"


@dataclass(frozen=True)
class Setting:
    """One compared setting: ``value`` is what is compared with the recipe,
    ``text`` how it reads in a record (default: the value itself), ``note`` a
    qualifier kept beside it (``"fallback"``, a path). ``compared=False``: not
    known yet (a resource not loaded), recorded but never a deviation."""

    value: Hashable
    text: str | None = None
    note: str = ""
    compared: bool = True

    def _plain(self) -> object:
        return self.value if self.text is None else self.text

    def shown(self) -> object:
        """The record's value when it agrees with the recipe."""
        return f"{self._plain()} ({self.note})" if self.note else self._plain()

    def against(self, reference: Setting | None) -> tuple[object, bool]:
        """(the record's value, whether it differs from ``reference``)."""
        if reference is None or not self.compared or self.value == reference.value:
            return self.shown(), False
        note = f"{self.note}; " if self.note else ""
        return f"{self._plain()} ({note}recipe: {reference._plain()})", True


#: A component's description: record key -> a ``Setting`` or a plain value.
Described = dict[str, object]


def compare(reference: Mapping[str, object], run: Mapping[str, object]) -> tuple[dict[str, Any], list[str]]:
    """The run's settings as recorded, and the keys whose values differ from the recipe's."""
    out: dict[str, Any] = {}
    deviations: list[str] = []
    for key, value in run.items():
        if not isinstance(value, Setting):
            out[key] = value
            continue
        ref = reference.get(key)
        out[key], differs = value.against(ref if isinstance(ref, Setting) else None)
        if differs:
            deviations.append(key)
    return out, deviations


class Component(Protocol):
    """A frozen part of a recipe (transformation, constraint or search)."""

    def options(self) -> dict[str, object]:
        """The options (``--attack-option``) this component takes, with their defaults."""
        ...

    def configure(self, options: Mapping[str, object]) -> Component:
        """This component as a run uses it: the options applied, this implementation's facts in."""
        ...

    def describe(self, live: object | None = None) -> Described:
        """Record entries; ``live`` is the run's loaded resource (None: the value as declared)."""
        ...

    def live(self) -> object | None:
        """The resource a run of this component needs (loaded lazily), made once per attack."""
        ...

    def summary(self) -> str:
        """A phrase for `pre list attacks`."""
        ...


@dataclass(frozen=True)
class Recipe:
    """One attack as a value: what it may change, what a change must keep,
    which candidates it tries, and its goal."""

    name: str
    #: Where the recipe comes from (recorded as ``settings.recipe``).
    source: str
    transformation: Component
    constraints: tuple[Component, ...]
    search: Component
    goal: str = GOAL
    #: Candidate evaluations allowed: promptbench's goal function sets
    #: ``query_budget = float("inf")`` (None: unlimited).
    query_budget: int | None = None
    #: What the attack needs beyond the installed packages, and how to get it
    #: (`pre list attacks` prints it); "" when it runs offline as installed.
    requirements: str = ""

    @property
    def parts(self) -> tuple[Component, ...]:
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
        from dataclasses import replace

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
