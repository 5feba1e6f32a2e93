"""RetryPolicy delays and call_with_retries, driven without real waiting."""

from __future__ import annotations

import email.utils
import random

import pytest

from promptrobust.engine.serving.backends.base import BackendError, TransientBackendError
from promptrobust.engine.serving.retry import RetryPolicy, call_with_retries, parse_retry_after


class RecordingSleep:
    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def test_backoff_doubles_and_caps_without_jitter():
    p = RetryPolicy(base_delay=0.5, max_delay=4.0, jitter=0.0)
    rng = random.Random(0)
    assert [p.delay(a, None, rng) for a in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert p.delay(10_000, None, rng) == 4.0  # no overflow for absurd attempt numbers


def test_jitter_stays_within_band_and_varies():
    p = RetryPolicy(base_delay=1.0, max_delay=60.0, jitter=0.5)
    rng = random.Random(1)
    waits = [p.delay(3, None, rng) for _ in range(200)]
    assert all(2.0 <= w <= 4.0 for w in waits)
    assert len(set(waits)) > 100


def test_retry_after_is_a_floor_never_shortened_by_jitter():
    p = RetryPolicy(base_delay=0.1, max_delay=60.0, jitter=1.0)
    rng = random.Random(2)
    assert all(p.delay(1, 7.5, rng) >= 7.5 for _ in range(100))
    # backoff larger than the hint wins
    assert RetryPolicy(base_delay=10, jitter=0).delay(1, 2.0, rng) == 10.0


def test_retry_after_is_capped_at_twice_max_delay():
    p = RetryPolicy(max_delay=5.0, jitter=0.0, base_delay=0.5)
    assert p.delay(1, 3600.0, random.Random(0)) == 10.0


@pytest.mark.parametrize(
    "kw,msg",
    [({"max_attempts": 0}, "max_attempts"), ({"jitter": 1.5}, "jitter"), ({"base_delay": -1}, "base_delay")],
)
def test_bad_policy_rejected(kw, msg):
    with pytest.raises(ValueError, match=msg):
        RetryPolicy(**kw)


async def test_transient_errors_are_retried_until_success():
    sleep = RecordingSleep()
    calls = []
    seen = []

    async def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise TransientBackendError("busy", retry_after=2.0, status=429)
        return "ok"

    out = await call_with_retries(
        flaky, RetryPolicy(base_delay=0.1, jitter=0.0), sleep=sleep,
        on_retry=lambda a, e, d: seen.append((a, e.status, d)),
    )
    assert out == "ok" and len(calls) == 3
    assert sleep.waits == [2.0, 2.0]  # Retry-After (2 s) beats the 0.1/0.2 s backoff
    assert seen == [(1, 429, 2.0), (2, 429, 2.0)]


async def test_permanent_errors_propagate_at_once():
    sleep = RecordingSleep()
    calls = []

    async def bad():
        calls.append(1)
        raise BackendError("400 bad request")

    with pytest.raises(BackendError, match="400"):
        await call_with_retries(bad, RetryPolicy(), sleep=sleep)
    assert len(calls) == 1 and sleep.waits == []


async def test_gives_up_after_max_attempts_with_last_error():
    sleep = RecordingSleep()
    calls = []

    async def always():
        calls.append(1)
        raise TransientBackendError(f"fail {len(calls)}", status=503)

    with pytest.raises(TransientBackendError, match="fail 4"):
        await call_with_retries(always, RetryPolicy(max_attempts=4, base_delay=1, jitter=0), sleep=sleep)
    assert len(calls) == 4
    assert sleep.waits == [1.0, 2.0, 4.0]


def test_parse_retry_after_forms():
    assert parse_retry_after({"Retry-After": "3"}) == 3.0
    assert parse_retry_after({"retry-after": " 1.5 "}) == 1.5
    assert parse_retry_after({"retry-after-ms": "250", "Retry-After": "9"}) == 0.25
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after({"Retry-After": "-4"}) is None
    assert parse_retry_after({}) is None and parse_retry_after(None) is None
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert parse_retry_after({"Retry-After": date}, now=now) == pytest.approx(30.0)
    past = email.utils.formatdate(now - 30, usegmt=True)
    assert parse_retry_after({"Retry-After": past}, now=now) == 0.0


async def test_failures_that_spend_no_attempt_are_retried_at_once_without_counting(monkeypatch):
    import promptrobust.engine.serving.retry as retry

    outcomes = ["free"] * 5 + ["counted", "free", "free", "ok"]
    calls: list[str] = []

    async def call() -> str:
        kind = outcomes[len(calls)]
        calls.append(kind)
        if kind == "free":
            raise TransientBackendError("connection refused", spends_attempt=False)
        if kind == "counted":
            raise TransientBackendError("HTTP 500")
        return "answer"

    sleep, told = RecordingSleep(), []
    policy = RetryPolicy(max_attempts=2, base_delay=0.5, jitter=0.0)
    out = await call_with_retries(call, policy, sleep=sleep, on_retry=lambda a, e, d: told.append((a, d)))
    assert out == "answer" and len(calls) == 9
    assert sleep.waits == [0.5]  # only the counted failure waited, and only it was an attempt
    assert [d for _, d in told] == [0.0] * 5 + [0.5] + [0.0] * 2
    # a bound remains: past MAX_FREE_RETRIES in a row they count like any other failure
    monkeypatch.setattr(retry, "MAX_FREE_RETRIES", 3)
    calls.clear()
    outcomes[:] = ["free"] * 10

    with pytest.raises(TransientBackendError, match="refused"):
        await call_with_retries(call, policy, sleep=sleep)
    assert len(calls) == 3 + 1 + 3 + 1  # three free, then one counted; again; the second counted is the last
