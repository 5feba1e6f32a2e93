"""Do the sequential loops end on the engine's adversarial prompts? A certificate, without running their searches.

At the size users run, the batch-1 loops cannot run the whole protocol here
(``bench/extrapolate.py`` times a sample of their calls instead), so whether
they would find the same adversarial prompts is shown another way. A loop's
search is decided by its per-sample predictions alone; the engine computes
the same requests batched, which moves log-probabilities and logits by float
rounding only (``tests/test_hf_levers.py``: within 1e-4). So:

* an engine answer whose top two labels (label scoring) or, at every decode
  step, top two logits (generation) are more than ``THRESHOLD`` apart is the
  batch-1 answer too: **certified by margin**;
* every other answer is computed again at batch 1, as the loop computes it,
  and compared (the same label; the same text): **verified**;
* candidates the engine stopped early never had their remaining samples
  computed; exact early stopping (``tests/test_early_stopping*``) guarantees
  that no values of those samples could have made them win, so the loop,
  which scores them whole, makes the same choice.

A result (an attack on a prompt) is certified when no answer of its phase,
or of an earlier phase whose answers it may reuse from the cache (the
ranking first), is different or left unverified.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from bench.levers import BASELINE, Recorder, configure
from promptrobust.engine.serving.types import Completion, Request

#: Answers closer than this to changing (label log-prob gap, or greedy logit gap) are verified at batch 1.
THRESHOLD = 1e-3


@dataclass
class Certificate:
    mode: str
    answers: int = 0
    by_margin: int = 0
    verified_same: int = 0
    verified_different: int = 0
    unverified: int = 0
    smallest_margin: float = math.inf
    #: largest |log-prob difference| between the engine and batch 1 on the verified label-scoring answers
    largest_logprob_difference: float = 0.0
    results: int = 0
    certified_results: int = 0
    threshold: float = THRESHOLD
    bad_phases: list[str] = field(default_factory=list)

    def fraction(self) -> float | None:
        return self.certified_results / self.results if self.results else None

    def payload(self) -> dict[str, Any]:
        return {"mode": self.mode, "answers": self.answers, "certified_by_margin": self.by_margin,
                "verified_same_at_batch_1": self.verified_same, "verified_different": self.verified_different,
                "unverified": self.unverified, "smallest_margin": self.smallest_margin if self.answers else None,
                "largest_logprob_difference": self.largest_logprob_difference, "threshold": self.threshold,
                "results": self.results, "certified_results": self.certified_results, "phases_not_certified": self.bad_phases}

    def line(self) -> str:
        return (f"| {self.mode} | {self.answers} | {self.by_margin} | {self.verified_same} | {self.verified_different} | "
                f"{self.unverified} | {self.smallest_margin:.2e} | {self.certified_results} of {self.results} |")


def margin(request: Request, completion: Completion, greedy_margins: dict[Request, float]) -> float:
    """How far an answer is from changing: the gap between its top two labels' log-probs, or its smallest greedy
    logit gap (inf: one label, or an answer whose steps were not observed)."""
    if completion.choice_logprobs is not None:
        top = sorted(completion.choice_logprobs, reverse=True)
        return top[0] - top[1] if len(top) > 1 else math.inf
    return greedy_margins.get(request, math.inf)


def _label(c: Completion) -> int:
    return max(range(len(c.choice_logprobs)), key=c.choice_logprobs.__getitem__)


async def certify(backend: Any, mode: str, recorder: Recorder, greedy_margins: dict[Request, float],
                  phases: list[str], results: list[str], verify_max: int, threshold: float = THRESHOLD) -> Certificate:
    """Certify ``recorder``'s answers; ``phases`` in the order they ran, ``results`` the phase of each result."""
    cert = Certificate(mode, answers=len(recorder.sent), results=len(results), threshold=threshold)
    close: list[tuple[Request, Completion]] = []
    for request, completion in recorder.sent.items():
        m = margin(request, completion, greedy_margins)
        cert.smallest_margin = min(cert.smallest_margin, m)
        if m > threshold:
            cert.by_margin += 1
        else:
            close.append((request, completion))
    bad: set[str] = set()
    configure(backend, BASELINE)
    for k, (request, engine_answer) in enumerate(close):
        if k >= verify_max:
            cert.unverified += 1
            bad.add(recorder.phase_of[request])
            continue
        (alone,) = await backend.complete_batch([request])
        if engine_answer.choice_logprobs is not None:
            same = _label(alone) == _label(engine_answer)
            cert.largest_logprob_difference = max(cert.largest_logprob_difference, *(
                abs(a - b) for a, b in zip(alone.choice_logprobs, engine_answer.choice_logprobs)))
        else:
            same = alone.text == engine_answer.text
        if same:
            cert.verified_same += 1
        else:
            cert.verified_different += 1
            bad.add(recorder.phase_of[request])
    order = {p: k for k, p in enumerate(phases)}
    first_bad = min((order.get(p, 0) for p in bad), default=len(phases))
    cert.certified_results = sum(1 for p in results if order.get(p, len(phases)) < first_bad)
    cert.bad_phases = sorted(bad, key=lambda p: order.get(p, 0))
    return cert


def certificate_lines(certs: list[Certificate]) -> list[str]:
    threshold = certs[0].threshold if certs else THRESHOLD
    return ["| mode | answers the engine computed | certified by margin (> %g) | verified at batch 1: same | different | "
            "left unverified | smallest margin | results certified |" % threshold,
            "|---|---:|---:|---:|---:|---:|---:|---:|", *(c.line() for c in certs)]
