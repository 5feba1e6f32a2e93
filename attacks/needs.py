"""Which install extras each attack's default resources come from.

Checked before any model work (``pre run --attack``), so a lean install
(``pip install promptrobust``) says in one line which extra a word attack needs
instead of failing after the clean scores. Character and sentence attacks
(DeepWordBug, CheckList, StressTest, Semantic) need nothing beyond the base.
"""

from __future__ import annotations

from collections.abc import Iterable

from promptrobust.attacks.errors import AttackResourceError
from promptrobust.extras import MissingExtraError, require_extra

#: attack -> extras its default resources need: word vectors, the sentence encoder and
#: the tagger are in [attacks]; BertAttack's masked LM runs on torch ([local]).
NEEDS: dict[str, tuple[str, ...]] = {
    "textbugger": ("attacks",),
    "textfooler": ("attacks",),
    "bertattack": ("local", "attacks"),
}


def check_attack_extras(names: Iterable[str]) -> None:
    """Raise AttackResourceError (one line naming the pip install) for the first attack
    in ``names`` whose extra is not installed."""
    for name in names:
        for extra in NEEDS.get(name.strip().lower(), ()):
            try:
                require_extra(extra, name)
            except MissingExtraError as exc:
                raise AttackResourceError(str(exc)) from None
