"""Splitting a prompt into words an attack may touch, and words it may not.

A prompt is cut into alternating non-word / word tokens that join back to the
exact original text: ``tokenize(p)`` always starts with a (possibly empty)
non-word token, so words sit at the odd indices. Keeping the separators as
tokens means an attack that edits one word never disturbs the spacing,
quotes or punctuation around it.

Protection is decided per word token: a token is protected when it, or any of
its parts split at ``_ - '`` (so "not_entailment", "positive's"), matches a
protected word case-insensitively. Quotes and punctuation are separate
tokens, so "'positive'", "negative." and "Answer:" are all recognised.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# A word: letters/digits/underscore runs, joined by inner apostrophes or hyphens.
_WORD = re.compile(r"\w+(?:['’\-]\w+)*")
_PARTS = re.compile(r"[^\W_]+")
_HAS_LETTER = re.compile(r"[^\W\d_]")


def tokenize(text: str) -> tuple[str, ...]:
    """Alternating non-word / word tokens; ``"".join(tokenize(t)) == t``.

    Index 0 is always a non-word token (maybe empty) and so is the last one,
    so word tokens are exactly the odd indices.
    """
    tokens: list[str] = []
    pos = 0
    for match in _WORD.finditer(text):
        tokens.append(text[pos : match.start()])
        tokens.append(match.group())
        pos = match.end()
    tokens.append(text[pos:])
    return tuple(tokens)


def word_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) character offsets of every word of ``text``, in order."""
    return [m.span() for m in _WORD.finditer(text)]


def word_count(text: str) -> int:
    """How many words ``text`` has (without building a list of them)."""
    return sum(1 for _ in _WORD.finditer(text))


def word_indices(tokens: tuple[str, ...]) -> list[int]:
    """Indices of the word tokens of a ``tokenize`` result."""
    return list(range(1, len(tokens), 2))


def normalize_protected(words: Iterable[str]) -> frozenset[str]:
    """Lowercased protected words; entries with punctuation ("'positive'",
    "Answer:") are reduced to their word parts."""
    out: set[str] = set()
    for raw in words:
        if not isinstance(raw, str):
            raise TypeError(
                f"protected words must be strings, got {type(raw).__name__}; pass a set of str"
            )
        low = raw.strip().lower()
        if not low:
            continue
        out.update(m.group() for m in _WORD.finditer(low))
    return frozenset(out)


def folded(word: str) -> str:
    """``word`` lower-cased, a typographic apostrophe read as a plain one ("Can’t" -> "can't"):
    the form word lists (opposites, negations, dictionaries) are looked up in."""
    return word.lower().replace("\u2019", "'")


def word_parts(word: str) -> list[str]:
    """The lowercased word itself plus its parts split at ``_ - '``."""
    low = word.lower()
    return [low, *_PARTS.findall(low)]


def is_protected(word: str, protected: frozenset[str]) -> bool:
    """Whether a word token (or any part of it) is a protected word."""
    if not protected:
        return False
    return any(part in protected for part in word_parts(word))


def mentions_protected(text: str, protected: frozenset[str]) -> bool:
    """Whether any word of ``text`` is protected: a replacement that would
    introduce a label word ("good" -> "positive") is never proposed."""
    return any(is_protected(m.group(), protected) for m in _WORD.finditer(text))


def has_letter(word: str) -> bool:
    return bool(_HAS_LETTER.search(word))


def protected_sequence(text: str, protected: frozenset[str]) -> list[str]:
    """The protected word tokens of ``text`` in order, exactly as written.
    Used to check that an attack left them all alone."""
    return [
        m.group() for m in _WORD.finditer(text) if is_protected(m.group(), protected)
    ]


def match_case(template: str, word: str) -> str:
    """Give ``word`` the capitalisation pattern of ``template`` (vocabularies
    of GloVe and uncased BERT are lowercase)."""
    if template.isupper() and len(template) > 1:
        return word.upper()
    if template[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


#: ``STOPWORDS`` as records name it.
STOPWORDS_NAME = "promptrobust's function-word list"

# Function words that the greedy attacks never spend queries on (the usual
# stop-word rule of TextFooler-style attacks). Written for this project.
STOPWORDS: frozenset[str] = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "nor",
        "so",
        "yet",
        "if",
        "then",
        "else",
        "than",
        "that",
        "this",
        "these",
        "those",
        "of",
        "to",
        "in",
        "on",
        "at",
        "by",
        "for",
        "with",
        "from",
        "into",
        "onto",
        "over",
        "under",
        "about",
        "as",
        "via",
        "per",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "am",
        "do",
        "does",
        "did",
        "done",
        "has",
        "have",
        "had",
        "having",
        "i",
        "me",
        "my",
        "we",
        "us",
        "our",
        "you",
        "your",
        "he",
        "him",
        "his",
        "she",
        "her",
        "it",
        "its",
        "they",
        "them",
        "their",
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "when",
        "where",
        "why",
        "how",
        "there",
        "here",
        "not",
        "no",
        "all",
        "any",
        "both",
        "each",
        "few",
        "more",
        "most",
        "other",
        "some",
        "such",
        "only",
        "own",
        "same",
        "too",
        "very",
        "can",
        "will",
        "just",
        "should",
        "would",
        "could",
        "may",
        "might",
        "must",
        "shall",
        "s",
        "t",
        "d",
        "ll",
        "m",
        "o",
        "re",
        "ve",
        "y",
        "also",
        "up",
        "down",
        "out",
        "off",
        "again",
        "once",
    ]
)
