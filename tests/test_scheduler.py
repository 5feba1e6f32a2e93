"""Scheduler behaviour: micro-batching, limits, deduplication, cache."""

from __future__ import annotations

import asyncio

import pytest

from promptrobust.engine.serving.cache import ScoreCache
from promptrobust.engine.serving.ratelimit import RateLimiter
from promptrobust.engine.serving.scheduler import Scheduler
from promptrobust.engine.serving.scheduler_settings import SchedulerSettings
from promptrobust.engine.serving.types import Decoding, Request
from promptrobust.testing.backends import CountingBackend


def gen(text: str) -> Request:
    return Request(kind="generate", prompt=text, decoding=Decoding(max_tokens=4))


async def test_micro_batches_group_requests_by_length() -> None:
    backend = CountingBackend(batching=True, max_batch_size=8)
    texts = ["x" * n for n in (30, 1, 25, 2, 3, 28, 4, 5, 6, 27, 7, 8, 9, 26, 10, 11, 12, 29, 13, 14)]
    async with Scheduler(backend, settings=SchedulerSettings(max_wait_ms=200)) as sched:
        out = await sched.submit_many([gen(t) for t in texts])
    assert [len(b) for b in backend.batches] == [8, 8, 4]
    # Sorted by length before cutting: the first batch holds the 8 shortest inputs.
    first = sorted(len(r.prompt or "") for r in backend.batches[0])
    assert first == sorted(len(t) for t in texts)[:8]
    # Answers come back in request order whatever the batching.
    assert [c.text for c in out] == [t[-12:] for t in texts]
    assert sched.stats.batches == 3 and sched.stats.backend_requests == 20


async def test_backend_arrangement_is_used_and_a_failing_one_falls_back_to_length_order() -> None:
    class Reversed(CountingBackend):
        def arrange_batches(self, requests, batch_size):  # noqa: ANN001, ANN202
            order = list(reversed(range(len(requests))))
            return [order[k : k + batch_size] for k in range(0, len(order), batch_size)]

    class Broken(CountingBackend):
        def arrange_batches(self, requests, batch_size):  # noqa: ANN001, ANN202
            raise RuntimeError("tokenizer exploded")

    texts = ["x" * n for n in (3, 1, 4, 2)]
    reversed_backend = Reversed(batching=True, max_batch_size=2)
    async with Scheduler(reversed_backend, settings=SchedulerSettings(max_wait_ms=200)) as sched:
        out = await sched.submit_many([gen(t) for t in texts])
    assert [[r.prompt for r in b] for b in reversed_backend.batches] == [["xx", "xxxx"], ["x", "xxx"]]  # submission order, reversed
    assert [c.text for c in out] == texts
    broken = Broken(batching=True, max_batch_size=2)
    async with Scheduler(broken, settings=SchedulerSettings(max_wait_ms=200)) as sched:
        out = await sched.submit_many([gen(t) for t in texts])
    assert [[r.prompt for r in b] for b in broken.batches] == [["x", "xx"], ["xxx", "xxxx"]]
    assert [c.text for c in out] == texts


async def test_batch_worker_does_not_wait_past_max_wait_for_a_full_batch() -> None:
    backend = CountingBackend(batching=True, max_batch_size=64)
    async with Scheduler(backend, settings=SchedulerSettings(max_wait_ms=1)) as sched:
        await sched.submit(gen("a"))
        await sched.submit(gen("b"))
    assert [len(b) for b in backend.batches] == [1, 1]


async def test_concurrency_limit_holds_for_http_style_backends() -> None:
    backend = CountingBackend(batching=False, delay=0.01)
    async with Scheduler(backend, settings=SchedulerSettings(concurrency=5)) as sched:
        await sched.submit_many([gen(f"q{i}") for i in range(60)])
    assert backend.max_in_flight == 5
    assert backend.calls == 60


async def test_rpm_limit_holds_under_a_controlled_clock() -> None:
    clock = {"now": 0.0}
    sent_at: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        clock["now"] += seconds
        await asyncio.sleep(0)

    limiter = RateLimiter(rpm=60, clock=lambda: clock["now"], sleep=fake_sleep)

    def answer(request: Request):  # noqa: ANN202
        sent_at.append(clock["now"])
        from promptrobust.engine.serving.types import Completion

        return Completion(text="ok")

    backend = CountingBackend(batching=False, answer=answer)
    async with Scheduler(backend, settings=SchedulerSettings(concurrency=16), limiter=limiter) as sched:
        await sched.submit_many([gen(f"q{i}") for i in range(150)])
    assert len(sent_at) == 150
    # One second's worth of burst, then one per second: no 60 s window holds
    # more than the limit (plus the one-request burst).
    for start in sent_at:
        in_window = [t for t in sent_at if start <= t < start + 60.0]
        assert len(in_window) <= 61
    assert max(sent_at) == pytest.approx(149.0)  # 150 requests at 1/s


