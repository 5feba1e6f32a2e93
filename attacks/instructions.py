"""The words that carry a prompt's instruction: languages, scope and the task's roles.

A word attack that swaps one of these changes what the model is asked to do, however close
the new word sits in any vector space: "into German" -> "into Dutch", "report only the
number" -> "report also the number", "the premise entails the hypothesis" -> "the
hypothesis entails the hypothesis". The meaning verdict (``attacks.meaning_check``) treats
a change between two different groups below as a changed instruction, and a change
within one group ("only" -> "solely", "question" -> "query") as the same instruction.

Where the lists come from (written for promptrobust, not learned from the verdict's
labelled pairs):

* ``LANGUAGES``: the English names of the ISO 639-1 languages most used on the web and in
  the paper's translation sets (IWSLT 2017, UN Multi), each its own group; a nationality
  is not its language ("English" -> "British" changes the instruction); two names of one language
  ("Persian", "Farsi") are one group.
* ``SCOPE``: English quantifiers, focusing adverbs, frequency and degree adverbs, the
  coordinators "and" and "or", modal words of possibility, ordinals and small cardinals (the
  closed classes of a grammar of English: determiners and quantifiers, "only"/"also"/"even",
  "always"/"never", "entirely"/"partly", "might"/"perhaps", "first"/"last"), grouped by meaning
  (a determiner and a degree adverb apart: "all" -> "totally" is not the same scope).
  Of these, a negation (``NEGATIONS``) inserted into the prompt changes the instruction too
  ("keep the names" -> "never keep the names"); an inserted "also", "all" or "only" mostly
  stresses what the prompt already says, so insertions of other scope words are left to the rest
  of the check.
* ``ROLES``: the names the paper's tasks give the parts of their input (GLUE's premise and
  hypothesis, question and passage or context, sentence pairs; translation's source and
  target; classification's category; summarisation's summary and headline), with the verbs
  that name the same act ("respond" as "answer", "return" as "output"), and the parties a
  text has (its writer and reader, speaker and listener, sender and recipient).
* ``DIRECTIONS``: the prepositions that make a language the target ("into", "to") or the
  source ("from") of a translation; read only before a language name ("into German" -> "from
  German" turns the direction round, "into German" -> "to German" keeps it).
"""

from __future__ import annotations

from collections.abc import Iterable

LANGUAGES: tuple[tuple[str, ...], ...] = tuple((name,) for name in (
    "english", "german", "french", "spanish", "italian", "portuguese", "dutch", "russian", "chinese",
    "mandarin", "cantonese", "japanese", "korean", "arabic", "hindi", "bengali", "urdu", "turkish",
    "polish", "ukrainian", "czech", "slovak", "hungarian", "romanian", "bulgarian", "greek",
    "hebrew", "swedish", "norwegian", "danish", "finnish", "icelandic", "estonian", "latvian",
    "lithuanian", "serbian", "croatian", "bosnian", "albanian", "catalan", "basque",
    "galician", "irish", "welsh", "vietnamese", "thai", "indonesian", "malay", "tagalog", "swahili",
    "latin", "tamil", "telugu", "marathi", "punjabi", "gujarati", "kannada", "malayalam", "nepali",
)) + (("persian", "farsi"), ("slovenian", "slovene"))  # one language, two English names

