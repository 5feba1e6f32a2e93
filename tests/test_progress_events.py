"""Progress on every long step: engine events -> status (counts, send rate, a stable ETA) -> lines.

The end-to-end tests run `pre run --attack` and a two-job `pre sweep` against the fake
OpenAI server with progress forced to line mode and a short heartbeat
($PRE_PROGRESS_EVERY), and read what a user would see on stderr.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from promptrobust.cli.main import main
from promptrobust.engine import progress
from promptrobust.engine.progress import ProgressState, StreamReporter, format_status
from promptrobust.testing.fake_openai import FakeOpenAIServer
from tests.sweep_helpers import hashed_text_answer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Stats:
    def __init__(self) -> None:
        self.completed = 0
        self.cache_hits = 0
        self.backend_requests = 0


def _state() -> tuple[ProgressState, Stats, Clock]:
    clock = Clock()
    state = ProgressState(clock)
    stats = Stats()
    state.apply(progress.Watch(stats))
    return state, stats, clock


def test_the_eta_appears_with_the_first_answers_and_counts_down() -> None:
    state, stats, clock = _state()
    state.apply(progress.Planned(1000))
    with progress.use(state_reporter(state)):
        with progress.during("loading the model"):  # nothing is sent, nothing is estimated
            clock.now += 40
            assert state.status().eta is None and "ETA estimating" in format_status(state.status())
    etas = []
    for _ in range(20):  # 5 requests/s, steadily
        clock.now += 1
        stats.completed += 5
        stats.backend_requests += 5
        etas.append(state.status().eta)
    assert etas[0] is not None  # no waiting for a stable estimate: the first answers give one
    assert all(e is not None and abs(e - (1000 - 5 * (i + 1)) / 5) <= 1 for i, e in enumerate(etas))
    assert all(later <= earlier for earlier, later in zip(etas, etas[1:]))  # counts down, no jumps up


class state_reporter:
    """Feeds events straight into a ProgressState (the reporter StreamReporter wraps)."""

    def __init__(self, state: ProgressState) -> None:
        self.state = state

    def emit(self, event: progress.Event) -> None:
        self.state.apply(event)


def test_a_batch_backend_gets_a_rate_from_its_first_batch_and_keeps_it_between_batches() -> None:
    """745 answers in 20 minutes, 64 at a time: a window of recent seconds sees none between two
    batches; the rate is measured between the batches' arrivals instead."""
    state, stats, clock = _state()
    state.apply(progress.Planned(1000))
    seen = []
    for second in range(1, 20 * 60 + 1):
        clock.now += 1
        if second % 100 == 0:  # a batch of 64 every 100 s
            stats.completed += 64
            stats.backend_requests += 64
        seen.append((second, state.status()))
    first = next(second for second, status in seen if status.sent)
    assert first == 100
    after = [status for second, status in seen if second >= first]
    assert all(s.rate is not None and s.eta is not None for s in after)  # never "estimating" again
    assert all(s.rate == pytest.approx(0.64, rel=0.02) for s in after)
    for second, status in seen[first:]:
        batches_left = (1000 - status.done) / 64
        true_left = batches_left * 100 - (second % 100)
        assert abs(status.eta - true_left) <= 0.05 * true_left + 2  # counts down between batches too


def test_a_stalled_backend_slows_the_rate_down() -> None:
    state, stats, clock = _state()
    state.apply(progress.Planned(1000))
    for _ in range(5):  # a batch of 10 every 10 s ...
        clock.now += 10
        stats.completed += 10
        stats.backend_requests += 10
        steady = state.status().rate
    assert steady == pytest.approx(1.0)
    clock.now += 10  # ... then nothing for 60 s
    assert state.status().rate == pytest.approx(1.0)  # within the usual gap: no news yet
    clock.now += 50
    assert state.status().rate == pytest.approx(50 / (50 + 60 - 10))  # the wait beyond the usual gap counts


