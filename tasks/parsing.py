"""Reading a label from a model's free-text answer.

Two parsers, chosen per run and recorded with the results:

``last_word``
    The reference behaviour: lowercase, strip, take the last word, strip its
    punctuation, map it to a label. Anything else is unparseable (None), which
    the metric scores as wrong.
``robust``
    Looks for the task's answer words anywhere in a short answer ("The answer
    is: negative", "Positive.", "neutral'"). Two different labels in one
    answer are ambiguous, so None.

Label words may contain underscores ("not_entailment"); ``robust`` also reads
the spelled-out forms ("not entailment", "not-equivalent").
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping

from promptrobust.tasks.base import ParserName

# Punctuation stripped from the ends of a word; underscore belongs to words.
_EDGE_PUNCT = "".join(c for c in string.punctuation if c != "_") + "\u201c\u201d\u2018\u2019\u00ab\u00bb\u3002\uff0c\uff1a"
# Alphanumeric runs: underscores, hyphens, apostrophes and spaces all separate.
_PART_RE = re.compile(r"[^\W_]+")
#: ``robust`` ignores answers longer than this many words (not a short answer).
ROBUST_MAX_WORDS = 40


def strip_word(word: str) -> str:
    """Lowercase a word and strip punctuation (not underscores) from its ends."""
    return word.strip().strip(_EDGE_PUNCT).lower()


def last_word(answer: str) -> str:
    """The answer's last whitespace-separated word, lowercased and stripped."""
    words = [strip_word(w) for w in answer.split()]
    words = [w for w in words if w]
    return words[-1] if words else ""


def _phrase_tokens(phrase: str) -> tuple[str, ...]:
    return tuple(t.lower() for t in _PART_RE.findall(phrase))


class LabelParser:
    """Maps answers to labels for one task.

    ``answer_words`` maps each label to the words that mean it; the first is
    the verbaliser the prompts ask for, the others are synonyms that only
    ``robust`` accepts. ``case_sensitive_tokens`` (lowercase) are option
    letters that ``robust`` reads only when written as capitals.
    """

    def __init__(
        self,
        answer_words: Mapping[str, tuple[str, ...]],
        *,
        case_sensitive_tokens: frozenset[str] = frozenset(),
    ) -> None:
        self._exact: dict[str, str] = {}
        self._primary: dict[str, str] = {}
        self._phrases: list[tuple[tuple[str, ...], str]] = []
        for label, words in answer_words.items():
            if not words:
                raise ValueError(f"label {label!r} has no answer words")
            self._primary[words[0].lower()] = label
            for w in words:
                key = w.lower()
                other = self._exact.get(key)
                if other is not None and other != label:
                    raise ValueError(f"answer word {w!r} maps to two labels ({other}, {label})")
                self._exact[key] = label
                self._phrases.append((_phrase_tokens(w), label))
        # Longest phrases first, so "not entailment" wins over "entailment".
        self._phrases.sort(key=lambda p: -len(p[0]))
        self._case_sensitive = case_sensitive_tokens

    def parse(self, answer: str, parser: ParserName = "last_word") -> str | None:
        if parser == "last_word":
            return self.parse_last_word(answer)
        if parser == "robust":
            return self.parse_robust(answer)
        raise ValueError(f"unknown parser {parser!r}; use 'last_word' or 'robust'")

    def parse_last_word(self, answer: str) -> str | None:
        """Only the verbaliser itself counts here, as in the reference."""
        return self._primary.get(last_word(answer))

    def parse_robust(self, answer: str) -> str | None:
        raw = _PART_RE.findall(answer)
        if not raw or len(raw) > ROBUST_MAX_WORDS:
            return None
        low = [r.lower() for r in raw]
        found: set[str] = set()
        i = 0
        while i < len(low):
            for phrase, label in self._phrases:
                n = len(phrase)
                if tuple(low[i : i + n]) != phrase:
                    continue
                if n == 1 and phrase[0] in self._case_sensitive and not _letter_ok(raw, i):
                    continue
                found.add(label)
                i += n - 1
                break
            i += 1
        return found.pop() if len(found) == 1 else None


def _letter_ok(raw: list[str], i: int) -> bool:
    """An option letter counts only as a capital ("B", "(B)", "B."), and "A"
    not when prose follows it ("A dog barks": an article)."""
    if not raw[i].isupper():
        return False
    nxt = raw[i + 1] if i + 1 < len(raw) else ""
    return not (raw[i] == "A" and nxt[:1].islower())
