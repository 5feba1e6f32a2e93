"""The words of a prompt that define its labels.

Two kinds, both protected by the word attacks' meaning guard
(``components.MeaningGuard``) and both checked by the meaning verdict
(``meaning_check``):

* ``label_linked_words``: the words in the same clause as a label word or
  its verbaliser. "Write positive for praise and negative for criticism" has
  the clauses "Write positive for praise" and "negative for criticism", so
  *write*, *praise* and *criticism* say what the labels mean; changing them
  changes the task even when the label words stay.
* ``synonyms.contrast_words``: words another word of the prompt opposes
  ("pleased" / "displeased"), or that oppose a label word, wherever they stand.

A clause ends at ``. , ; : ! ?``, a line break, or the coordinators *and*,
*but*, *while*, *whereas*; not at *or*, which joins the labels themselves. So
"Determine the overall sentiment, calling it positive or negative" links only
*calling*, and "Reply entailment if true, contradiction if false" links *true*
to entailment and *false* to contradiction; a condition cut off by a comma
("If yes, answer positive") is still protected when another word opposes it
(*yes* / *no*: contrast words). Function words (``words.STOPWORDS``) are never
linked: the attacks skip them anyway.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from promptrobust.attacks.lexicon import Lexicon
from promptrobust.attacks.synonyms import contrast_words
from promptrobust.attacks.words import STOPWORDS, has_letter, is_protected, word_spans

_CLAUSE_END = re.compile(r"[.,;:!?\n]+|\b(?:and|but|while|whereas)\b", re.IGNORECASE)


def clauses(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each clause of ``text``."""
    start = 0
    for match in _CLAUSE_END.finditer(text):
        if match.start() > start:
            yield start, match.start()
        start = match.end()
    if start < len(text):
        yield start, len(text)


def label_clauses(text: str, labels: frozenset[str]) -> list[tuple[int, int]]:
    """(start, end) of each clause of ``text`` that holds a word of ``labels``."""
    out = []
    for start, end in clauses(text):
        clause = text[start:end]
        if any(is_protected(clause[a:b], labels) for a, b in word_spans(clause)):
            out.append((start, end))
    return out


def linked(word: str, labels: frozenset[str]) -> bool:
    """Whether a word of a label clause is linked to the label (not a label, not a function word)."""
    return has_letter(word) and not is_protected(word, labels) and word.lower() not in STOPWORDS


def label_linked_words(text: str, labels: frozenset[str]) -> frozenset[str]:
    """Lowercased words that share a clause with a word of ``labels`` (the task's
    protected words: its labels, their verbalisers, its special words such as
    "unanswerable"), except those words themselves and function words."""
    out: set[str] = set()
    for start, end in label_clauses(text, labels) if labels else ():
        clause = text[start:end]
        out.update(clause[a:b].lower() for a, b in word_spans(clause) if linked(clause[a:b], labels))
    return frozenset(out)


def label_defining_words(text: str, labels: frozenset[str], lexicon: Lexicon | None) -> frozenset[str]:
    """Both kinds together: the words no word substitution may change."""
    return label_linked_words(text, labels) | contrast_words(text, labels, lexicon)