SCOPE: tuple[tuple[str, ...], ...] = (
    ("only", "solely", "exclusively", "merely", "just"),
    ("also", "too", "additionally", "likewise", "furthermore"),
    ("even",),
    ("all", "every", "each", "entire", "whole"),
    ("entirely", "completely", "fully", "wholly", "totally"),
    ("partly", "partially"),
    ("any",),
    ("some", "several"),
    ("none", "no", "nothing"),
    ("not",),
    ("both",),
    ("either",),
    ("and",),
    ("or",),
    ("might", "perhaps", "possibly", "maybe"),  # not "may": it also grants permission
    ("neither", "nor"),
    ("always", "invariably"),
    ("never",),
    ("sometimes", "occasionally"),
    ("often", "frequently", "usually"),
    ("rarely", "seldom"),
    ("exactly", "precisely", "exact", "precise"),
    ("approximately", "roughly", "about", "around", "nearly", "almost", "approximate", "rough"),
    ("most", "maximum"),
    ("least", "minimum", "fewest"),
    ("more",),
    ("less", "fewer"),
    ("first", "initial"),
    ("second",),
    ("third",),
    ("last", "final"),
    ("one", "single"),
    ("double",),
    ("two",),
    ("three",),
    ("four",),
    ("five",),
    ("six",),
    ("seven",),
    ("eight",),
    ("nine",),
    ("ten",),
)

ROLES: tuple[tuple[str, ...], ...] = (
    ("premise",),
    ("hypothesis",),
    ("conclusion",),
    ("evidence",),
    ("question", "query", "inquiry", "enquiry"),
    ("answer", "reply", "response", "respond"),
    ("context", "passage", "paragraph", "text"),
    ("sentence", "statement", "claim", "assertion", "phrase"),
    ("source",),
    ("target",),
    ("input",),
    ("output", "return"),
    ("headline", "title"),
    ("summary", "abstract"),
    ("category", "class"),
    ("writer", "author"),
    ("reader",),
    ("speaker",),
    ("listener", "audience"),
    ("sender",),
    ("recipient", "receiver", "addressee"),
)

#: The scope words that negate what follows them.
NEGATIONS = frozenset({"not", "never", "no", "none", "nothing", "neither", "nor", "without", "cannot", "can't",
                       "don't", "doesn't", "didn't", "won't", "isn't", "aren't", "wasn't", "weren't", "shouldn't",
                       "mustn't"})

DIRECTIONS: tuple[tuple[str, ...], ...] = (("into", "to"), ("from",))  # not "in": "the text in French" is its source

#: kind -> its groups, in the order the verdict names them.
VOCABULARY: dict[str, tuple[tuple[str, ...], ...]] = {"language": LANGUAGES, "scope word": SCOPE, "role": ROLES}

_GROUP: dict[str, tuple[str, int]] = {
    word: (kind, n) for kind, groups in VOCABULARY.items() for n, group in enumerate(groups) for word in group
}


def group_of(forms: Iterable[str]) -> tuple[str, int] | None:
    """(kind, group) of the first of a word's forms (the word, its lemmas) that is an instruction word."""
    return next((_GROUP[f] for f in forms if f.lower() in _GROUP), None)


def instruction_change(old_forms: Iterable[str], new_forms: Iterable[str]) -> tuple[bool, str] | None:
    """Whether replacing a word (given by its forms) by another keeps the instruction: (True, why)
    within one group, (False, why) across groups or out of one; None when neither is an instruction word."""
    old, new = group_of(old_forms), group_of(new_forms)
    if old is None and new is None:
        return None
    if old == new:
        assert old is not None
        return True, f"the same {old[0]}"
    kind = (old or new)[0]  # type: ignore[index]
    return False, f"changes the instruction: another {kind}"


def direction_change(old: str, new: str, next_word: str) -> tuple[bool, str] | None:
    """Whether replacing the preposition ``old`` by ``new`` before ``next_word`` keeps a translation's
    direction: None unless both are direction prepositions and ``next_word`` names a language."""
    language = group_of([next_word.lower()])
    if language is None or language[0] != "language":
        return None
    groups = [next((n for n, group in enumerate(DIRECTIONS) if w.lower() in group), None) for w in (old, new)]
    if None in groups:
        return None
    if groups[0] == groups[1]:
        return True, f"the same direction of translation ({next_word} stays the {'target' if groups[0] == 0 else 'source'})"
    return False, f"changes the instruction: turns the translation round ({next_word} becomes the {'source' if groups[0] == 0 else 'target'})"
