"""The reference loop: promptbench's way of scoring a candidate prompt.

For every candidate, a pass over the data with one model call per sample,
one after the other: no batching, no cache, no deduplication, no early
stopping; generation with the task's generation length and the paper's
last-word parser. It exists so benchmarks can compare our engine with the
sequential baseline on the same model, backend, data and attack search, and
so a test can show the two find the same adversarial prompt.

It implements the same ``PromptScorer`` interface as ``engine.evaluator``,
so an attack runs unchanged on either.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from promptrobust.attacks.base import CandidateScore
from promptrobust.engine.backends.base import Backend
from promptrobust.engine.requests import RequestBuilder
from promptrobust.engine.types import Request
from promptrobust.tasks.base import Sample, Task


@dataclass
class ReferenceCost:
    model_calls: int = 0
    candidate_evaluations: int = 0


class ReferenceScorer:
    """Sequential, uncached, one-sample-per-call scoring (the baseline)."""

    def __init__(
        self,
        backend: Backend,
        task: Task,
        samples: Sequence[Sample],
        *,
        examples: Sequence[Sample] = (),
        chat: bool | None = None,
        max_tokens: int | None = None,
    ) -> None:
        self.backend = backend
        self.task = task
        self.samples = list(samples)
        self.chat = backend.is_chat if chat is None else chat
        self.builder = RequestBuilder(task, mode="generate", chat=self.chat, examples=examples, max_tokens=max_tokens)
        self.cost = ReferenceCost()

    def request(self, prompt: str, sample: Sample) -> Request:
        return self.builder.build(prompt, sample)

    async def score(self, prompt: str) -> float:
        predictions = []
        for sample in self.samples:
            (completion,) = await self.backend.complete_batch([self.request(prompt, sample)])
            self.cost.model_calls += 1
            predictions.append(self.task.parse(completion.text or "", "last_word"))
        metric = self.task.metric
        if metric.decomposable:
            return math.fsum(metric.sample_score(p, s) for p, s in zip(predictions, self.samples)) / len(self.samples)
        return float(metric.corpus_score(predictions, self.samples))

    async def __call__(self, prompts: Sequence[str], *, to_beat: float | None = None) -> list[CandidateScore]:
        out = []
        for prompt in prompts:  # every candidate, even a repeated one, costs a full pass
            self.cost.candidate_evaluations += 1
            out.append(CandidateScore(prompt, await self.score(prompt), True, len(self.samples)))
        return out