async def test_identical_in_flight_requests_reach_the_backend_once() -> None:
    backend = CountingBackend(batching=False, delay=0.05)
    async with Scheduler(backend, settings=SchedulerSettings(concurrency=4)) as sched:
        a, b, c = await asyncio.gather(sched.submit(gen("same")), sched.submit(gen("same")), sched.submit(gen("other")))
    assert a == b
    assert backend.calls == 2
    assert sched.stats.deduplicated == 1


async def test_duplicates_inside_one_submit_many_are_sent_once() -> None:
    backend = CountingBackend(batching=True, max_batch_size=16)
    async with Scheduler(backend, settings=SchedulerSettings(max_wait_ms=50)) as sched:
        out = await sched.submit_many([gen("dup")] * 10 + [gen("one")])
    assert backend.calls == 2
    assert len(out) == 11 and len({c.text for c in out[:10]}) == 1


async def test_cache_hit_avoids_the_backend_call(tmp_path) -> None:  # noqa: ANN001
    cache = ScoreCache(tmp_path / "c.sqlite")
    backend = CountingBackend(batching=True)
    async with Scheduler(backend, cache=cache) as sched:
        first = await sched.submit_many([gen(f"q{i}") for i in range(5)])
        second = await sched.submit_many([gen(f"q{i}") for i in range(5)])
    assert backend.calls == 5
    assert first == second
    assert sched.stats.cache_hits == 5


async def test_cache_key_depends_on_decoding_and_model(tmp_path) -> None:  # noqa: ANN001
    cache = ScoreCache(tmp_path / "c.sqlite")
    backend = CountingBackend(batching=True)
    async with Scheduler(backend, cache=cache) as sched:
        await sched.submit(gen("q"))
        await sched.submit(Request(kind="generate", prompt="q", decoding=Decoding(max_tokens=5)))
    other = CountingBackend(batching=True, name="another-model")
    async with Scheduler(other, cache=cache) as sched:
        await sched.submit(gen("q"))
    assert backend.calls == 2 and other.calls == 1


async def test_window_bounds_outstanding_requests() -> None:
    backend = CountingBackend(batching=False, delay=0.001)
    async with Scheduler(backend, settings=SchedulerSettings(concurrency=4), max_pending=8) as sched:
        out = await sched.submit_many([gen(f"q{i}") for i in range(500)], window=16)
        assert len(out) == 500
        assert sched._queue is not None and sched._queue.maxsize == 8
    assert len(asyncio.all_tasks()) < 10  # a fixed set of workers, not one task per request


async def test_backend_error_reaches_the_caller_and_the_worker_survives() -> None:
    calls = {"n": 0}

    def answer(request: Request):  # noqa: ANN202
        from promptrobust.engine.serving.types import Completion

        calls["n"] += 1
        if request.prompt == "bad":
            raise ValueError("model exploded")
        return Completion(text="fine")

    backend = CountingBackend(batching=False, answer=answer)
    async with Scheduler(backend, settings=SchedulerSettings(concurrency=2)) as sched:
        with pytest.raises(ValueError, match="model exploded"):
            await sched.submit(gen("bad"))
        assert (await sched.submit(gen("good"))).text == "fine"


# -- issue 12: timeouts, malformed completions, one error after the retries, lazy start --

from promptrobust.engine.serving.backends.base import (  # noqa: E402
    BackendError,
    RequestFailedError,
    TransientBackendError,
    cut_least_padding,
)
from promptrobust.engine.serving.retry import RetryPolicy  # noqa: E402
from promptrobust.engine.serving.types import Completion, request_key  # noqa: E402

QUICK = RetryPolicy(max_attempts=4, base_delay=0.0, max_delay=0.0, jitter=0.0)


class Scripted(CountingBackend):
    """Answers like CountingBackend after consuming a script of misbehaviours, one per call."""

    def __init__(self, script: list[str], **kw) -> None:  # noqa: ANN003
        super().__init__(**kw)
        self.script = list(script)
        self.starts = 0

    async def start(self) -> None:
        self.starts += 1

    async def complete_batch(self, requests):  # noqa: ANN001, ANN201
        step = self.script.pop(0) if self.script else "ok"
        if step == "hang":
            self.batches.append(list(requests))
            await asyncio.sleep(30)
        if step == "500":
            self.batches.append(list(requests))
            raise TransientBackendError("HTTP 500 from http://127.0.0.1:9/v1: upstream died", status=500)
        if step == "none":
            self.batches.append(list(requests))
            return [Completion(text=None) for _ in requests]
        return await super().complete_batch(requests)


