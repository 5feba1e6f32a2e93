"""Search strategies: which candidate prompts to score, and which to keep.

All three talk to the model through a ``TrackedScorer`` (a PromptScorer plus
the query budget and the counters an ``AttackOutcome`` reports):

* ``greedy_word_search``: rank words by importance (all variants in one
  call), then at each word score every allowed replacement in one call with
  ``to_beat`` = the current score and keep the best if strictly lower.
* ``brute_force_search``: score a fixed candidate list in one call.
* ``prompt_set_search``: score a given set of prompts; report the worst.

Choosing "the first complete candidate with the minimum score" is, by the
PromptScorer contract, the same choice as scoring everything exhaustively.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from promptrobust.attacks.base import (
    CandidateScore,
    Constraint,
    PromptScorer,
    WordSite,
    WordTransformation,
)
from promptrobust.attacks.errors import AttackBudgetError, ScorerContractError
from promptrobust.attacks.words import (
    STOPWORDS,
    has_letter,
    is_protected,
    mentions_protected,
    tokenize,
    word_indices,
)

ImportanceMode = Literal["delete", "unk"]


class TrackedScorer:
    """A PromptScorer with a query budget and counters.

    ``queries`` counts candidate prompts sent for scoring (each distinct
    prompt once, even when re-scored); the clean prompt's evaluation is not a
    candidate and is not counted. ``budget=None`` means unlimited.
    """

    def __init__(self, scorer: PromptScorer, budget: int | None) -> None:
        if budget is not None and budget < 0:
            raise ValueError(f"query budget must be >= 0 or None, got {budget}")
        self._scorer = scorer
        self.budget = budget
        self.queries = 0
        self.pruned = 0
        self.samples_evaluated = 0
        self.calls = 0
        self.budget_exhausted = False

    def report(self, position: int | None, positions: int | None, clean: float, best: float, *, scoring: int = 0) -> None:
        """Tell the scorer's optional ``search_step`` hook where the search is (progress display):
        word ``position`` of ``positions``, ``scoring`` candidates now being scored."""
        hook = getattr(self._scorer, "search_step", None)
        if hook is not None:
            hook(position=position, positions=positions, candidates=self.queries, scoring=scoring,
                 clean_score=clean, best_score=best, requests=self.samples_evaluated, budget=self.budget)

    @property
    def remaining(self) -> int | None:
        return None if self.budget is None else max(0, self.budget - self.queries)

    def take(self, candidates: Iterable[str]) -> list[str]:
        """The candidates the budget still allows (in order); notes exhaustion.
        A lazy ``candidates`` is drawn only as far as the budget reaches (one more, to know it ran out)."""
        left = self.remaining
        if left is None:
            return list(candidates)
        taken = list(itertools.islice(candidates, left + 1))
        if len(taken) > left:
            self.budget_exhausted = True
            return taken[:left]
        return taken

    async def _call(
        self, prompts: list[str], to_beat: float | None, incumbent: str | None = None
    ) -> list[CandidateScore]:
        self.calls += 1
        results = list(await self._scorer(prompts, to_beat=to_beat, incumbent=incumbent))
        if len(results) != len(prompts):
            raise ScorerContractError(
                f"scorer returned {len(results)} scores for {len(prompts)} prompts"
            )
        for prompt, res in zip(prompts, results):
            if res.prompt != prompt:
                raise ScorerContractError(
                    "scorer returned scores out of order (CandidateScore.prompt mismatch)"
                )
            self.samples_evaluated += res.samples_evaluated
        return results

    async def score_clean(self, prompt: str) -> float:
        """The exact score of the prompt under attack (not a counted query)."""
        (res,) = await self._call([prompt], None)
        if not res.complete:
            raise ScorerContractError(
                "scorer left the only candidate incomplete; a lone prompt must be scored fully"
            )
        return res.score

    async def score(
        self, prompts: list[str], to_beat: float | None, incumbent: str | None = None
    ) -> list[CandidateScore]:
        """Score candidates (caller has applied ``take``); counts them. ``incumbent``: the prompt
        ``to_beat`` is the score of (a racing scorer compares the candidates with it)."""
        if not prompts:
            return []
        results = await self._call(prompts, to_beat, incumbent)
        self.queries += len(prompts)
        self.pruned += sum(not r.complete for r in results)
        return results

    async def score_exact(self, prompts: list[str]) -> list[float]:
        """Exact scores for every prompt: one batched call, then each pruned
        one alone (a lone prompt must come back complete; with the engine's
        cache that costs only the samples it had not reached)."""
        results = await self.score(prompts, None)
        redo = [i for i, r in enumerate(results) if not r.complete]
        if redo:
            again = await asyncio.gather(
                *(self._call([prompts[i]], None) for i in redo)
            )
            for i, (res,) in zip(redo, again):
                if not res.complete:
                    raise ScorerContractError("scorer left a lone prompt incomplete")
                results[i] = res
        return [r.score for r in results]


def best_complete(
    results: Sequence[CandidateScore], to_beat: float | None
) -> CandidateScore | None:
    """The first complete candidate with the lowest score strictly below ``to_beat``."""
    best: CandidateScore | None = None
    for r in results:
        if not r.complete or (to_beat is not None and r.score >= to_beat):
            continue
        if best is None or r.score < best.score:
            best = r
    return best


@dataclass(frozen=True)
class SearchResult:
    prompt: str
    score: float
    perturbed_words: int = 0
    #: (language, prompt, exact score) of every prompt a prompt-set search scored.
    prompt_scores: tuple[tuple[str, str, float], ...] = ()
    #: Settings the search learned while running (recorded with the outcome).
    notes: dict[str, object] = field(default_factory=dict)
    #: Why the search could try no change at all ("" when it tried some): its result is the clean
    #: prompt because nothing could change, which measures nothing about robustness.
    nothing_to_change: str = ""


def attackable_words(
    tokens: tuple[str, ...], protected: frozenset[str], *, skip_stopwords: bool
) -> list[int]:
    """Indices of the words an attack may change, in prompt order."""
    out = []
    for i in word_indices(tokens):
        w = tokens[i]
        if not w or not has_letter(w) or is_protected(w, protected):
            continue
        if skip_stopwords and w.lower() in STOPWORDS:
            continue
        out.append(i)
    return out


#: Characters of candidate prompts sent to the scorer in one call of the word
#: ranking: one candidate per word means the ranking of an N-word prompt holds
#: N prompts of N words; sent in calls of at most this much text, memory stays
#: linear in the prompt (a prompt of a few hundred words still goes in one call).
RANKING_CALL_CHARS = 1 << 20


def importance_variants(tokens: tuple[str, ...], indices: Sequence[int], filler: str) -> Iterator[str]:
    """The prompt without each word in turn (deleted, or replaced by ``filler``), made one at a time."""
    for i in indices:
        yield WordSite(tokens, i).with_word(filler)


def _calls_of(prompts: Iterable[str], max_chars: int) -> Iterator[list[str]]:
    """Consecutive groups of prompts of at most ``max_chars`` characters (at least one prompt each)."""
    group: list[str] = []
    size = 0
    for prompt in prompts:
        if group and size + len(prompt) > max_chars:
            yield group
            group, size = [], 0
        group.append(prompt)
        size += len(prompt)
    if group:
        yield group


async def rank_words(
    tokens: tuple[str, ...],
    indices: list[int],
    tracker: TrackedScorer,
    *,
    mode: ImportanceMode,
    unk_token: str = "[UNK]",
) -> list[int]:
    """Word indices, most important first: the lower the score without the
    word (deleted, or replaced by ``unk_token``), the more it matters. Ties
    keep prompt order. The variants are made lazily, no more than the budget
    allows, and scored in calls of at most ``RANKING_CALL_CHARS`` characters
    (one call for any ordinary prompt); words the budget does not cover follow,
    in prompt order."""
    filler = "" if mode == "delete" else unk_token
    left = tracker.remaining
    variants = importance_variants(tokens, indices, filler)
    if left is not None:
        variants = itertools.islice(variants, left + 1)  # one more than the budget: to see it run out
    scores: list[float] = []
    for call in _calls_of(variants, RANKING_CALL_CHARS):
        if left is not None and len(scores) + len(call) > left:
            call = call[: left - len(scores)]
            tracker.budget_exhausted = True
        if call:
            scores += await tracker.score_exact(call)
    ranked = sorted(range(len(scores)), key=lambda j: (scores[j], j))
    return [indices[j] for j in ranked] + indices[len(scores) :]


# One attack at a time computes candidates: the shared resources (encoder
# memo, tagger, masked LM) are not written for concurrent threads.
_CPU_LOCK = threading.Lock()


def _candidates_for(
    site: WordSite,
    transformation: WordTransformation,
    constraints: Sequence[Constraint],
    protected: frozenset[str],
    clean: str,
    current: str,
) -> list[str]:
    """The allowed candidate prompts for one word, in proposal order."""
    with _CPU_LOCK:
        seen: set[str] = {current}
        candidates: list[str] = []
        for new in transformation.replacements(site):
            if not new or new.isspace() or mentions_protected(new, protected):
                continue
            cand = site.with_word(new)
            if cand not in seen:
                seen.add(cand)
                candidates.append(cand)
        # TextAttack sorts a step's candidates by text, so among equal scores
        # the alphabetically first wins; keeping the first minimum of a sorted
        # list gives the same choice.
        return sorted(_filter(constraints, clean, current, candidates))


def _filter(
    constraints: Sequence[Constraint], clean: str, current: str, candidates: list[str]
) -> list[str]:
    for c in constraints:
        if not candidates:
            break
        ref = clean if getattr(c, "reference", "clean") == "clean" else current
        keep = c.allowed(ref, candidates)
        candidates = [cand for cand, ok in zip(candidates, keep) if ok]
    return candidates


async def greedy_word_search(
    clean_prompt: str,
    clean_score: float,
    tracker: TrackedScorer,
    *,
    transformation: WordTransformation,
    constraints: Sequence[Constraint],
    protected: frozenset[str],
    importance: ImportanceMode = "delete",
    unk_token: str = "[UNK]",
    skip_stopwords: bool = True,
) -> SearchResult:
    """Greedy word-importance search (TextBugger, DeepWordBug, TextFooler,
    BertAttack). Each word is changed at most once; positions are tracked in
    the clean prompt's tokenisation, so an edit that adds a space inside a
    word does not shift later words."""
    tokens = list(tokenize(clean_prompt))
    current, current_score, changed = clean_prompt, clean_score, 0
    indices = attackable_words(tuple(tokens), protected, skip_stopwords=skip_stopwords)
    if current_score <= 0.0:
        return SearchResult(current, current_score)
    if not indices:
        return SearchResult(current, current_score, nothing_to_change=_no_word_left(tuple(tokens), protected, skip_stopwords))
    tried = 0
    order = await rank_words(
        tuple(tokens), indices, tracker, mode=importance, unk_token=unk_token
    )
    tracker.report(0, len(order), clean_score, current_score)
    for step, i in enumerate(order, 1):
        if current_score <= 0.0 or tracker.remaining == 0:
            if tracker.remaining == 0 and tracker.budget is not None:
                tracker.budget_exhausted = True
            break
        site = WordSite(tuple(tokens), i)
        # CPU work (word vectors, masked LM, encoders, tagger) runs off the
        # event loop so a shared scheduler keeps feeding the model meanwhile.
        candidates = await asyncio.to_thread(
            _candidates_for,
            site,
            transformation,
            constraints,
            protected,
            clean_prompt,
            current,
        )
        candidates = tracker.take(candidates)
        tried += len(candidates)
        if candidates:
            tracker.report(step, len(order), clean_score, current_score, scoring=len(candidates))
            best = best_complete(
                await tracker.score(candidates, current_score, incumbent=current), current_score
            )
            if best is not None:
                tokens[i] = _replacement_of(site, best.prompt)
                current, current_score = best.prompt, best.score
                changed += 1
        tracker.report(step, len(order), clean_score, current_score)
    if not tried and not tracker.budget_exhausted:
        words = ", ".join(dict.fromkeys(tokens[i].lower() for i in indices))
        return SearchResult(current, current_score, changed, nothing_to_change=(
            f"no allowed replacement for any of the {len(indices)} words it may change ({words}): every candidate "
            "broke a constraint of the attack"))
    return SearchResult(current, current_score, changed)


def _no_word_left(tokens: tuple[str, ...], protected: frozenset[str], skip_stopwords: bool) -> str:
    """Why a prompt has no word a word attack may change, naming the words and what keeps each."""
    kept = [tokens[i] for i in word_indices(tokens) if tokens[i] and has_letter(tokens[i])]
    guarded = list(dict.fromkeys(w.lower() for w in kept if is_protected(w, protected)))
    stop = list(dict.fromkeys(w.lower() for w in kept if skip_stopwords and w.lower() in STOPWORDS and w.lower() not in guarded))
    said = [f"protected: {', '.join(guarded)} (answer words, label values, the task's protected words and the "
            "words that define the labels)"] if guarded else []
    said += [f"stop words, which the recipe never changes: {', '.join(stop)}"] if stop else []
    return "every word of the prompt is kept as it is; " + "; ".join(said or ["the prompt has no word"])


def _replacement_of(site: WordSite, prompt: str) -> str:
    """Recover the replacement word from a candidate built by ``site.with_word``."""
    before = "".join(site.tokens[: site.index])
    after = "".join(site.tokens[site.index + 1 :])
    return prompt[len(before) : len(prompt) - len(after)]


async def brute_force_search(
    clean_prompt: str,
    clean_score: float,
    tracker: TrackedScorer,
    candidates: Sequence[str],
) -> SearchResult:
    """Score every candidate in one call and return the lowest-scoring one,
    even when it scores above the clean prompt (promptbench's BruteForceSearch:
    the PDR can be negative). Ties go to the alphabetically first candidate.

    Only the minimum is needed, so candidates are scored against
    ``to_beat=inf``: one that provably scores above another stops early."""
    made = sorted(c for c in dict.fromkeys(candidates) if c != clean_prompt)
    todo = tracker.take(made)
    if not made:
        return SearchResult(clean_prompt, clean_score, nothing_to_change="it made no candidate that differs from the prompt")
    if not todo:
        return SearchResult(clean_prompt, clean_score)
    tracker.report(None, None, clean_score, clean_score, scoring=len(todo))
    best = best_complete(await tracker.score(todo, math.inf), math.inf)
    if best is not None:
        tracker.report(None, None, clean_score, best.score)
    if best is None:
        raise ScorerContractError(
            "scorer returned no complete score for a brute-force step (the lowest-scoring candidate must be scored fully)"
        )
    return SearchResult(best.prompt, best.score, 0 if best.prompt == clean_prompt else 1)


async def prompt_set_search(
    tracker: TrackedScorer, prompts: Sequence[tuple[str, str]], *, every_score: bool = True
) -> SearchResult:
    """Score every (language, prompt) of a set exactly (Semantic attack: the
    paper reports each one) and return the lowest-scoring one as the result,
    whether or not it is below the clean prompt's score.

    ``every_score=False`` wants only the lowest score: the set is scored
    against ``to_beat=inf``, so a prompt that provably scores above another
    stops early, and ``prompt_scores`` is left empty."""
    unique = list(dict.fromkeys(text for _, text in prompts))
    todo = tracker.take(unique)
    if not todo:
        raise AttackBudgetError("the query budget allows no prompt of the set; raise the budget")
    skipped = f" ({len(unique) - len(todo)} not scored: budget)" if len(todo) < len(unique) else ""
    if not every_score:
        best = best_complete(await tracker.score(todo, math.inf), math.inf)
        if best is None:
            raise ScorerContractError(
                "scorer returned no complete score for a prompt set (the lowest-scoring prompt must be scored fully)"
            )
        note = f"worst of {len(todo)} semantic prompts{skipped}; other scores not computed (every_score=false)"
        return SearchResult(best.prompt, best.score, notes={"result": note})
    scores = dict(zip(todo, await tracker.score_exact(todo)))
    language: dict[str, str] = {}
    for lang, text in prompts:
        language.setdefault(text, lang)
    table = tuple((language[t], t, scores[t]) for t in todo)
    worst = min(range(len(todo)), key=lambda i: (scores[todo[i]], i))
    note = f"worst of {len(todo)} semantic prompts{skipped}"
    return SearchResult(
        todo[worst], scores[todo[worst]], prompt_scores=table, notes={"result": note}
    )
