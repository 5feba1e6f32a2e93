"""Label scores by token ids (vLLM 0.26+'s ``logprob_token_ids``) against the fake server playing vLLM.

The fake's next-token distribution is documented (``FakeOpenAIServer``): the
answer 0.70, with a space 0.10, capitalised 0.05, the vocabulary words halving
from 0.04, the rest spread over ``FAKE_VOCAB_SIZE`` tokens. The scores through
the route must be exactly those numbers; the fall-back order is seen in the
requests the server got. (tests/test_openai_exact_scoring.py checks the same
route against the in-process model on real weights.)
"""

from __future__ import annotations

import asyncio
import math

import pytest

import promptrobust.engine.serving.backends.openai.scoring as scoring
from promptrobust.engine.serving.backends.openai import OpenAIBackend, OpenAIOptions
from promptrobust.engine.serving.types import ChatMessage, Completion, Request
from promptrobust.testing import FakeOpenAIServer
from promptrobust.testing.fake_openai import FAKE_VOCAB_SIZE

POSITIVE = "Review, in one word: a great film"  # the fake judges the last line: "positive"
LABELS = (" positive", " negative", " mixed feelings", "positive")
# The answer table for "positive" with the default vocabulary; every other token shares the rest.
TABLE = {"positive": 0.70, " positive": 0.10, "Positive": 0.05, "negative": 0.04, "neutral": 0.02, "The": 0.01,
         "I": 0.005, "It": 0.0025, "This": 0.00125}
OTHER = math.log((1 - sum(TABLE.values())) / FAKE_VOCAB_SIZE)


async def _scores(url: str, requests: list[Request], **kwargs: object) -> tuple[str, list[Completion], tuple]:
    backend = OpenAIBackend("fake-model", OpenAIOptions(base_urls=[url], **kwargs))  # type: ignore[arg-type]
    await backend.start()
    try:
        return backend.label_scoring, [await backend.complete(r) for r in requests], backend.identity.extra
    finally:
        await backend.close()


def test_token_ids_route_gives_the_servers_exact_label_scores() -> None:
    with FakeOpenAIServer(vllm=True) as srv:
        label_scoring, (got,), extra = asyncio.run(
            _scores(srv.url, [Request("score_choices", prompt=POSITIVE, choices=LABELS)], api="completions"))
        bodies = list(srv.bodies)
    assert label_scoring == scoring.DESCRIPTIONS["logprob_token_ids"] and label_scoring.startswith("exact")
    assert ("label_scoring", "logprob_token_ids") in extra  # never pooled with approximate scores in the cache
    # "positive" right after "film" merges with it ("filmpositive"): the label is tokenised alone then (the
    # input's tokens stay as they are), so it is the table's "positive".
    want = (math.log(0.10), OTHER, 2 * OTHER, math.log(0.70))
    assert got.choice_logprobs == pytest.approx(want, abs=1e-9)
    # The label reads: one request for the sample, its prompts the trie's nodes (the input, and the input
    # plus " mixed"), as token ids; never the prompt's own log-probs.
    reads = [b for path, b in bodies if b.get("logprob_token_ids")]
    assert len(reads) == 2  # the start-up probe, the sample
    assert len(reads[1]["prompt"]) == 2 and all(isinstance(t, int) for p in reads[1]["prompt"] for t in p)
    assert not any(b.get("echo") or b.get("prompt_logprobs") is not None for _, b in bodies)


def test_chat_requests_are_scored_by_token_ids_in_the_servers_template() -> None:
    requests = [Request("score_choices", messages=(ChatMessage("user", "a great film"),),
                        choices=("positive", "negative", "Positive"))]
    with FakeOpenAIServer(vllm=True) as srv:
        label_scoring, (got,), _ = asyncio.run(_scores(srv.url, requests))  # api=auto: chat
        tokenized = [b for path, b in srv.bodies if path == "/tokenize" and "messages" in b]
    assert label_scoring == scoring.DESCRIPTIONS["logprob_token_ids"]
    assert got.choice_logprobs == pytest.approx((math.log(0.70), math.log(0.04), math.log(0.05)), abs=1e-9)
    # The conversation with a generation prompt, and each label as the start of the answer.
    assert any(b["add_generation_prompt"] and len(b["messages"]) == 1 for b in tokenized)
    assert sum(b["continue_final_message"] and b["messages"][-1]["role"] == "assistant" for b in tokenized) == 3


def test_a_server_that_refuses_token_ids_falls_back_in_order_and_says_so() -> None:
    request = Request("score_choices", prompt=POSITIVE, choices=(" positive", " negative"))
    with FakeOpenAIServer(vllm=True, refuse=("logprob_token_ids",)) as srv:
        label_scoring, (got,), extra = asyncio.run(_scores(srv.url, [request], api="completions"))
        asked = [("token_ids" if b.get("logprob_token_ids") else "echo" if b.get("echo")
                  else "prompt_logprobs" if b.get("prompt_logprobs") is not None else "top")
                 for path, b in srv.bodies if path == "/v1/completions"]
    # logprob_token_ids (refused), then the text routes (this server scores no prompt tokens), then top-20.
    assert asked[:3] == ["token_ids", "echo", "prompt_logprobs"] and asked[3:] == ["top"]
    assert label_scoring == scoring.DESCRIPTIONS["top_logprobs"] and label_scoring.startswith("approximate")
    assert not any(k == "label_scoring" for k, _ in extra)
    assert got.choice_logprobs is not None and got.choice_logprobs[0] > got.choice_logprobs[1]


def test_servers_that_are_not_vllm_are_not_asked() -> None:
    """One refused request at every start would be the cost for every other server: only vLLM is asked."""
    request = Request("score_choices", prompt=POSITIVE, choices=(" positive", " negative"))
    with FakeOpenAIServer() as srv:
        label_scoring, _, _ = asyncio.run(_scores(srv.url, [request]))
        assert srv.count("/tokenize") == 0
        assert not any(b.get("logprob_token_ids") for _, b in srv.bodies)
    assert label_scoring == scoring.DESCRIPTIONS["top_logprobs"]


def test_scoring_can_name_the_route() -> None:
    with FakeOpenAIServer(vllm=True) as srv:
        label_scoring, (got,), _ = asyncio.run(_scores(
            srv.url, [Request("score_choices", prompt=POSITIVE, choices=(" positive",))], scoring="logprob_token_ids"))
        assert not any(b.get("echo") for _, b in srv.bodies)  # no detection: the route was named
    assert label_scoring == scoring.DESCRIPTIONS["logprob_token_ids"]
    assert got.choice_logprobs == pytest.approx((math.log(0.10),), abs=1e-9)
