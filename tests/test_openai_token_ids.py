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
    # The label reads, no start-up probe (the server's /version says 0.26+): the sample's text with the labels'
    # first tokens (its ids come back with the answer), then the one inner node of the trie (the input plus
    # " mixed") as token ids; never the prompt's own log-probs.
    reads = [b for path, b in bodies if b.get("logprob_token_ids")]
    assert len(reads) == 2
    assert reads[0]["prompt"] == POSITIVE and reads[0]["return_token_ids"] is True
    assert len(reads[0]["logprob_token_ids"]) == 4  # " positive", " negative", " mixed", "positive"
    assert len(reads[1]["prompt"]) == 1 and all(isinstance(t, int) for p in reads[1]["prompt"] for t in p)
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
    """A vLLM server that does not say its version is asked (and here refuses)."""
    request = Request("score_choices", prompt=POSITIVE, choices=(" positive", " negative"))
    with FakeOpenAIServer(vllm=True, vllm_version=None, refuse=("logprob_token_ids",)) as srv:
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


# -- issue 43 item 2: one HTTP request per sample in steady state ---------------------------------------

def _sample(i: int) -> str:
    shots = "".join(f"Review: example {k} was {'great' if k % 2 else 'dull'}\nAnswer: {'positive' if k % 2 else 'negative'}\n"
                    for k in range(3))
    return f"Classify the review.\n{shots}Review: sample {i} was {'great' if i % 2 else 'dull'}. Answer:"  # the fake
    # judges the last line


def _run_scheduler(url: str, requests: list[Request], concurrency: int, api: str = "completions") -> list[Completion]:
    from promptrobust.engine.serving.scheduler import Scheduler
    from promptrobust.engine.serving.scheduler_settings import SchedulerSettings

    async def main() -> list[Completion]:
        backend = OpenAIBackend("fake-model", OpenAIOptions(base_urls=(url,), api=api))  # type: ignore[arg-type]
        async with Scheduler(backend, settings=SchedulerSettings(concurrency=concurrency)) as scheduler:
            return list(await scheduler.submit_many(requests))

    return asyncio.run(main())


def test_one_request_per_sample_at_concurrency_64_with_the_exact_scores() -> None:
    """The label set is tokenised once per run (not once per concurrent slot), and each sample is one
    request: its text read at the generated position, its ids coming back in the same answer."""
    n = 200
    requests = [Request("score_choices", prompt=_sample(i), choices=(" positive", " negative")) for i in range(n)]
    with FakeOpenAIServer(vllm=True) as srv:
        got = _run_scheduler(srv.url, requests, concurrency=64)
        tokenize, completions = srv.count("/tokenize"), srv.count("/v1/completions")
    # Once per run and seam (the input's last two tokens; here " great." or " dull." before " Answer:"): the
    # input, each label after it, each label alone (once).
    assert tokenize == (1 + 2 + 2) + (1 + 2)
    assert completions == n  # one read per sample; no start-up probe (the server's /version says 0.26+)
    assert (tokenize + completions) / n <= 1.1
    # The same scores as the route always gave: the fake's exact distribution (the answer with a space: 0.10;
    # the other label is outside its table and shares the rest).
    for i, completion in enumerate(got):
        hit, miss = math.log(0.10), OTHER
        want = (hit, miss) if i % 2 else (miss, hit)
        assert completion.choice_logprobs == pytest.approx(want, abs=1e-9)


def test_labels_of_several_tokens_take_one_more_request_and_chat_one_in_all() -> None:
    n = 64
    multi = [Request("score_choices", prompt=_sample(i), choices=(" positive", " mixed feelings")) for i in range(n)]
    chat = [Request("score_choices", messages=(ChatMessage("user", f"sample {i} was great"),),
                    choices=("positive", "negative")) for i in range(n)]
    with FakeOpenAIServer(vllm=True) as srv:
        _run_scheduler(srv.url, multi, concurrency=64)
        multi_posts = srv.count("/tokenize") + srv.count("/v1/completions")
        srv.reset_counts()
        chat_got = _run_scheduler(srv.url, chat, concurrency=64, api="auto")
        chat_posts = srv.count("/tokenize") + srv.count("/v1/completions") + srv.count("/v1/chat/completions")
        chat_reads = srv.count("/v1/chat/completions")
    assert multi_posts <= 2 * n + 8  # the text read, and one read of the inner node (" mixed")
    assert chat_reads == n and chat_posts <= n + 5  # the conversation read by the chat route, its ids returned
    assert all(c.choice_logprobs == pytest.approx((math.log(0.70), math.log(0.04)), abs=1e-9) for c in chat_got)


def test_an_input_that_ends_otherwise_is_learned_again_and_scored_exactly() -> None:
    """How a label continues an input depends on the input's last tokens: an input ending in another way
    (here: a trailing space, which the label " positive" would merge with) is learned from, not assumed."""
    with FakeOpenAIServer(vllm=True) as srv:
        label_scoring, got, _ = asyncio.run(_scores(srv.url, [
            Request("score_choices", prompt="Review: a great film. Answer:", choices=("positive", " positive")),
            Request("score_choices", prompt="Review: a great film. Answer: ", choices=("positive", " positive")),
        ], api="completions"))
        tokenized = srv.count("/tokenize")
    assert got[0].choice_logprobs == pytest.approx((math.log(0.70), math.log(0.10)), abs=1e-9)
    # after "Answer: " the toy tokenizer merges the space with the label: each label then counts as itself alone
    assert got[1].choice_logprobs == pytest.approx((math.log(0.70), math.log(0.10)), abs=1e-9)
    assert tokenized == (1 + 2 + 2) + (1 + 2)  # the second seam: the input and each label after it again


# -- issue 43 item 6: a run that only generates asks nothing of label scoring ----------------------------

def test_a_run_that_only_generates_sends_no_label_scoring_probe() -> None:
    with FakeOpenAIServer(vllm=True) as srv:
        (out,) = _run_scheduler(srv.url, [Request("generate", prompt="Review: a great film.")], concurrency=4)
        posts = [path for path, _ in srv.bodies]
    assert out.text == "positive"
    assert posts == ["/v1/completions"]  # the generation alone: no /tokenize, no probe read


# -- issue 43 item 4: the model's identity is what the server serves, not where from ---------------------

def _identity(url: str) -> tuple[str, dict[str, str]]:
    async def main() -> tuple[str, dict[str, str]]:
        backend = OpenAIBackend("fake-model", OpenAIOptions(base_urls=(url,), api="completions"))
        await backend.start()
        try:
            return backend.identity.revision, dict(backend.identity.extra)
        finally:
            await backend.close()

    return asyncio.run(main())


def test_the_identity_says_what_the_server_serves_without_its_paths() -> None:
    first = FakeOpenAIServer(vllm=True, root="/home/alice/models/gemma-3-270m").start()
    try:
        port = first.port
        here = _identity(first.url)
    finally:
        first.stop()
    with FakeOpenAIServer(vllm=True, root="/srv/weights/copy/gemma-3-270m", port=port) as moved:
        there = _identity(moved.url)  # the same weights restarted from another folder: the same identity
    with FakeOpenAIServer(vllm=True, root="/x/hub/models--google--gemma-3-270m/snapshots/0123abc", port=port) as hub:
        snapshot = _identity(hub.url)
    assert here == there
    revision, extra = here
    assert revision == "root=gemma-3-270m" and "/home" not in str(here)
    assert extra["max_model_len"] == "8192" and extra["server"] == "vllm 0.32.0"
    assert snapshot[0] == "root=google/gemma-3-270m@0123abc"
