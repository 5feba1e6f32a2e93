"""Prompts x samples -> requests -> per-sample scores -> a metric per prompt.

The evaluator is the bridge between tasks and the scheduler, and it is the
``PromptScorer`` the attacks talk to: ``await evaluator(prompts, to_beat=x)``
scores all candidates of a search step as one stream of requests, evaluates
them over the data in chunks, and stops candidates that can no longer win
(``engine.measuring.early_stop``), which keeps the attack's result identical to
exhaustive evaluation.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from promptrobust.attacks.base import CandidateScore
from promptrobust.engine import progress as _progress
from promptrobust.engine.measuring.early_stop import CandidateProgress, prune
from promptrobust.engine.measuring.mode import check_mode
from promptrobust.engine.measuring.racing import Race, RacingSettings, sample_order
from promptrobust.engine.measuring.requests import Mode, RequestBuilder
from promptrobust.engine.serving.scheduler import JobCounters, Scheduler
from promptrobust.engine.serving.types import Completion, Request
from promptrobust.tasks.base import ParserName, Sample, Task

__all__ = ["Evaluator", "EvaluatorCost", "Mode", "PromptEvaluation", "SampleRecord", "label_of_highest"]

def label_of_highest(task: Task, logprobs: Sequence[float]) -> str:
    """The task label whose choice has the highest log-probability (the first one on a tie)."""
    return task.labels[max(range(len(logprobs)), key=lambda k: logprobs[k])]


@dataclass
class SampleRecord:
    """What happened on one sample (for ``--log-samples``)."""

    sample_id: str
    input: str
    target: Any
    answer: str | None
    choice_logprobs: list[float] | None
    prediction: Any
    score: float


@dataclass
class PromptEvaluation:
    prompt: str
    score: float
    samples: int
    unparseable: int
    records: list[SampleRecord] = field(default_factory=list)
    sample_scores: list[float] = field(default_factory=list)
    """Per-sample scores in sample order (for intervals and paired tests)."""


@dataclass
class EvaluatorCost:
    """What the attack's queries cost; copied into result records."""

    candidate_evaluations: int = 0  # distinct candidate prompts scored
    duplicate_candidates: int = 0  # identical candidates answered once
    samples_evaluated: int = 0  # (candidate, sample) pairs actually scored
    saved_by_early_stopping: int = 0  # (candidate, sample) pairs never requested (exact early stopping)
    pruned_candidates: int = 0
    saved_by_racing: int = 0  # (candidate, sample) pairs a race never requested
    races: int = 0  # search steps decided by a race
    raced_out: int = 0  # candidates a race dropped before their last sample

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


