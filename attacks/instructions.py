"""The words that carry a prompt's instruction: languages, scope and the task's roles.

A word attack that swaps one of these changes what the model is asked to do, however close
the new word sits in any vector space: "into German" -> "into Dutch", "report only the
number" -> "report also the number", "the premise entails the hypothesis" -> "the
hypothesis entails the hypothesis". The meaning verdict (``attacks.meaning_check``) treats
a change between two different groups below as a changed instruction, and a change
within one group ("only" -> "solely", "question" -> "query") as the same instruction.

Where the lists come from (written for promptrobust, not learned from the verdict's
labelled pairs; check v7's additions, the other names of languages, the parties of an
exchange, ``RESTRICTING`` and ``POINTERS``, were written for errors the fifth and sixth blind
sets showed, so those sets are not blind for them: docs/fidelity.md, "Check v7"; check v8's,
``PERIODS``, ``UNITS``, ``OPPOSED_PREPOSITIONS``, ``ONE``, "Bangla", "zero" and "alone", for errors
the seventh and eighth showed: "Check v8"; check v9's, ``ALSO_PREPOSITIONS``, "entail"/"imply",
the sides of a chat ("user", "assistant"), "orator", "Rumanian", "Slovakian" and watt-hours, for
errors the ninth showed: "Check v9"; check v10's "Hellenic", for an error the tenth showed: "Check v10"):

* ``LANGUAGES``: the English names of the ISO 639-1 languages most used on the web and in
  the paper's translation sets (IWSLT 2017, UN Multi), each its own group; a nationality
  is not its language ("English" -> "British" changes the instruction); two names of one language
  ("Persian", "Farsi") are one group, and ``LANGUAGE_ALIASES`` reads a language's own name for
  itself and ISO 639-2's other English names as the language ("Deutsch", "Flemish").
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
  that name the same act ("respond" as "answer", "return" as "output"), and the relation an NLI
  task asks about ("entail", "imply").
* ``PARTIES``: the parties a text has (its writer and reader, speaker and listener, sender and
  recipient) and the two sides of the exchanges task texts record (customer and seller or agent,
  employer and employee, patient and doctor, student and teacher, interviewer and interviewee,
  host and guest, tenant and landlord; the user and the assistant of a chat transcript), with
  their everyday synonyms; one party replaced by
  another changes the instruction, a party renamed by a word no list names is left to the rest of
  the check.
* ``PERIODS`` and ``UNITS``: the calendar's spans and rates ("week", "quarterly") and units of
  measure ("litre", "gallon"), each its own group like the parties (an unlisted replacement is
  left to the rest of the check).
* ``OPPOSED_PREPOSITIONS``: pairs of prepositions of opposite relations ("with"/"without",
  "from"/"to", "for"/"against"), which WordNet lists no antonyms for.
* ``DIRECTIONS``: the prepositions that make a language the target ("into", "to") or the
  source ("from") of a translation; read only before a language name ("into German" -> "from
  German" turns the direction round, "into German" -> "to German" keeps it).
"""

from __future__ import annotations

from collections.abc import Iterable

from promptrobust.attacks.words import folded

LANGUAGES: tuple[tuple[str, ...], ...] = tuple((name,) for name in (
    "english", "german", "french", "spanish", "italian", "portuguese", "dutch", "russian", "chinese",
    "mandarin", "cantonese", "japanese", "korean", "arabic", "hindi", "bengali", "urdu", "turkish",
    "polish", "ukrainian", "czech", "slovak", "hungarian", "romanian", "bulgarian", "greek",
    "hebrew", "swedish", "norwegian", "danish", "finnish", "icelandic", "estonian", "latvian",
    "lithuanian", "serbian", "croatian", "bosnian", "albanian", "catalan", "basque",
    "galician", "irish", "welsh", "vietnamese", "thai", "indonesian", "malay", "tagalog", "swahili",
    "latin", "tamil", "telugu", "marathi", "punjabi", "gujarati", "kannada", "malayalam", "nepali",
)) + (("persian", "farsi"), ("slovenian", "slovene"))  # one language, two English names