def test_cache_hits_are_counted_apart_and_not_in_the_send_rate() -> None:
    state, stats, clock = _state()
    state.apply(progress.Planned(100))
    clock.now += 1
    stats.completed = stats.cache_hits = 60  # answered from the cache at once
    status = state.status()
    assert (status.done, status.cache_hits, status.sent, status.rate) == (60, 60, 0, None)
    line = format_status(status)
    assert "requests 60/100 (cache hits 60, sent 0)" in line and "sent - req/s" in line
    for _ in range(2):
        clock.now += 2
        stats.completed += 4
        stats.backend_requests += 4
        state.status()
    assert state.status().rate == pytest.approx(8 / 5)  # 8 sent in the 5 s since work appeared; hits are not sends


def test_hits_the_cache_is_expected_to_answer_take_no_time() -> None:
    """An attack re-scores its clean and its adversarial prompt: both from the cache, at once."""
    state, stats, clock = _state()
    state.apply(progress.Planned(300, cached=100))
    for _ in range(10):
        clock.now += 1
        stats.completed += 10
        stats.backend_requests += 10
    status = state.status()
    assert status.eta == pytest.approx((300 - 100 - 100) / 10, abs=1)  # the 100 expected hits are not waited for
    stats.completed += 50
    stats.cache_hits += 50  # half of them arrived
    assert state.status().eta == pytest.approx((300 - 150 - 50) / 10, abs=1)


def test_a_word_search_projects_the_requests_of_the_words_left() -> None:
    state, stats, clock = _state()
    state.apply(progress.Planned(200))
    state.apply(progress.SearchStep(position=0, positions=10, candidates=0, clean_score=0.8, best_score=0.8, requests=0))
    state.apply(progress.SearchStep(position=2, positions=10, candidates=8, clean_score=0.8, best_score=0.6, requests=200))
    status = state.status()
    assert status.total == 200 + 8 * 4 * 25  # 4 candidates a word, 25 samples a candidate, 8 words left
    line = format_status(status)
    assert "word 2 of 10, 8 candidates tried, best PDR so far 0.250" in line
    state.apply(progress.PhaseDone())  # the attack returned: nothing more is projected
    assert state.status().total == 200


def test_the_budget_bounds_what_a_search_projects() -> None:
    """The issue's run: a budget of 10 on 50 samples, 8 words ranked (8 candidates), then 4350
    requests projected for the words left although the budget allowed 2 more candidates."""
    state, stats, clock = _state()
    state.apply(progress.Planned(500 + 12 * 50, bound=True))  # ranking, then the attack's bound (budget + 2) x 50
    state.apply(progress.SearchStep(position=0, positions=8, candidates=8, clean_score=0.7, best_score=0.7,
                                    requests=450, budget=10, reserved=2 * 50))
    assert state.status().total == 500 + 12 * 50
    state.apply(progress.SearchStep(position=1, positions=8, candidates=10, clean_score=0.7, best_score=0.6,
                                    requests=550, budget=10, reserved=0))
    assert state.status().total == 500 + 12 * 50  # the budget is spent: 7 words left project nothing


def test_a_short_prompt_ends_the_search_before_its_reservation_does() -> None:
    state, stats, clock = _state()
    state.apply(progress.Planned(102 * 10, bound=True))  # budget 100 on 10 samples
    state.apply(progress.SearchStep(position=0, positions=3, candidates=3, clean_score=0.9, best_score=0.9,
                                    requests=40, budget=100, reserved=1020 - 40 - 10))
    state.apply(progress.SearchStep(position=1, positions=3, candidates=7, clean_score=0.9, best_score=0.8,
                                    requests=80, budget=100, reserved=1020 - 80 - 10))
    # asked 80; two words left at 4 candidates of 10 samples; the adversarial prompt's re-scoring (10)
    assert state.status().total == 80 + 2 * 4 * 10 + 10


