"""Scheduler behaviour: micro-batching, limits, deduplication, cache."""

from __future__ import annotations

import asyncio

import pytest

from promptrobust.engine.cache import ScoreCache
from promptrobust.engine.ratelimit import RateLimiter
from promptrobust.engine.scheduler import Scheduler
from promptrobust.engine.types import Decoding, Request
from promptrobust.testing.backends import CountingBackend


def gen(text: str) -> Request:
    return Request(kind="generate", prompt=text, decoding=Decoding(max_tokens=4))


async def test_micro_batches_group_requests_by_length() -> None:
    backend = CountingBackend(batching=True, max_batch_size=8)
    texts = ["x" * n for n in (30, 1, 25, 2, 3, 28, 4, 5, 6, 27, 7, 8, 9, 26, 10, 11, 12, 29, 13, 14)]
    async with Scheduler(backend, max_wait_ms=200) as sched:
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
    async with Scheduler(reversed_backend, max_wait_ms=200) as sched:
        out = await sched.submit_many([gen(t) for t in texts])
    assert [[r.prompt for r in b] for b in reversed_backend.batches] == [["xx", "xxxx"], ["x", "xxx"]]  # submission order, reversed
    assert [c.text for c in out] == texts
    broken = Broken(batching=True, max_batch_size=2)
    async with Scheduler(broken, max_wait_ms=200) as sched:
        out = await sched.submit_many([gen(t) for t in texts])
    assert [[r.prompt for r in b] for b in broken.batches] == [["x", "xx"], ["xxx", "xxxx"]]
    assert [c.text for c in out] == texts


async def test_batch_worker_does_not_wait_past_max_wait_for_a_full_batch() -> None:
    backend = CountingBackend(batching=True, max_batch_size=64)
    async with Scheduler(backend, max_wait_ms=1) as sched:
        await sched.submit(gen("a"))
        await sched.submit(gen("b"))
    assert [len(b) for b in backend.batches] == [1, 1]


async def test_concurrency_limit_holds_for_http_style_backends() -> None:
    backend = CountingBackend(batching=False, delay=0.01)
    async with Scheduler(backend, concurrency=5) as sched:
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
        from promptrobust.engine.types import Completion

        return Completion(text="ok")

    backend = CountingBackend(batching=False, answer=answer)
    async with Scheduler(backend, concurrency=16, limiter=limiter) as sched:
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
    async with Scheduler(backend, concurrency=4) as sched:
        a, b, c = await asyncio.gather(sched.submit(gen("same")), sched.submit(gen("same")), sched.submit(gen("other")))
    assert a == b
    assert backend.calls == 2
    assert sched.stats.deduplicated == 1


async def test_duplicates_inside_one_submit_many_are_sent_once() -> None:
    backend = CountingBackend(batching=True, max_batch_size=16)
    async with Scheduler(backend, max_wait_ms=50) as sched:
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
    async with Scheduler(backend, concurrency=4, max_pending=8) as sched:
        out = await sched.submit_many([gen(f"q{i}") for i in range(500)], window=16)
        assert len(out) == 500
        assert sched._queue is not None and sched._queue.maxsize == 8
    assert len(asyncio.all_tasks()) < 10  # a fixed set of workers, not one task per request


async def test_backend_error_reaches_the_caller_and_the_worker_survives() -> None:
    calls = {"n": 0}

    def answer(request: Request):  # noqa: ANN202
        from promptrobust.engine.types import Completion

        calls["n"] += 1
        if request.prompt == "bad":
            raise ValueError("model exploded")
        return Completion(text="fine")

    backend = CountingBackend(batching=False, answer=answer)
    async with Scheduler(backend, concurrency=2) as sched:
        with pytest.raises(ValueError, match="model exploded"):
            await sched.submit(gen("bad"))
        assert (await sched.submit(gen("good"))).text == "fine"
