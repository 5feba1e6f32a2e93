"""bench/certify.py: the certificate that the batch-1 loops would end on the engine's adversarial prompts.

On the embedded SmolLM2: answers computed with every lever are certified by
their margin or verified at batch 1; a planted wrong answer is found, and
every result that could depend on it (its phase and the later ones, which
may reuse it from the cache) loses its certificate.
"""

from __future__ import annotations

import asyncio
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.certify import certify, margin  # noqa: E402
from bench.levers import ENGINE, Recorder, configure  # noqa: E402
from promptrobust.engine.serving.backends.hf import GreedyMargins, HFOptions, embedded_backend  # noqa: E402
from promptrobust.engine.serving.model_store import ModelNotInstalled  # noqa: E402
from promptrobust.engine.serving.types import ChatMessage, Completion, Decoding, Request  # noqa: E402

pytestmark = pytest.mark.slow  # loads the real model

REVIEWS = ["Great.", "A dull, lifeless film.", "Charming and funny.", "Too long.", "I loved every minute of it."]
ASK = "Is this review positive or negative? Answer with one word.\nReview: "
PHASES = ["rank", "stresstest", "checklist"]


def _requests(phase: str) -> list[Request]:
    extra = "" if phase == "rank" else f" ({phase})"
    msgs = [(ChatMessage("user", ASK + r + extra),) for r in REVIEWS]
    return ([Request("score_choices", messages=m, choices=("positive", "negative")) for m in msgs]
            + [Request("generate", messages=m, decoding=Decoding(max_tokens=6)) for m in msgs[:2]])


@pytest.fixture(scope="module")
def recorded():
    try:
        backend = embedded_backend("smollm2-135m-instruct", HFOptions(batch_size=8))
    except ModelNotInstalled as e:
        pytest.skip(str(e))
    asyncio.run(backend.start())
    configure(backend, ENGINE)
    recorder = Recorder(backend)
    backend.observer = observer = GreedyMargins()
    for phase in PHASES:
        recorder.phase = phase
        asyncio.run(recorder.complete_batch(_requests(phase)))
    margins, backend.observer = observer.margins, None
    return backend, recorder, margins


def test_margins_are_read_from_labels_and_from_every_decode_step(recorded) -> None:
    _, recorder, margins = recorded
    generated = [r for r in recorder.sent if r.kind == "generate"]
    assert generated and all(0 <= margins[r] < math.inf for r in generated)
    scored = next(r for r in recorder.sent if r.kind == "score_choices")
    a, b = recorder.sent[scored].choice_logprobs
    assert margin(scored, recorder.sent[scored], margins) == pytest.approx(abs(a - b))
    assert recorder.phase_of[scored] == "rank" and set(recorder.phase_of.values()) == set(PHASES)


def test_every_answer_of_the_engine_is_the_batch_1_answer(recorded) -> None:
    backend, recorder, margins = recorded
    results = ["stresstest", "checklist"]
    by_margin = asyncio.run(certify(backend, "engine", recorder, margins, PHASES, results, verify_max=0, threshold=0.0))
    assert by_margin.by_margin == by_margin.answers == len(recorder.sent) and by_margin.fraction() == 1.0
    # every answer computed again alone, as the loop computes it
    checked = asyncio.run(certify(backend, "engine", recorder, margins, PHASES, results, verify_max=100,
                                  threshold=math.inf))
    assert checked.verified_same == checked.answers and checked.verified_different == 0
    assert checked.certified_results == 2 and checked.largest_logprob_difference <= 1e-4


def _planted(recorder: Recorder, phase: str, kind: str) -> Recorder:
    """A copy of ``recorder`` whose first ``kind`` answer of ``phase`` is wrong."""
    planted = Recorder(recorder._backend)
    planted.sent, planted.phase_of = dict(recorder.sent), dict(recorder.phase_of)
    request = next(r for r in recorder.sent if recorder.phase_of[r] == phase and r.kind == kind)
    right = recorder.sent[request]
    if kind == "score_choices":
        wrong = replace(right, choice_logprobs=tuple(reversed(right.choice_logprobs)))
    else:
        wrong = Completion(text=(right.text or "") + " not", prompt_tokens=right.prompt_tokens, completion_tokens=1)
    planted.sent[request] = wrong
    return planted


@pytest.mark.parametrize("phase, kind, certified", [
    ("checklist", "score_choices", 1),  # the StressTest result came before it: still certified
    ("stresstest", "generate", 0),  # CheckList may reuse the wrong answer from the cache: not certified either
    ("rank", "score_choices", 0),  # the ranking decides which prompt is attacked
])
def test_a_wrong_answer_uncertifies_its_phase_and_every_later_one(recorded, phase, kind, certified) -> None:
    backend, recorder, margins = recorded
    planted = _planted(recorder, phase, kind)
    cert = asyncio.run(certify(backend, "engine", planted, margins, PHASES, ["stresstest", "checklist"],
                               verify_max=100, threshold=math.inf))
    assert cert.verified_different == 1 and cert.bad_phases == [phase]
    assert cert.certified_results == certified


def test_answers_left_unverified_are_not_certified(recorded) -> None:
    backend, recorder, margins = recorded
    cert = asyncio.run(certify(backend, "engine", recorder, margins, PHASES, ["stresstest", "checklist"],
                               verify_max=3, threshold=math.inf))
    assert cert.verified_same == 3 and cert.unverified == cert.answers - 3
    assert cert.certified_results == 0 and cert.bad_phases[0] == "rank"