@pytest.mark.parametrize("budget", [None, 10])
def test_a_set_search_counts_its_one_call_once(budget: int | None) -> None:
    """StressTest's 3 candidates on 100 samples: with a budget of 10 they replace its bound of 10;
    without one, its scorer's own plan is all (no projection on top of it)."""
    state, stats, clock = _state()
    with progress.use(state_reporter(state)):
        progress.planned(1000)  # the ranking
        bound = 0 if budget is None else (budget + 2) * 100
        with progress.reserve(bound, kind="attack", after_search=100 if budget else 0):
            progress.planned(100)  # the clean prompt, re-scored
            progress.search_step(position=None, positions=None, candidates=0, clean_score=0.8, best_score=0.8,
                                 requests=100, scoring=3, budget=budget)
            assert state.status().total == 1000 + 100 + (300 + 100 if budget else 0)  # unlimited: not known yet
            progress.planned(300)  # the call
            assert state.status().total == 1000 + 100 + 300 + (100 if budget else 0)
            progress.search_step(position=None, positions=None, candidates=3, clean_score=0.8, best_score=0.6,
                                 requests=400, budget=budget)
            progress.planned(100)  # the adversarial prompt, re-scored
            assert state.status().total == 1000 + 100 + 300 + 100
        progress.phase_done()
    assert state.status().total == 1000 + 100 + 300 + 100


def test_a_steps_own_progress_has_an_eta_from_its_own_measured_speed() -> None:
    state, stats, clock = _state()
    state.apply(progress.Phase("converting gemma3-270m (253 MB GGUF) once into /store"))
    state.apply(progress.Work("dequantising the tensors", 0, 250, "MB"))
    assert format_status(state.status()) == (  # numbers first: the step's own progress and ETA, then the phase
        "dequantising the tensors 0/250 MB, ETA estimating | 00:00 elapsed"
        " | converting gemma3-270m (253 MB GGUF) once into /store")
    clock.now += 5
    state.apply(progress.Work("dequantising the tensors", 50, 250, "MB"))
    status = state.status()
    assert status.work is not None and status.work.eta == pytest.approx(20.0)  # 10 MB/s measured here
    assert format_status(status).startswith("dequantising the tensors 50/250 MB, ETA 00:20 | 00:05 elapsed")
    clock.now += 2  # no move yet (a GGUF read takes tens of seconds): the ETA counts down meanwhile
    assert state.status().work.eta == pytest.approx(18.0)  # type: ignore[union-attr]
    state.apply(progress.Work("writing the float32 weights", 0, 1000, "MB"))  # the next step measures itself
    assert state.status().work.eta is None  # type: ignore[union-attr]
    state.apply(progress.Phase("ranking 10 prompts on 100 samples"))  # a new phase: the step's progress goes
    assert state.status().work is None


class Collect:
    def __init__(self) -> None:
        self.seen: list[progress.Event] = []

    def emit(self, event: progress.Event) -> None:
        self.seen.append(event)

    def planned(self) -> list[int]:
        return [e.requests for e in self.seen if isinstance(e, progress.Planned)]


def test_reserve_announces_a_phase_once_and_returns_what_was_not_used() -> None:
    collect = Collect()
    with progress.use(collect):
        with progress.reserve(30):
            progress.planned(10)  # absorbed: already announced
            progress.planned(10)
        progress.planned(5)
    assert collect.planned() == [30, -10, 5]


def test_a_pool_is_claimed_only_by_reservations_of_its_kind() -> None:
    """A sweep announces every cell's ranking up front; a job's attack planning meanwhile is its own."""
    collect = Collect()
    with progress.use(collect):
        with progress.reserve_pool("ranking", 100):
            with progress.scope("job a"):
                progress.planned(40)  # an attack: not a ranking, announced on its own
                with progress.reserve(60, kind="ranking"):  # a cell's ranking: claims the pool
                    progress.planned(60)
    assert [(e.requests, e.scope) for e in collect.seen if isinstance(e, progress.Planned)] == [
        (100, ""), (40, "job a"), (-40, "")]  # the pool's unclaimed 40 go back at its end