#: Other names of the languages above, each read as that language: the language's own name for itself
#: (the "native name" ISO 639-1 gives, in Latin letters; "Deutsch", "Türkçe"), the alternative English
#: names ISO 639-2 lists beside the main one ("Dutch; Flemish", "Spanish; Castilian"), and the
#: variants Merriam-Webster gives ("Netherlandic" for "Dutch", "Rumanian" for "Romanian", "Slovakian"
#: for "Slovak"). A name followed by "-language" is the language too
#: ("French-language": ``language_name``).
LANGUAGE_ALIASES: dict[str, str] = {
    "deutsch": "german", "français": "french", "francais": "french", "español": "spanish", "espanol": "spanish",
    "castilian": "spanish", "italiano": "italian", "português": "portuguese", "portugues": "portuguese",
    "nederlands": "dutch", "flemish": "dutch", "netherlandic": "dutch", "türkçe": "turkish", "turkce": "turkish",
    "polski": "polish", "svenska": "swedish", "norsk": "norwegian", "dansk": "danish", "suomi": "finnish",
    "magyar": "hungarian", "čeština": "czech", "cestina": "czech", "slovenčina": "slovak", "română": "romanian",
    "romana": "romanian", "moldovan": "romanian", "hrvatski": "croatian", "srpski": "serbian", "shqip": "albanian",
    "català": "catalan", "valencian": "catalan", "euskara": "basque", "galego": "galician", "gaeilge": "irish",
    "cymraeg": "welsh", "íslenska": "icelandic", "islenska": "icelandic", "eesti": "estonian",
    "latviešu": "latvian", "lietuvių": "lithuanian", "kiswahili": "swahili", "panjabi": "punjabi",
    "slovenščina": "slovenian", "bangla": "bengali", "rumanian": "romanian", "roumanian": "romanian",
    "slovakian": "slovak", "hellenic": "greek",
}

SCOPE: tuple[tuple[str, ...], ...] = (
    ("only", "solely", "exclusively", "merely", "just", "alone"),
    ("also", "too", "additionally", "likewise", "furthermore"),
    ("even",),
    ("all", "every", "each", "entire", "whole"),
    ("entirely", "completely", "fully", "wholly", "totally"),
    ("partly", "partially"),
    ("any",),
    ("some", "several"),
    ("none", "no", "nothing", "zero"),
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
    ("entail", "imply"),  # the relation an NLI task asks about
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
)

#: The parties a task's text has or records. A party replaced by another party changes who is meant
#: ("patient" -> "doctor"); replaced by a word no list names ("listener" -> "reviewer", "diner" ->
#: "customer") it is left to the rest of the check, since one person often has both names.
PARTIES: tuple[tuple[str, ...], ...] = (
    ("writer", "author"),
    ("reader",),
    ("speaker", "orator"),
    ("listener", "audience"),
    ("sender",),
    ("recipient", "receiver", "addressee"),
    # the two sides of the exchanges the tasks' texts record: a sale, a service, a job, a clinic, a
    # class, an interview, a tenancy (each side its own group: "patient" -> "doctor" changes who is meant)
    ("customer", "client", "shopper", "consumer", "purchaser", "buyer"),
    ("seller", "vendor", "supplier", "retailer", "merchant"),
    ("agent", "representative"),
    ("employer",),
    ("employee", "worker"),
    ("applicant", "candidate"),
    ("patient",),
    ("doctor", "physician", "clinician"),
    ("student", "pupil", "learner"),
    ("teacher", "instructor", "tutor"),
    ("interviewer",),
    ("interviewee",),
    ("host", "presenter"),
    ("guest",),
    ("tenant", "renter"),
    ("landlord", "landlady"),
    # the two sides of a chat transcript an assistant is judged on
    ("user",),
    ("assistant", "chatbot"),
)

