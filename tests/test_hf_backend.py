"""The hf backend on real models: the embedded SmolLM2 and a tiny random T5.

SmolLM2 comes from the model store (PRE_MODEL_STORE, default
~/.cache/promptrobust/models); the first run converts it (~30-60 s), later
runs load it in seconds.
"""

from __future__ import annotations

import asyncio
import math
import os
from pathlib import Path

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see engine/backends/hf.py
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from engine.backends.base import BackendError, BackendUnavailable
from engine.backends.hf import HFBackend, embedded_backend
from engine.model_store import ModelNotInstalled, ensure_embedded
from engine.types import ChatMessage, Decoding, Request

pytestmark = pytest.mark.slow  # loads real models

LABELS = ("positive", "negative")
OBVIOUS = [
    ("I loved this film, it was wonderful.", "positive"),
    ("This movie was terrible and boring.", "negative"),
    ("What a fantastic, joyful experience!", "positive"),
    ("I hated every minute of it, awful.", "negative"),
    ("An absolute masterpiece, beautiful and moving.", "positive"),
    ("The worst film I have ever seen, a total disaster.", "negative"),
]


def sentiment(sentence: str, choices: tuple[str, ...] = LABELS) -> Request:
    text = f"Is the sentiment of this sentence positive or negative? Answer with one word.\nSentence: {sentence}"
    return Request("score_choices", messages=(ChatMessage("user", text),), choices=choices)


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="session")
def smol() -> HFBackend:
    try:
        backend = embedded_backend("smollm2-135m-instruct", batch_size=16)
    except ModelNotInstalled as e:
        pytest.skip(str(e))
    run(backend.start())
    return backend


def manual_logprob(backend: HFBackend, input_ids: list[int], cont: list[int]) -> float:
    """Reference: one unpadded forward pass over input+continuation, straight through transformers."""
    ids = torch.tensor([input_ids + cont])
    with torch.inference_mode():
        logp = torch.log_softmax(backend._model(input_ids=ids).logits[0].float(), dim=-1)
    n = len(input_ids)
    return float(sum(logp[n - 1 + k, t] for k, t in enumerate(cont)))


# ---------------------------------------------------------------- SmolLM2


def test_identity_and_chat(smol: HFBackend) -> None:
    m = ensure_embedded("smollm2-135m-instruct")
    assert HFBackend(str(m.path)).is_chat  # chat template found before start()
    ident = smol.identity
    assert ident.backend == "hf" and ident.name == "smollm2-135m-instruct"
    assert ident.revision == m.revision and len(ident.revision) == 64
    assert dict(ident.extra)["dtype"] == "float32"
    assert smol.is_chat


def test_zero_shot_sentiment_picks_obvious_label(smol: HFBackend) -> None:
    outs = run(smol.complete_batch([sentiment(s) for s, _ in OBVIOUS]))
    picked = [LABELS[max(range(2), key=lambda k: o.choice_logprobs[k])] for o in outs]
    assert picked == [label for _, label in OBVIOUS]
    assert all(o.prompt_tokens > 10 and all(lp < 0 for lp in o.choice_logprobs) for o in outs)


def test_left_padding_gives_same_scores_alone_and_in_batch(smol: HFBackend) -> None:
    short = sentiment("Great.")
    multi = sentiment("Great.", choices=("very positive", "not good at all"))
    longer = [sentiment("A long, winding and rather tedious story that " * k + "ends badly.") for k in (2, 4)]
    alone = run(smol.complete_batch([short]))[0].choice_logprobs
    alone_multi = run(smol.complete_batch([multi]))[0].choice_logprobs
    batch = run(smol.complete_batch([longer[0], short, longer[1], multi]))
    assert batch[1].choice_logprobs == pytest.approx(alone, abs=2e-4)
    assert batch[3].choice_logprobs == pytest.approx(alone_multi, abs=2e-4)


def test_multi_token_choice_equals_manual_sum(smol: HFBackend) -> None:
    req = sentiment("I loved this film.", choices=("positive", "very positive", "It is negative"))
    (out,) = run(smol.complete_batch([req]))
    input_ids = smol._encode_input(req)
    for choice, got in zip(req.choices, out.choice_logprobs):
        cont = smol._tok(choice, add_special_tokens=False)["input_ids"]
        assert got == pytest.approx(manual_logprob(smol, input_ids, cont), abs=2e-4)
    assert len(smol._tok("It is negative", add_special_tokens=False)["input_ids"]) > 1


def test_generate_honours_max_tokens_and_stop(smol: HFBackend) -> None:
    reqs = [
        Request("generate", prompt="The capital of France is", decoding=Decoding(max_tokens=12, stop=(".",))),
        Request("generate", prompt="Once upon a time", decoding=Decoding(max_tokens=3)),
        Request(
            "generate",
            messages=(ChatMessage("user", "Say hello."),),
            decoding=Decoding(max_tokens=24),
        ),
    ]
    paris, short, chat = run(smol.complete_batch(reqs))
    assert "Paris" in paris.text and "." not in paris.text
    assert paris.completion_tokens < 12  # stopped early at the stop string
    assert short.completion_tokens == 3 and short.text.strip()
    assert chat.text.strip() and "<|im_end|>" not in chat.text
    # Greedy generation does not depend on the batch around it.
    (paris_alone,) = run(smol.complete_batch(reqs[:1]))
    assert paris_alone.text == paris.text


