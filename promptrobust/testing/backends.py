"""Test doubles at the backend boundary, and a synthetic task.

These stand in for a model (the true boundary of the engine); everything
between them and the test (scheduler, cache, evaluator, early stopping) is
the real code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from promptrobust.engine.serving.backends.base import Backend
from promptrobust.engine.serving.types import Completion, ModelIdentity, Request
from promptrobust.tasks.base import Metric, Sample, Task


class CountingBackend(Backend):
    """Answers deterministically from the input text and records every call."""

    kind = "fake"

    def __init__(
        self,
        *,
        batching: bool = True,
        max_batch_size: int = 8,
        answer: Callable[[Request], Completion] | None = None,
        delay: float = 0.0,
        name: str = "fake-model",
    ) -> None:
        self.batching = batching
        self.max_batch_size = max_batch_size
        self.batches: list[list[Request]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.delay = delay
        self._answer = answer or _echo
        self._name = name

    @property
    def identity(self) -> ModelIdentity:
        return ModelIdentity(backend="fake", name=self._name, revision="r1")

    @property
    def calls(self) -> int:
        return sum(len(b) for b in self.batches)

    async def complete_batch(self, requests: Sequence[Request]) -> list[Completion]:
        self.batches.append(list(requests))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            return [self._answer(r) for r in requests]
        finally:
            self.in_flight -= 1


def _echo(request: Request) -> Completion:
    if request.kind == "score_choices":
        text = request.input_text().lower()
        return Completion(choice_logprobs=tuple(-0.1 if c.strip() in text else -5.0 for c in request.choices))
    return Completion(text=request.input_text()[-12:], completion_tokens=1)


class FractionMetric(Metric):
    """The prediction is the per-sample score itself (a float in [0, 1])."""

    name = "fraction"

    def sample_score(self, prediction: Any, sample: Sample) -> float:
        return 0.0 if prediction is None else float(prediction)


@dataclass
class TableTask(Task):
    """A task whose per-sample scores come from a table keyed by (prompt, sample).

    The input is rendered as ``prompt␞sample_id`` so a backend can look the
    score up; ``parse`` reads the float back.
    """

    name: str = "table"
    n: int = 10
    table: Mapping[tuple[str, str], float] = field(default_factory=dict)
    supports_choices: bool = False

    @property
    def metric(self) -> Metric:
        return FractionMetric()

    def load(self, *, limit=None, seed=0, data_dir=None, data_file=None) -> list[Sample]:  # noqa: ANN001
        n = self.n if limit is None else min(limit, self.n)
        return [Sample(id=str(i), fields={"x": str(i)}, target=None) for i in range(n)]

    def few_shot_pool(self, *, seed=0, data_dir=None) -> list[Sample]:  # noqa: ANN001
        return []

    def render(self, instruction: str, sample: Sample, examples: Sequence[Sample] = ()) -> str:
        return instruction + "\u241e" + sample.id

    def parse(self, answer: str, parser="last_word") -> Any:  # noqa: ANN001
        try:
            return float(answer)
        except ValueError:
            return None


def table_answer(table: Mapping[tuple[str, str], float]) -> Callable[[Request], Completion]:
    def answer(request: Request) -> Completion:
        prompt, _, sample_id = request.input_text().rpartition("\u241e")
        return Completion(text=repr(table[(prompt, sample_id)]))

    return answer
