"""Attack names -> attacks, for the CLI (`pre run --attack NAME`, `pre list attacks`),
and what a named attack is, for callers that hold only a name (a setting, a record)."""

from __future__ import annotations

from typing import Any

from promptrobust.attacks.attack import Attack
from promptrobust.attacks.base import Recipe
from promptrobust.attacks.errors import AttackOptionError, UnknownAttackError
from promptrobust.attacks.recipes import RECIPES

_RECIPES: dict[str, Recipe] = {recipe.name: recipe for recipe in RECIPES}


def list_attacks() -> list[tuple[str, str]]:
    """(name, one-line description) for every attack, in the paper's order."""
    return [(name, recipe.description) for name, recipe in _RECIPES.items()]


def attack_requirements() -> list[tuple[str, str]]:
    """(name, what it needs beyond the install and how to get it) for attacks that say."""
    return [(name, recipe.requirements) for name, recipe in _RECIPES.items() if recipe.requirements]


def recipe_of(name: str) -> Recipe:
    """The recipe an attack name stands for."""
    key = name.strip().lower() if isinstance(name, str) else name
    if key not in _RECIPES:
        raise UnknownAttackError(f"unknown attack {name!r}; choose one of: {', '.join(_RECIPES)}")
    return _RECIPES[key]


def attack_options(name: str, *, cli_only: bool = False) -> dict[str, object]:
    """The options an attack accepts, with their defaults. ``cli_only`` keeps
    those settable from the command line (str/int/float/bool defaults), not
    the injectable resource objects (embedding, encoder, tagger)."""
    options = recipe_of(name).options()
    if cli_only:
        return {k: v for k, v in options.items() if isinstance(v, (str, int, float, bool))}
    return options


def _coerce(name: str, option: str, value: Any, default: Any) -> Any:
    """Turn CLI strings ("5", "0.8", "true") into the option's type."""
    if not isinstance(value, str) or isinstance(default, str) or default is None:
        return value
    try:
        if isinstance(default, bool):
            low = value.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
    except ValueError:
        raise AttackOptionError(
            f"attack {name}: option {option}={value!r} should be a {type(default).__name__}",
            setting="attack_options",
        ) from None
    return value


def get_attack(name: str, **options: object) -> Attack:
    """Build an attack by name; options may be typed values or CLI strings."""
    recipe = recipe_of(name)
    known = recipe.options()
    unknown = sorted(set(options) - set(known))
    if unknown:
        valid = ", ".join(sorted(known)) or "none"
        raise AttackOptionError(
            f"attack {recipe.name} has no option {', '.join(unknown)}; valid options: {valid}",
            setting="attack_options",
        )
    typed = {k: _coerce(recipe.name, k, v, known[k]) for k, v in options.items()}
    try:
        return Attack(recipe, **typed)
    except (TypeError, ValueError) as exc:
        raise AttackOptionError(f"attack {recipe.name}: {exc}", setting="attack_options") from exc


def is_word_attack(name: str) -> bool:
    """Whether the attack edits words (and so needs the task's protected words)."""
    return recipe_of(name).edits_words


def prompt_set_of(name: str) -> str | None:
    """The type of the task's prompts the attack scores as its candidates (Semantic's set); None when
    it edits the prompt, or for a name no recipe has (an old record's)."""
    recipe = _RECIPES.get(name.strip().lower()) if isinstance(name, str) else None
    return recipe.prompt_set if recipe is not None else None


class InsertionAttacks:
    """The attacks that only insert text, told apart by content: what a promptbench archive's or a
    pairs file's label is checked against (``tasks.promptbench_import.ContentCheck``)."""

    def shown_by(self, clean: str, adversarial: str) -> str | None:
        """The attack whose insertion alone turns ``clean`` into ``adversarial``, or None."""
        for recipe in RECIPES:
            if recipe.transformation.only_inserts(clean, adversarial):
                return recipe.name
        return None

    def inserts(self, name: str) -> str | None:
        """What the attack inserts ("tautologies"), or None when it is not an insertion attack (or unknown)."""
        recipe = _RECIPES.get(name.strip().lower())
        return recipe.transformation.inserts() if recipe is not None else None


#: The one instance callers pass around.
INSERTION_ATTACKS = InsertionAttacks()
