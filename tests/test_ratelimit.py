"""RateLimiter behaviour under a hand-driven clock: counts, never wall time."""

from __future__ import annotations

import asyncio

import pytest

from promptrobust.engine.serving.ratelimit import RateLimiter


class FakeTime:
    """A clock that only moves when someone sleeps on it."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


def limiter(t: FakeTime, **kw) -> RateLimiter:
    """Bucket mechanics are tested with a whole minute of burst (round numbers)."""
    kw.setdefault("burst_seconds", 60.0)
    return RateLimiter(clock=t.clock, sleep=t.sleep, **kw)


async def test_default_burst_is_one_second_so_any_minute_stays_near_the_limit():
    t = FakeTime()
    rl = RateLimiter(rpm=600, clock=t.clock, sleep=t.sleep)
    stamps = []
    for _ in range(1500):
        await rl.acquire()
        stamps.append(t.now)
    assert sum(1 for s in stamps if s == 0.0) == 10  # one second's worth goes at once
    for i, start in enumerate(stamps):
        window = sum(1 for s in stamps[i:] if s < start + 60.0)
        assert window <= 600 * 61 / 60 + 1
    assert stamps[-1] == pytest.approx((1500 - 10) / 10.0)  # then exactly the rate


async def test_rpm_burst_then_one_per_second():
    t = FakeTime()
    rl = limiter(t, rpm=60)
    for _ in range(60):
        await rl.acquire()
    assert t.now == 0.0 and t.sleeps == []  # the whole burst went out at once
    stamps = []
    for _ in range(5):
        await rl.acquire()
        stamps.append(t.now)
    assert stamps == pytest.approx([1.0, 2.0, 3.0, 4.0, 5.0])


async def test_rpm_refills_while_idle_but_not_beyond_capacity():
    t = FakeTime()
    rl = limiter(t, rpm=60)
    for _ in range(60):
        await rl.acquire()
    t.now += 1000.0  # idle for a long time: the bucket is full again, not fuller
    for _ in range(60):
        await rl.acquire()
    assert t.sleeps == []
    await rl.acquire()
    assert t.now == pytest.approx(1001.0)


async def test_tpm_bucket_weights_requests_by_tokens():
    t = FakeTime()
    rl = limiter(t, tpm=600)  # 10 tokens per second
    await rl.acquire(400)
    await rl.acquire(200)
    assert t.now == 0.0
    await rl.acquire(100)  # empty bucket: needs 100 tokens = 10 s
    assert t.now == pytest.approx(10.0)
    await rl.acquire(0)  # a weightless request passes a tpm-only limiter at once
    assert t.now == pytest.approx(10.0)


async def test_rpm_and_tpm_together_wait_for_the_scarcer():
    t = FakeTime()
    rl = limiter(t, rpm=6000, tpm=60)  # requests plentiful, 1 token per second
    await rl.acquire(60)
    await rl.acquire(5)
    assert t.now == pytest.approx(5.0)


async def test_oversized_request_passes_when_bucket_full_and_leaves_debt():
    t = FakeTime()
    rl = limiter(t, tpm=60)  # 1 token per second, capacity 60
    await rl.acquire(10)
    await rl.acquire(500)  # larger than the bucket: waits until full (10 s) then goes
    assert t.now == pytest.approx(10.0)
    await rl.acquire(1)  # debt of 440 tokens plus 1 more must be earned back
    assert t.now == pytest.approx(10.0 + 441.0)


async def test_waiters_are_served_in_arrival_order():
    t = FakeTime()
    rl = limiter(t, rpm=60, tpm=600)
    for _ in range(60):
        await rl.acquire()
    order: list[int] = []

    async def worker(i: int, tokens: int) -> None:
        await rl.acquire(tokens)
        order.append(i)

    # A heavy request first, then light ones: the light ones must not overtake it.
    tasks = [asyncio.create_task(worker(0, 500))]
    await asyncio.sleep(0)
    tasks += [asyncio.create_task(worker(i, 1)) for i in range(1, 6)]
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3, 4, 5]


async def test_concurrent_acquirers_never_exceed_the_rate():
    t = FakeTime()
    rl = limiter(t, rpm=120)  # 2 per second after the burst
    stamps: list[float] = []

    async def worker() -> None:
        await rl.acquire()
        stamps.append(t.now)

    await asyncio.gather(*(worker() for _ in range(140)))
    assert len(stamps) == 140
    assert sum(1 for s in stamps if s == 0.0) == 120
    # every sliding 60 s window holds at most capacity + refill (120 + 2*60)
    late = [s for s in stamps if s > 0]
    assert late == sorted(late)
    assert late[-1] == pytest.approx(10.0)


async def test_cancelled_waiter_does_not_block_the_queue():
    t = FakeTime()
    gate = asyncio.Event()

    async def blocking_sleep(seconds: float) -> None:
        await gate.wait()
        t.now += seconds

    rl = RateLimiter(rpm=1, clock=t.clock, sleep=blocking_sleep)
    await rl.acquire()
    stuck = asyncio.create_task(rl.acquire())
    await asyncio.sleep(0)
    stuck.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stuck
    gate.set()
    await asyncio.wait_for(rl.acquire(), timeout=5)  # would hang if the lock leaked


async def test_no_limits_is_a_no_op():
    t = FakeTime()
    rl = limiter(t)
    for _ in range(1000):
        await rl.acquire(10**6)
    assert t.sleeps == []


@pytest.mark.parametrize("kw", [{"rpm": 0}, {"tpm": -5}, {"rpm": float("nan")}])
def test_bad_limits_raise_clear_errors(kw):
    with pytest.raises(ValueError, match="positive number"):
        RateLimiter(**kw)


async def test_negative_tokens_rejected():
    with pytest.raises(ValueError, match="tokens must be >= 0"):
        await RateLimiter(tpm=10).acquire(-1)
