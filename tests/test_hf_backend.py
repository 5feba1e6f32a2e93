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

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from promptrobust.engine.serving.backends.base import BackendError, BackendUnavailable
from promptrobust.engine.serving.backends.hf import HFBackend, HFOptions, embedded_backend
from promptrobust.engine.serving.model_store import ModelNotInstalled, ensure_embedded
from promptrobust.engine.serving.types import ChatMessage, Decoding, Request

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
        backend = embedded_backend("smollm2-135m-instruct", HFOptions(batch_size=16))
    except ModelNotInstalled as e:
        pytest.skip(str(e))
    run(backend.start())
    return backend


def manual_logprob(backend: HFBackend, input_ids: list[int], cont: list[int]) -> float:
    """Reference: one unpadded forward pass over input+continuation, straight through transformers."""
    ids = torch.tensor([input_ids + cont])
    with torch.inference_mode():
        logp = torch.log_softmax(backend.model(input_ids=ids).logits[0].float(), dim=-1)
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
    input_ids = smol.encode_input(req)
    for choice, got in zip(req.choices, out.choice_logprobs):
        cont = smol.tokenizer(choice, add_special_tokens=False)["input_ids"]
        assert got == pytest.approx(manual_logprob(smol, input_ids, cont), abs=2e-4)
    assert len(smol.tokenizer("It is negative", add_special_tokens=False)["input_ids"]) > 1


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


SHARED = "Read the review and say whether its sentiment is positive or negative. Answer with one word only.\nReview: "
REVIEWS = ["Great.", "A dull, lifeless film that never finds its footing.", "Charming and funny.",
           "I walked out after an hour; the plot made no sense at all and the acting was wooden."]


def forward_widths(backend: HFBackend):
    """Record the (rows, columns) of every forward pass the real model runs."""
    widths: list[tuple[int, int]] = []

    def hook(_module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None:
            widths.append(tuple(ids.shape))

    # The decoder stack runs in every pass, also a prefix pass that stops before the output layer.
    decoder = getattr(backend.model, "model", None) or backend.model
    return widths, decoder.register_forward_pre_hook(hook, with_kwargs=True)


def test_shared_prefix_runs_once_and_scores_as_each_request_alone(smol: HFBackend) -> None:
    reqs = [Request("score_choices", messages=(ChatMessage("user", SHARED + r),), choices=LABELS) for r in REVIEWS]
    multi = [Request("score_choices", messages=(ChatMessage("user", SHARED + r),), choices=("very positive", "so negative"))
             for r in REVIEWS]
    alone = [run(smol.complete_batch([r]))[0].choice_logprobs for r in reqs + multi]
    encoded = [smol.encode_input(r) for r in reqs]
    smol.prefixes.clear()
    widths, handle = forward_widths(smol)
    try:
        together = run(smol.complete_batch(reqs + multi))
    finally:
        handle.remove()
    assert [o.choice_logprobs for o in together] == [pytest.approx(a, abs=2e-4) for a in alone]
    (prefix,) = [len(k) for k in smol.prefixes.entries]
    assert prefix > 30  # chat template + system turn + the instruction
    # The prefix ran once as a single row; no batched pass recomputed it.
    assert (1, prefix) in widths
    longest = max(len(e) for e in encoded)
    assert all(cols < longest for rows, cols in widths if rows > 1)


def test_shared_prefix_generation_matches_generation_alone(smol: HFBackend) -> None:
    reqs = [Request("generate", messages=(ChatMessage("user", SHARED + r),), decoding=Decoding(max_tokens=4)) for r in REVIEWS]
    alone = [run(smol.complete_batch([r]))[0].text for r in reqs]
    widths, handle = forward_widths(smol)
    try:
        together = run(smol.complete_batch(reqs))
    finally:
        handle.remove()
    assert [o.text for o in together] == alone
    assert any(rows == 1 for rows, _ in widths)  # the prefix pass


def test_arrange_batches_plans_each_prompts_prefix_and_orders_by_the_rest(smol: HFBackend) -> None:
    # Two instructions interleaved, with sample lengths that a length sort would mix up.
    other = "Decide if the following movie review is favourable. Reply positive or negative, nothing else.\nReview: "
    reqs = []
    for k, r in enumerate(REVIEWS * 2):
        reqs.append(Request("score_choices", messages=(ChatMessage("user", (SHARED if k < len(REVIEWS) else other) + r),), choices=LABELS))
    plan = smol.arrange_batches(reqs, 4)
    assert sorted(i for b in plan for i in b) == list(range(len(reqs)))
    # each request runs after its own prompt's prefix, found on the token ids
    encoded = [tuple(smol.encode_input(r)) for r in reqs]
    planned = [smol.planned_prefixes[e] for e in encoded]
    half = len(REVIEWS)
    assert len(set(planned[:half])) == 1 and len(set(planned[half:])) == 1
    assert encoded[0][: planned[0]] != encoded[half][: planned[half]]
    # batches follow the length after the prefix, so one review's two copies run side by side
    rest = [len(encoded[i]) - planned[i] for b in plan for i in b]
    assert rest == sorted(rest)
    assert any(len({reqs[i].messages[0].content.startswith(SHARED) for i in b}) == 2 for b in plan)
    # Without prefix sharing the default length order is kept.
    smol.with_options(share_prefix=False)
    try:
        by_length = smol.arrange_batches(reqs, 4)
    finally:
        smol.with_options(share_prefix=True)
    lengths = [len(reqs[i].input_text()) for b in by_length for i in b]
    assert lengths == sorted(lengths)
    assert any(len({reqs[i].messages[0].content.startswith(SHARED) for i in b}) == 2 for b in by_length)


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


def test_an_empty_choice_is_refused(smol: HFBackend) -> None:
    """It would score log 1 (probability 1) on every sample and always win (issue 41 item 3: refused)."""
    with pytest.raises(BackendError, match="no tokens"):
        run(smol.complete_batch([sentiment("Fine.", choices=("", "positive words"))]))


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
        HFOptions(dtype="float8")
    with pytest.raises(ValueError, match="batch_size"):
        HFOptions(batch_size=0)
    with pytest.raises(TypeError, match="HFOptions"):
        HFBackend("x", {"batch_size": 4})  # type: ignore[arg-type]  # the options come whole


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
    backend = HFBackend(str(out), HFOptions(batch_size=4))
    assert backend.is_chat is False  # read from the files, before loading
    run(backend.start())
    return backend


def t5_manual(backend: HFBackend, prompt: str, choice: str) -> float:
    tok = backend.tokenizer
    enc = torch.tensor([tok(prompt)["input_ids"]])
    cont = tok(choice, add_special_tokens=False)["input_ids"]
    dec = torch.tensor([[backend.model.config.decoder_start_token_id] + cont[:-1]])
    with torch.inference_mode():
        logits = backend.model(input_ids=enc, decoder_input_ids=dec).logits[0]
    logp = torch.log_softmax(logits.float(), dim=-1)
    return float(sum(logp[k, t] for k, t in enumerate(cont)))


def test_t5_is_encoder_decoder_and_not_chat(
    tiny_t5: HFBackend, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PRE_MODEL_STORE", str(tmp_path))  # the file-hash record goes here
    assert tiny_t5.passes.model.encdec and not tiny_t5.is_chat
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
