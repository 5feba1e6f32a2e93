"""Issue 20: no impossible number is scored or cached, and no damaged cache row kills a run.
Issue 32: an impossible number fails its request at once in one line (a retry would get it again).

A real FakeOpenAIServer on 127.0.0.1 serves positive, NaN and infinite
log-probabilities (sent as JSON's NaN/Infinity extensions, as a broken server
would); a real SQLite cache holds rows damaged by hand.
"""

from __future__ import annotations

import asyncio
import logging
import math
import sqlite3

import orjson
import pytest

from promptrobust.engine.serving.backends.base import BadAnswerError, TransientBackendError
from promptrobust.engine.serving.backends.openai import OpenAIBackend, OpenAIOptions
from promptrobust.engine.serving.backends.openai.answers import logprob_problem
from promptrobust.engine.serving.cache import ScoreCache, decode_completion
from promptrobust.engine.serving.retry import RetryPolicy, call_with_retries
from promptrobust.engine.serving.scheduler import Scheduler, completion_problem
from promptrobust.engine.serving.types import ChatMessage, Completion, Request, request_key
from promptrobust.testing.fake_openai import NUMBER_FAULTS, FakeOpenAIServer, FaultPlan

FAST = RetryPolicy(max_attempts=6, base_delay=0.01, max_delay=0.05, jitter=0.0)
CHOICES = ("positive", "negative")


@pytest.fixture(autouse=True)
def _no_ambient_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def scoring(text: str, chat: bool) -> Request:
    if chat:
        return Request("score_choices", messages=(ChatMessage("user", f"Sentence:\n{text}"),), choices=CHOICES)
    return Request("score_choices", prompt=f"Sentence:\n{text}", choices=CHOICES)


def all_rows(path) -> dict[str, bytes]:  # noqa: ANN001
    with sqlite3.connect(path) as conn:
        return dict(conn.execute("SELECT key, value FROM completions").fetchall())


@pytest.mark.parametrize("value, ok", [
    (-0.5, True), (0.0, True), (0.0005, True),  # rounding just above 0 is tolerated
    (3.5, False), (7.25, False), (math.nan, False), (math.inf, False), (-math.inf, False), ("1", False), (True, False),
])
def test_a_log_probability_must_be_finite_and_not_above_zero(value, ok):
    assert (logprob_problem(value) is None) is ok
    answer = Completion(choice_logprobs=(value, -1.0))
    assert (completion_problem(Request("score_choices", prompt="x", choices=CHOICES), answer) is None) is ok


@pytest.mark.parametrize("fault", NUMBER_FAULTS)
@pytest.mark.parametrize("chat", [True, False])
async def test_impossible_log_probabilities_fail_at_once_in_one_line(fault, chat):
    """Issue 32: a server that computes an impossible number would compute it again: no retry, one line."""
    with FakeOpenAIServer(model="fake-model") as srv:
        b = OpenAIBackend("fake-model", OpenAIOptions(base_urls=[srv.url], api="chat" if chat else "completions"))
        await b.start()
        req = scoring("a great film", chat)
        srv.script(fault)  # the very first scoring answer: nothing is decided about log-probs yet
        calls = srv.count()
        with pytest.raises(BadAnswerError, match="impossible answer from .*: log-probability of") as err:
            await call_with_retries(lambda: b.complete(req), FAST)
        assert srv.count() == calls + 1  # not retried
        assert "\n" not in str(err.value) and "a retry would get the same" in str(err.value)
        assert "--max-retries" not in str(err.value)  # retrying is not the fix
        assert not isinstance(err.value, TransientBackendError)
        assert b.supports_choice_scoring  # an impossible number is not "no log-probabilities"
        out = await b.complete(req)  # the next answer is sound and scored
        assert all(v <= 0 and math.isfinite(v) for v in out.choice_logprobs)
        assert out.choice_logprobs[0] > out.choice_logprobs[1]  # "positive" for a great film
        await b.close()


async def test_a_server_that_only_sends_impossible_numbers_fails_at_once_and_nothing_is_cached(tmp_path):
    cache = ScoreCache(tmp_path / "c.sqlite")
    plan = FaultPlan({"positive_logprobs": 0.5, "nan_logprobs": 0.25, "inf_logprobs": 0.25}, seed=3)
    with FakeOpenAIServer(model="fake-model", faults=plan) as srv:
        backend = OpenAIBackend("fake-model", OpenAIOptions(base_urls=[srv.url], logprobs=True))
        async with Scheduler(backend, cache=cache, retry_policy=FAST) as sched:
            with pytest.raises(BadAnswerError, match="impossible answer"):
                await sched.submit(scoring("a great film", chat=True))
            assert sched.stats.retries == 0 and sched.stats.failures == 1
        assert sum(srv.injected.values()) == 1
    assert all_rows(tmp_path / "c.sqlite") == {}
    cache.close()


