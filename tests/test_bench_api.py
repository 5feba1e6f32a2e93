"""`pre bench api`: our scheduler versus a plain client under a server's rate limit."""

from __future__ import annotations

import json
from collections import Counter

import httpx
import pytest


from bench.api_bench import ApiBenchConfig, max_in_window, summarise
from bench.api_bench import main as api_bench
from promptrobust.testing.fake_openai import FakeOpenAIServer


def test_tiny_run_produces_table_and_ours_stays_within_the_limit(tmp_path, capsys):
    # 10 requests per 1 s window (600 rpm); the plain client's 16 in flight exceed a window at once.
    rc = api_bench(["--rpm", "600", "--window-s", "1", "--requests", "40", "--concurrency", "16",
               "--latency", "0.01", "--out", str(tmp_path)])
    assert rc == 0
    out = capsys.readouterr().out
    assert "| client | requests | succeeded | lost |" in out
    assert "| scheduler (ours) | 40 | 40 | 0 |" in out

    data = json.loads((tmp_path / "api.json").read_text())
    assert (tmp_path / "api.md").read_text().startswith("# API mode under a rate limit")
    assert data["settings"]["per_window"] == 10
    ours, plain = data["results"]
    assert ours["client"] == "scheduler (ours)" and plain["client"].startswith("plain semaphore")
    # Ours: nothing lost, and paced. A 1 s window leaves a request sent at a window's edge a few ms to
    # arrive late on a loaded machine and be refused once (then retried): idle, 1 refusal here; 3 and
    # 12 sent in one window were seen on loaded CI machines. So the pacing is judged against the plain
    # client on the same server (about 42 refusals and 26-29 sent in a window here), not by a count of
    # milliseconds; bench/results/api.md measures it at a provider's proportions.
    assert ours["lost"] == 0 and ours["succeeded"] == 40
    assert ours["max_accepted_per_window"] <= 10
    assert ours["rate_limited"] * 3 <= plain["rate_limited"]
    assert ours["max_sent_per_window"] < plain["max_sent_per_window"]
    assert ours["fraction_of_limit"] >= 0.75
    # The plain client has no limiter: its first burst alone is refused in part.
    assert plain["rate_limited"] >= 6
    assert plain["sent"] == plain["requests"] + plain["retries"]
    assert plain["succeeded"] + plain["lost"] == 40


def test_bad_settings_exit_2_with_the_option_to_change(capsys):
    assert api_bench(["--rpm", "100", "--window-s", "7"]) == 2
    assert "--window-s" in capsys.readouterr().err
    assert api_bench(["--requests", "5"]) == 2
    assert "raise --requests" in capsys.readouterr().err
    assert api_bench(["--concurrency", "0"]) == 2
    assert "--concurrency must be at least 1" in capsys.readouterr().err


def test_out_must_be_a_directory(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("x")
    assert api_bench(["--window-s", "1", "--requests", "40", "--out", str(target)]) == 2
    assert "give a directory" in capsys.readouterr().err


def test_max_in_window_counts_half_open_intervals():
    assert max_in_window([], 1.0) == 0
    assert max_in_window([0.0, 0.5, 0.99, 1.0, 1.5], 1.0) == 3  # (0, 1.0] holds 0.5, 0.99, 1.0
    assert max_in_window([0.0, 1.0, 2.0, 3.0], 1.0) == 1


def test_steady_rate_uses_whole_windows_after_the_first():
    cfg = ApiBenchConfig(rpm=600, window_s=1.0, requests=40)
    # A bursty client: 10 accepted at the start of each window, 4 windows.
    bursts = [(w + 0.001 * i, 200) for w in range(4) for i in range(10)]
    r = summarise("bursty", cfg, bursts, requests=40, succeeded=40, lost_reasons=Counter(), t0=0.0,
                  wall_s=3.1, cpu_s=0.0)
    # Windows (1, 3]: the bursts at 1.0xx and 2.0xx, 20 requests in 2 s = exactly the limit.
    assert r.steady_successes == 20 and r.fraction_of_limit == pytest.approx(1.0)
    # A steady client at half the limit, with a 429 in the log.
    half = [(0.2 * i, 200) for i in range(40)] + [(0.05, 429)]
    r = summarise("half", cfg, half, requests=40, succeeded=40, lost_reasons=Counter(), t0=0.0,
                  wall_s=8.0, cpu_s=0.0)
    assert r.fraction_of_limit == pytest.approx(0.5, abs=0.03)
    assert (r.sent, r.rate_limited, r.retries) == (41, 1, 1)


def test_server_logs_every_answer_with_its_status():
    with FakeOpenAIServer(model="m", rpm=2, window=60.0) as srv:
        body = {"model": "m", "prompt": "a good film", "max_tokens": 1}
        codes = [httpx.post(f"{srv.url}/completions", json=body, timeout=10).status_code for _ in range(3)]
        assert codes == [200, 200, 429]
        assert [s for _, s in srv.outcomes] == codes
        assert srv.status_count(429) == 1
        times = [t for t, _ in srv.outcomes]
        assert times == sorted(times)
        srv.reset_counts()
        assert srv.outcomes == []
