"""Replacement words that keep meaning, and the word-level meaning guard.

* ``LexiconNeighbours``: the offline synonym source. Candidates are the
  WordNet synonyms (``attacks.lexicon``) of the word's lemma, re-inflected like
  the word, that the word vectors know, ranked by their cosine to the word;
  ``min_cos`` and ``k`` apply as to plain neighbours. So a candidate is both a
  listed synonym and an embedding neighbour: "writer" -> "author", never
  "literature" (an association) or "elated" for "displeased" (an antonym).
  With a tagger (``InContext``) it proposes the word in its sense in this
  prompt: only synonyms of the part of speech the word has here (a verb stays a
  verb: "judge" -> "evaluate", never "justice"), from the senses WordNet's
  sense-tagged corpus gives the word most of the time, and only candidates
  that themselves usually mean that sense (``SENSE_SHARE``).
* ``is_opposite``: the antonym guard, the union of the hand-written pairs, the
  negating-prefix rule (``embeddings.is_antonym``) and WordNet's antonyms
  (direct and indirect), tried on the words and on their lemmas.
* ``contrast_words``: words of a prompt that its other words oppose ("pleased"
  and "displeased" in "positive if pleased and negative if displeased") or
  that oppose a protected label word: they define the labels, so the word
  attacks never touch them.
* ``Guarded``: wraps any word transformation and drops opposite replacements.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from promptrobust.attacks.base import WordSite, WordTransformation
from promptrobust.attacks.embeddings import _ANTONYMS, WordEmbedding, is_antonym, negations
from promptrobust.attacks.instructions import as_instruction, group_of
from promptrobust.attacks.lexicon import MAX_EXPRESSION_WORDS, Lexicon, load_lexicon
from promptrobust.attacks.pos import PosTagger, TaggedSpan, tag_at
from promptrobust.attacks.words import is_protected, match_case, tokenize, word_indices

# Inflection classes: (class, surface suffix, lemma suffix), WordNet's
# detachment rules ("morphy"), tried in order.
_DETACH: tuple[tuple[str, str, str], ...] = (
    ("s", "ies", "y"), ("s", "ses", "s"), ("s", "xes", "x"), ("s", "zes", "z"), ("s", "ches", "ch"),
    ("s", "shes", "sh"), ("s", "es", "e"), ("s", "es", ""), ("s", "s", ""), ("s", "men", "man"),
    ("ed", "ied", "y"), ("ed", "ed", "e"), ("ed", "ed", ""), ("ing", "ing", "e"), ("ing", "ing", ""),
)
#: morphy's adjective rules (comparative, superlative); tried only for a word that is not itself a
#: lemma ("number" is not "numb" + "er") and only towards a lemma with an adjective sense.
_DETACH_ADJECTIVE: tuple[tuple[str, str, str], ...] = (
    ("er", "er", ""), ("er", "er", "e"), ("est", "est", ""), ("est", "est", "e"),
)
#: Parts of speech an inflection can come from ("" = the word is a lemma: any).
_POS_OF = {"": None, "s": ("n", "v"), "ed": ("v",), "ing": ("v",), "er": ("a", "r"), "est": ("a", "r")}
_VOWELS = "aeiou"


@dataclass(frozen=True)
class Form:
    """A lemma of a surface word and the inflection that makes the word from it."""

    lemma: str
    inflection: str  # "" (the word is the lemma), "s", "ed", "ing", "er", "est"

    @property
    def pos(self) -> tuple[str, ...] | None:
        return _POS_OF[self.inflection]


def _irregular_class(form: str, pos: str) -> str:
    """The inflection an irregular form of WordNet's exception lists carries ("bought": "ed")."""
    if pos == "n":
        return "s"
    if pos == "v":  # of the list's verb forms in -s, only "was" is not a third person ("has", "is", "quizzes")
        return "ing" if form.endswith("ing") else "s" if form.endswith("s") and form != "was" else "ed"
    return "est" if form.endswith("st") else "er"


