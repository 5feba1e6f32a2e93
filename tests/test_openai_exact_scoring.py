"""Exact label scoring over HTTP equals the in-process hf backend on the same model.

The embedded SmolLM2 serves an OpenAI-compatible completions endpoint from this
process (promptrobust.testing.hf_server: one real forward pass per prompt, so
its log-probs are the model's own); the ``openai:`` backend detects at start-up
which exact path the server allows and must give every label the log-probability
the ``hf:`` backend gives it, within 1e-4. The server plays vLLM: it serves
``logprob_token_ids`` (vLLM 0.26+, tried first) and ``/tokenize`` unless told to
refuse them, so the fall-back order is tested route by route.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import orjson
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import promptrobust.engine.serving.backends.openai.scoring as openai_scoring
from promptrobust.engine.serving.backends.hf import HFBackend, HFOptions, embedded_backend
from promptrobust.engine.serving.backends.openai import OpenAIBackend, OpenAIOptions
from promptrobust.engine.serving.model_store import ModelNotInstalled
from promptrobust.engine.serving.types import Request
from promptrobust.testing.hf_server import HFCompletionsServer

pytestmark = pytest.mark.slow  # loads the embedded model

NAME = "smollm2"
# Our own review snippets; labels of one, several and rare tokens (a label far
# outside the top 20 is where the first-token approximation breaks down).
REVIEWS = [
    "A warm, funny film that never loses its nerve.",
    "Two hours of noise with nothing to say.",
    "The cast tries hard, but the script keeps tripping them up.",
]
LABELS = (" positive", " negative", " mixed feelings", " zebra")


def _requests() -> list[Request]:
    return [
        Request("score_choices", prompt=f"Review: {text}\nIs this review positive or negative?\nAnswer:", choices=LABELS)
        for text in REVIEWS
    ]


@pytest.fixture(scope="module")
def smol() -> HFBackend:
    try:
        backend = embedded_backend("smollm2-135m-instruct", HFOptions(batch_size=8, chat=False))
    except ModelNotInstalled as exc:
        pytest.skip(str(exc))
    asyncio.run(backend.start())
    return backend


async def _openai_scores(url: str, **kwargs) -> tuple[str, list[tuple[float, ...]], tuple]:
    backend = OpenAIBackend(NAME, OpenAIOptions(base_urls=[url], api="completions", **kwargs))
    await backend.start()
    try:
        answers = [await backend.complete(r) for r in _requests()]
    finally:
        await backend.close()
    return backend.label_scoring, [a.choice_logprobs for a in answers], backend.identity.extra


@pytest.mark.parametrize(("server_args", "path"), [
    ({}, "logprob_token_ids"),
    ({"logprob_token_ids": False}, "echo"),
    ({"logprob_token_ids": False, "echo": False}, "prompt_logprobs"),
])
def test_openai_exact_scoring_matches_hf_per_label(smol: HFBackend, server_args: dict, path: str) -> None:
    hf = asyncio.run(smol.complete_batch(_requests()))
    with HFCompletionsServer(smol.model, smol.tokenizer, name=NAME, **server_args) as srv:
        label_scoring, scores, extra = asyncio.run(_openai_scores(srv.url))
        bodies = list(srv.bodies)
    assert label_scoring == openai_scoring.DESCRIPTIONS[path]
    assert ("label_scoring", path) in extra  # exact scores are cached apart from approximate ones
    for want, got in zip(hf, scores):
        assert got is not None and len(got) == len(LABELS)
        for label, a, b in zip(LABELS, want.choice_logprobs, got):
            assert abs(a - b) < 1e-4, (label, a, b)
    # The rare label really is far down (the case the approximation cannot score).
    assert all(s[3] < -10 for s in scores)
    if path == "logprob_token_ids":
        # Per sample, every label's tokens are read at generated positions, never the prompt's own log-probs:
        # the sample's text (its ids come back with the answer), then the inner node of the label trie
        # (" mixed feelings" is two tokens) as token ids. No start-up probe: the server's /version says 0.26+.
        reads = [b for b in bodies if b.get("logprob_token_ids")]
        assert len(reads) == 2 * len(REVIEWS)
        assert not any(b.get("echo") or b.get("prompt_logprobs") is not None for b in bodies)
        text_reads = [b for b in reads if isinstance(b["prompt"], str)]
        assert [b["prompt"] for b in text_reads] == [r.prompt for r in _requests()]
        node_reads = [b for b in reads if not isinstance(b["prompt"], str)]
        assert all(len(b["prompt"]) == 1 and all(isinstance(t, int) for t in b["prompt"][0]) for b in node_reads)
        return
    # One request scores every label of a sample: the labels go as a list of prompts.
    scoring_bodies = [b for b in bodies if isinstance(b.get("prompt"), list) and "Review:" in b["prompt"][0]]
    assert len(scoring_bodies) == len(REVIEWS)
    assert all(len(b["prompt"]) == len(LABELS) for b in scoring_bodies)


def test_token_ids_route_equals_the_prompt_token_routes_on_one_server(smol: HFBackend) -> None:
    """The same server, each route named: the label scores agree across routes within 1e-4."""
    with HFCompletionsServer(smol.model, smol.tokenizer, name=NAME) as srv:
        by_route = {path: asyncio.run(_openai_scores(srv.url, scoring=path))[1]
                    for path in ("logprob_token_ids", "echo", "prompt_logprobs")}
    for other in ("echo", "prompt_logprobs"):
        for a, b in zip(by_route["logprob_token_ids"], by_route[other]):
            assert a is not None and b is not None
            assert max(abs(x - y) for x, y in zip(a, b)) < 1e-4, (other, a, b)


def test_a_server_without_exact_scoring_falls_back_to_top20_and_says_so(smol: HFBackend) -> None:
    hf = asyncio.run(smol.complete_batch(_requests()))
    with HFCompletionsServer(smol.model, smol.tokenizer, name=NAME, echo=False, prompt_logprobs=False,
                             logprob_token_ids=False) as srv:
        label_scoring, scores, extra = asyncio.run(_openai_scores(srv.url))
    assert label_scoring == openai_scoring.DESCRIPTIONS["top_logprobs"]
    assert label_scoring.startswith("approximate")
    assert not any(k == "label_scoring" for k, _ in extra)
    # The approximation: the rare label gets a floor, not its value.
    assert any(abs(got[3] - want.choice_logprobs[3]) > 1e-2 for want, got in zip(hf, scores))


def test_openai_chat_scoring_on_vllm_matches_hf_chat_per_label(smol: HFBackend) -> None:
    """Chat requests (the model's template): scoring=prompt_logprobs, vLLM's chat extensions."""
    from promptrobust.engine.serving.types import ChatMessage

    chat_hf = embedded_backend("smollm2-135m-instruct", HFOptions(batch_size=8, chat=True))
    asyncio.run(chat_hf.start())
    requests = [Request("score_choices", messages=(ChatMessage("user", f"Review: {t}\nIs it positive or negative?"),),
                        choices=("positive", "negative", "mixed feelings")) for t in REVIEWS]
    want = asyncio.run(chat_hf.complete_batch(requests))

    async def over_http(url: str) -> tuple[str, list]:
        backend = OpenAIBackend(NAME, OpenAIOptions(base_urls=[url], scoring="prompt_logprobs"))
        await backend.start()
        try:
            return backend.label_scoring, [await backend.complete(r) for r in requests]
        finally:
            await backend.close()

    with HFCompletionsServer(chat_hf.model, chat_hf.tokenizer, name=NAME) as srv:
        label_scoring, got = asyncio.run(over_http(srv.url))
        bodies = [b for b in srv.bodies if b.get("continue_final_message")]
    assert label_scoring == openai_scoring.CHAT_DESCRIPTION
    assert len(bodies) == len(requests) * 3  # one request per label
    for r, w, g in zip(requests, want, got):
        for a, b in zip(w.choice_logprobs, g.choice_logprobs):
            assert abs(a - b) < 1e-4, (a, b)
        # the cost: three requests, each billed for the whole conversation (their sum, not the largest)
        assert g.prompt_tokens >= 3 * len(chat_hf.tokenizer(r.messages[0].content)["input_ids"]), g.prompt_tokens


def test_chat_requests_on_vllm_are_scored_exactly_by_token_ids(smol: HFBackend) -> None:
    """api=auto, chat messages: the server renders the conversation (/tokenize), the labels are read at
    generated positions, and the scores equal the in-process chat scores."""
    from promptrobust.engine.serving.types import ChatMessage

    chat_hf = embedded_backend("smollm2-135m-instruct", HFOptions(batch_size=8, chat=True))
    asyncio.run(chat_hf.start())
    requests = [Request("score_choices", messages=(ChatMessage("user", f"Review: {t}\nIs it positive or negative?"),),
                        choices=("positive", "negative", "mixed feelings")) for t in REVIEWS]
    want = asyncio.run(chat_hf.complete_batch(requests))

    async def over_http(url: str) -> tuple[str, list, tuple]:
        backend = OpenAIBackend(NAME, OpenAIOptions(base_urls=[url]))
        await backend.start()
        try:
            return backend.label_scoring, [await backend.complete(r) for r in requests], backend.identity.extra
        finally:
            await backend.close()

    with HFCompletionsServer(chat_hf.model, chat_hf.tokenizer, name=NAME) as srv:
        label_scoring, got, extra = asyncio.run(over_http(srv.url))
        chat_calls = [b for b in srv.bodies if "messages" in b and "add_special_tokens" not in b]
    assert label_scoring == openai_scoring.DESCRIPTIONS["logprob_token_ids"]
    assert ("label_scoring", "logprob_token_ids") in extra
    # read by token ids at the generated position (the conversation's ids come back with the answer), never
    # by the chat route's prompt log-probs
    assert len(chat_calls) == len(REVIEWS)
    assert all(b["logprob_token_ids"] and b["return_token_ids"] and "prompt_logprobs" not in b for b in chat_calls)
    for w, g in zip(want, got):
        for a, b in zip(w.choice_logprobs, g.choice_logprobs):
            assert abs(a - b) < 1e-4, (a, b)


def test_a_server_that_ignores_logprob_token_ids_is_not_trusted() -> None:
    """vLLM before 0.26 drops the unknown field and answers with the sampled token only: unusable, never
    read as a score."""
    from promptrobust.engine.serving.backends.openai import token_ids

    ignored = {"choices": [{"index": 0, "logprobs": {"tokens": ["token_id:7"], "token_logprobs": [-0.1],
                                                     "top_logprobs": [{"token_id:7": -0.1}]}}]}
    with pytest.raises(openai_scoring.ScoringAnswerError, match="ignored logprob_token_ids"):
        token_ids.read_nodes(ignored, [[7, 9]])
    served = {"choices": [{"index": 0, "logprobs": {"top_logprobs": [{"token_id:7": -0.1, "token_id:9": -2.5}]}}]}
    assert token_ids.read_nodes(served, [[7, 9]]) == [{7: -0.1, 9: -2.5}]
    served["choices"][0]["logprobs"]["top_logprobs"][0]["token_id:9"] = 0.5
    with pytest.raises(openai_scoring.ImpossibleLogprob):
        token_ids.read_nodes(served, [[7, 9]])
    assert token_ids.tokenize_url("http://h:8000/v1") == "http://h:8000/tokenize"
    assert token_ids.tokenize_url("http://h:8000/proxy/v1/") == "http://h:8000/proxy/tokenize"


def test_scoring_argument_is_checked() -> None:
    with pytest.raises(ValueError, match="api=completions"):
        OpenAIBackend(NAME, OpenAIOptions(base_urls=["http://127.0.0.1:9/v1"], scoring="echo"))
    with pytest.raises(ValueError, match="drop logprobs=false"):
        OpenAIBackend(NAME, OpenAIOptions(base_urls=["http://127.0.0.1:9/v1"], scoring="prompt_logprobs", logprobs=False))
    with pytest.raises(ValueError, match="scoring must be one of"):
        OpenAIBackend(NAME, OpenAIOptions(base_urls=["http://127.0.0.1:9/v1"], api="completions", scoring="exactish"))


def test_a_run_records_which_scoring_path_it_used(smol: HFBackend, tmp_path: Path) -> None:
    from promptrobust.cli.main import main

    with HFCompletionsServer(smol.model, smol.tokenizer, name=NAME) as srv:
        code = main([
            "run", "--model", f"openai:{NAME}", "--model-args", f"base_url={srv.url},api=completions",
            "--dataset", "rotten_tomatoes", "--limit", "3", "--mode", "choices", "--shots", "0",
            "--prompt-text", "Is this movie review positive or negative?",
            "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(tmp_path / "runs"), "--no-progress",
        ])
    assert code == 0
    (folder,) = (tmp_path / "runs").iterdir()
    results = orjson.loads((folder / "results.json").read_bytes())
    measurement = results["configs"]["measurement"]
    assert measurement["label_scoring"] == openai_scoring.DESCRIPTIONS["logprob_token_ids"]
    assert measurement["input_format"] == "completion"


def test_reading_refuses_a_token_that_straddles_input_and_label() -> None:
    answer = {"choices": [{"index": 0, "logprobs": {
        "tokens": ["Answer", ":pos", "itive", "!"], "token_logprobs": [None, -1.0, -0.5, -0.1],
        "text_offset": [0, 6, 10, 15]}}]}
    with pytest.raises(openai_scoring.ScoringAnswerError, match="not the label"):
        openai_scoring.read("echo", answer, "Answer:", ("positive",))
    answer["choices"][0]["logprobs"]["tokens"] = ["Answer", ":", "positive", "!"]
    assert openai_scoring.read("echo", answer, "Answer:", ("positive",)) == (-0.5,)
    assert not math.isnan(openai_scoring.read("echo", answer, "Answer:", ("positive",))[0])
