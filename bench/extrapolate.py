"""Sequential baselines at the size users run, measured on a subset of the engine's own calls.

The reference loops and stock promptbench answer one (candidate, sample) at a
time, with nothing shared or cached, so their cost is linear in their calls:
a call costs what it costs whichever candidate it belongs to (the inputs of a
task differ only by the sample, and the sample subset is spread over the
run). ``CallSampler`` times single calls on requests the engines sent,
spread over the run and interleaved with it (a slice after each phase, so the
shared machine's load falls on both), and checks each answer against the
engine's; ``baseline_calls`` counts the calls each loop would make for the
whole protocol: every candidate the engine's search scored (repeats
included: the loops have no cache) times the samples.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from bench.levers import BASELINE, Recorder, _same, configure
from bench.reference import PromptbenchScorer, promptbench_last_word
from promptrobust.engine.serving.types import Request

#: baseline -> the engine whose requests it answers (same mode, same requests)
ENGINE_OF = {"reference-choices": "engine", "reference": "engine-gen", "promptbench": "engine-gen"}


@dataclass
class CallTimes:
    baseline: str
    seconds: list[float] = field(default_factory=list)
    #: calls whose answer equals the engine's (log-probs within 1e-4, or the same text; promptbench: the same parse)
    agree: int = 0

    def summary(self) -> dict[str, Any]:
        s = self.seconds
        if not s:
            return {"calls_measured": 0}
        mean = statistics.fmean(s)
        return {"calls_measured": len(s), "mean_s": mean, "median_s": statistics.median(s), "min_s": min(s),
                "max_s": max(s), "stdev_over_mean": statistics.pstdev(s) / mean if mean else 0.0,
                "answers_as_the_engine": self.agree}


class CallSampler:
    """Times single baseline calls on recorded engine requests, a slice at a time."""

    def __init__(self, backend: Any, task: Any, examples: Any, baselines: list[str], per_baseline: int, slices: int,
                 max_tokens: int) -> None:
        self.backend = backend
        self.task = task
        self.baselines = baselines
        self.per_slice = max(1, -(-per_baseline // max(1, slices)))
        self.per_baseline = per_baseline
        self.times = {b: CallTimes(b) for b in baselines}
        self._used: dict[str, int] = {b: 0 for b in baselines}  # recorded requests already past
        self._pb = PromptbenchScorer(backend.model, backend.tokenizer, task, [], examples=examples,
                                     max_new_tokens=max_tokens) if "promptbench" in baselines else None

    async def slice(self, recorders: dict[str, Recorder]) -> None:
        """Time up to ``per_slice`` calls of each baseline on requests recorded since the last slice (spread)."""
        configure(self.backend, BASELINE)
        for b in self.baselines:
            rec = recorders.get(ENGINE_OF[b])
            if rec is None:
                continue
            sent = list(rec.sent.items())
            fresh = sent[self._used[b]:]
            self._used[b] = len(sent)
            want = min(self.per_slice, self.per_baseline - len(self.times[b].seconds), len(fresh))
            if want <= 0:
                continue
            step = len(fresh) / want
            for k in range(want):
                request, completion = fresh[int(k * step)]
                await self._one(b, request, completion)

    async def _one(self, baseline: str, request: Request, engine_answer: Any) -> None:
        t = self.times[baseline]
        if baseline == "promptbench":
            text = request.prompt if request.prompt is not None else request.messages[-1].content
            t0 = time.perf_counter()
            raw = await asyncio.to_thread(self._pb._predict, text)
            t.seconds.append(time.perf_counter() - t0)
            mine = self.task.parse(promptbench_last_word(raw, self._pb.drop), "last_word")
            t.agree += mine == self.task.parse(engine_answer.text or "", "last_word")
            return
        t0 = time.perf_counter()
        (got,) = await self.backend.complete_batch([request])
        t.seconds.append(time.perf_counter() - t0)
        t.agree += _same(got, engine_answer)


def baseline_calls(evaluators: list[Any], samples: int) -> int:
    """Calls a sequential loop makes for the searches the engine ran: every candidate scored, repeats included,
    on every sample (no cache, no early stopping)."""
    return sum(e.cost.candidate_evaluations + e.cost.duplicate_candidates for e in evaluators) * samples