#: Spans of time, and how often (the calendar's units): one replaced by another changes the period a
#: text covers or the rate asked for ("quarterly" -> "annual", "daily log" -> "hourly log", "per week" ->
#: "per month"); replaced by a word no list names ("day" -> "date") it is left to the rest of the check.
PERIODS: tuple[tuple[str, ...], ...] = (
    ("hour",), ("hourly",), ("day",), ("daily",), ("week",), ("weekly",), ("fortnight",), ("fortnightly",),
    ("month",), ("monthly",), ("quarterly",), ("year",), ("annual", "yearly", "annually"), ("decade",),
    ("century",),
)

#: Units of measure (SI, imperial and US customary, temperature scales, common currencies), each a group with
#: its other spellings: one replaced by another asks for another quantity ("in litres" -> "in gallons").
UNITS: tuple[tuple[str, ...], ...] = (
    ("metre", "meter"), ("centimetre", "centimeter"), ("millimetre", "millimeter"), ("kilometre", "kilometer"),
    ("inch",), ("foot", "feet"), ("yard",), ("mile",),
    ("litre", "liter"), ("millilitre", "milliliter"), ("gallon",), ("pint",),
    ("gram", "gramme"), ("kilogram", "kilogramme", "kilo"), ("tonne",), ("ton",), ("ounce",), ("pound",),
    ("celsius", "centigrade"), ("fahrenheit",), ("kelvin",),
    ("watt",), ("kilowatt",), ("megawatt",), ("kilowatt-hour", "kilowatt-hours", "kwh"),
    ("megawatt-hour", "megawatt-hours", "mwh"), ("volt",), ("ampere", "amp"), ("joule",), ("calorie",),
    ("dollar",), ("euro",), ("yen",), ("cent",), ("penny", "pence"),
)

#: The scope words that negate what follows them.
NEGATIONS = frozenset({"not", "never", "no", "none", "nothing", "neither", "nor", "without", "cannot", "can't",
                       "don't", "doesn't", "didn't", "won't", "isn't", "aren't", "wasn't", "weren't", "shouldn't",
                       "mustn't"})

#: Degree words that weaken or sharpen what they are put before ("guarantees it is true" ->
#: "guarantees it is partly true", "confirms" -> "fully confirms"): inserted, they change the
#: instruction, where an inserted "also", "all" or "both" restates it (and "only" does either:
#: "Focus only on decisions" narrows, "answer 'yes' only if it does" restates; left to the rest).
RESTRICTING = frozenset(w for group in SCOPE if group[0] in ("entirely", "partly", "exactly", "approximately")
                        for w in group)

#: Words that point at the input the prompt comes with ("the text below", "the following review"):
#: deleted, the prompt still names the same input, since the model sees it beside the prompt either way.
POINTERS = frozenset({"below", "above", "following", "given", "provided", "attached", "accompanying"})

#: The indefinite article and "one": replaced one by the other alone, they count the same ("in a sentence" ->
#: "in one sentence"). Not a scope group: a change that also replaces the noun after the article ("an expert"
#: -> "a specialist") is judged by the noun.
ONE = frozenset({"a", "an", "one"})