def lemma_forms(word: str, lexicon: Lexicon) -> list[Form]:
    """The word's lemmas that the lexicon knows, the word itself first, as WordNet's lemmatiser
    ("morphy") finds them: the word, its irregular forms (the exception lists), the suffix rules."""
    low = word.lower()
    out: list[Form] = []
    if low in lexicon:
        out.append(Form(low, ""))
    for pos, lemma in lexicon.irregular(low):
        form = Form(lemma, _irregular_class(low, pos))
        if lemma in lexicon and form not in out:
            out.append(form)
    rules = _DETACH if low in lexicon else _DETACH + _DETACH_ADJECTIVE
    for cls, surface, lemma_end in rules:
        if low.endswith(surface) and len(low) > len(surface) + 1:
            lemma = low[: len(low) - len(surface)] + lemma_end
            # doubled consonant: "stopped" -> "stop", "running" -> "run", "biggest" -> "big"
            candidates = [lemma]
            if not lemma_end and len(lemma) > 2 and lemma[-1] == lemma[-2] and lemma[-1] not in _VOWELS:
                candidates.append(lemma[:-1])
            for lem in candidates:
                if lem not in lexicon or Form(lem, cls) in out:
                    continue
                if cls in ("er", "est") and not lexicon.senses_in(lem, ["a"]):
                    continue
                out.append(Form(lem, cls))
    return out


def inflect(lemma: str, inflection: str) -> str:
    """The regular English form of ``lemma`` (candidates are kept only when
    the word vectors know the result, which drops irregular misses)."""
    if not inflection:
        return lemma
    if inflection == "s":
        if lemma.endswith(("s", "x", "z", "ch", "sh")):
            return lemma + "es"
        if lemma.endswith("y") and len(lemma) > 1 and lemma[-2] not in _VOWELS:
            return lemma[:-1] + "ies"
        return lemma + "s"
    if inflection == "ed":
        if lemma.endswith("e"):
            return lemma + inflection[1:]
        if lemma.endswith("y") and len(lemma) > 1 and lemma[-2] not in _VOWELS:
            return lemma[:-1] + "i" + inflection
        return lemma + inflection
    if inflection == "ing":
        if lemma.endswith("e") and not lemma.endswith("ee") and len(lemma) > 2:
            return lemma[:-1] + "ing"
        return lemma + "ing"
    if inflection in ("er", "est"):
        if lemma.endswith("e"):
            return lemma + inflection[1:]
        if lemma.endswith("y") and len(lemma) > 1 and lemma[-2] not in _VOWELS:
            return lemma[:-1] + "i" + inflection
        return lemma + inflection
    raise ValueError(f"unknown inflection {inflection!r}")


def is_opposite(a: str, b: str, lexicon: Lexicon | None = None) -> bool:
    """Whether ``b`` means the opposite of ``a`` (either direction, any form)."""
    a, b = a.lower(), b.lower()
    if is_antonym(a, b):
        return True
    if lexicon is None:
        return False
    b_forms = _forms(b, lexicon)
    for x in _forms(a, lexicon):
        ants = lexicon.antonyms(x)
        for y in b_forms:
            if y in ants or is_antonym(x, y):
                return True
    return False


def _forms(word: str, lexicon: Lexicon | None) -> set[str]:
    """The word, its lemmas and their other spellings, as a set (``forms_of`` and ``spelling_variants``;
    without a lexicon, the word alone)."""
    if lexicon is None:
        return {word.lower()}
    forms = set(forms_of(word, lexicon))
    return forms.union(*(spelling_variants(f, lexicon) for f in forms))


#: British -> American spelling correspondences ("criticise" / "criticize", "colour" / "color",
#: "analyse" / "analyze", "centre" / "center", "catalogue" / "catalog", "defence" / "defense",
#: "travelled" / "traveled"), applied to both words before they are compared.
_SPELLING = (("ise", "ize"), ("isa", "iza"), ("yse", "yze"), ("our", "or"), ("tre", "ter"), ("ogue", "og"),
             ("ence", "ense"), ("ll", "l"))


def _american(word: str) -> str:
    for british, american in _SPELLING:
        word = word.replace(british, american)
    return word


