"""The parts recipes are composed of: transformations and searches (the
constraints are in ``attacks.constraints``, each one part and constraint at once).

Each part is a frozen value (``attacks.base.Part``). In ``attacks.recipes`` its
fields hold the recipe's reference values; ``configure`` gives the value a run
uses (the user's options applied; where this implementation necessarily
differs, such as our stop-word list, its own fact put in); ``describe`` writes
the record entries that ``deviations.compare`` sets against the recipe's.
``live`` makes the run's resource (word vectors, a masked LM), loaded on first
use, once per attack; parts without one return None. A word transformation's
``build`` gives what the search calls (``base.WordTransformation``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

from promptrobust.attacks.base import Constraint, SemanticPrompt, Part, Recipe, Resource, WordSite, WordTransformation
from promptrobust.attacks.chars import EditSet
from promptrobust.attacks.deviations import Described, Setting
from promptrobust.attacks.embeddings import (
    GLOVE_NAME,
    PARAGRAMCF_NAME,
    ResolvedEmbedding,
    WordEmbedding,
    given_embedding,
    resolve_embedding,
)
from promptrobust.attacks.fallbacks import word_vectors as say_word_vectors_fallback
from promptrobust.attacks.label_words import label_linked_words
from promptrobust.attacks.masked_lm import MaskedLM, MaskedLMSwap, load_masked_lm
from promptrobust.attacks.search import (
    ImportanceMode,
    SearchResult,
    TrackedScorer,
    brute_force_search,
    greedy_word_search,
    prompt_set_search,
)
from promptrobust.attacks.suffix import insert_after_last_word, promptbench_checklist_strings, random_strings
from promptrobust.attacks.pos import PosTagger, load_spacy_tagger
from promptrobust.attacks.synonyms import SENSE_SHARE, SYNONYM_FLOOR, Guarded, InContext, LexiconNeighbours, contrast_words
from promptrobust.attacks.transformations import CharacterEdits, EmbeddingNeighbours
from promptrobust.attacks.words import STOPWORDS_NAME

if TYPE_CHECKING:
    from promptrobust.attacks.lexicon import Lexicon


class AttackParts(Protocol):
    """What a search needs of the attack running it (``attack.Attack``)."""

    configured: Recipe

    @property
    def meaning_guard(self) -> MeaningGuard | None: ...

    def transformation(self, seed: int) -> WordTransformation: ...

    def constraints(self) -> list[Constraint]: ...


def _option(options: Mapping[str, object], key: str, default: Any) -> Any:
    return options[key] if key in options else default


# -- searches ---------------------------------------------------------------------------

#: What the search keeps and never touches (every greedy recipe, as TextAttack's GreedyWordSwapWIR).
_GREEDY = {
    "search": "greedy word swap, word importance ranking (each word at most once)",
    "accept": "strictly lower score; ties: alphabetically first candidate",
    "protected_words": "the words the task protects are never changed or introduced",
}
_NO_STOPWORDS = "none skipped"


@dataclass(frozen=True)
class GreedyWordSwapWIR(Part):
    """Rank every attackable word once by importance (the score without it),
    then try each word's candidates in that order, keeping a swap only when it
    strictly lowers the score (TextAttack's ``GreedyWordSwapWIR``)."""

    #: How a word's importance is measured: delete it, or replace it by ``unk_token``.
    importance: ImportanceMode
    #: The stop-word list the recipe never attacks.
    stopwords: str
    unk_token: str = "[UNK]"
    skip_stopwords: bool = True

    walks_words = True

    def options(self) -> dict[str, object]:
        out: dict[str, object] = {"skip_stopwords": True}
        if self.importance == "unk":
            out["unk_token"] = self.unk_token
        return out

    def configure(self, options: Mapping[str, object]) -> GreedyWordSwapWIR:
        unk = _option(options, "unk_token", self.unk_token)
        if not isinstance(unk, str) or not unk.strip():
            raise ValueError("unk_token must be a visible placeholder such as [UNK]")
        return replace(self, unk_token=unk, skip_stopwords=bool(_option(options, "skip_stopwords", True)),
                       stopwords=STOPWORDS_NAME)

    def _importance(self) -> str:
        return "delete the word" if self.importance == "delete" else f"replace the word by {self.unk_token}"

    def describe(self, live: object | None = None) -> Described:
        return {**_GREEDY, "importance": Setting(self._importance()),
                "stopwords": Setting(self.stopwords if self.skip_stopwords else _NO_STOPWORDS)}

    def summary(self) -> str:
        return "" if self.importance == "delete" else f"importance via {self.unk_token}"

    def check(self, semantic_prompts: Sequence[SemanticPrompt]) -> None:
        """Nothing to check before model work."""

    async def search(self, attack: AttackParts, clean_prompt: str, clean_score: float, tracker: TrackedScorer, *,
                     protected: frozenset[str], seed: int, semantic_prompts: Sequence[SemanticPrompt]) -> SearchResult:
        notes: dict[str, object] = {}
        guard = attack.meaning_guard
        if guard is not None:
            for kind, words in guard.protected_in(clean_prompt, protected).items():
                notes[kind] = sorted(words)
                protected = protected | words
        found = await greedy_word_search(
            clean_prompt, clean_score, tracker,
            transformation=attack.transformation(seed), constraints=attack.constraints(), protected=protected,
            importance=self.importance, unk_token=self.unk_token, skip_stopwords=self.skip_stopwords,
        )
        if notes:
            found = replace(found, notes={**found.notes, **notes})
        return found


#: Where CheckList and StressTest put their text (promptbench inserts after the last word).
_INSERTION = "after the last word (and its closing quotes), before the final punctuation, joined by a space"


@dataclass(frozen=True)
class BruteForce(Part):
    """Score every candidate at once; the lowest score is the result even when
    it is above the clean score (promptbench's ``BruteForceSearch``)."""

    def describe(self, live: object | None = None) -> Described:
        return {"search": "brute force: every candidate scored; the lowest score is the result even if above "
                          "the clean score", "ties": "alphabetically first candidate"}

    def summary(self) -> str:
        return "brute force"

    def check(self, semantic_prompts: Sequence[SemanticPrompt]) -> None:
        """Nothing to check before model work."""

    async def search(self, attack: AttackParts, clean_prompt: str, clean_score: float, tracker: TrackedScorer, *,
                     protected: frozenset[str], seed: int, semantic_prompts: Sequence[SemanticPrompt]) -> SearchResult:
        transformation = attack.configured.transformation
        if not isinstance(transformation, (RandomSuffix, TautologySuffix)):
            raise TypeError(f"brute force needs a list of candidates, not {type(transformation).__name__}")
        return await brute_force_search(clean_prompt, clean_score, tracker, transformation.candidates(clean_prompt))


def semantic_entries(prompts: Sequence[SemanticPrompt]) -> list[tuple[str, str]]:
    """(language, prompt) for each semantic prompt given as a string (language
    unknown), a (language, prompt) pair, or an object with ``language`` and
    ``text`` (``tasks.base.Prompt``). Blank prompts are dropped."""
    if isinstance(prompts, str):
        raise TypeError("semantic_prompts must be a list of prompts, not one string")
    out: list[tuple[str, str]] = []
    for p in prompts:
        if isinstance(p, str):
            lang, text = "unknown", p
        elif isinstance(p, tuple) and len(p) == 2 and all(isinstance(x, str) for x in p):
            lang, text = p
        elif isinstance(getattr(p, "text", None), str):
            lang, text = str(getattr(p, "language", "unknown") or "unknown"), str(getattr(p, "text"))
        else:
            raise TypeError("each semantic prompt must be a string, a (language, prompt) pair or a Prompt")
        if text and text.strip():
            out.append((lang, text))
    return out


_EVERY = "score every prompt of the set exactly; each score is in prompt_scores"
_LOWEST = "lowest score only, others stopped early (every_score=false)"


@dataclass(frozen=True)
class PromptSetSearch(Part):
    """Score a given set of prompts; the worst is the attack's result."""

    #: The paper reports each prompt's score, so each is scored exactly.
    every_score: bool = True

    def options(self) -> dict[str, object]:
        return {"every_score": self.every_score}

    def configure(self, options: Mapping[str, object]) -> PromptSetSearch:
        return replace(self, every_score=bool(_option(options, "every_score", self.every_score)))

    def describe(self, live: object | None = None) -> Described:
        return {"search": Setting(self.every_score, _EVERY if self.every_score else _LOWEST),
                "result": "worst prompt of the set"}

    def summary(self) -> str:
        return "each score is kept, the worst is the attack result"

    def check(self, semantic_prompts: Sequence[SemanticPrompt]) -> None:
        if not semantic_entries(semantic_prompts):
            raise ValueError("the semantic attack needs the task's semantic prompts; this task has none to score")

    async def search(self, attack: AttackParts, clean_prompt: str, clean_score: float, tracker: TrackedScorer, *,
                     protected: frozenset[str], seed: int, semantic_prompts: Sequence[SemanticPrompt]) -> SearchResult:
        return await prompt_set_search(tracker, semantic_entries(semantic_prompts), every_score=self.every_score)


# -- transformations ----------------------------------------------------------------------

#: Our look-alike table (``chars.HOMOGLYPHS``), as records name it.
OUR_HOMOGLYPHS = "promptrobust's Unicode look-alike table (a-z, A-Z, 0 1 3 - '), one candidate per position"


@dataclass(frozen=True)
class CharacterBugs(Part):
    """Character edits of one word (TextBugger's character bugs, DeepWordBug's edits)."""

    edits: EditSet
    #: The name that seeds each word's random draws (``transformations.site_rng``).
    stream: str
    #: TextBugger's Sub-C look-alike table (None: no homoglyph bug).
    homoglyphs: str | None = None

    def configure(self, options: Mapping[str, object]) -> CharacterBugs:
        return self if self.homoglyphs is None else replace(self, homoglyphs=OUR_HOMOGLYPHS)

    def describe(self, live: object | None = None) -> Described:
        out: Described = {"transformation": self.edits.described}
        if self.homoglyphs is not None:
            out["homoglyphs"] = Setting(self.homoglyphs)
        return out

    def summary(self) -> str:
        return self.edits.summary

    def candidates_per_word(self) -> int:
        return self.edits.per_word

    def build(self, seed: int, live: object | None, guard: Lexicon | None) -> WordTransformation:
        return CharacterEdits(self.edits.edits, seed=seed, name=self.stream)


_SYNONYM_SOURCES = ("auto", "wordnet", "none")
_WORD_SENSES = ("context", "any")


class EmbeddingChoice:
    """Word vectors named by the ``embedding`` option (or given), resolved on
    first use: paragramcf when it can be had, else the GloVe fallback (said on
    the terminal); and the synonym source (``synonyms`` option): ``auto``
    restricts fallback vectors to WordNet synonyms (counter-fitted vectors are
    used as they are), ``wordnet`` always does, ``none`` never."""

    def __init__(self, spec: str | WordEmbedding, synonyms: str = "auto") -> None:
        if synonyms not in _SYNONYM_SOURCES:
            raise ValueError(f"synonyms must be one of {', '.join(_SYNONYM_SOURCES)}, got {synonyms!r}")
        self.synonyms = synonyms
        self.resolved: ResolvedEmbedding | None = None
        if isinstance(spec, WordEmbedding):
            self.spec = spec.name
            self.resolved = given_embedding(spec)
        elif isinstance(spec, str):
            self.spec = spec
        else:
            raise ValueError("embedding must be auto, paragramcf, glove or a path to TextAttack's paragramcf folder")

    def __call__(self) -> ResolvedEmbedding:
        if self.resolved is None:
            self.resolved = resolve_embedding(self.spec)
            if self.resolved.fallback:
                say_word_vectors_fallback(self.resolved.label, self.resolved.reason)  # once per run
        return self.resolved

    @property
    def uses_lexicon(self) -> bool:
        # auto: plain GloVe is not counter-fitted (antonyms and associations are
        # its near neighbours), so it is restricted to listed synonyms; vectors
        # given by the caller or TextAttack's are used as they are.
        return self.synonyms == "wordnet" or (self.synonyms == "auto" and self().embedding.name == GLOVE_NAME)


@dataclass(frozen=True)
class EmbeddingSwap(Part):
    """Nearest neighbours of the word in a word-vector space (TextAttack's ``WordSwapEmbedding``)."""

    neighbours: int
    #: Word cosine a neighbour must reach (``WordEmbeddingDistance``); None: no such constraint.
    min_cos: float | None
    vectors: str | WordEmbedding = PARAGRAMCF_NAME
    #: Offline synonym source (``synonyms`` option; see ``EmbeddingChoice``).
    synonyms: str = "auto"
    #: Which senses the WordNet synonyms come from (``word_senses`` option): "context", the
    #: word's sense in its prompt (``synonyms.LexiconNeighbours`` with a tagger), or "any".
    word_senses: str = "context"
    #: A part-of-speech tagger given instead of spaCy's (the ``tagger`` option; tests).
    tagger: PosTagger | None = field(default=None, compare=False, repr=False)

    extras = ("attacks",)

    def candidates_per_word(self) -> int:
        return self.neighbours

    def resources(self) -> tuple[Resource, ...]:
        name = self.vectors if isinstance(self.vectors, str) else self.vectors.name
        return (Resource("word vectors", name),)

    def options(self) -> dict[str, object]:
        out: dict[str, object] = {"neighbours": self.neighbours}
        if self.min_cos is not None:
            out["min_word_cos"] = self.min_cos
        return {**out, "embedding": "auto", "synonyms": "auto", "word_senses": "context", "tagger": None}

    def configure(self, options: Mapping[str, object]) -> EmbeddingSwap:
        k = _option(options, "neighbours", self.neighbours)
        if k <= 0:
            raise ValueError(f"neighbours must be positive, got {k}")
        senses = _option(options, "word_senses", "context")
        if senses not in _WORD_SENSES:
            raise ValueError(f"word_senses must be one of {', '.join(_WORD_SENSES)}, got {senses!r}")
        return replace(self, neighbours=k, min_cos=_option(options, "min_word_cos", self.min_cos),
                       vectors=_option(options, "embedding", "auto"), synonyms=_option(options, "synonyms", "auto"),
                       word_senses=senses, tagger=_option(options, "tagger", None))

    def live(self) -> EmbeddingChoice:
        return EmbeddingChoice(self.vectors, self.synonyms)

    def describe(self, live: object | None = None) -> Described:
        out: Described = {"transformation": "embedding neighbours", "neighbours": Setting(self.neighbours)}
        if self.min_cos is not None:
            out["min_word_cos"] = Setting(self.min_cos)
        if not isinstance(live, EmbeddingChoice):  # the recipe's counter-fitted neighbours
            out["word_embedding"] = Setting(str(self.vectors))
            out["synonym_source"] = Setting("neighbours", "counter-fitted neighbours")
            return out
        if live.resolved is None:
            out["word_embedding"] = Setting(live.spec, note="not loaded: no word was attacked", compared=False)
            return out
        name = live.resolved.embedding.name
        out["word_embedding"] = live.resolved.recorded
        if live.uses_lexicon and self.word_senses == "context":
            out["synonym_source"] = Setting("wordnet", f"WordNet 3.0 synonyms of the word in its sense in the prompt "
                                                       f"(its part of speech as tagged there by spaCy en_core_web_sm; its "
                                                       f"senses with >= {SENSE_SHARE:.0%} of its sense-tagged uses, and "
                                                       f"synonyms that mean that sense as often; none inside a WordNet fixed "
                                                       f"expression such as 'look at', an instruction word only within its "
                                                       f"group), re-inflected, ranked by {name} cosine (>= {SYNONYM_FLOOR})")
        elif live.uses_lexicon:
            out["synonym_source"] = Setting("wordnet", f"WordNet 3.0 synonyms of the word's lemma (same part of speech "
                                                       f"as its inflection), re-inflected, ranked by {name} cosine "
                                                       f"(>= {SYNONYM_FLOOR})")
        else:
            out["synonym_source"] = Setting("neighbours", f"{name} neighbours")
        return out

    def summary(self) -> str:
        cos = f" (cosine >= {self.min_cos})" if self.min_cos is not None else ""
        return f"top-{self.neighbours} counter-fitted neighbours{cos}"

    def build(self, seed: int, live: object | None, guard: Lexicon | None) -> WordTransformation:
        from promptrobust.attacks.lexicon import load_lexicon

        assert isinstance(live, EmbeddingChoice)
        resolved = live()
        lexicon = load_lexicon()
        inner: WordTransformation
        name = "embedding_neighbours"
        if live.uses_lexicon:
            context = None
            if self.word_senses == "context":
                context = InContext(self.tagger if self.tagger is not None else load_spacy_tagger())
            inner = LexiconNeighbours(k=self.neighbours, min_cos=self.min_cos, embedding=resolved.embedding,
                                      lexicon=lexicon, name=name, context=context)
        else:
            inner = EmbeddingNeighbours(k=self.neighbours, min_cos=self.min_cos, embedding=resolved.embedding,
                                        filter_antonyms=False, name=name)
        return inner if guard is None else Guarded(inner, guard)


class MaskedLMChoice:
    """The masked LM named by the ``mlm`` option (or given), loaded when the first word is attacked."""

    def __init__(self, model: str, device: str, given: MaskedLM | None) -> None:
        self.model, self.device, self.given = model, device, given

    def __call__(self) -> MaskedLM:
        if self.given is None:
            self.given = load_masked_lm(self.model, self.device)
        self.given.ensure_loaded()  # a missing model fails before any budget is spent
        return self.given


@dataclass(frozen=True)
class WordSwapMaskedLM(Part):
    """What a masked LM predicts at the word's own positions in the unmasked
    prompt (BERT-Attack; TextAttack's ``WordSwapMaskedLM(method="bert-attack")``)."""

    model: str
    candidates: int
    #: How the combinations of a word of several pieces are cut to ``candidates``.
    subword_ranking: Literal["product order", "perplexity"]
    #: Whether a candidate takes the original word's capitalisation.
    keep_case: bool = False
    #: Share of the words that may change (``MaxWordsPerturbed``).
    max_words_perturbed: float = 1.0
    device: str = "cpu"
    given: MaskedLM | None = field(default=None, compare=False, repr=False)

    extras = ("local",)

    def candidates_per_word(self) -> int:
        return self.candidates

    def resources(self) -> tuple[Resource, ...]:
        return (Resource("masked LM", self.model),)

    def options(self) -> dict[str, object]:
        return {"mlm": self.model, "candidates": self.candidates, "device": self.device, "keep_case": self.keep_case}

    def configure(self, options: Mapping[str, object]) -> WordSwapMaskedLM:
        mlm = _option(options, "mlm", self.model)
        given = mlm if isinstance(mlm, MaskedLM) else None
        model = mlm.model_id if isinstance(mlm, MaskedLM) else os.path.expanduser(str(mlm))
        k = _option(options, "candidates", self.candidates)
        if k <= 0:
            raise ValueError(f"candidates must be positive, got {k}")
        return replace(self, model=model, candidates=k, subword_ranking="perplexity", given=given,
                       keep_case=bool(_option(options, "keep_case", self.keep_case)),
                       device=str(_option(options, "device", self.device)))

    def live(self) -> MaskedLMChoice:
        return MaskedLMChoice(self.model, self.device, self.given)

    def describe(self, live: object | None = None) -> Described:
        ranking = ("sorted by perplexity" if self.subword_ranking == "perplexity"
                   else f"first {self.candidates} in product order (unsorted)")
        return {
            "transformation": "masked-LM predictions at the word's own positions in the unmasked prompt; "
                              "words of several pieces: combinations ranked by perplexity",
            "mlm": Setting(self.model),
            "candidates": Setting(self.candidates),
            "subword_ranking": Setting(self.subword_ranking, ranking),
            "case": Setting(self.keep_case, "original word's case" if self.keep_case else "model token as is"),
            "max_words_perturbed": Setting(self.max_words_perturbed, f"{self.max_words_perturbed:.0%}"),
        }

    def summary(self) -> str:
        return (f"top-{self.candidates} masked-LM words (sub-word combinations too) predicted on the unmasked "
                f"prompt (default {self.model})")

    def build(self, seed: int, live: object | None, guard: Lexicon | None) -> WordTransformation:
        assert isinstance(live, MaskedLMChoice)
        inner = MaskedLMSwap(live(), k=self.candidates, keep_case=self.keep_case)
        return inner if guard is None else Guarded(inner, guard)


@dataclass(frozen=True)
class Composite(Part):
    """The union of several word transformations' proposals, in order (TextAttack's
    ``CompositeTransformation``). In a recipe its parts are parts; ``build`` gives
    the same union over the built transformations, which is what the search calls."""

    parts: tuple[Any, ...]

    name = "composite"

    def options(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for part in self.parts:
            out.update(part.options())
        return out

    def configure(self, options: Mapping[str, object]) -> Composite:
        return Composite(tuple(p.configure(options) for p in self.parts))

    def live(self) -> tuple[object | None, ...]:
        return tuple(p.live() for p in self.parts)

    @property
    def extras(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(dict.fromkeys(e for p in self.parts for e in p.extras))

    def candidates_per_word(self) -> int:
        return sum(p.candidates_per_word() or 0 for p in self.parts)

    def resources(self) -> tuple[Resource, ...]:
        return tuple(r for p in self.parts for r in p.resources())

    def describe(self, live: object | None = None) -> Described:
        lives = live if isinstance(live, tuple) else (None,) * len(self.parts)
        out: Described = {}
        for part, one in zip(self.parts, lives):
            for key, value in part.describe(one).items():
                out[key] = f"{out[key]}; {value}" if key == "transformation" and key in out else value
        return out

    def summary(self) -> str:
        return " + ".join(p.summary() for p in self.parts)

    def build(self, seed: int, live: object | None, guard: Lexicon | None) -> Composite:
        lives = live if isinstance(live, tuple) else (None,) * len(self.parts)
        return Composite(tuple(p.build(seed, one, guard) for p, one in zip(self.parts, lives)))

    def replacements(self, site: WordSite) -> list[str]:
        """Every built part's replacements, in order, each once."""
        out: list[str] = []
        for part in self.parts:
            for new in part.replacements(site):
                if new not in out:
                    out.append(new)
        return out


@dataclass(frozen=True)
class WordSwapOf(Part):
    """A word transformation written by the caller (its own name is recorded)."""

    source: WordTransformation

    def describe(self, live: object | None = None) -> Described:
        return {"transformation": getattr(self.source, "name", type(self.source).__name__)}

    def summary(self) -> str:
        return str(getattr(self.source, "name", "custom word swap"))

    def build(self, seed: int, live: object | None, guard: Lexicon | None) -> WordTransformation:
        return self.source


@dataclass(frozen=True)
class RandomSuffix(Part):
    """One of ``count`` random alphanumeric strings inserted after the last word (CheckList)."""

    count: int
    length: int
    #: Seed our strings are drawn with; None: promptbench's own fixed list.
    strings_seed: int | None = None
    #: promptbench's own strings, read from a checkout (option ``promptbench``); empty: drawn.
    strings: tuple[str, ...] = ()
    #: The checkout the strings were read from ("" when drawn).
    strings_source: str = ""

    def options(self) -> dict[str, object]:
        return {"count": self.count, "length": self.length, "strings_seed": OUR_STRINGS_SEED, "promptbench": ""}

    def configure(self, options: Mapping[str, object]) -> RandomSuffix:
        checkout = str(_option(options, "promptbench", "") or "")
        if checkout:
            given = [k for k in ("count", "length", "strings_seed") if k in options]
            if given:
                raise ValueError(f"promptbench={checkout} gives the checkout's own strings; drop {', '.join(given)}")
            strings = promptbench_checklist_strings(checkout)
            return replace(self, count=len(strings), length=max(len(s) for s in strings), strings_seed=None,
                           strings=strings, strings_source=checkout)
        count, length = _option(options, "count", self.count), _option(options, "length", self.length)
        if count <= 0 or length <= 0:
            raise ValueError(f"count and length must be positive, got count={count}, length={length}")
        return replace(self, count=count, length=length, strings_seed=_option(options, "strings_seed", OUR_STRINGS_SEED))

    def describe(self, live: object | None = None) -> Described:
        strings = (Setting(None, f"promptbench's fixed list of {self.count}", note=self.strings_source)
                   if self.strings_seed is None
                   else Setting(self.strings_seed, f"drawn with seed {self.strings_seed}"))
        return {"transformation": "insert a random string of [A-Za-z0-9]", "count": Setting(self.count),
                "length": Setting(self.length), "strings": strings, "insertion": _INSERTION}

    def summary(self) -> str:
        return f"insert one of {self.count} random {self.length}-character alphanumeric strings after the last word"

    def candidate_count(self) -> int:
        return self.count

    def promptbench_options(self, given: Mapping[str, object], checkout: str) -> dict[str, object] | None:
        """promptbench's own fixed strings (the paper's 50), unless the user chose the strings."""
        if set(given) & {"promptbench", "count", "length", "strings_seed"}:
            return None
        return {**given, "promptbench": checkout}

    def inserts(self) -> str:
        return f"a random {self.length}-character suffix"

    def only_inserts(self, clean: str, adversarial: str) -> bool:
        """Whether ``adversarial`` is ``clean`` with one random string of this length inserted and nothing else:
        a token of ``length`` letters and digits not in ``clean``, with a digit or a capital (a plain word is not one)."""
        if _same_text(clean, adversarial):
            return False
        token_at = re.compile(rf"\s*(?<![A-Za-z0-9])([A-Za-z0-9]{{{self.length}}})(?![A-Za-z0-9])")
        for m in token_at.finditer(adversarial):
            token = m.group(1)
            if token in clean or not (any(c.isdigit() for c in token) or token != token.lower()):
                continue  # a word of the prompt, or a plain lowercase word
            if _same_text(adversarial[: m.start()] + " " + adversarial[m.end() :], clean):
                return True
        return False

    def candidates(self, prompt: str) -> list[str]:
        if self.strings:
            return [insert_after_last_word(prompt, s) for s in self.strings]
        seed = OUR_STRINGS_SEED if self.strings_seed is None else self.strings_seed
        return [insert_after_last_word(prompt, s) for s in random_strings(self.count, self.length, seed)]


#: Our CheckList strings are drawn with this seed (promptbench's list is data we do not copy).
OUR_STRINGS_SEED = 2306


@dataclass(frozen=True)
class TautologySuffix(Part):
    """A fixed text inserted after the last word (StressTest)."""

    texts: tuple[str, ...]

    def describe(self, live: object | None = None) -> Described:
        return {"transformation": "insert a tautology", "suffixes": list(self.texts), "insertion": _INSERTION}

    def summary(self) -> str:
        return f"insert one of {len(self.texts)} tautologies ('{self.texts[0].strip()}', ...) after the last word"

    def candidate_count(self) -> int:
        return len(self.texts)

    def inserts(self) -> str:
        return "tautologies"

    def only_inserts(self, clean: str, adversarial: str) -> bool:
        """Whether ``adversarial`` is ``clean`` with these texts (one or repeated) inserted and nothing else."""
        units = sorted({" ".join(t.split()) for t in self.texts}, key=len)
        repeated = re.compile(r"\s*(?:\b(?:" + "|".join(map(re.escape, units)) + r")\s*)+", re.IGNORECASE)
        return (not _same_text(clean, adversarial) and bool(repeated.search(adversarial))
                and _same_text(repeated.sub(" ", adversarial), clean))

    def candidates(self, prompt: str) -> list[str]:
        return [insert_after_last_word(prompt, s) for s in self.texts]


@dataclass(frozen=True)
class GivenPrompts(Part):
    """No edits: the prompts of one of the task's prompt sets, as given (Semantic)."""

    #: The type of the task's prompts that are the candidates (``tasks.base.PromptType``).
    prompt_type: str
    #: How many prompts the paper's set has per dataset (for planning: ``pre sweep --dry-run``).
    paper_set_size: int

    def describe(self, live: object | None = None) -> Described:
        return {"transformation": f"none: the task's {self.prompt_type} prompt set, as given"}

    def summary(self) -> str:
        return f"no edits: score every prompt of the task's {self.prompt_type} set (other speakers' phrasings)"

    def prompt_set(self) -> str:
        return self.prompt_type

    def candidate_count(self) -> int:
        return self.paper_set_size


def _same_text(a: str, b: str) -> bool:
    """Equal up to whitespace (runs of it, and space before punctuation)."""
    def norm(t: str) -> str:
        return re.sub(r"\s+([.,:;!?\"'])", r"\1", " ".join(t.split()))

    return norm(a) == norm(b)


# -- constraints -----------------------------------------------------------------------------

#: What our guard does, as records describe it.
OUR_GUARD = ("opposites dropped (hand-written pairs, negating prefixes, WordNet 3.0 direct and indirect antonyms); "
             "words that define the labels never changed: those in a clause with a label word (label_linked_words) "
             "and those another word opposes (contrast_words)")


@dataclass(frozen=True)
class MeaningGuard(Part):
    """Word substitutions never put an opposite in, and never change the words
    that define the labels (``label_words``). The recipes have no such guard
    (``rule`` says what they rely on instead)."""

    rule: str

    def configure(self, options: Mapping[str, object]) -> MeaningGuard:
        return replace(self, rule=OUR_GUARD)

    def describe(self, live: object | None = None) -> Described:
        return {"antonym_guard": Setting(self.rule)}

    def summary(self) -> str:
        return "no opposites, label-defining words kept"

    def protected_in(self, prompt: str, protected: frozenset[str]) -> dict[str, frozenset[str]]:
        """The words of ``prompt`` the guard protects beyond ``protected``, by kind (recorded so)."""
        from promptrobust.attacks.lexicon import load_lexicon

        return {"label_linked_words": label_linked_words(prompt, protected),
                "contrast_words": contrast_words(prompt, protected, load_lexicon())}


@dataclass(frozen=True)
class ConstraintOf(Part):
    """A constraint written by the caller (its own name is recorded)."""

    constraint: Constraint

    def live(self) -> Constraint:
        return self.constraint

    def describe(self, live: object | None = None) -> Described:
        return {f"constraint_{self.constraint.name}": "given"}

    def summary(self) -> str:
        return self.constraint.name
