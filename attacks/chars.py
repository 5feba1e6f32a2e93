"""Character-level word edits (TextBugger's and DeepWordBug's "bugs").

Each edit takes a word and a ``random.Random`` and returns the edited words it
proposes (usually one; an empty list when the word is too short for it).
They never touch anything but the word they are given.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable

CharEdit = Callable[[str, random.Random], list[str]]

_LETTERS = string.ascii_lowercase

# Visually similar characters. ASCII ones first; the Unicode entries are
# Cyrillic/Greek letters that render like the Latin ones.
HOMOGLYPHS_ASCII: dict[str, str] = {
    "a": "@",
    "b": "6",
    "e": "3",
    "g": "9",
    "i": "1",
    "l": "1",
    "o": "0",
    "s": "5",
    "t": "7",
    "z": "2",
    "A": "4",
    "B": "8",
    "E": "3",
    "I": "1",
    "O": "0",
    "S": "5",
    "Z": "2",
}
HOMOGLYPHS_UNICODE: dict[str, str] = {
    "a": "\u0430",
    "c": "\u0441",
    "e": "\u0435",
    "i": "\u0456",
    "j": "\u0458",
    "o": "\u043e",
    "p": "\u0440",
    "s": "\u0455",
    "x": "\u0445",
    "y": "\u0443",
    "A": "\u0391",
    "B": "\u0392",
    "C": "\u0421",
    "E": "\u0395",
    "H": "\u0397",
    "K": "\u039a",
    "M": "\u039c",
    "N": "\u039d",
    "O": "\u039f",
    "P": "\u03a1",
    "T": "\u03a4",
    "X": "\u03a7",
}


def _other_letter(ch: str, rng: random.Random) -> str:
    pool = [c for c in _LETTERS if c != ch.lower()]
    new = rng.choice(pool)
    return new.upper() if ch.isupper() else new


def insert_space(word: str, rng: random.Random) -> list[str]:
    """Split the word with a space somewhere inside it ("tone" -> "to ne")."""
    if len(word) < 2:
        return []
    i = rng.randrange(1, len(word))
    return [word[:i] + " " + word[i:]]


def delete_inner(word: str, rng: random.Random) -> list[str]:
    """Delete one character that is neither the first nor the last."""
    if len(word) < 3:
        return []
    i = rng.randrange(1, len(word) - 1)
    return [word[:i] + word[i + 1 :]]


def swap_inner(word: str, rng: random.Random) -> list[str]:
    """Swap two adjacent different characters, first and last kept in place."""
    spots = [i for i in range(1, len(word) - 2) if word[i] != word[i + 1]]
    if not spots:
        return []
    i = rng.choice(spots)
    return [word[:i] + word[i + 1] + word[i] + word[i + 2 :]]


def swap_adjacent(word: str, rng: random.Random) -> list[str]:
    """Swap any two adjacent different characters."""
    spots = [i for i in range(len(word) - 1) if word[i] != word[i + 1]]
    if not spots:
        return []
    i = rng.choice(spots)
    return [word[:i] + word[i + 1] + word[i] + word[i + 2 :]]


def substitute_random(word: str, rng: random.Random) -> list[str]:
    """Replace one letter by another random letter."""
    spots = [i for i, c in enumerate(word) if c.isalpha()]
    if not spots:
        return []
    i = rng.choice(spots)
    return [word[:i] + _other_letter(word[i], rng) + word[i + 1 :]]


def delete_random(word: str, rng: random.Random) -> list[str]:
    """Delete any one character (the word keeps at least one)."""
    if len(word) < 2:
        return []
    i = rng.randrange(len(word))
    return [word[:i] + word[i + 1 :]]


def insert_random(word: str, rng: random.Random) -> list[str]:
    """Insert one random letter anywhere in the word."""
    i = rng.randrange(len(word) + 1)
    return [word[:i] + rng.choice(_LETTERS) + word[i:]]


def make_homoglyph_edit(table: dict[str, str], max_candidates: int = 3) -> CharEdit:
    """An edit that replaces one character by its lookalike; one candidate per
    position, up to ``max_candidates`` positions chosen at random."""

    def homoglyph(word: str, rng: random.Random) -> list[str]:
        spots = [i for i, c in enumerate(word) if c in table]
        if len(spots) > max_candidates:
            spots = sorted(rng.sample(spots, max_candidates))
        return [word[:i] + table[word[i]] + word[i + 1 :] for i in spots]

    homoglyph.__name__ = "homoglyph"
    return homoglyph


def homoglyph_table(unicode: bool) -> dict[str, str]:
    """ASCII lookalikes, optionally overridden by Unicode ones where both exist."""
    table = dict(HOMOGLYPHS_ASCII)
    if unicode:
        table.update(HOMOGLYPHS_UNICODE)
    return table


TEXTBUGGER_EDITS: tuple[CharEdit, ...] = (insert_space, delete_inner, swap_inner)
DEEPWORDBUG_EDITS: tuple[CharEdit, ...] = (
    swap_adjacent,
    substitute_random,
    delete_random,
    insert_random,
)