def spelling_variants(lemma: str, lexicon: Lexicon) -> set[str]:
    """The lemma's other spellings: members of its WordNet synsets that differ from it by British and
    American spelling alone. WordNet 3.0 lists both spellings in one synset but draws an antonym
    between one spelling of each word ("criticize" / "praise", not "criticise" / "praise")."""
    key = _american(lemma)
    return {m for sid in lexicon.senses(lemma) for m in lexicon.members(sid) if m != lemma and _american(m) == key}


def _opposites_of(form: str, lexicon: Lexicon | None) -> set[str]:
    """Every y with ``is_antonym(form, y)`` or ``y in lexicon.antonyms(form)`` (a lookup, not a search)."""
    out = set(_ANTONYMS.get(form, ())) | negations(form)
    if lexicon is not None:
        out |= lexicon.antonyms(form)
    return out


def contrast_words(text: str, protected: frozenset[str], lexicon: Lexicon | None = None) -> frozenset[str]:
    """Lowercased words of ``text`` that another word of ``text`` opposes, or
    that oppose a protected word: the words that define the labels. Each word's
    opposites are looked up (linear in the prompt), with exactly the pairs
    ``is_opposite`` finds."""
    tokens = tokenize(text)
    words = {tokens[i].lower() for i in word_indices(tokens) if tokens[i].isalpha()}
    by_form: dict[str, set[str]] = {}
    for w in words:
        for form in _forms(w, lexicon):
            by_form.setdefault(form, set()).add(w)
    anchors = {p for p in protected if p.isalpha()}
    anchor_forms = {form for p in anchors for form in _forms(p, lexicon)}
    out: set[str] = set()
    for a in words:
        opposed = {y for form in _forms(a, lexicon) for y in _opposites_of(form, lexicon)}
        partners = {b for y in opposed for b in by_form.get(y, ()) if b != a}
        if partners:
            out |= {a} | partners
        if opposed & anchor_forms and not is_protected(a, protected):
            out.add(a)
    return frozenset(out)


#: Listed synonyms less similar than this in the word vectors are other
#: senses of the word ("or" -> "surgery", for "operating room"): dropped.
SYNONYM_FLOOR = 0.5

#: Universal part-of-speech tags -> WordNet's parts of speech. A word tagged
#: otherwise in its prompt (a preposition, a determiner, a number) has no synonym.
WORDNET_POS = {"NOUN": "n", "PROPN": "n", "VERB": "v", "ADJ": "a", "ADV": "r"}
#: A sense counts as the word's sense here when WordNet's sense-tagged corpus
#: (``index.sense``) tags the lemma in it at least this share of its tagged uses
#: in the part of speech (a lemma never tagged keeps every sense); and a
#: candidate is kept only when it means that sense at least this share of its
#: own tagged uses ("inspection" is rarely a review; "justice" rarely a judge).
SENSE_SHARE = 0.2


class InContext:
    """The part of speech of a word in its prompt, from a tagger; each prompt tagged once."""

    def __init__(self, tagger: PosTagger, max_prompts: int = 256) -> None:
        self.tagger = tagger
        self._tagged: dict[str, list[TaggedSpan]] = {}
        self._max = max_prompts

    def pos(self, site: WordSite) -> str | None:
        """WordNet's part of speech (n v a r) of the site's word as tagged in its prompt, or None."""
        text = "".join(site.tokens)
        spans = self._tagged.get(text)
        if spans is None:
            if len(self._tagged) >= self._max:
                self._tagged.clear()
            spans = self._tagged[text] = self.tagger.tag([text])[0]
        tag = tag_at(spans, len("".join(site.tokens[: site.index])))
        return WORDNET_POS.get(tag or "")


def usual_senses(lemma: str, pos: str, lexicon: Lexicon, share: float = SENSE_SHARE) -> list[str]:
    """The lemma's synsets of ``pos`` that its tagged uses fall in at least ``share`` of the time
    (every synset when it was never tagged), most frequent first."""
    senses = lexicon.senses_in(lemma, [pos])
    counts = [lexicon.tag_count(lemma, sid) for sid in senses]
    total = sum(counts)
    if total == 0:
        return senses
    return [sid for sid, n in zip(senses, counts) if n >= share * total]