async def test_a_call_over_the_request_timeout_is_retried() -> None:
    backend = Scripted(["hang"], batching=False)
    async with Scheduler(backend, settings=SchedulerSettings(request_timeout=0.2), retry_policy=QUICK) as sched:
        out = await sched.submit(gen("hello"))
    assert out.text == "hello" and backend.calls == 2 and sched.stats.retries == 1


async def test_a_completion_lacking_its_answer_is_retried_and_never_cached(tmp_path) -> None:  # noqa: ANN001
    cache = ScoreCache(tmp_path / "c.sqlite")
    backend = Scripted(["none"], batching=False)
    async with Scheduler(backend, cache=cache, retry_policy=QUICK) as sched:
        out = await sched.submit(gen("hello"))
    assert out.text == "hello" and sched.stats.retries == 1
    assert cache.get_many([request_key(backend.identity, gen("hello"))]) == {
        request_key(backend.identity, gen("hello")): out
    }
    broken = Scripted(["none"] * 4, batching=False)
    async with Scheduler(broken, cache=cache, retry_policy=QUICK) as sched:
        with pytest.raises(RequestFailedError, match="malformed answer: no text for a generate request"):
            await sched.submit(gen("other"))
    assert cache.get_many([request_key(backend.identity, gen("other"))]) == {}
    cache.close()


async def test_exhausted_retries_raise_one_line_naming_the_cause_and_the_fix() -> None:
    backend = Scripted(["500"] * 10, batching=False)
    async with Scheduler(backend, retry_policy=QUICK) as sched:
        with pytest.raises(RequestFailedError) as err:
            await sched.submit(gen("hello"))
    message = str(err.value)
    assert isinstance(err.value, BackendError) and "\n" not in message
    assert message.startswith("request failed after 4 attempts: HTTP 500")
    assert message.endswith("; raise --max-retries (now 3) or check the server")
    assert err.value.attempts == 4 and isinstance(err.value.cause, TransientBackendError)
    assert backend.calls == 4 and sched.stats.failures == 1


async def test_timeouts_that_exhaust_the_retries_name_the_request_timeout() -> None:
    backend = Scripted(["hang"] * 3, batching=False)
    async with Scheduler(backend, settings=SchedulerSettings(request_timeout=0.05), retry_policy=RetryPolicy(max_attempts=2, base_delay=0, jitter=0)) as sched:
        fix = r"raise --request-timeout \(now 0.05s\) or --max-retries \(now 1\)"
        with pytest.raises(RequestFailedError, match=r"no answer within 0.05s .*" + fix):
            await sched.submit(gen("hello"))


def test_request_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="request_timeout"):
        Scheduler(CountingBackend(), settings=SchedulerSettings(request_timeout=0))


async def test_a_fully_cached_run_never_starts_the_backend(tmp_path) -> None:  # noqa: ANN001
    cache = ScoreCache(tmp_path / "c.sqlite")
    first = Scripted([], batching=True)
    async with Scheduler(first, cache=cache) as sched:
        assert not sched.backend_started  # started lazily, on the first cache miss
        await sched.submit_many([gen("a"), gen("b")])
        assert sched.backend_started and first.starts == 1
    again = Scripted([], batching=True)
    async with Scheduler(again, cache=cache) as sched:
        out = await sched.submit_many([gen("a"), gen("b")])
        assert [c.text for c in out] == ["a", "b"]
        assert not sched.backend_started and again.starts == 0 and again.calls == 0
        await sched.submit(gen("c"))  # one miss: now it loads
        assert again.starts == 1
    cache.close()


async def test_a_backend_that_cannot_defer_is_started_at_once() -> None:
    backend = Scripted([], batching=False)
    backend.defer_start = False
    async with Scheduler(backend) as sched:
        assert sched.backend_started and backend.starts == 1


