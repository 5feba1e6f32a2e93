"""Prompt attacks: transformation + constraints + search + goal.

``get_attack(name, **options)`` builds one of the paper's seven attacks;
``await attack.run(prompt, scorer, protected=..., seed=..., budget=...)``
returns an ``AttackOutcome``. Importing this package loads no model or
word-vector resource.
"""

from promptrobust.attacks.errors import (
    AttackError,
    AttackOptionError,
    AttackResourceError,
    UnknownAttackError,
)
from promptrobust.attacks.attack import Attack
from promptrobust.attacks.registry import attack_options, get_attack, is_word_attack, list_attacks
from promptrobust.attacks.result import AttackOutcome, performance_drop_rate

__all__ = [
    "Attack",
    "AttackError",
    "AttackOptionError",
    "AttackOutcome",
    "AttackResourceError",
    "UnknownAttackError",
    "attack_options",
    "get_attack",
    "is_word_attack",
    "list_attacks",
    "performance_drop_rate",
]
