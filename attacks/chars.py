"""Character-level word edits (TextBugger's and DeepWordBug's "bugs").

Each edit takes a word and a ``random.Random`` and returns the edited words it
proposes (usually one; an empty list when the word is too short for it).
They never touch anything but the word they are given.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass

CharEdit = Callable[[str, random.Random], list[str]]

#: Letters DeepWordBug inserts or substitutes: both cases, as TextAttack's
#: character swaps draw from ``string.ascii_letters``.
LETTERS = string.ascii_letters

# TextBugger's Sub-C bug: one visually similar Unicode character per Latin
# letter (Cyrillic, Greek, Armenian, Cherokee and a few Latin/maths look-
# alikes). Chosen for this project; the idea (a look-alike table, one
# candidate per position) is TextAttack's WordSwapHomoglyphSwap.
HOMOGLYPHS: dict[str, str] = {
    "a": "\u0430",  # Cyrillic a
    "b": "\u0185",  # Latin tone six
    "c": "\u0441",  # Cyrillic es
    "d": "\u0501",  # Cyrillic komi de
    "e": "\u0435",  # Cyrillic ie
    "f": "\u0192",  # Latin f with hook
    "g": "\u0581",  # Armenian co
    "h": "\u04bb",  # Cyrillic shha
    "i": "\u0456",  # Cyrillic i
    "j": "\u0458",  # Cyrillic je
    "k": "\u03ba",  # Greek kappa
    "l": "\u04cf",  # Cyrillic palochka
    "m": "\u217f",  # small roman numeral one thousand
    "n": "\u0578",  # Armenian vo
    "o": "\u043e",  # Cyrillic o
    "p": "\u0440",  # Cyrillic er
    "q": "\u051b",  # Cyrillic qa
    "r": "\u0433",  # Cyrillic ghe
    "s": "\u0455",  # Cyrillic dze
    "t": "\U0001d5cd",  # mathematical sans-serif t
    "u": "\u03c5",  # Greek upsilon
    "v": "\u03bd",  # Greek nu
    "w": "\u051d",  # Cyrillic we
    "x": "\u0445",  # Cyrillic ha
    "y": "\u0443",  # Cyrillic u
    "z": "\u0225",  # Latin z with hook
    "A": "\u0410",
    "B": "\u0412",
    "C": "\u0421",
    "D": "\u13a0",  # Cherokee a
    "E": "\u0415",
    "F": "\u03dc",  # Greek digamma
    "G": "\u050c",
    "H": "\u041d",
    "I": "\u0406",
    "J": "\u0408",
    "K": "\u041a",
    "L": "\u13de",  # Cherokee tle
    "M": "\u041c",
    "N": "\u039d",
    "O": "\u041e",
    "P": "\u0420",
    "Q": "\u051a",
    "R": "\u13a1",  # Cherokee e
    "S": "\u0405",
    "T": "\u0422",
    "U": "\u054d",  # Armenian capital seh
    "V": "\u13d9",  # Cherokee do
    "W": "\u051c",
    "X": "\u0425",
    "Y": "\u03a5",
    "Z": "\u0396",
    "0": "\u039f",  # Greek capital omicron
    "1": "\u04c0",  # Cyrillic palochka
    "3": "\u0417",  # Cyrillic ze
    "-": "\u2010",  # hyphen
    "'": "\u2019",  # right single quotation mark
}


def _other_letter(ch: str, rng: random.Random) -> str:
    """A random letter of either case, different from ``ch``."""
    return rng.choice([c for c in LETTERS if c != ch])


# TextBugger's character bugs (TextAttack: random_one, first and last
# character kept). One random draw each.


def insert_space(word: str, rng: random.Random) -> list[str]:
    """Split the word with a space ("tone" -> "t one" or "to ne"): after the
    first character at the earliest and never before the last one (TextAttack
    skips the first and the last position)."""
    if len(word) < 3:
        return []
    i = rng.randrange(1, len(word) - 1)
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


# DeepWordBug's four edits (TextAttack: random_one, any position, letters of
# both cases; words of one character are left alone).


def swap_adjacent(word: str, rng: random.Random) -> list[str]:
    """Swap any two adjacent different characters."""
    spots = [i for i in range(len(word) - 1) if word[i] != word[i + 1]]
    if len(word) < 2 or not spots:
        return []
    i = rng.choice(spots)
    return [word[:i] + word[i + 1] + word[i] + word[i + 2 :]]


def substitute_random(word: str, rng: random.Random) -> list[str]:
    """Replace one character by a random letter of either case."""
    if len(word) < 2:
        return []
    i = rng.randrange(len(word))
    return [word[:i] + _other_letter(word[i], rng) + word[i + 1 :]]


def delete_random(word: str, rng: random.Random) -> list[str]:
    """Delete any one character (the word keeps at least one)."""
    if len(word) < 2:
        return []
    i = rng.randrange(len(word))
    return [word[:i] + word[i + 1 :]]


def insert_random(word: str, rng: random.Random) -> list[str]:
    """Insert one random letter of either case before any character of the
    word (TextAttack inserts at positions 0..len-1, never after the end)."""
    if len(word) < 2:
        return []
    i = rng.randrange(len(word))
    return [word[:i] + rng.choice(LETTERS) + word[i:]]


def make_homoglyph_edit(table: dict[str, str] | None = None) -> CharEdit:
    """TextBugger's Sub-C: for every position whose character has a look-alike,
    one candidate with that character replaced (as TextAttack's homoglyph swap
    with ``random_one=False``). Nothing is inserted, so no space appears."""
    glyphs = HOMOGLYPHS if table is None else table

    def homoglyph(word: str, rng: random.Random) -> list[str]:
        return [
            word[:i] + glyphs[c] + word[i + 1 :]
            for i, c in enumerate(word)
            if c in glyphs
        ]

    homoglyph.__name__ = "homoglyph"
    return homoglyph


@dataclass(frozen=True)
class EditSet:
    """The character edits a recipe applies to one word, with how records and
    `pre list attacks` describe them."""

    edits: tuple[CharEdit, ...]
    #: The records' ``transformation`` entry.
    described: str
    #: The phrase `pre list attacks` shows.
    summary: str
    #: Candidates per word, at most, for planning (``pre sweep --dry-run``; docs/scale.md).
    per_word: int


#: TextBugger (Li et al. 2018) bugs 1-4: insert a space, delete an inner
#: character, swap two inner neighbours, a visually similar character.
TEXTBUGGER_BUGS = EditSet(
    (insert_space, delete_inner, swap_inner, make_homoglyph_edit()),
    "one random space insertion, inner deletion, inner swap; a Unicode look-alike at every position",
    "character bugs (space, delete, swap, Unicode homoglyph)",
    per_word=5,
)
#: DeepWordBug (Gao et al. 2018): swap, substitute, delete or insert one
#: character, any letter of either case (TextAttack's random_one edits).
DEEPWORDBUG_EDITS = EditSet(
    (swap_adjacent, substitute_random, delete_random, insert_random),
    "one random adjacent swap, substitution, deletion, insertion per word (letters a-z and A-Z)",
    "swap/substitute/delete/insert one character (letters of both cases)",
    per_word=4,
)