async def test_the_capability_probe_goes_through_the_cache(tmp_path) -> None:  # noqa: ANN001
    probe = Request("score_choices", prompt="probe?", choices=("yes", "no"))

    class Probed(Scripted):
        defer_start = False

        def capability_probe(self):  # noqa: ANN201
            return probe

    cache = ScoreCache(tmp_path / "c.sqlite")
    b1 = Probed([], batching=False)
    async with Scheduler(b1, cache=cache):
        pass
    assert b1.batches == [[probe]]
    b2 = Probed([], batching=False)
    async with Scheduler(b2, cache=cache) as sched:
        assert b2.calls == 0  # a rerun asks nothing
        # Counted apart: the jobs' own numbers stay what they asked for.
        assert sched.stats.probes == 1 and sched.stats.cache_hits == 0 and sched.stats.backend_requests == 0
    cache.close()


def test_cut_least_padding_cuts_only_where_padding_costs_more_than_a_pass() -> None:
    lengths = [2, 2, 2, 10, 10, 10]
    order = list(range(6))
    # one batch: 6 x 10 + 5 = 65 positions; two: 3 x 2 + 5 + 3 x 10 + 5 = 46
    assert cut_least_padding(order, lengths, 6, overhead=5) == [[0, 1, 2], [3, 4, 5]]
    # a pass worth 30 positions: one batch (90) beats two (96)
    assert cut_least_padding(order, lengths, 6, overhead=30) == [order]
    # never more rows than the batch size, and no more batches than needed
    runs = cut_least_padding(order, [4] * 6, 4, overhead=1)
    assert len(runs) == 2 and max(map(len, runs)) <= 4 and sum(runs, []) == order
    assert cut_least_padding([], [], 4, overhead=10) == []


async def test_the_scheduler_takes_its_settings_whole(monkeypatch) -> None:  # noqa: ANN001
    """Issue 29 item 4: one frozen value, not 14 keywords: every limit of it is the one applied."""
    monkeypatch.setenv("PRE_RETRY_BASE_DELAY", "0")
    settings = SchedulerSettings(concurrency=3, batch_size=5, max_wait_ms=40, rpm=600, max_retries=2, request_timeout=9)
    backend = Scripted(["500"] * 10, batching=False)
    sched = Scheduler(backend, settings=settings)
    assert sched.settings is settings and sched.concurrency == 3 and sched.batch_size == 5
    assert sched.max_wait == 0.04 and sched.request_timeout == 9 and sched._limiter is not None  # noqa: SLF001
    async with sched:
        assert len(sched._workers) == 3  # noqa: SLF001
        with pytest.raises(RequestFailedError, match=r"after 3 attempts: .*--max-retries \(now 2\)"):
            await sched.submit(gen("hello"))
    assert backend.calls == 3
    assert Scheduler(CountingBackend(max_batch_size=7)).batch_size == 7  # no batch size set: the backend's own
    with pytest.raises(TypeError, match="SchedulerSettings"):
        Scheduler(CountingBackend(), settings={"concurrency": 3})  # type: ignore[arg-type]


async def test_a_twin_answered_while_a_call_waits_is_read_from_the_cache_not_sent_again(tmp_path) -> None:  # noqa: ANN001
    """A call looks its chunk up in the cache once, then may wait (here: its window is full).
    A twin request another job sent can be answered and cached meanwhile; when the call
    reaches it, it must read that answer, not send the request a second time."""
    cache = ScoreCache(tmp_path / "c.sqlite")
    backend = CountingBackend(batching=False, delay=0.02)
    async with Scheduler(backend, cache=cache, settings=SchedulerSettings(concurrency=1)) as sched:
        first = asyncio.create_task(sched.submit(gen("shared")))
        await asyncio.sleep(0)  # "shared" is on the backend's queue before the second call looks it up
        out = await sched.submit_many([gen("own"), gen("shared")], window=1)
        assert out[1] == await first
    assert sorted(r.prompt for b in backend.batches for r in b) == ["own", "shared"]
    assert cache.count() == 2
    # Three lookups: "shared" missed by the first call, "own" missed, "shared" found on the second look.
    assert sched.stats.cache_hits == 1 and (cache.stats.hits, cache.stats.misses) == (1, 2)


class SlowStart(CountingBackend):
    """A backend whose start takes a while (a model load), and may fail."""

    def __init__(self, *, error: str | None = None, **kw) -> None:  # noqa: ANN003
        super().__init__(**kw)
        self.starts = 0
        self.error = error

    async def start(self) -> None:
        self.starts += 1
        await asyncio.sleep(0.02)
        if self.error:
            raise BackendError(self.error)


