"""The paper's seven attacks, each assembled from transformation +
constraints + search, behind one ``Attack.run`` call.

Heavy resources (GloVe, USE, spaCy, a masked LM) are never loaded at import
or construction time: each recipe takes them as optional constructor
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
from promptrobust.attacks.chars import (
    DEEPWORDBUG_EDITS,
    TEXTBUGGER_EDITS,
    homoglyph_table,
    make_homoglyph_edit,
)
from promptrobust.attacks.constraints import MaxLevenshtein, PartOfSpeechMatch, SentenceSimilarity
from promptrobust.attacks.embeddings import WordEmbedding
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
from promptrobust.attacks.sentence import CachedEncoder
from promptrobust.attacks.transformations import CharacterEdits, Combined, EmbeddingNeighbours
from promptrobust.attacks.words import normalize_protected

DEFAULT_BUDGET = 100


class Attack(ABC):
    """One attack: ``await attack.run(prompt, scorer, protected=..., seed=...)``."""

    name: str = ""
    description: str = ""

    @abstractmethod
    def settings(self) -> dict[str, Any]:
        """The options that define this attack (recorded with every result)."""

    @abstractmethod
    async def _search(
        self,
        clean_prompt: str,
        clean_score: float,
        tracker: TrackedScorer,
        *,
        protected: frozenset[str],
        seed: int,
        semantic_prompts: Sequence[str],
    ) -> SearchResult: ...

    def _check(self, semantic_prompts: Sequence[str]) -> None:
        """Reject bad input before any model work."""

    async def run(
        self,
        clean_prompt: str,
        scorer: PromptScorer,
        *,
        protected: frozenset[str] = frozenset(),
        seed: int = 0,
        budget: int | None = DEFAULT_BUDGET,
        semantic_prompts: Sequence[str] = (),
    ) -> AttackOutcome:
        """Score the clean prompt, search, and report. ``budget`` caps the
        candidate evaluations (None: unlimited)."""
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
        return AttackOutcome(
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
            settings=self.settings(),
        )


class GreedyWordAttack(Attack):
    """Word-importance ranking + greedy replacement, one word at a time."""

    importance: ImportanceMode = "delete"
    unk_token: str = "[UNK]"

    def __init__(self, *, skip_stopwords: bool = True) -> None:
        self.skip_stopwords = skip_stopwords

    @abstractmethod
    def transformation(self, seed: int) -> WordTransformation: ...

    @abstractmethod
    def constraints(self) -> list[Constraint]: ...

    def settings(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "importance": self.importance,
            "skip_stopwords": self.skip_stopwords,
        }
        if self.importance == "unk":
            out["unk_token"] = self.unk_token
        return out

    async def _search(
        self, clean_prompt, clean_score, tracker, *, protected, seed, semantic_prompts
    ):
        return await greedy_word_search(
            clean_prompt,
            clean_score,
            tracker,
            transformation=self.transformation(seed),
            constraints=self.constraints(),
            protected=protected,
            importance=self.importance,
            unk_token=self.unk_token,
            skip_stopwords=self.skip_stopwords,
        )


class TextBugger(GreedyWordAttack):
    name = "textbugger"
    description = "character bugs (space, delete, swap, homoglyph) + top-5 GloVe neighbours; USE similarity >= 0.8"

    def __init__(
        self,
        *,
        neighbours: int = 5,
        similarity: float = 0.8,
        unicode_homoglyphs: bool = False,
        embedding: WordEmbedding | None = None,
        encoder: CachedEncoder | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self.neighbours = neighbours
        self.similarity = similarity
        self.unicode_homoglyphs = unicode_homoglyphs
        self._words = EmbeddingNeighbours(
            k=neighbours, embedding=embedding, name="textbugger_words"
        )
        self._similarity = SentenceSimilarity(similarity, encoder=encoder)

    def transformation(self, seed: int) -> WordTransformation:
        edits = (
            *TEXTBUGGER_EDITS,
            make_homoglyph_edit(homoglyph_table(self.unicode_homoglyphs)),
        )
        return Combined(
            [CharacterEdits(edits, seed=seed, name="textbugger_chars"), self._words],
            name=self.name,
        )

    def constraints(self) -> list[Constraint]:
        return [self._similarity]

    def settings(self) -> dict[str, Any]:
        return {
            **super().settings(),
            "neighbours": self.neighbours,
            "similarity": self.similarity,
            "unicode_homoglyphs": self.unicode_homoglyphs,
        }


class DeepWordBug(GreedyWordAttack):
    name = "deepwordbug"
    description = "swap/substitute/delete/insert one character; importance via [UNK]; Levenshtein <= 30"
    importance = "unk"

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

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "max_edit_distance": self.max_edit_distance}


class TextFooler(GreedyWordAttack):
    name = "textfooler"
    description = "50 GloVe neighbours (cosine >= 0.6), same part of speech; USE similarity >= 0.84"

    def __init__(
        self,
        *,
        neighbours: int = 50,
        min_word_cos: float = 0.6,
        similarity: float = 0.84,
        embedding: WordEmbedding | None = None,
        encoder: CachedEncoder | None = None,
        tagger: PosTagger | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self.neighbours = neighbours
        self.min_word_cos = min_word_cos
        self.similarity = similarity
        self._words = EmbeddingNeighbours(
            k=neighbours, min_cos=min_word_cos, embedding=embedding, name=self.name
        )
        self._constraints: list[Constraint] = [
            PartOfSpeechMatch(tagger=tagger),
            SentenceSimilarity(similarity, encoder=encoder),
        ]

    def transformation(self, seed: int) -> WordTransformation:
        return self._words

    def constraints(self) -> list[Constraint]:
        return self._constraints

    def settings(self) -> dict[str, Any]:
        return {
            **super().settings(),
            "neighbours": self.neighbours,
            "min_word_cos": self.min_word_cos,
            "similarity": self.similarity,
        }


class BertAttack(GreedyWordAttack):
    name = "bertattack"
    description = "top-48 masked-LM words for the word's position (default bert-base-uncased); USE similarity >= 0.8"

    def __init__(
        self,
        *,
        mlm: str | MaskedLM = "bert-base-uncased",
        candidates: int = 48,
        similarity: float = 0.8,
        device: str = "cpu",
        encoder: CachedEncoder | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self.mlm_id = mlm.model_id if isinstance(mlm, MaskedLM) else mlm
        self._mlm = mlm if isinstance(mlm, MaskedLM) else None
        if candidates <= 0:
            raise ValueError(f"candidates must be positive, got {candidates}")
        self.device = device
        self.candidates = candidates
        self.similarity = similarity
        self._similarity = SentenceSimilarity(similarity, encoder=encoder)

    def transformation(self, seed: int) -> WordTransformation:
        if self._mlm is None:
            self._mlm = load_masked_lm(self.mlm_id, self.device)
        self._mlm.ensure_loaded()
        return MaskedLMSwap(self._mlm, k=self.candidates, name=self.name)

    def constraints(self) -> list[Constraint]:
        return [self._similarity]

    def settings(self) -> dict[str, Any]:
        return {
            **super().settings(),
            "mlm": self.mlm_id,
            "candidates": self.candidates,
            "similarity": self.similarity,
        }


class SuffixAttack(Attack):
    """Append each of a fixed list of suffixes; brute force over them."""

    def suffixes(self) -> list[str]:
        raise NotImplementedError

    async def _search(
        self, clean_prompt, clean_score, tracker, *, protected, seed, semantic_prompts
    ):
        return await brute_force_search(
            clean_prompt,
            clean_score,
            tracker,
            [clean_prompt + s for s in self.suffixes()],
        )


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
    description = "append one of 50 random 10-character alphanumeric strings (fixed seed); brute force"

    def __init__(
        self, *, count: int = 50, length: int = 10, strings_seed: int = 2306
    ) -> None:
        if count <= 0 or length <= 0:
            raise ValueError(
                f"count and length must be positive, got count={count}, length={length}"
            )
        self.count, self.length, self.strings_seed = count, length, strings_seed

    def suffixes(self) -> list[str]:
        return [
            " " + s for s in random_strings(self.count, self.length, self.strings_seed)
        ]

    def settings(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "length": self.length,
            "strings_seed": self.strings_seed,
        }


STRESS_SUFFIXES: tuple[str, ...] = (
    " and true is true",
    " and false is not true",
    " and true is true" * 5,
)


class StressTest(SuffixAttack):
    name = "stresstest"
    description = "append 'and true is true', 'and false is not true', or the first five times; brute force"

    def suffixes(self) -> list[str]:
        return list(STRESS_SUFFIXES)

    def settings(self) -> dict[str, Any]:
        return {"suffixes": list(STRESS_SUFFIXES)}


class Semantic(Attack):
    name = "semantic"
    description = "no edits: score the task's semantic prompt set (other speakers' phrasings); report the worst"

    def _check(self, semantic_prompts: Sequence[str]) -> None:
        if isinstance(semantic_prompts, str):
            raise TypeError(
                "semantic_prompts must be a list of prompts, not one string"
            )
        if not [p for p in semantic_prompts if p and p.strip()]:
            raise ValueError(
                "the semantic attack needs the task's semantic prompts; this task has none to score"
            )

    def settings(self) -> dict[str, Any]:
        return {}

    async def _search(
        self, clean_prompt, clean_score, tracker, *, protected, seed, semantic_prompts
    ):
        return await prompt_set_search(
            tracker, [p for p in semantic_prompts if p and p.strip()]
        )