class Evaluator:
    """Scores prompts on one task's samples through one model's scheduler."""

    def __init__(
        self,
        scheduler: Scheduler,
        task: Task,
        samples: Sequence[Sample],
        *,
        mode: Mode = "choices",
        parser: ParserName = "last_word",
        chat: bool | None = None,
        examples: Sequence[Sample] = (),
        chunk_size: int = 32,
        early_stopping: bool = True,
        racing: RacingSettings | None = None,
        seed: int = 0,
        max_tokens: int | None = None,
        stop: Sequence[str] | None = None,
        system_instruction: str | None = None,
    ) -> None:
        if not samples:
            raise ValueError(f"task {task.name} has no samples to evaluate")
        # The mode is taken as given: a plan decided it (engine/measuring/target.py) and the workbench
        # applied the backend's downgrade (engine/measuring/mode.py); here it is only checked.
        check_mode(mode, task, scheduler.backend)
        self.scheduler = scheduler
        self.task = task
        self.samples = list(samples)
        self.parser: ParserName = parser
        self.chunk_size = max(1, chunk_size)
        self.early_stopping = early_stopping
        #: Race the candidates of each step instead of scoring them exactly (``engine.measuring.racing``).
        self.racing = racing
        self.seed = seed
        #: The prompt whose label margins order the samples of a race with no prompt to beat (the
        #: attacked prompt: ``Workbench.attack`` sets it); a step with a prompt to beat uses that one's.
        self.reference_prompt: str | None = None
        self._races = 0
        self.cost = EvaluatorCost()
        self.requests = JobCounters()
        self.unparseable = 0
        chat = scheduler.backend.is_chat if chat is None else chat
        self.builder = RequestBuilder(task, mode=mode, chat=chat, examples=examples, max_tokens=max_tokens,
                                      stop=stop, system_instruction=system_instruction)

    @property
    def mode(self) -> Mode:
        return self.builder.mode

    @property
    def chat(self) -> bool:
        """Whether inputs go to the model as chat messages (else completion text)."""
        return self.builder.chat

    @property
    def examples(self) -> list[Sample]:
        return self.builder.examples

    # -- requests ----------------------------------------------------------------
    def build_request(self, prompt: str, sample: Sample) -> Request:
        return self.builder.build(prompt, sample)

    def interpret(self, completion: Completion) -> tuple[str | None, str | None]:
        """The prediction read from a completion, and the answer text if any."""
        if completion.choice_logprobs is not None:
            return label_of_highest(self.task, completion.choice_logprobs), None
        text = completion.text or ""
        return self.task.parse(text, self.parser), text

    def _sample_score(self, completion: Completion, sample: Sample) -> tuple[float, str | None, str | None]:
        prediction, text = self.interpret(completion)
        if prediction is None:
            self.unparseable += 1
        return float(self.task.metric.sample_score(prediction, sample)), prediction, text

    # -- one prompt, all samples ---------------------------------------------------
    async def evaluate(self, prompt: str, *, keep_records: bool = False) -> PromptEvaluation:
        """Score one prompt on every sample (no early stopping)."""
        self.cost.candidate_evaluations += 1
        return await self._full_pass(prompt, keep_records=keep_records)

    async def _full_pass(self, prompt: str, *, keep_records: bool = False) -> PromptEvaluation:
        requests = [self.build_request(prompt, s) for s in self.samples]
        _progress.planned(len(requests))
        completions = await self.scheduler.submit_many(requests, counters=self.requests)
        self.cost.samples_evaluated += len(self.samples)
        predictions: list[Any] = []
        scores: list[float] = []
        records: list[SampleRecord] = []
        for request, completion, sample in zip(requests, completions, self.samples):
            score, prediction, text = self._sample_score(completion, sample)
            predictions.append(prediction)
            scores.append(score)
            if keep_records:
                records.append(
                    SampleRecord(
                        sample_id=sample.id,
                        input=request.input_text(),
                        target=sample.target,
                        answer=text,
                        choice_logprobs=list(completion.choice_logprobs) if completion.choice_logprobs else None,
                        prediction=prediction,
                        score=score,
                    )
                )
        if self.task.metric.decomposable:
            total = math.fsum(scores) / len(scores)
        else:
            total = float(self.task.metric.corpus_score(predictions, self.samples))
            # What the intervals resample: per-sample contributions where the metric has them (macro-F1).
            scores = self.task.metric.sample_scores(predictions, self.samples)
        unparseable = sum(p is None for p in predictions)
        return PromptEvaluation(prompt, total, len(self.samples), unparseable, records, scores)

    # -- many candidates: the PromptScorer -------------------------------------------
    async def __call__(self, prompts: Sequence[str], *, to_beat: float | None = None,
                       incumbent: str | None = None) -> list[CandidateScore]:
        """Score candidate prompts; see ``attacks.base.PromptScorer`` for the contract.

        With ``to_beat=None`` every candidate is scored exactly (the search needs
        full scores, e.g. to rank word importance). Otherwise candidates that
        cannot end strictly below ``to_beat`` and below every earlier candidate
        are stopped early; with ``racing``, the candidates (and ``incumbent``, the prompt
        ``to_beat`` is the exact score of) are raced instead (``race``).
        """
        unique = list(dict.fromkeys(prompts))
        self.cost.duplicate_candidates += len(prompts) - len(unique)
        self.cost.candidate_evaluations += len(unique)
        if self.racing is not None and to_beat is not None and self.task.metric.decomposable and len(self.samples) > 1:
            return await self.race(prompts, unique, to_beat=to_beat, incumbent=incumbent)
        if not self.task.metric.decomposable:
            exact = {p: (await self._full_pass(p)).score for p in unique}
            return [CandidateScore(p, exact[p], True, len(self.samples)) for p in prompts]

        n = len(self.samples)
        asked_before = self.requests.requests
        announced = [len(unique) * n]  # progress: the most this call can ask; lowered as candidates stop
        _progress.planned(announced[0])
        try:
            return await self._candidates(prompts, unique, n, to_beat, announced)
        finally:
            _progress.planned(self.requests.requests - asked_before - announced[0])  # progress: what was really asked

    #: An attack's search reports its position (``attacks.search``) straight to the progress events.
    search_step = staticmethod(_progress.search_step)

    def during(self, text: str) -> contextlib.AbstractContextManager[None]:
        """An attack's work that is not model requests (checking its result's meaning), shown in the
        status line while it runs (``attacks.attack``)."""
        return _progress.during(text, line=False)

    async def _candidates(self, prompts: Sequence[str], unique: list[str], n: int, to_beat: float | None,
                          announced: list[int]) -> list[CandidateScore]:
        progress = [CandidateProgress(total=n) for _ in unique]
        may_stop = self.early_stopping and to_beat is not None
        while True:
            plan = self._next_round(progress, leader_first=may_stop)
            if not plan:
                break
            requests = [self.build_request(unique[i], self.samples[j]) for i, js in plan for j in js]
            completions = await self.scheduler.submit_many(requests, counters=self.requests)
            self.cost.samples_evaluated += len(requests)
            it = iter(completions)
            for i, js in plan:
                for j in js:
                    score, _, _ = self._sample_score(next(it), self.samples[j])
                    progress[i].scores.append(score)
            if may_stop:
                for i in prune(progress, to_beat):
                    unasked = n - progress[i].seen
                    self.cost.pruned_candidates += 1
                    self.cost.saved_by_early_stopping += unasked
                    announced[0] -= unasked  # progress: its unasked samples leave the total at once
                    _progress.planned(-unasked)

        by_prompt = {
            p: CandidateScore(p, c.lower(), c.complete, c.seen) for p, c in zip(unique, progress)
        }
        return [by_prompt[p] for p in prompts]

    # -- racing ---------------------------------------------------------------------
    async def per_sample(self, prompt: str) -> tuple[list[float], list[float] | None]:
        """A prompt's score on every sample, and its label margin per sample (the best label's
        log-probability less the second's; None in generate mode). The prompts a race needs whole
        (the one to beat, the attacked one) were scored before, so this reads the cache."""
        requests = [self.build_request(prompt, s) for s in self.samples]
        completions = await self.scheduler.submit_many(requests, counters=self.requests)
        scores, margins = [], []
        for completion, sample in zip(completions, self.samples):
            scores.append(self._sample_score(completion, sample)[0])
            if completion.choice_logprobs is not None and len(completion.choice_logprobs) > 1:
                top = sorted(completion.choice_logprobs, reverse=True)
                margins.append(float(top[0] - top[1]))
        return scores, (margins if len(margins) == len(scores) else None)

    async def race(self, prompts: Sequence[str], unique: list[str], *, to_beat: float,
                   incumbent: str | None) -> list[CandidateScore]:
        """The candidates of one search step raced (``engine.measuring.racing``): with ``incumbent``
        (the prompt ``to_beat`` scores) as one more arm, known whole; the winner, if a candidate,
        scored on every sample (its score exact); every dropped candidate comes back incomplete."""
        assert self.racing is not None
        settings = self.racing
        n = len(self.samples)
        arms = ([incumbent] if incumbent is not None else []) + unique
        known: list[float] | None = None
        reference = incumbent if incumbent is not None else self.reference_prompt
        margins = None
        if reference is not None:
            ref_scores, margins = await self.per_sample(reference)
            known = ref_scores if incumbent is not None else None
        order, prefix = sample_order(n, margins, settings, self.seed + self._races)
        self._races += 1
        self.cost.races += 1
        race = Race(arms=len(arms), total=n, exact_prefix=prefix, error_rate=settings.error_rate,
                    tolerance=settings.tolerance)
        if known is not None:
            race.observe(0, [known[j] for j in order])
        first_candidate = 1 if incumbent is not None else 0
        announced = (len(arms) - first_candidate) * n
        _progress.planned(announced)
        asked = 0
        while True:
            plan = race.needed(settings.round_size)
            if not plan:
                break
            requests = [self.build_request(arms[i], self.samples[order[p]]) for i, positions in plan.items() for p in positions]
            completions = await self.scheduler.submit_many(requests, counters=self.requests)
            asked += len(requests)
            self.cost.samples_evaluated += len(requests)
            it = iter(completions)
            for i, positions in plan.items():
                race.observe(i, [self._sample_score(next(it), self.samples[order[p]])[0] for p in positions])
            race.drop()
        winner = race.winner()
        out: dict[str, CandidateScore] = {}
        for i in range(first_candidate, len(arms)):
            prompt = arms[i]
            seen = race.seen(i)
            if i == winner:
                rest = [order[p] for p in range(seen, n)]
                if rest:
                    requests = [self.build_request(prompt, self.samples[j]) for j in rest]
                    completions = await self.scheduler.submit_many(requests, counters=self.requests)
                    asked += len(requests)
                    self.cost.samples_evaluated += len(requests)
                    race.observe(i, [self._sample_score(c, self.samples[j])[0] for c, j in zip(completions, rest)])
                out[prompt] = CandidateScore(prompt, math.fsum(race.scores[i]) / n, True, n)
            elif seen == n:  # lost on every sample: an exact score, no call saved
                out[prompt] = CandidateScore(prompt, math.fsum(race.scores[i]) / n, True, n)
            else:
                self.cost.raced_out += 1
                self.cost.saved_by_racing += n - seen
                # Not the one kept: incomplete, with the lowest score it could still reach (the contract's bound).
                out[prompt] = CandidateScore(prompt, math.fsum(race.scores[i][:seen]) / n, False, seen)
        _progress.planned(asked - announced)  # progress: what was really asked
        return [out[p] for p in prompts]

    def _next_round(self, progress: list[CandidateProgress], *, leader_first: bool) -> list[tuple[int, range]]:
        """Which samples each unfinished candidate is scored on next, as one batch.

        Every candidate advances by one chunk. With early stopping, after the
        first chunk the candidate that looks best so far (lowest mean) is also
        finished in the same batch: its exact score is then a tight bound that
        the others can be stopped against long before the data runs out (in
        lockstep, nobody finishes before the last chunk). Which candidates are
        stopped stays decided by ``prune`` alone, so the order of evaluation
        never changes the result, only how early losers stop.
        """
        n = len(self.samples)
        active = [i for i, c in enumerate(progress) if not c.stopped and not c.complete]
        if not active:
            return []
        plan = {i: range(progress[i].seen, min(n, progress[i].seen + self.chunk_size)) for i in active}
        started = all(progress[i].seen > 0 for i in active)
        if leader_first and started and len(active) > 1:
            leader = min(active, key=lambda i: (math.fsum(progress[i].scores) / progress[i].seen, i))
            plan[leader] = range(progress[leader].seen, n)
        return [(i, plan[i]) for i in active]