async def test_twins_that_miss_while_the_model_loads_reach_it_once() -> None:
    """Two calls miss the same request before the model is up: the second waits for the load, then
    joins the first one's request instead of sending its own."""
    backend = SlowStart(batching=False)
    async with Scheduler(backend, settings=SchedulerSettings(concurrency=2)) as sched:
        a, b = await asyncio.gather(sched.submit_many([gen("one"), gen("two")]), sched.submit_many([gen("one")]))
    assert backend.starts == 1 and backend.calls == 2 and a[0] == b[0]
    assert sched.stats.deduplicated == 1 and sched.stats.backend_requests == 2


async def test_a_failed_load_is_not_tried_again_by_every_call_that_waited_for_it() -> None:
    backend = SlowStart(batching=True, error="no weights at /models/x: download them first")
    async with Scheduler(backend) as sched:
        outcomes = await asyncio.gather(*(sched.submit(gen(f"q{i}")) for i in range(5)), return_exceptions=True)
        assert all(isinstance(o, BackendError) and "no weights" in str(o) for o in outcomes)
        assert backend.starts == 1  # the four calls behind the failed load share its error
        with pytest.raises(BackendError):
            await sched.submit(gen("later"))  # a call after the failure tries again
        assert backend.starts == 2


async def test_cancelling_one_call_leaves_the_twin_it_shares_answered() -> None:
    backend = CountingBackend(batching=False, delay=0.1)
    async with Scheduler(backend, settings=SchedulerSettings(concurrency=1)) as sched:
        first = asyncio.create_task(sched.submit(gen("shared")))
        await asyncio.sleep(0.01)
        second = asyncio.create_task(sched.submit(gen("shared")))  # joins the first one's request
        await asyncio.sleep(0.01)
        first.cancel()
        answer = await second
        assert first.cancelled() and answer.text is not None
    assert backend.calls == 1


async def test_a_call_cancelled_at_a_full_queue_still_queues_what_twins_wait_for() -> None:
    backend = CountingBackend(batching=False, delay=0.05)
    async with Scheduler(backend, settings=SchedulerSettings(concurrency=1), max_pending=1) as sched:
        blockers = asyncio.create_task(sched.submit_many([gen("b1"), gen("b2"), gen("b3")]))
        await asyncio.sleep(0.01)  # b1 at the worker, b2 in the queue, b3 waiting for a place
        caller = asyncio.create_task(sched.submit(gen("shared")))
        await asyncio.sleep(0.01)  # "shared" is in flight, waiting for a place in the queue too
        twin = asyncio.create_task(sched.submit(gen("shared")))
        await asyncio.sleep(0)
        caller.cancel()
        answer = await asyncio.wait_for(twin, 5)  # before: it waited forever on a request never queued
        await blockers
    assert answer.text is not None and sorted(r.prompt for b in backend.batches for r in b) == ["b1", "b2", "b3", "shared"]


async def test_a_damaged_row_whose_twin_was_recomputed_meanwhile_is_not_sent_again(tmp_path) -> None:  # noqa: ANN001
    cache = ScoreCache(tmp_path / "c.sqlite")
    key_backend = CountingBackend(batching=False)
    async with Scheduler(key_backend, cache=cache) as sched:
        key = request_key(sched._identity, gen("shared"))  # type: ignore[arg-type]
    cache.put(key, "fake-model", Completion(choice_logprobs=(-0.1,)))  # a row it cannot use: no text for a generate request
    backend = CountingBackend(batching=False, delay=0.02)
    async with Scheduler(backend, cache=cache, settings=SchedulerSettings(concurrency=1)) as sched:
        first = asyncio.create_task(sched.submit(gen("shared")))
        await asyncio.sleep(0)
        out = await sched.submit_many([gen("own"), gen("shared")], window=1)
        assert out[1] == await first and out[1].text is not None
    assert sorted(r.prompt for b in backend.batches for r in b) == ["own", "shared"]
    assert cache.stats.damaged == 2  # the row, found by each call once (not again on the second look)


async def test_copies_of_a_request_in_one_call_reach_the_model_once_and_count_once(tmp_path) -> None:  # noqa: ANN001
    """A request repeated in one call, its first copy answered before the call reaches the others
    (window 1): they read that answer; the cache counts one miss (the copy sent) and one hit."""
    cache = ScoreCache(tmp_path / "c.sqlite")
    backend = CountingBackend(batching=False)
    async with Scheduler(backend, cache=cache) as sched:
        out = await sched.submit_many([gen("x"), gen("x"), gen("x")], window=1)
    assert backend.calls == 1 and len({c.text for c in out}) == 1
    assert (cache.stats.hits, cache.stats.misses) == (1, 1) and sched.stats.cache_hits == 2