def test_early_stopping_takes_a_candidates_unasked_samples_out_of_the_total_at_once() -> None:
    import asyncio

    from promptrobust.engine.measuring.evaluator import Evaluator
    from promptrobust.engine.serving.scheduler import Scheduler
    from promptrobust.engine.serving.scheduler_settings import SchedulerSettings
    from promptrobust.testing.backends import CountingBackend, TableTask, table_answer

    n = 24
    prompts = ["good", "bad", "worse"]
    table = {(p, str(j)): (1.0 if p == "good" else 0.0 if p == "bad" else 1.0) for p in prompts for j in range(n)}

    async def score() -> tuple[Evaluator, Collect]:
        collect = Collect()
        task = TableTask(n=n, table=table)
        backend = CountingBackend(batching=True, max_batch_size=8, answer=table_answer(table))
        async with Scheduler(backend, settings=SchedulerSettings(max_wait_ms=0)) as sched:
            ev = Evaluator(sched, task, task.load(), mode="generate", chunk_size=4, early_stopping=True)
            with progress.use(collect):
                await ev(prompts, to_beat=0.5)
        return ev, collect

    ev, collect = asyncio.run(score())
    plans = collect.planned()
    assert plans[0] == 3 * n  # the most the call can ask
    assert any(x < 0 for x in plans[1:-1])  # taken back while the call runs, as candidates stop
    assert sum(plans) == ev.requests.requests < 3 * n  # and the total ends at what was asked


def test_a_sweep_predicts_waiting_jobs_from_finished_ones_and_ends_with_its_last_job() -> None:
    state, stats, clock = _state()
    shapes = [("stresstest", "m", "d", "0")] * 3 + [("checklist", "m", "d", "0")]
    with progress.use(state_reporter(state)):
        progress.jobs(0, 4, shapes=shapes)
        assert state.status().total == 0  # nothing known yet
        with progress.job("job 1", shapes[0]):
            with progress.reserve(600, kind="attack", cached=100):  # a budget's bound
                progress.planned(100)
                assert state.status().total == 4 * 600  # the others are expected to ask as much
                progress.planned(150)
                stats.completed += 250
                stats.backend_requests += 250
        assert state.status().total == 4 * 250  # it asked 250: that predicts the others
        with progress.job("job 4", shapes[3]):
            with progress.reserve(600, kind="attack", cached=100):
                assert state.status().total == 250 + 600 + 2 * 250  # no CheckList finished: its own bound
        with progress.job("job 2", shapes[1]):
            with progress.reserve(600, kind="attack", cached=100):
                progress.planned(50)
                assert state.status().total == 250 + 0 + 250 + 250  # bounded at 600, predicted 250: 250
        with progress.job("job 3", shapes[2]):
            progress.planned(250)  # no budget: its plan only grows; the prediction is a floor
            assert state.status().total == 250 + 0 + 50 + 250
            stats.completed += 250
            stats.backend_requests += 250
    assert state.status().total == 250 + 0 + 50 + 250  # every job finished: exactly what each asked


def test_fallbacks_are_said_once_per_reporter() -> None:
    out = io.StringIO()
    reporter = StreamReporter(out, every=0)
    with progress.reporting(reporter):
        from promptrobust.attacks import fallbacks

        fallbacks.word_vectors("glove-6b-50d (fallback; recipe: paragramcf)", "not downloadable offline")
        fallbacks.word_vectors("glove-6b-50d (fallback; recipe: paragramcf)", "not downloadable offline")
    lines = [line for line in out.getvalue().splitlines() if "fallback" in line]
    assert len(lines) == 1
    assert "instead of TextAttack's counter-fitted paragramcf" in lines[0] and "--attack-option embedding=" in lines[0]