def means_usually(word: str, sid: str, lexicon: Lexicon, share: float = SENSE_SHARE) -> bool:
    """Whether ``sid`` is among the usual senses of ``word`` in its part of speech."""
    return sid in usual_senses(word, lexicon.pos_of(sid), lexicon, share)


class LexiconNeighbours:
    """Listed synonyms that are also embedding neighbours (the offline
    stand-in for counter-fitted vectors): up to ``k``, cosine >= ``min_cos``
    and >= ``floor`` (``SYNONYM_FLOOR``), most similar first; opposites never.
    With ``context`` (the word's part of speech in its prompt): only synonyms
    in the word's usual senses of that part of speech that usually mean it;
    nothing for a word inside a fixed expression of the prompt (``expression_at``:
    "look at", "figure out", "step by step"), and for a word of the instruction
    (a language, a scope word, a role of the task: ``attacks.instructions``)
    only words of its own group ("question" -> "query", never "hypothesis" ->
    "theory")."""

    def __init__(
        self,
        *,
        k: int,
        embedding: WordEmbedding,
        lexicon: Lexicon | None = None,
        min_cos: float | None = None,
        floor: float = SYNONYM_FLOOR,
        name: str = "lexicon_neighbours",
        context: InContext | None = None,
    ) -> None:
        if k <= 0:
            raise ValueError(f"number of neighbours must be positive, got {k}")
        self.k = k
        self.min_cos = min_cos
        self.floor = floor
        self.embedding = embedding
        self.lexicon = lexicon if lexicon is not None else load_lexicon()
        self.name = name
        self.context = context

    def _synonyms(self, form: Form, tagged: str | None) -> set[str]:
        if self.context is None:
            return set(self.lexicon.synonyms(form.lemma, form.pos))
        if tagged is None or (form.pos is not None and tagged not in form.pos):
            return set()
        out: set[str] = set()
        antonyms = self.lexicon.antonyms(form.lemma)
        for sid in usual_senses(form.lemma, tagged, self.lexicon):
            for syn in self.lexicon.members(sid):
                if syn != form.lemma and syn not in antonyms and means_usually(syn, sid, self.lexicon):
                    out.add(syn)
        return out

    def scored(self, word: str, tagged: str | None = None) -> list[tuple[str, float, str]]:
        """(replacement, cosine, lemma synonym it came from), best first; ``tagged``: the
        word's part of speech in its prompt (used with ``context``)."""
        low = word.lower()
        seen: dict[str, tuple[float, str]] = {}
        for form in lemma_forms(low, self.lexicon):
            for syn in sorted(self._synonyms(form, tagged)):
                surface = inflect(syn, form.inflection)
                if surface == low or surface in seen or not self.embedding.proposable(surface):
                    continue
                cos = self.embedding.cosine(low, surface)
                if cos is None or cos < max(self.min_cos or -1.0, self.floor):
                    continue
                if is_opposite(low, surface, self.lexicon):
                    continue
                seen[surface] = (cos, syn)
        ranked = sorted(seen.items(), key=lambda kv: (-kv[1][0], kv[0]))[: self.k]
        return [(w, cos, syn) for w, (cos, syn) in ranked]

    def replacements(self, site: WordSite) -> list[str]:
        word = site.word
        tagged = group = None
        if self.context is not None:
            if expression_at(site, self.lexicon) is not None:
                return []
            tagged = self.context.pos(site)
            following = site.tokens[site.index + 2] if site.index + 2 < len(site.tokens) else None
            group = group_of(as_instruction(forms_of(word, self.lexicon), following))
        out: list[str] = []
        for cand, _cos, _syn in self.scored(word, tagged):
            new = match_case(word, cand)
            if group is not None and group_of(forms_of(cand, self.lexicon)) != group:
                continue  # another instruction (or none): not a synonym in this prompt
            if new != word and new not in out:
                out.append(new)
        return out


def forms_of(word: str, lexicon: Lexicon) -> list[str]:
    """The word, lowercased, then its lemmas."""
    low = word.lower()
    return [low, *(f.lemma for f in lemma_forms(low, lexicon))]


