"""The progress line's ETA: nothing until the work done can tell, then a sane estimate."""

from __future__ import annotations

from promptrobust.cli.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(total: int) -> tuple[Progress, dict[str, float], Clock]:
    counters = {"completed": 0.0, "cache_hits": 0.0, "backend_requests": 0.0}
    clock = Clock()
    return Progress(total, lambda: dict(counters), enabled=False, clock=clock), counters, clock


def test_model_loading_time_never_reads_as_hours_of_work_left() -> None:
    progress, counters, clock = make(10_000)
    clock.now += 23.0  # the model loads: nothing answered yet
    assert progress.line().endswith("ETA --:--")
    counters["completed"] = 20
    clock.now += 1.0
    assert progress.line().endswith("ETA --:--")  # first answers seen: the clock for the rate starts here
    counters["completed"] = 120  # 1% in 2 s: not enough to tell
    clock.now += 2.0
    assert progress.line().endswith("ETA --:--")
    counters["completed"] = 220  # 2.2%: 200 requests in 4 s since answers began -> 50 req/s
    clock.now += 2.0
    line = progress.line()
    assert "50.0 req/s" in line and line.endswith("ETA 03:15")  # 9780 left at 50/s


def test_slow_work_gets_an_eta_after_ten_seconds() -> None:
    progress, counters, clock = make(1_000_000)
    counters["completed"] = 1
    progress.line()
    counters["completed"] = 11
    clock.now += 9.0
    assert progress.line().endswith("ETA --:--")
    counters["completed"] = 21
    clock.now += 1.0
    assert progress.line().endswith("ETA 138:53:09")  # 2 req/s: a long run, said honestly


def test_a_run_that_ends_before_the_second_look_still_reports_a_rate() -> None:
    progress, counters, clock = make(40)
    clock.now += 4.0
    counters["completed"] = 40
    line = progress.line()
    assert "10.0 req/s" in line and line.endswith("ETA 00:00")