def test_the_heartbeat_writes_a_status_line_without_any_event(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    out = io.StringIO()
    with progress.reporting(StreamReporter(out, every=0.01)):
        progress.phase("converting gemma3-270m")
        deadline = time.monotonic() + 30
        while out.getvalue().count("\n") < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert "pre: converting gemma3-270m\n" in out.getvalue()
    assert re.search(r"pre: \d\d:\d\d elapsed \| converting gemma3-270m\n", out.getvalue())


# -- end to end: what the user sees on stderr ------------------------------------------------

LINE_MODE = {"PRE_PROGRESS": "lines", "PRE_PROGRESS_EVERY": "0.02", "PRE_PROGRESS_ETA_AFTER": "0.2"}


@pytest.fixture()
def line_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in LINE_MODE.items():
        monkeypatch.setenv(key, value)


@pytest.fixture()
def server():
    with FakeOpenAIServer(answer=hashed_text_answer, latency=0.004) as srv:
        yield srv


ETA = re.compile(r"ETA (\d\d:\d\d)")
COUNTS = re.compile(r"requests (\d+)/(\d+) \(cache hits (\d+), sent (\d+)\) \| sent (?:[\d.]+|-) req/s")


def test_pre_run_attack_shows_phases_search_position_counts_and_an_eta(tmp_path: Path, server, line_mode, capsys) -> None:  # noqa: ANN001
    args = [
        "run", "--model", "openai:fake-model", "--model-args", f"base_url={server.url}", "--mode", "choices",
        "--limit", "8", "--concurrency", "1", "--top-k", "1", "--attack", "stresstest,deepwordbug",
        "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(tmp_path / "runs"),
    ]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "pre: ranking 10 prompts on 8 samples\n" in err
    assert re.search(r"pre: attack stresstest on prompt sst2-task-\d\d \(clean [\d.]+\)\n", err)
    assert re.search(r"pre: attack deepwordbug on prompt sst2-task-\d\d", err)
    assert re.search(r"elapsed \| attack stresstest on prompt \S+ \(clean [\d.]+\) \| \d+ candidates tried", err)
    assert re.search(r"word \d+ of \d+, \d+ candidates tried(, best PDR so far -?[\d.]+)?", err)  # the search's position
    counts = [tuple(map(int, m)) for m in COUNTS.findall(err)]
    assert counts and all(done <= total and hits + sent <= done for done, total, hits, sent in counts)
    assert ETA.search(err), "no ETA was ever shown"
    assert "ETA estimating" in err  # before it was stable
    # A rerun is answered by the cache: the hits are counted apart, nothing is sent.
    assert main(args) == 0
    err = capsys.readouterr().err
    last = [tuple(map(int, m)) for m in COUNTS.findall(err)][-1]
    assert last[2] > 0 and last[3] == 0


def test_a_two_job_sweep_shows_jobs_done_phases_per_job_and_counts(tmp_path: Path, server, line_mode, capsys) -> None:  # noqa: ANN001
    config = tmp_path / "two.toml"
    config.write_text(
        f'[sweep]\nname = "two"\noutput_dir = "{tmp_path / "sweeps"}"\nlimit = 6\ntop_k = 1\nbudget = 10\nmode = "choices"\n'
        f'cache = "{tmp_path / "c.sqlite"}"\nconcurrency = 1\n\n'
        '[grid]\nmodels = ["openai:fake-model"]\ndatasets = ["rotten_tomatoes"]\nattacks = ["checklist", "stresstest"]\n\n'
        f'[models."openai:fake-model"]\nmodel_args = "base_url={server.url}"\n'
    )
    assert main(["sweep", str(config)]) == 0
    err = capsys.readouterr().err
    assert "pre: sweep jobs 0/2 done" in err and "pre: sweep jobs 2/2 done" in err
    assert "openai:fake-model / rotten_tomatoes / auto-shot task / checklist: ranking 10 prompts on 6 samples" in err
    assert re.search(r"/ stresstest: attack stresstest on prompt sst2-task-\d\d", err)
    assert re.search(r"jobs [012]/2 \| ", err)  # the status line carries the jobs count
    assert COUNTS.search(err) and ETA.search(err)


def test_the_python_api_reports_on_stderr_by_default_even_inside_a_running_loop(capsys, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """A notebook cell has a running loop: the call runs on a worker thread and still reports."""
    import asyncio

    import promptrobust as pr
    from promptrobust.testing.backends import CountingBackend
    from tests.sweep_helpers import hashed_answer

    monkeypatch.setenv("PRE_PROGRESS_EVERY", "0.01")

    async def in_a_notebook() -> object:
        return pr.evaluate(model="smollm2-135m-instruct", dataset="rotten_tomatoes", limit=4, mode="choices",
                           use_cache=False, backend_factory=lambda spec: CountingBackend(answer=hashed_answer))

    asyncio.run(in_a_notebook())
    err = capsys.readouterr().err
    assert "pre: loading fake-model (first request not in the cache)" in err
    assert "pre: scoring 10 prompts on 4 samples" in err
    assert COUNTS.search(err)  # at least the last status line: requests done of total, cache hits apart
    pr.evaluate(model="smollm2-135m-instruct", dataset="rotten_tomatoes", limit=4, mode="choices", use_cache=False,
                backend_factory=lambda spec: CountingBackend(answer=hashed_answer), progress=False)
    assert capsys.readouterr().err == ""


def test_an_offline_fallback_is_said_once_per_run_with_how_to_get_the_real_resource(tmp_path: Path, server, capsys, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    from promptrobust.attacks import embeddings

    monkeypatch.setenv("TA_CACHE_DIR", str(tmp_path / "textattack"))  # no paragramcf here
    monkeypatch.setattr(embeddings, "_DOWNLOAD_FAILED", ["cannot download paragramcf (offline)"])
    args = [
        "run", "--model", "openai:fake-model", "--model-args", f"base_url={server.url}", "--mode", "choices",
        "--limit", "2", "--top-k", "2", "--budget", "6", "--attack", "textfooler,textbugger", "--prompt-type", "task",
        "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(tmp_path / "runs"), "--no-progress",
    ]
    main(args)
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if line.startswith("pre: fallback: word vectors")]
    assert len(said) == 1, err  # two attacks x two prompts, said once
    assert "glove-6b-50d" in said[0] and "--attack-option embedding=" in said[0]
    assert not (tmp_path / "textattack").exists()


def test_loading_the_model_inside_a_phase_gives_the_phase_back_afterwards() -> None:
    state = ProgressState()
    state.apply(progress.Phase("ranking 10 prompts on 100 samples"))
    assert state.apply(progress.Phase("loading gemma3-270m", within=True))  # said as a line of its own
    assert state.status().phase == "loading gemma3-270m"
    assert not state.apply(progress.PhaseEnd())  # no line: the phase just resumes
    assert state.status().phase == "ranking 10 prompts on 100 samples"


def test_no_progress_keeps_only_the_heartbeat_and_off_silences_it(tmp_path: Path, server, capsys, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    from promptrobust.cli.progress import progress_mode

    monkeypatch.delenv("PRE_PROGRESS", raising=False)
    assert progress_mode(no_progress=True) == "heartbeat"
    assert progress_mode(no_progress=False) == "lines"  # pytest's stderr is no terminal
    monkeypatch.setenv("PRE_PROGRESS", "lines")
    assert progress_mode(no_progress=False) == "forced-lines"
    monkeypatch.setenv("PRE_PROGRESS", "off")
    assert progress_mode(no_progress=False) == "off"
    monkeypatch.delenv("PRE_PROGRESS")
    monkeypatch.setenv("PRE_PROGRESS_EVERY", "0.01")
    server.latency = 0.01
    args = ["run", "--model", "openai:fake-model", "--model-args", f"base_url={server.url}", "--mode", "choices",
            "--limit", "6", "--concurrency", "1", "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(tmp_path / "runs"),
            "--no-progress"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert not re.search(r"^pre: scoring prompt [^|]*$", err, re.M)  # no phase lines of their own
    assert COUNTS.search(err)  # but the heartbeat's status lines
    monkeypatch.setenv("PRE_PROGRESS", "off")
    assert main([*args[:-2], str(tmp_path / "runs2"), "--no-progress"]) == 0
    assert not COUNTS.search(capsys.readouterr().err)


def test_a_sweep_announces_every_cell_ranking_up_front() -> None:
    from promptrobust.engine.runs.sweep.estimate import clean_requests
    from tests.sweep_helpers import small_config

    cfg = small_config(Path("unused"))
    jobs = cfg.jobs()  # 4 models x 2 prompt types x 2 attacks: 8 cells of 10 prompts on 6 samples
    assert clean_requests(cfg, jobs) == 8 * 10 * 6
    assert clean_requests(cfg, jobs[:2]) == 10 * 6  # two attacks of one cell rank it once


def test_third_party_progress_bars_are_off_unless_the_user_turned_them_on() -> None:
    import os
    import subprocess
    import sys

    code = "import promptrobust; from transformers.utils import logging as l; print(l.is_progress_bar_enabled())"
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "False", out.stderr
    env["HF_HUB_DISABLE_PROGRESS_BARS"] = "0"  # a value the user exported wins
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "True", out.stderr


def test_on_a_terminal_the_status_line_is_redrawn_and_never_mixed_with_other_output(tmp_path: Path, server) -> None:  # noqa: ANN001
    import os
    import pty
    import subprocess
    import sys

    master, slave = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRE_PROGRESS")}
    cmd = [sys.executable, "-m", "promptrobust.cli.main", "run", "--model", "openai:fake-model", "--model-args",
           f"base_url={server.url}", "--limit", "4", "--mode", "choices", "--attack", "stresstest", "--top-k", "1",
           "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(tmp_path / "runs")]
    proc = subprocess.Popen(cmd, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    assert proc.wait(timeout=120) == 0, out.decode(errors="replace")[-2000:]
    text = out.decode(errors="replace")
    assert "\r\x1b[2K" in text  # redrawn in place
    shown = [part.split("\r\x1b[2K")[-1] for part in text.replace("\r\n", "\n").split("\n")]
    assert "pre: ranking 10 prompts on 4 samples" in shown
    assert any(line.startswith("pre: results in ") for line in shown)  # printed on a line of its own
    assert not any("req/s" in line and ("pre: results in" in line or "prompt  " in line) for line in shown)
    assert re.search(r"\x1b\[2Krequests \d+/\d+[^\r\n]* \| ETA", text)  # the status line was drawn (fitted to 80 columns)
    from promptrobust.testing import render

    assert render(out)[-1].startswith("pre: results in ")  # and erased at the end: the results path stays last


@pytest.mark.parametrize("attack, candidates", [("stresstest", 3), ("checklist", 50)])
def test_a_set_searchs_requests_are_in_the_total_from_the_start_of_the_run(attack: str, candidates: int) -> None:
    """Issue 42: the ranking counted down to 00:00, then the total jumped and the ETA restarted for
    the attack, although StressTest's 3 candidates x samples were known from the start. The run's
    total now holds them from the first phase on: it never grows, and ends at what was asked."""
    import promptrobust as pr
    from promptrobust import AttackSettings
    from promptrobust.testing.backends import CountingBackend
    from tests.sweep_helpers import hashed_answer

    state = ProgressState()
    seen: list[tuple[str, int]] = []

    class Record:
        def emit(self, event: progress.Event) -> None:
            state.apply(event)
            seen.append((state.phase, state.total.total()))

    samples = 8
    pr.attack_top_k(model="smollm2-135m-instruct", dataset="rotten_tomatoes", limit=samples, mode="choices",
                    settings=AttackSettings(attacks=(attack,), top_k=1), use_cache=False, progress=Record(),
                    backend_factory=lambda spec: CountingBackend(answer=hashed_answer))
    ranked = [total for phase, total in seen if phase.startswith("ranking")]
    attacked = [total for phase, total in seen if phase.startswith("attack")]
    # the ranking, then the attack: its candidates, the clean prompt re-scored, the adversarial prompt re-scored
    whole = 10 * samples + (candidates + 2) * samples
    assert ranked[-1] == attacked[0] == whole  # known while ranking: no jump when the attack starts
    assert max(total for _, total in seen) == whole  # never more than said at the start
    done = state.status()
    assert done.total == done.done  # early stopping took out what it did not ask


def test_a_phase_counts_one_prompt_in_the_singular(tmp_path: Path, server, line_mode, capsys) -> None:  # noqa: ANN001
    """Issue 42: `pre: ranking 1 prompts`."""
    assert main(["run", "--model", "openai:fake-model", "--model-args", f"base_url={server.url}", "--limit", "1",
                 "--mode", "choices", "--prompt", "sst2-task-01", "--attack", "stresstest", "--top-k", "1",
                 "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(tmp_path / "runs")]) == 0
    err = capsys.readouterr().err
    assert "pre: ranking 1 prompt on 1 sample\n" in err, err


def _status(**fields: object) -> progress.Status:
    base: dict[str, object] = dict(phase="attack stresstest on prompt sst2-task-02 (clean 0.8100)", step=None, jobs=None,
                                   done=1234, total=1500, cache_hits=100, sent=1134, rate=12.3, eta=83.0, elapsed=154.0)
    base.update(fields)
    return progress.Status(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("width", [40, 60, 79, 100, 119, 200])
def test_a_status_line_fits_the_terminal_with_its_numbers_first(width: int) -> None:
    """Issue 42 item 3: on a 120-column terminal the line ended in `| attack stresstest on prom`;
    during a conversion the phase and the store's path came first and the ETA never showed."""
    step = progress.SearchStep(2, 10, 8, 0.8, 0.6)
    line = format_status(_status(step=step), width)
    assert progress.cell_width(line) <= width
    assert line.startswith("requests 1234/1500")
    if width >= 60:  # what gives way last
        assert "ETA 01:23 | 02:34 elapsed | attack " in line
    if width >= 79:
        assert "ETA 01:23 | 02:34 elapsed | attack stresstest on prompt" in line
    if width >= 119:  # the counts' breakdown gives way before the phase's name does
        assert "attack stresstest on prompt sst2-task-02" in line
    if width >= 200:
        assert "(cache hits 100, sent 1134) | sent 12.3 req/s" in line and "| word 2 of 10, 8 candidates" in line
    if line != format_status(_status(step=step)):
        assert line.endswith("…") or "word 2 of 10" not in line  # cut where it is cut, with an ellipsis
    converting = _status(done=0, cache_hits=0, sent=0, rate=None, eta=None, phase="converting gemma3-270m (253 MB GGUF) once "
                         "into /home/someone/.cache/promptrobust/models",
                         work=progress.WorkStatus("converted", 23.0, 100.0, "%", 53.0, "reading the GGUF, 2 of 3"))
    shown = format_status(converting, width)
    assert progress.cell_width(shown) <= width
    assert shown.startswith("converted 23%")
    if width >= 60:
        assert "ETA 00:53 | 02:34 elapsed" in shown


def test_the_last_line_of_a_log_is_the_results_path(tmp_path: Path, server, line_mode, capsys) -> None:  # noqa: ANN001
    """Issue 42 item 4: with `2> err.log` the status line `pre: requests 1500/1500 ...` came after
    `pre: results in ...`; the run's last counts now come before its results."""
    assert main(["run", "--model", "openai:fake-model", "--model-args", f"base_url={server.url}", "--limit", "4",
                 "--mode", "choices", "--attack", "stresstest", "--top-k", "1",
                 "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(tmp_path / "runs")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("pre: results in "), err[-3:]
    assert not [line for line in err[err.index(err[-1]):] if "req/s" in line]
