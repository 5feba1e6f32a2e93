"""Which install extras an attack's default resources come from (``Recipe.extras``).

Checked before any model work (``pre run --attack``), so a lean install
(``pip install promptrobust``) says in one line which extra a word attack needs
instead of failing after the clean scores. Character and sentence attacks
need nothing beyond the base.
"""

from __future__ import annotations

from collections.abc import Iterable

from promptrobust.attacks.errors import AttackResourceError
from promptrobust.attacks.recipes import RECIPES
from promptrobust.extras import MissingExtraError, require_extra

_BY_NAME = {recipe.name: recipe for recipe in RECIPES}


def check_attack_extras(names: Iterable[str]) -> None:
    """Raise AttackResourceError (one line naming the pip install) for the first attack
    in ``names`` whose extra is not installed (a name no recipe has is left to the registry)."""
    for name in names:
        recipe = _BY_NAME.get(name.strip().lower())
        for extra in recipe.extras if recipe is not None else ():
            try:
                require_extra(extra, name)
            except MissingExtraError as exc:
                raise AttackResourceError(str(exc)) from None
