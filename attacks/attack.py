"""An attack: a recipe configured for a run, behind one ``Attack.run`` call.

``Attack(recipe, **options)`` checks the options, configures the recipe
(``Recipe.configure``) and makes each part's resource; nothing heavy loads
until the search needs it (word vectors, USE, spaCy, a masked LM), and tests
pass small ones as options. ``settings`` is what every record carries: the
run's values against the recipe's (``deviations.compare``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any

from promptrobust.attacks.base import Constraint, SemanticPrompt, PromptScorer, Recipe, WordTransformation
from promptrobust.attacks.changes import substitutions
from promptrobust.attacks.components import MeaningGuard
from promptrobust.attacks.constraints import SentenceSimilarity
from promptrobust.attacks.deviations import Setting, compare
from promptrobust.attacks.result import AttackOutcome, performance_drop_rate
from promptrobust.attacks.search import TrackedScorer
from promptrobust.attacks.sentence import CachedEncoder
from promptrobust.attacks.errors import PromptTooLongError
from promptrobust.attacks.meaning_check import meaning_verdict
from promptrobust.attacks.nli_check import load_nli_judge
from promptrobust.attacks.words import normalize_protected, word_count

#: The longest prompt an attack takes, in words. Memory stays linear in the
#: prompt (candidates are made lazily, the budget bounds what is made), but the
#: work does not: a word attack scores one candidate per word, each the whole
#: prompt, so an unbudgeted search over N words sends N prompts of N words to
#: the model. 20,000 words (~26,000 tokens) already fill the 32k-token context of
#: the longest-context model we ship (Gemma 3) before any sample is added, and
#: the paper's models have 2k-4k; beyond this the attack is refused in one line.
MAX_PROMPT_WORDS = 20_000


class Attack:
    """One attack: ``await attack.run(prompt, scorer, protected=..., seed=..., budget=...)``."""

    def __init__(self, recipe: Recipe, **options: Any) -> None:
        known = recipe.options()
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ValueError(f"{recipe.name} has no option {', '.join(unknown)}; valid options: "
                             f"{', '.join(sorted(known)) or 'none'}")
        self.recipe = recipe
        self.name = recipe.name
        #: The recipe as this run uses it (options and this implementation's facts in).
        self.configured = recipe.configure(options)
        self._lives = tuple(part.live() for part in self.configured.parts)

    @property
    def description(self) -> str:
        return self.recipe.description

    @property
    def requirements(self) -> str:
        return self.recipe.requirements

    @property
    def meaning_guard(self) -> MeaningGuard | None:
        """The run's meaning guard, if the recipe's word substitutions have one."""
        return next((c for c in self.configured.constraints if isinstance(c, MeaningGuard)), None)

    # -- the parts, as the search uses them ----------------------------------------------
    def transformation(self, seed: int) -> WordTransformation:
        """The word transformation of a word attack (opposites dropped where the recipe guards meaning)."""
        from promptrobust.attacks.lexicon import load_lexicon

        build = getattr(self.configured.transformation, "build", None)
        if build is None:
            raise TypeError(f"{self.name} does not change words")
        guard = load_lexicon() if self.meaning_guard is not None else None
        transformation: WordTransformation = build(seed, self._lives[0], guard)
        return transformation

    def constraints(self) -> list[Constraint]:
        """The constraints candidates are filtered by, in the recipe's order."""
        lives = self._lives[1 : 1 + len(self.configured.constraints)]
        return [live for live in lives if live is not None]  # type: ignore[misc]

    def _encoder(self) -> Callable[[], CachedEncoder] | None:
        for live in self._lives:
            if isinstance(live, SentenceSimilarity):
                return live.loaded_encoder
        return None

    # -- what records say -------------------------------------------------------------------
    def settings(self, budget: int | None = None) -> dict[str, object]:
        """Every setting that defines this attack, as recorded with its results.
        Values that differ from the recipe say "(recipe: ...)" and their keys
        are listed under ``deviations``."""
        reference = self.recipe.describe()
        reference["budget"] = Setting(self.recipe.query_budget, "unlimited")
        run = self.configured.describe(self._lives)
        run["budget"] = Setting(budget, "unlimited" if budget is None else None)
        out, deviations = compare(reference, run)
        out["deviations"] = sorted(set(deviations))
        return out

    def planned_candidates(self, prompt: str, semantic_prompts: Sequence[SemanticPrompt] = ()) -> int | None:
        """How many candidates its search will score on ``prompt``, where that is known before it
        runs: a fixed set (CheckList's strings, StressTest's tautologies, Semantic's prompts); None
        for a word search, whose candidates depend on what it finds. For progress totals."""
        from promptrobust.attacks.components import BruteForce, PromptSetSearch, semantic_entries

        search = self.configured.search
        if isinstance(search, BruteForce):
            made = getattr(self.configured.transformation, "candidates", None)
            return None if made is None else len({c for c in made(prompt) if c != prompt})
        if isinstance(search, PromptSetSearch):
            return len({text for _, text in semantic_entries(semantic_prompts)})
        return None

    # -- running ----------------------------------------------------------------------------
    async def run(
        self,
        clean_prompt: str,
        scorer: PromptScorer,
        *,
        protected: frozenset[str] = frozenset(),
        seed: int = 0,
        budget: int | None = None,
        semantic_prompts: Sequence[SemanticPrompt] = (),
        meaning_nli: str | None = None,
    ) -> AttackOutcome:
        """Score the clean prompt, search, and report. ``budget`` caps the
        candidate evaluations (None, the default: unlimited, as promptbench). ``meaning_nli``: an NLI
        model (Hugging Face id or folder) that judges replaced words for the meaning verdict, instead
        of the encoders (``nli_check``); loaded before the search, so a model that cannot load fails
        the attack before it costs anything."""
        if not isinstance(clean_prompt, str) or not clean_prompt.strip():
            raise ValueError("the prompt to attack is empty; pass the instruction text")
        words = word_count(clean_prompt)
        if words > MAX_PROMPT_WORDS:
            raise PromptTooLongError(
                f"the prompt to attack has {words:,} words, more than the {MAX_PROMPT_WORDS:,} an attack takes "
                "(each candidate is the whole prompt); attack a shorter instruction"
            )
        search = self.configured.search
        search.check(semantic_prompts)  # type: ignore[attr-defined]
        protected = normalize_protected(protected)
        judge = await asyncio.to_thread(load_nli_judge, meaning_nli) if meaning_nli else None
        started = time.perf_counter()
        tracker = TrackedScorer(scorer, budget)
        clean_score = await tracker.score_clean(clean_prompt)
        found = await search.search(  # type: ignore[attr-defined]
            self, clean_prompt, clean_score, tracker, protected=protected, seed=seed, semantic_prompts=semantic_prompts,
        )
        wall_time_s = time.perf_counter() - started
        # The meaning verdict, from evidence the search did not use (not part of the attack's cost);
        # its models load the first time (seconds): the scorer may show it as a step of its own.
        during = getattr(scorer, "during", None)
        with during("checking the adversarial prompt's meaning") if callable(during) else contextlib.nullcontext():
            verdict = await asyncio.to_thread(meaning_verdict, clean_prompt, found.prompt, protected, nli=judge)
            similarity = final_similarity(clean_prompt, found.prompt, self._encoder())  # as before: on this thread
        return AttackOutcome(
            substitutions=tuple(substitutions(clean_prompt, found.prompt)),
            final_similarity=similarity,
            meaning=verdict.to_dict(),
            attack=self.name,
            clean_prompt=clean_prompt,
            clean_score=clean_score,
            adversarial_prompt=found.prompt,
            adversarial_score=found.score,
            pdr=performance_drop_rate(clean_score, found.score),
            queries=tracker.queries,
            pruned=tracker.pruned,
            samples_evaluated=tracker.samples_evaluated,
            wall_time_s=wall_time_s,
            seed=seed,
            budget=budget,
            budget_exhausted=tracker.budget_exhausted,
            perturbed_words=found.perturbed_words,
            settings={**self.settings(budget), **found.notes},
            prompt_scores=found.prompt_scores,
            nothing_to_change=found.nothing_to_change,
        )


def final_similarity(clean: str, adversarial: str, choice: Callable[[], CachedEncoder] | None = None) -> dict[str, object]:
    """Whole-prompt similarity of the final prompt to the clean one under the
    attack's sentence encoder (the default USE port for attacks without one):
    angular and cosine, as the meaning check a reader can compare."""
    from promptrobust.attacks.errors import AttackResourceError
    from promptrobust.attacks.sentence import angular_similarity, load_use

    if clean == adversarial:
        return {"angular": 1.0, "cosine": 1.0, "encoder": "none needed (unchanged)"}
    try:
        encoder = choice() if choice is not None else load_use()
        cos = float(encoder.similarities(clean, [adversarial], "cosine")[0])
    except AttackResourceError as exc:
        return {"angular": None, "cosine": None, "encoder": f"unavailable ({exc})"}
    return {"angular": round(float(angular_similarity(cos)), 6), "cosine": round(cos, 6), "encoder": encoder.name}