async def test_through_the_scheduler_an_impossible_answer_is_never_cached_and_a_rerun_scores_soundly(tmp_path):
    cache = ScoreCache(tmp_path / "c.sqlite")
    request = scoring("a bad film", chat=True)
    with FakeOpenAIServer(model="fake-model") as srv:
        backend = OpenAIBackend("fake-model", OpenAIOptions(base_urls=[srv.url], logprobs=True))
        async with Scheduler(backend, cache=cache, retry_policy=FAST) as sched:
            srv.script("nan_logprobs")
            with pytest.raises(BadAnswerError):
                await sched.submit(request)
            assert all_rows(tmp_path / "c.sqlite") == {}
            out = await sched.submit(request)  # asked again (a rerun): the sound answer is scored and cached
            assert sched.stats.retries == 0
    assert out.choice_logprobs[1] > out.choice_logprobs[0] and max(out.choice_logprobs) <= 0
    (value,) = all_rows(tmp_path / "c.sqlite").values()
    assert orjson.loads(value)["choice_logprobs"] == list(out.choice_logprobs)
    cache.close()


async def test_an_in_process_backend_with_impossible_numbers_fails_at_once_in_one_line():
    """The scheduler's own check covers every backend (an hf model in float16 may overflow to NaN)."""
    from promptrobust.testing.backends import CountingBackend

    backend = CountingBackend(batching=True, answer=lambda r: Completion(choice_logprobs=(math.nan, -1.0)))
    async with Scheduler(backend, retry_policy=FAST) as sched:
        with pytest.raises(BadAnswerError, match="impossible answer from .*not a number.*check the model") as err:
            await sched.submit(Request("score_choices", prompt="x", choices=CHOICES))
    assert backend.calls == 1 and "\n" not in str(err.value)


# -- damaged cache rows ---------------------------------------------------------------------------

@pytest.mark.parametrize("value, why", [
    (b"not json", "not JSON"), (b'{"text": 5}', "text is a int"), (b"[1, 2]", "not an object"),
    (b'{"choice_logprobs": ["a"]}', "not a list of numbers"), (b"{}", "neither"),
    (b'{"text": "x", "prompt_tokens": -3}', "token counts"),
])
def test_a_value_that_is_not_a_completion_decodes_to_none_with_a_reason(value, why):
    completion, problem = decode_completion(value)
    assert completion is None and why in problem


async def test_damaged_rows_are_misses_recomputed_overwritten_and_reported_once(tmp_path, caplog):
    path = tmp_path / "c.sqlite"
    requests = [scoring(f"{'a great' if i % 2 else 'a dull'} film number {i}", chat=True) for i in range(60)]
    with FakeOpenAIServer(model="fake-model") as srv:
        cache = ScoreCache(path)
        backend = OpenAIBackend("fake-model", OpenAIOptions(base_urls=[srv.url], logprobs=True))
        async with Scheduler(backend, cache=cache, retry_policy=FAST) as sched:
            clean = await sched.submit_many(requests)
            identity = backend.identity
        cache.close()
        good = all_rows(path)
        keys = [request_key(identity, r) for r in requests]
        damaged = {k: b"not json" for k in keys[:50]}
        damaged[keys[50]] = b'{"text": 5}'
        damaged[keys[51]] = orjson.dumps({"choice_logprobs": [7.25, 3.5]})  # what a past version cached
        damaged[keys[52]] = orjson.dumps({"choice_logprobs": [-1.0]})  # a label missing
        with sqlite3.connect(path) as conn:
            conn.executemany("UPDATE completions SET value = ? WHERE key = ?", [(v, k) for k, v in damaged.items()])
        sent_before = srv.count("/v1/chat/completions")

        cache = ScoreCache(path)
        backend = OpenAIBackend("fake-model", OpenAIOptions(base_urls=[srv.url], logprobs=True))
        with caplog.at_level(logging.WARNING):
            async with Scheduler(backend, cache=cache, retry_policy=FAST) as sched:
                again = await sched.submit_many(requests)
            assert cache.stats.damaged == len(damaged) and cache.stats.hits == len(requests) - len(damaged)
            cache.close()
        assert srv.count("/v1/chat/completions") - sent_before == len(damaged)  # recomputed, nothing else
    assert again == clean
    assert all_rows(path) == good  # overwritten with sound values
    lines = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert len(lines) == 1 and f"{len(damaged)} damaged rows" in lines[0] and "recomputed" in lines[0]
    assert "\n" not in lines[0]


async def test_one_impossible_answer_fails_its_own_request_not_its_micro_batch(tmp_path):
    """Two jobs share a micro-batch; the model gives one of its requests a NaN: that request fails in
    one line, never cached; the others (the other job's too) are answered and cached as usual."""
    from promptrobust.testing.backends import CountingBackend

    def answer(r: Request) -> Completion:
        return Completion(choice_logprobs=(math.nan, -1.0) if "cursed" in (r.prompt or "") else (-0.2, -1.8))

    cache = ScoreCache(tmp_path / "c.sqlite")
    backend = CountingBackend(batching=True, max_batch_size=8, answer=answer)
    async with Scheduler(backend, cache=cache, retry_policy=FAST) as sched:
        good = [Request("score_choices", prompt=f"review {i}", choices=CHOICES) for i in range(3)]
        bad = Request("score_choices", prompt="a cursed review", choices=CHOICES)
        first, second = await asyncio.gather(sched.submit_many(good[:2] + [bad]), sched.submit_many(good[2:]),
                                             return_exceptions=True)
    assert len(backend.batches) == 1  # one micro-batch held both jobs' requests
    assert isinstance(first, BadAnswerError) and "not a number" in str(first)
    assert [c.choice_logprobs for c in second] == [(-0.2, -1.8)]
    assert len(all_rows(tmp_path / "c.sqlite")) == 3 and sched.stats.failures == 1
    cache.close()
