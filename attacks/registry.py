"""Attack names -> attacks, for the CLI (`pre run --attack NAME`, `pre list attacks`)."""

from __future__ import annotations

import inspect
from typing import Any

from promptrobust.attacks.errors import AttackOptionError, UnknownAttackError
from promptrobust.attacks.recipes import (
    Attack,
    BertAttack,
    CheckList,
    DeepWordBug,
    GreedyWordAttack,
    Semantic,
    StressTest,
    TextBugger,
    TextFooler,
)

_ATTACKS: dict[str, type[Attack]] = {
    cls.name: cls
    for cls in (
        TextBugger,
        DeepWordBug,
        TextFooler,
        BertAttack,
        CheckList,
        StressTest,
        Semantic,
    )
}


def list_attacks() -> list[tuple[str, str]]:
    """(name, one-line description) for every attack, in the paper's order."""
    return [(name, cls.description) for name, cls in _ATTACKS.items()]


def attack_requirements() -> list[tuple[str, str]]:
    """(name, what it needs beyond the install and how to get it) for attacks that say."""
    return [(name, cls.requirements) for name, cls in _ATTACKS.items() if cls.requirements]


def attack_options(name: str, *, cli_only: bool = False) -> dict[str, Any]:
    """The options an attack accepts, with their defaults. ``cli_only`` keeps
    those settable from the command line (str/int/float/bool defaults), not
    the injectable resource objects (embedding, encoder, tagger)."""
    cls = _attack_class(name)
    out: dict[str, Any] = {}
    for klass in cls.__mro__:
        if klass in (Attack, object) or "__init__" not in vars(klass):
            continue
        for p in inspect.signature(klass.__init__).parameters.values():
            if p.kind is not p.KEYWORD_ONLY or p.name in out:
                continue
            if cli_only and not isinstance(p.default, (str, int, float, bool)):
                continue
            out[p.name] = p.default
    return out


def _attack_class(name: str) -> type[Attack]:
    key = name.strip().lower() if isinstance(name, str) else name
    if key not in _ATTACKS:
        raise UnknownAttackError(
            f"unknown attack {name!r}; choose one of: {', '.join(_ATTACKS)}"
        )
    return _ATTACKS[key]


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


def get_attack(name: str, **options: Any) -> Attack:
    """Build an attack by name; options may be typed values or CLI strings."""
    cls = _attack_class(name)
    known = attack_options(cls.name)
    unknown = sorted(set(options) - set(known))
    if unknown:
        valid = ", ".join(sorted(known)) or "none"
        raise AttackOptionError(
            f"attack {cls.name} has no option {', '.join(unknown)}; valid options: {valid}",
            setting="attack_options",
        )
    typed = {k: _coerce(cls.name, k, v, known[k]) for k, v in options.items()}
    try:
        return cls(**typed)
    except (TypeError, ValueError) as exc:
        raise AttackOptionError(f"attack {cls.name}: {exc}", setting="attack_options") from exc


def is_word_attack(name: str) -> bool:
    """Whether the attack edits words (and so needs the task's protected words)."""
    return issubclass(_attack_class(name), GreedyWordAttack)