def expression_at(site: WordSite, lexicon: Lexicon) -> tuple[str, ...] | None:
    """The fixed expression of WordNet (a phrasal verb, an idiom) the site's word is part of in its
    prompt ("Look" in "Look at the two sentences", both "step"s in "step by step"), or None. The first
    word may be inflected ("figured out"); the others are matched as written, with only spaces between."""
    tokens, i = site.tokens, site.index
    for start in range(i, max(1, i - 2 * (MAX_EXPRESSION_WORDS - 1)) - 1, -2):  # word tokens: odd indices
        for first in dict.fromkeys(forms_of(tokens[start], lexicon)):
            for words in lexicon.expressions(first):
                end = start + 2 * (len(words) - 1)
                if end < i or end >= len(tokens):
                    continue
                if all(tokens[start + 2 * k].lower() == words[k] and not tokens[start + 2 * k - 1].strip()
                       for k in range(1, len(words))):
                    return words
    return None


class Guarded:
    """Any word transformation with opposite replacements dropped."""

    def __init__(self, inner: WordTransformation, lexicon: Lexicon | None) -> None:
        self.inner = inner
        self.lexicon = lexicon
        self.name = inner.name

    def replacements(self, site: WordSite) -> list[str]:
        word = site.word
        return [new for new in self.inner.replacements(site) if not _opposes(word, new, self.lexicon)]


def _opposes(word: str, new: str, lexicon: Lexicon | None) -> bool:
    parts = [p for p in tokenize(new)[1::2] if p.isalpha()]
    return any(is_opposite(word, p, lexicon) for p in parts) if parts else False


def opposite_substitutions(pairs: Iterable[tuple[str, str]], lexicon: Lexicon | None = None) -> list[tuple[str, str]]:
    """The substitutions that replace a word by its opposite (should be none)."""
    return [(o, n) for o, n in pairs if o.isalpha() and n.isalpha() and is_opposite(o, n, lexicon)]


# -- how two words relate in WordNet (evidence for the meaning verdict) ------------------------------

#: Relations ``relation`` finds, closest first.
Relation = str
SYNONYM, RARER_SENSE, RELATED, SAME_FIELD, UNRELATED, UNKNOWN = (
    "synonym in a usual sense", "synonym in a rarer sense only", "related (kind of, similar to)",
    "same field (another kind of the same thing)", "unrelated", "not in WordNet")


def relation(old: str, new: str, pos: str | None, lexicon: Lexicon) -> Relation:
    """How ``new`` relates to ``old`` in WordNet 3.0, in ``pos`` (n v a r; None: any): a synonym in
    one of old's usual senses (``usual_senses``), a synonym in a rarer sense only, related (one is a
    kind of the other, or similar adjectives), in the same field (both kinds of the same thing:
    judge and referee, tone and pitch), unrelated, or unknown. Adverbs in -ly relate as their adjectives."""
    wanted = [pos] if pos else ["n", "v", "a", "r"]
    olds, news = _forms(old, lexicon), _forms(new, lexicon)
    old_senses = {sid for w in olds for sid in lexicon.senses_in(w, wanted)}
    new_senses = {sid for w in news for sid in lexicon.senses_in(w, wanted)}
    if pos == "r" and old.lower().endswith("ly") and new.lower().endswith("ly"):
        adjectives = relation(old.lower()[:-2], new.lower()[:-2], "a", lexicon)
        if adjectives not in (UNKNOWN, UNRELATED):
            return adjectives
    if not old_senses or not new_senses:
        known = any(lexicon.senses(w) for w in olds) and any(lexicon.senses(w) for w in news)
        return UNRELATED if known else UNKNOWN
    shared = old_senses & new_senses
    if shared:
        usual = {sid for w in olds for p in wanted for sid in usual_senses(w, p, lexicon)}
        return SYNONYM if shared & usual else RARER_SENSE
    up_old = {h for s in old_senses for h in lexicon.hypernyms(s)}
    up_new = {h for s in new_senses for h in lexicon.hypernyms(s)}
    heads_old = {lexicon.head(s) or s for s in old_senses}
    heads_new = {lexicon.head(s) or s for s in new_senses}
    if up_old & new_senses or up_new & old_senses or heads_old & heads_new:
        return RELATED
    if up_old & up_new:
        return SAME_FIELD
    return UNRELATED