#: Scope words that are also prepositions of topic or place: "about 40 words" is approximate, "a review
#: about the hotel" is not a scope word at all, so they are read as scope words only before a number.
ALSO_PREPOSITIONS = frozenset({"about", "around"})
_NUMBER_WORDS = frozenset({"one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                           "twelve", "twenty", "thirty", "forty", "fifty", "hundred", "thousand", "dozen", "half"})


def names_a_number(word: str) -> bool:
    """Whether ``word`` starts a quantity: digits ("40", "3.5", "$12") or a number word ("forty", "dozen"; not
    "a": "a review about a hotel" names no quantity)."""
    low = word.lower().lstrip("$£€")
    return any(ch.isdigit() for ch in low[:1]) or low in _NUMBER_WORDS


def as_instruction(forms: Iterable[str], following: str | None) -> list[str]:
    """The forms of a word to look up as instruction words, given the word after it: "about" and "around"
    only before a number (``ALSO_PREPOSITIONS``)."""
    before_number = following is not None and names_a_number(following)
    return [f for f in forms if before_number or f not in ALSO_PREPOSITIONS]


#: Prepositions of opposite relations: one replaced by the other says the opposite ("without notes" ->
#: "with notes", "a message from the manager" -> "to the manager"). WordNet lists no antonyms for them;
#: "before"/"after" and "inside"/"outside" are in the hand-written opposites (``embeddings._ANTONYM_PAIRS``,
#: read by ``synonyms.is_opposite`` before this). These stay apart from that table because it also
#: protects a prompt's contrasted words from the attacks, and "from ... to" in a translation prompt
#: is no contrast.
OPPOSED_PREPOSITIONS = frozenset(frozenset(pair) for pair in (
    ("with", "without"), ("from", "to"), ("for", "against"), ("including", "excluding"), ("over", "under"),
))

DIRECTIONS: tuple[tuple[str, ...], ...] = (("into", "to"), ("from",))  # not "in": "the text in French" is its source

#: kind -> its groups, in the order the verdict names them.
VOCABULARY: dict[str, tuple[tuple[str, ...], ...]] = {"language": LANGUAGES, "scope word": SCOPE, "role": ROLES,
                                                     "party": PARTIES, "period": PERIODS, "unit": UNITS}
#: Kinds whose words also have names no list gives: one of them replaced by an unlisted word, or
#: replacing one, is left to the rest of the check.
OPEN_KINDS = frozenset({"party", "period", "unit"})

_GROUP: dict[str, tuple[str, int]] = {
    word: (kind, n) for kind, groups in VOCABULARY.items() for n, group in enumerate(groups) for word in group
}


def without_possessive(word: str) -> str:
    """"patient's" -> "patient", "readers'" -> "readers": the party a possessive names."""
    if word.endswith("'s"):
        return word[:-2]
    return word[:-1] if word.endswith("s'") else word


def language_name(word: str) -> str | None:
    """The English name of the language ``word`` names: itself, another name of it ("Deutsch", "Flemish"),
    either followed by "-language" ("French-language"); None when it names none."""
    low = word.lower()
    low = low[: -len("-language")] if low.endswith("-language") else low
    name = LANGUAGE_ALIASES.get(low, low)
    return name if _GROUP.get(name, ("",))[0] == "language" else None


def group_of(forms: Iterable[str]) -> tuple[str, int] | None:
    """(kind, group) of the first of a word's forms (the word, its lemmas) that is an instruction word
    (a language by any of its names)."""
    for form in forms:
        low = without_possessive(folded(form))
        if low in _GROUP:
            return _GROUP[low]
        language = language_name(low)
        if language is not None:
            return _GROUP[language]
    return None


def instruction_change(old_forms: Iterable[str], new_forms: Iterable[str]) -> tuple[bool, str] | None:
    """Whether replacing a word (given by its forms) by another keeps the instruction: (True, why)
    within one group, (False, why) across groups or out of one; None when neither is an instruction word,
    or when a party is replaced by a word no list names (or replaces one)."""
    old, new = group_of(old_forms), group_of(new_forms)
    if old is None and new is None:
        return None
    if (old is None or new is None) and (old or new)[0] in OPEN_KINDS:  # type: ignore[index]
        return None  # a party, period or unit by another name, or not: left to the rest of the check
    if old == new:
        assert old is not None
        return True, f"the same {old[0]}"
    kind = (old or new)[0]  # type: ignore[index]
    return False, f"changes the instruction: another {kind}"


def direction_change(old: str, new: str, next_word: str) -> tuple[bool, str] | None:
    """Whether replacing the preposition ``old`` by ``new`` before ``next_word`` keeps a translation's
    direction: None unless both are direction prepositions and ``next_word`` names a language."""
    if language_name(next_word) is None:
        return None
    groups = [next((n for n, group in enumerate(DIRECTIONS) if w.lower() in group), None) for w in (old, new)]
    if None in groups:
        return None
    if groups[0] == groups[1]:
        return True, f"the same direction of translation ({next_word} stays the {'target' if groups[0] == 0 else 'source'})"
    return False, f"changes the instruction: turns the translation round ({next_word} becomes the {'source' if groups[0] == 0 else 'target'})"
