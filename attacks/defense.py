"""Spell-check defense: repair a prompt's misspelled words before it reaches
the model.

Character-level attacks (TextBugger, DeepWordBug) turn words into non-words
("sentimnet", "r3view", Cyrillic look-alikes, "rev iew"); a dictionary-based
corrector undoes most of that, while word-level attacks (TextFooler,
BertAttack) produce real words and pass through untouched. Only words that
are not in the dictionary are changed; protected words (label and template
words), punctuation, spacing and capitalisation stay as they were.

The dictionary and edit-distance candidates come from ``pyspellchecker``
(PyPI package ``pyspellchecker``, word frequencies shipped inside the
package, so it works offline).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from promptrobust.attacks.errors import AttackOptionError, AttackResourceError
from promptrobust.attacks.words import folded, is_protected, match_case, normalize_protected

# Defense words may contain "@" (a look-alike of "a"), so they are cut here,
# not with attacks.words.tokenize.
_WORD = re.compile(r"[\w@]+(?:['’\-][\w@]+)*")
_NUMBERISH = re.compile(r"^\d+(?:[.,]\d+)*(?:st|nd|rd|th|s|k|m|x|%)?$", re.IGNORECASE)
_HAS_LETTER = re.compile(r"[^\W\d_]")

# Look-alike characters -> the Latin letter they imitate (Cyrillic/Greek letters,
# plus the digits and symbols of "leet" spelling). A digit may stand for two
# letters; each reading is tried.
_CONFUSABLE: dict[str, tuple[str, ...]] = {
    "\u0430": ("a",),
    "\u0441": ("c",),
    "\u0435": ("e",),
    "\u0456": ("i",),
    "\u0458": ("j",),
    "\u043e": ("o",),
    "\u0440": ("p",),
    "\u0455": ("s",),
    "\u0445": ("x",),
    "\u0443": ("y",),
    "\u0391": ("A",),
    "\u0392": ("B",),
    "\u0421": ("C",),
    "\u0395": ("E",),
    "\u0397": ("H",),
    "\u039a": ("K",),
    "\u039c": ("M",),
    "\u039d": ("N",),
    "\u039f": ("O",),
    "\u03a1": ("P",),
    "\u03a4": ("T",),
    "\u03a7": ("X",),
    "\u0410": ("A",),
    "\u0415": ("E",),
    "\u041e": ("O",),
    "\u0420": ("P",),
    "\u0422": ("T",),
    "\u041d": ("H",),
    "\u041a": ("K",),
    "\u041c": ("M",),
    "@": ("a",),
    "0": ("o",),
    "1": ("l", "i"),
    "3": ("e",),
    "4": ("a",),
    "5": ("s",),
    "6": ("b",),
    "7": ("t",),
    "8": ("b",),
    "9": ("g",),
    "2": ("z",),
    "$": ("s",),
}


class DefenseUnavailable(AttackResourceError):
    """The spell checker package is not installed (a user error: install it)."""


@dataclass(frozen=True)
class Correction:
    """A corrected prompt and what changed (original word, replacement)."""

    original: str
    text: str
    changes: tuple[tuple[str, str], ...] = ()

    @property
    def changed(self) -> bool:
        return self.text != self.original


@dataclass
class SpellCheckDefense:
    """Correct out-of-dictionary words of a prompt; see the module docstring.

    ``protected``: words never changed (case-insensitive; the task's label and
    template words). ``extra_words``: words to accept as correctly spelled
    (domain terms). ``distance``: largest edit distance of a correction.
    """

    protected: Iterable[str] = ()
    extra_words: Iterable[str] = ()
    distance: int = 2
    name: str = "spellcheck"
    _checker: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.distance not in (1, 2):
            raise AttackOptionError(f"spell-check distance must be 1 or 2 (got {self.distance})", setting="distance")
        self.protected = normalize_protected(self.protected)
        try:
            from spellchecker import SpellChecker
        except ImportError:
            raise DefenseUnavailable(
                "the spell-check defense needs the 'pyspellchecker' package: pip install pyspellchecker"
            ) from None
        self._checker = SpellChecker(language="en", distance=self.distance)
        extra = [w.lower() for w in self.extra_words]
        if extra:
            self._checker.word_frequency.load_words(extra)

    def __call__(self, text: str) -> str:
        return self.correct(text).text

    # -- dictionary ----------------------------------------------------------------
    def is_known(self, word: str) -> bool:
        low = folded(word)
        if low in self._checker:
            return True
        # Hyphenated or apostrophe compounds are fine when every part is a word.
        parts = [p for p in re.split(r"['’\-]", low) if p]
        return len(parts) > 1 and all(
            p in self._checker or p in ("s", "t", "d", "ll", "re", "ve", "m")
            for p in parts
        )

    def _skip(self, word: str) -> bool:
        """Words the defense leaves alone whatever the dictionary says."""
        if not _HAS_LETTER.search(word) and not any(ch in _CONFUSABLE for ch in word):
            return True  # punctuation-like or a plain number
        if _NUMBERISH.match(word) or word.isdigit():
            return True
        if is_protected(word, self.protected):  # type: ignore[arg-type]
            return True
        if word.isascii() and word.isalpha() and word.isupper() and len(word) <= 4:
            return True  # an acronym (LLM, NLI) the dictionary does not list
        return self.is_known(word)

    # -- repairs ---------------------------------------------------------------------
    def _unconfuse(self, word: str) -> str | None:
        """A dictionary word read through look-alike characters, if any."""
        if not any(ch in _CONFUSABLE for ch in word):
            return None
        readings = [""]
        for ch in word:
            options = _CONFUSABLE.get(ch, (ch,))
            readings = [r + o for r in readings for o in options][:64]
        for r in readings:
            if _HAS_LETTER.search(r) and r.isalpha() and self.is_known(r):
                return r
        return None

    def _repair(self, word: str) -> str | None:
        """The corrected spelling of one unknown word (lowercase), or None."""
        fixed = self._unconfuse(word)
        if fixed is not None:
            return fixed.lower()
        plain = (
            "".join(_CONFUSABLE.get(ch, (ch,))[0] for ch in word)
            if not word.isascii()
            else word
        )
        low = folded(plain)
        if not low.replace("'", "").replace("-", "").isalpha():
            # letters mixed with digits or symbols the dictionary cannot say anything about
            low = "".join(ch for ch in low if ch.isalpha() or ch in "'-") or low
        best = self._checker.correction(low)
        if not best or best == low and not self.is_known(best):
            return None
        return best

    def correct(self, text: str) -> Correction:
        """Spell-correct ``text``; only out-of-dictionary words change."""
        matches = list(_WORD.finditer(text))
        pieces: list[str] = []
        changes: list[tuple[str, str]] = []
        pos = 0
        i = 0
        while i < len(matches):
            m = matches[i]
            word = m.group()
            pieces.append(text[pos : m.start()])
            # A word split by an inserted space ("rev iew"): join it back.
            if i + 1 < len(matches):
                nxt = matches[i + 1]
                gap = text[m.end() : nxt.start()]
                joined = word + nxt.group()
                if (
                    gap == " "
                    and not (self._skip(word) and self._skip(nxt.group()))
                    and not is_protected(word, self.protected)  # type: ignore[arg-type]
                    and not is_protected(nxt.group(), self.protected)  # type: ignore[arg-type]
                    and _HAS_LETTER.search(joined)
                    and self.is_known(joined)
                ):
                    pieces.append(joined)
                    changes.append((text[m.start() : nxt.end()], joined))
                    pos = nxt.end()
                    i += 2
                    continue
            if self._skip(word):
                pieces.append(word)
            else:
                fixed = self._repair(word)
                if fixed is None:
                    pieces.append(word)
                else:
                    new = _restore_case(word, fixed)
                    pieces.append(new)
                    if new != word:
                        changes.append((word, new))
            pos = m.end()
            i += 1
        pieces.append(text[pos:])
        return Correction(text, "".join(pieces), tuple(changes))


def _restore_case(template: str, word: str) -> str:
    """Give the correction the original's capitalisation (read through look-alikes)."""
    plain = "".join(
        _CONFUSABLE.get(ch, (ch,))[0] if not ch.isascii() else ch for ch in template
    )
    letters = [ch for ch in plain if ch.isalpha()]
    if len(letters) > 1 and all(ch.isupper() for ch in letters):
        return word.upper()
    if letters and letters[0].isupper() and plain[:1].isalpha():
        return word[:1].upper() + word[1:]
    return match_case(plain, word) if plain[:1].isalpha() else word
