"""How a run is told apart from its recipe, as every record says it.

A run configures its recipe (``base.Recipe.configure``) with the user's options
and this implementation's facts; the run's value has the recipe's shape. Each
part describes itself as ``{record key: value}``; a value is either plain (a
description nothing is compared with) or a ``Setting``, compared with the
recipe's setting of the same key. ``compare`` turns the two descriptions into
what every record carries: the run's values, a differing one written
``ours (recipe: theirs)``, and the keys that differ under ``deviations``.
Nobody keeps that list by hand.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass


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


#: A part's description: record key -> a ``Setting`` or a plain value.
Described = dict[str, object]


def compare(reference: Mapping[str, object], run: Mapping[str, object]) -> tuple[dict[str, object], list[str]]:
    """The run's settings as recorded, and the keys whose values differ from the recipe's."""
    out: dict[str, object] = {}
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