def test_event_loop_stays_responsive_during_a_batch(smol: HFBackend) -> None:
    async def main() -> int:
        ticks = 0
        task = asyncio.create_task(smol.complete_batch([sentiment(s) for s, _ in OBVIOUS[:4]]))
        while not task.done():
            await asyncio.sleep(0.01)
            ticks += 1
        await task
        return ticks

    assert run(main()) >= 3


def test_empty_choice_has_logprob_zero(smol: HFBackend) -> None:
    (out,) = run(smol.complete_batch([sentiment("Fine.", choices=("", "positive words"))]))
    assert out.choice_logprobs[0] == 0.0 and out.choice_logprobs[1] < 0


# ---------------------------------------------------------------- errors


def test_missing_local_dir_is_unavailable(tmp_path: Path) -> None:
    b = HFBackend(str(tmp_path / "nope"))
    with pytest.raises(BackendUnavailable, match="does not exist"):
        run(b.start())


def test_unknown_hub_id_offline_is_unavailable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    b = HFBackend("no-such-org/no-such-model-xyz")
    with pytest.raises(BackendUnavailable, match="cannot load model 'no-such-org/no-such-model-xyz'") as err:
        run(b.start())
    assert "\n" not in str(err.value)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="dtype"):
        HFBackend("x", dtype="float8")
    with pytest.raises(ValueError, match="batch_size"):
        HFBackend("x", batch_size=0)


# ---------------------------------------------------------------- tiny encoder-decoder


@pytest.fixture(scope="module")
def tiny_t5(tmp_path_factory: pytest.TempPathFactory) -> HFBackend:
    """A 2-layer random T5 with SmolLM2's tokenizer (chat template removed)."""
    try:
        src = ensure_embedded("smollm2-135m-instruct").path
    except ModelNotInstalled as e:
        pytest.skip(str(e))
    out = tmp_path_factory.mktemp("tiny_t5")
    tok = transformers.AutoTokenizer.from_pretrained(str(src))
    tok.chat_template = None
    tok.save_pretrained(str(out))
    (out / "chat_template.jinja").unlink(missing_ok=True)
    cfg = transformers.T5Config(
        vocab_size=len(tok),
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        decoder_start_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    transformers.T5ForConditionalGeneration(cfg).save_pretrained(str(out))
    backend = HFBackend(str(out), batch_size=4)
    assert backend.is_chat is False  # read from the files, before loading
    run(backend.start())
    return backend


def t5_manual(backend: HFBackend, prompt: str, choice: str) -> float:
    tok = backend._tok
    enc = torch.tensor([tok(prompt)["input_ids"]])
    cont = tok(choice, add_special_tokens=False)["input_ids"]
    dec = torch.tensor([[backend._model.config.decoder_start_token_id] + cont[:-1]])
    with torch.inference_mode():
        logits = backend._model(input_ids=enc, decoder_input_ids=dec).logits[0]
    logp = torch.log_softmax(logits.float(), dim=-1)
    return float(sum(logp[k, t] for k, t in enumerate(cont)))


def test_t5_is_encoder_decoder_and_not_chat(
    tiny_t5: HFBackend, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PRE_MODEL_STORE", str(tmp_path))  # the file-hash record goes here
    assert tiny_t5._encdec and not tiny_t5.is_chat
    rev = tiny_t5.identity.revision
    assert rev.startswith("sha256:") and tiny_t5.identity.revision == rev  # stable
    assert list((tmp_path / ".hashes").glob("*.json"))
    with pytest.raises(BackendError, match="no chat template"):
        run(tiny_t5.complete_batch([sentiment("Fine.")]))


def test_t5_scores_match_manual_decoder_pass(tiny_t5: HFBackend) -> None:
    prompts = ["Review: great film. Sentiment:", "Review: a dull, slow and far too long film. Sentiment:"]
    single = [Request("score_choices", prompt=p, choices=LABELS) for p in prompts]
    multi = [Request("score_choices", prompt=p, choices=("very positive", "It is negative")) for p in prompts]
    outs = run(tiny_t5.complete_batch(single + multi))
    for req, out in zip(single + multi, outs):
        for choice, got in zip(req.choices, out.choice_logprobs):
            assert got == pytest.approx(t5_manual(tiny_t5, req.prompt, choice), abs=1e-4)
            assert math.isfinite(got)
    (alone,) = run(tiny_t5.complete_batch(multi[:1]))
    assert alone.choice_logprobs == pytest.approx(outs[2].choice_logprobs, abs=1e-4)


def test_t5_generate_honours_max_tokens(tiny_t5: HFBackend) -> None:
    outs = run(
        tiny_t5.complete_batch(
            [
                Request("generate", prompt="Translate: hello", decoding=Decoding(max_tokens=5)),
                Request("generate", prompt="Translate: a much longer sentence here", decoding=Decoding(max_tokens=2)),
            ]
        )
    )
    assert [o.completion_tokens <= m for o, m in zip(outs, (5, 2))] == [True, True]
    assert all(isinstance(o.text, str) for o in outs)
    sampled = run(tiny_t5.complete_batch([Request("generate", prompt="x", decoding=Decoding(max_tokens=4, temperature=0.8))]))
    assert sampled[0].completion_tokens <= 4
