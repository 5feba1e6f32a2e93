"""The reference loop: promptbench's way of scoring a candidate prompt.

For every candidate, a pass over the data with one model call per sample,
one after the other: no batching, no cache, no deduplication, no early
stopping; generation with the task's generation length and the paper's
last-word parser (or, with ``mode="choices"``, the label of highest
log-probability, the engine's label scoring done one call at a time). It exists so benchmarks can compare our engine with the
sequential baseline on the same model, backend, data and attack search, and
so a test can show the two find the same adversarial prompt.

It implements the same ``PromptScorer`` interface as ``engine.evaluator``,
so an attack runs unchanged on either.

``PromptbenchScorer`` is the other baseline: stock promptbench's per-call
behaviour on a transformers model (raw text without a chat template,
``generate`` with ``max_new_tokens=20`` stopping at EOS only, the whole output
decoded, its last-word parse), which is what users of promptbench run today.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from promptrobust.attacks.base import CandidateScore
from promptrobust.engine.serving.backends.base import Backend
from promptrobust.engine.measuring.evaluator import label_of_highest
from promptrobust.engine.measuring.requests import RequestBuilder
from promptrobust.engine.serving.types import Completion, Request
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
        mode: str = "generate",
    ) -> None:
        self.backend = backend
        self.task = task
        self.samples = list(samples)
        self.chat = backend.is_chat if chat is None else chat
        #: "generate" (the paper's: answer text, last-word parse) or "choices" (the label of highest log-probability)
        self.mode = mode
        self.builder = RequestBuilder(task, mode=mode, chat=self.chat, examples=examples, max_tokens=max_tokens)
        self.cost = ReferenceCost()

    def request(self, prompt: str, sample: Sample) -> Request:
        return self.builder.build(prompt, sample)

    async def score(self, prompt: str) -> float:
        predictions = []
        for sample in self.samples:
            (completion,) = await self.backend.complete_batch([self.request(prompt, sample)])
            self.cost.model_calls += 1
            predictions.append(self._prediction(completion))
        metric = self.task.metric
        if metric.decomposable:
            return math.fsum(metric.sample_score(p, s) for p, s in zip(predictions, self.samples)) / len(self.samples)
        return float(metric.corpus_score(predictions, self.samples))

    def _prediction(self, completion: Completion) -> Any:
        if completion.choice_logprobs is not None:  # read as the evaluator reads it
            return label_of_highest(self.task, completion.choice_logprobs)
        return self.task.parse(completion.text or "", "last_word")

    async def __call__(self, prompts: Sequence[str], *, to_beat: float | None = None,
                       incumbent: str | None = None) -> list[CandidateScore]:
        out = []
        for prompt in prompts:  # every candidate, even a repeated one, costs a full pass
            self.cost.candidate_evaluations += 1
            out.append(CandidateScore(prompt, await self.score(prompt), True, len(self.samples)))
        return out


#: Characters promptbench strips from both ends of an answer before taking its last word.
_PB_STRIP = ",._\"'-+=!?()&^%$#@:\\|{}[]<>/`\n\t\r\v\f "


def promptbench_last_word(raw: str, drop: Sequence[str] = ("<pad>", "</s>")) -> str:
    """promptbench's classification parse: lower-case, drop the pad/end tokens, strip, last space-separated word."""
    text = raw.lower()
    for token in drop:
        text = text.replace(token.lower(), "")
    return text.strip(_PB_STRIP).split(" ")[-1]


class PromptbenchScorer:
    """Stock promptbench's per-call loop on a transformers model and tokenizer.

    Per (candidate, sample): the task's text rendered raw (no chat template),
    tokenised with the tokenizer's own special tokens, ``model.generate`` with
    ``max_new_tokens`` (20 in promptbench) stopping at EOS only, the whole
    output (input included, special tokens kept) decoded, and the last word
    parsed. Two adaptations, both cost-neutral: greedy decoding (promptbench
    asks for sampling at temperature 0, which recent transformers refuse;
    temperature 0 means greedy), and this model's own end and pad tokens are
    dropped before parsing as promptbench drops its models' ``</s>`` and
    ``<pad>`` (otherwise every answer that ends on EOS would be unparseable).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        task: Task,
        samples: Sequence[Sample],
        *,
        examples: Sequence[Sample] = (),
        max_new_tokens: int = 20,
    ) -> None:
        self.model = model
        self.tok = tokenizer
        self.task = task
        self.samples = list(samples)
        self.examples = list(examples)
        self.max_new_tokens = max_new_tokens
        self.drop = tuple(t for t in {"<pad>", "</s>", tokenizer.eos_token, tokenizer.pad_token} if t)
        self.cost = ReferenceCost()

    def _predict(self, text: str) -> str:
        import torch

        with torch.inference_mode():
            ids = self.tok(text, return_tensors="pt").input_ids.to(self.model.device)
            out = self.model.generate(ids, max_new_tokens=self.max_new_tokens, do_sample=False,
                                      pad_token_id=self.tok.pad_token_id)
        return self.tok.decode(out[0])

    async def score(self, prompt: str) -> float:
        predictions = []
        for sample in self.samples:
            raw = await asyncio.to_thread(self._predict, self.task.render(prompt, sample, self.examples))
            self.cost.model_calls += 1
            predictions.append(self.task.parse(promptbench_last_word(raw, self.drop), "last_word"))
        metric = self.task.metric
        if metric.decomposable:
            return math.fsum(metric.sample_score(p, s) for p, s in zip(predictions, self.samples)) / len(self.samples)
        return float(metric.corpus_score(predictions, self.samples))

    async def __call__(self, prompts: Sequence[str], *, to_beat: float | None = None,
                       incumbent: str | None = None) -> list[CandidateScore]:
        out = []
        for prompt in prompts:
            self.cost.candidate_evaluations += 1
            out.append(CandidateScore(prompt, await self.score(prompt), True, len(self.samples)))
        return out
