"""Racing a search step's candidates (engine/measuring/racing.py): the best candidate is never
dropped when it is clearly best, the stated error rate holds on simulated candidates over many
seeds (near ties, the hardest case), a tolerance bounds how far from the best the kept one can be,
and an attack run with racing reports the exact PDR of the prompt it kept."""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import orjson
import pytest

from promptrobust.engine.measuring.racing import Race, RacingSettings, sample_order


def _run_race(arms: np.ndarray, settings: RacingSettings, seed: int, *, incumbent: bool = False,
              margins: list[float] | None = None, keep: int = 1) -> tuple[list[int], int]:
    """Race ``arms`` (arms x samples of 0/1 scores) as the evaluator does; (arms kept, calls made)."""
    k, n = arms.shape
    order, prefix = sample_order(n, margins, settings, seed)
    race = Race(arms=k, total=n, exact_prefix=prefix, error_rate=settings.error_rate, tolerance=settings.tolerance, keep=keep)
    if incumbent:
        race.observe(0, [arms[0, j] for j in order])
    calls = 0
    while True:
        plan = race.needed(settings.round_size)
        if not plan:
            break
        for i, positions in plan.items():
            race.observe(i, [arms[i, order[p]] for p in positions])
            calls += len(positions)
        race.drop()
    return race.winners(), calls


def _candidates(rng: np.random.Generator, n: int, means: list[float], shared: float) -> np.ndarray:
    """Candidates that answer alike on most samples (as a search step's do): each agrees with a common
    base answer on a ``shared`` share of the samples and draws its own answer elsewhere."""
    base = (rng.random(n) < 0.8).astype(float)
    rows = []
    for m in means:
        own = (rng.random(n) < m).astype(float)
        same = rng.random(n) < shared
        rows.append(np.where(same, base, own))
    return np.array(rows)


def test_a_clearly_best_candidate_is_kept_and_clearly_worse_ones_leave_early() -> None:
    rng = np.random.default_rng(0)
    settings = RacingSettings(error_rate=0.05)
    for seed in range(40):
        n = 200
        arms = np.ones((6, n))
        arms[2, rng.choice(n, size=60, replace=False)] = 0.0  # the attacker's best: 30 points lower
        for i in (0, 1, 3, 4, 5):  # the others lower the metric a little, on a few samples
            arms[i, rng.choice(n, size=int(rng.integers(0, 8)), replace=False)] = 0.0
        kept, calls = _run_race(arms, settings, seed)
        assert kept == [2]
        assert calls < arms.size * 0.6  # the losers left well before the end


def test_the_prompt_to_beat_wins_when_no_candidate_beats_it() -> None:
    """A step whose candidates all do worse than the current prompt changes nothing."""
    rng = np.random.default_rng(1)
    n = 200
    for seed in range(20):
        incumbent = (rng.random(n) < 0.5).astype(float)
        arms = [incumbent]
        for _ in range(5):
            worse = incumbent.copy()
            worse[rng.choice(np.flatnonzero(worse == 0), size=40, replace=False)] = 1.0
            arms.append(worse)
        kept, _ = _run_race(np.array(arms), RacingSettings(error_rate=0.05), seed, incumbent=True)
        assert kept == [0]


@pytest.mark.parametrize("error_rate", [0.05, 0.2])
def test_the_error_rate_holds_on_near_ties(error_rate: float) -> None:
    """Many seeded steps whose best candidate is only slightly better than the rest (the case where
    a test is most likely to err): the share of steps that keep a candidate that is not a best one
    stays within the stated rate (a binomial margin of 3 standard deviations for the finite count)."""
    rng = np.random.default_rng(2)
    settings = RacingSettings(error_rate=error_rate)
    trials, wrong = 300, 0
    for seed in range(trials):
        k, n = int(rng.integers(3, 9)), 200
        gap = rng.uniform(0.01, 0.06)
        means = [0.7] * k
        means[int(rng.integers(k))] = 0.7 - gap
        arms = _candidates(rng, n, means, shared=0.7)
        kept, _ = _run_race(arms, settings, seed)
        truth = arms.mean(axis=1)
        wrong += truth[kept[0]] > truth.min() + 1e-12
    margin = 3 * math.sqrt(error_rate * (1 - error_rate) / trials)
    assert wrong / trials <= error_rate + margin


@pytest.mark.parametrize("error_rate", [0.05, 0.2])
def test_the_error_rate_holds_with_the_least_sure_quarter_first(error_rate: float) -> None:
    """The default race scores the least sure quarter of the samples first (exact bound only there),
    then the rest in random order (the betting tests). Near ties where the candidates differ mostly on
    the least sure samples (as in label scoring): the error rate still holds."""
    rng = np.random.default_rng(4)
    settings = RacingSettings(error_rate=error_rate)
    assert settings.informative_fraction == 0.25
    trials, wrong = 300, 0
    for seed in range(trials):
        k, n = int(rng.integers(3, 9)), 200
        unsure = rng.random(n) < 0.3  # where answers change between candidates
        margins = np.where(unsure, rng.uniform(0.0, 1.0, n), rng.uniform(0.5, 5.0, n))
        base = (rng.random(n) < 0.8).astype(float)
        gap = rng.uniform(0.01, 0.06)
        means = [0.7] * k
        means[int(rng.integers(k))] = 0.7 - gap
        arms = np.array([np.where(unsure, (rng.random(n) < m).astype(float), base) for m in means])
        kept, _ = _run_race(arms, settings, seed, margins=list(margins))
        truth = arms.mean(axis=1)
        wrong += truth[kept[0]] > truth.min() + 1e-12
    assert wrong / trials <= error_rate + 3 * math.sqrt(error_rate * (1 - error_rate) / trials)


def test_a_tolerance_bounds_how_far_from_the_best_the_kept_candidate_is() -> None:
    rng = np.random.default_rng(3)
    settings = RacingSettings(error_rate=0.1, tolerance=0.03)
    trials, wrong = 200, 0
    for seed in range(trials):
        k, n = int(rng.integers(3, 7)), 400
        arms = _candidates(rng, n, [0.7 - rng.uniform(0, 0.05) for _ in range(k)], shared=0.8)
        kept, _ = _run_race(arms, settings, seed)
        truth = arms.mean(axis=1)
        wrong += truth[kept[0]] > truth.min() + settings.tolerance + 1e-12
    assert wrong / trials <= 0.1 + 3 * math.sqrt(0.1 * 0.9 / trials)


def test_identical_candidates_run_to_the_end_and_the_first_is_kept_as_exhaustive_search_keeps_it() -> None:
    arms = np.tile((np.arange(100) % 3 == 0).astype(float), (4, 1))
    kept, calls = _run_race(arms, RacingSettings(), 0)
    assert kept == [0] and calls == arms.size


def test_the_k_best_are_kept_when_racing_for_several() -> None:
    rng = np.random.default_rng(4)
    for seed in range(20):
        n = 200
        means = [0.3, 0.32, 0.5, 0.55, 0.6, 0.9, 0.85]
        arms = (rng.random((len(means), n)) < np.array(means)[:, None]).astype(float)
        kept, _ = _run_race(arms, RacingSettings(), seed, keep=2)
        truth = arms.mean(axis=1)
        assert sorted(kept) == sorted(np.argsort(truth, kind="stable")[:2].tolist())


def test_the_order_puts_the_least_sure_samples_first_and_shuffles_the_rest_by_seed() -> None:
    margins = [5.0, 0.1, 3.0, 0.2, 9.0, 0.05, 7.0, 1.0]
    settings = RacingSettings(informative_fraction=0.25)
    order, prefix = sample_order(8, margins, settings, seed=1)
    assert prefix == 2 and order[:2] == [5, 1]
    assert sorted(order) == list(range(8))
    assert sample_order(8, margins, settings, seed=1) == (order, prefix)
    assert sample_order(8, None, settings, seed=1)[1] == 0  # generation: no margins, no informative part
    random_part = {tuple(sample_order(8, margins, settings, seed=s)[0][2:]) for s in range(20)}
    assert len(random_part) > 10


def test_racing_settings_refuse_impossible_values() -> None:
    for bad in ({"error_rate": 0.0}, {"error_rate": 1.5}, {"tolerance": -0.1}, {"round_size": 0}):
        with pytest.raises(ValueError):
            RacingSettings(**bad)


def test_an_attack_with_racing_reports_the_exact_pdr_of_the_prompt_it_kept(tmp_path: Path) -> None:
    """End to end on the fake OpenAI server: the record says racing and its error rate, its cost
    counts the race, and its PDR is the exact one of the adversarial prompt it kept, scored again
    on every sample by a separate exhaustive evaluation."""
    from promptrobust.cli.main import main
    from promptrobust.engine.measuring.settings import EvaluationSettings
    from promptrobust.engine.runs.api import evaluate
    from promptrobust.tasks.base import Prompt
    from promptrobust.testing.fake_openai import FakeOpenAIServer
    from tests.sweep_helpers import hashed_text_answer

    with FakeOpenAIServer(answer=hashed_text_answer) as srv:
        code = main(["run", "--model", "openai:fake-model", "--model-args", f"base_url={srv.url}", "--limit", "24",
                     "--mode", "choices", "--top-k", "1", "--prompt", "sst2-task-02", "--attack",
                     "deepwordbug,stresstest", "--early-stopping", "racing", "--error-rate", "0.1", "--cache",
                     str(tmp_path / "c.sqlite"), "--output-dir", str(tmp_path / "runs"), "--no-progress"])
        assert code == 0
        (folder,) = (tmp_path / "runs").iterdir()
        records = [orjson.loads(line) for line in (folder / "results.jsonl").read_bytes().splitlines()]
        assert {r["attack"] for r in records} == {"deepwordbug", "stresstest"}
        for r in records:
            assert r["early_stopping"] == "racing" and r["search"] == "racing (error rate 0.1 per step)"
            assert r["cost"]["races"] >= 1
            again = evaluate(EvaluationSettings(limit=24, mode="choices"), model="openai:fake-model",
                             model_args={"base_url": srv.url}, cache=str(tmp_path / "fresh.sqlite"), progress=False,
                             prompts=[Prompt("c", "rotten_tomatoes", "task", r["clean_prompt"]),
                                      Prompt("a", "rotten_tomatoes", "task", r["adversarial_prompt"])])
            clean, adversarial = (c.score for c in again.clean)
            assert r["clean_score"] == pytest.approx(clean) and r["adversarial_score"] == pytest.approx(adversarial)
            assert r["pdr"] == pytest.approx(1 - adversarial / clean)
            assert r["adversarial_sample_scores"] == list(again.clean[1].sample_scores)


def test_sample_orders_differ_between_races_of_one_attack() -> None:
    """Each race of an attack draws its own random order (seed + race number), so one unlucky
    order does not decide every step."""
    settings = RacingSettings()
    orders = {tuple(sample_order(50, None, settings, seed=7 + k)[0]) for k in range(5)}
    assert len(orders) == 5
    assert random.Random(7).random() == random.Random(7).random()  # seeded: runs repeat


def test_separation_says_how_far_apart_a_steps_prompts_are() -> None:
    """bench/racing.py's why-table: neighbours in a step's order, their gap, exact ties and the
    samples on which they answer differently, per kind of step."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench.racing import separation
    from bench.racing_records import AttackRecordFile, Call

    scores = {
        "clean": [1.0] * 10,
        "a": [1.0] * 8 + [0.0, 0.0],  # total 8
        "b": [0.0, 0.0] + [1.0] * 8,  # total 8: tied with a, different on 4 samples
        "c": [1.0] * 9 + [0.0],  # total 9
    }
    rec = AttackRecordFile(attack="x", search="brute", model="m", dataset="d", prompt_id="p", clean_prompt="clean",
                           samples=10, seed=0, mode="choices", source={},
                           calls=[Call(("clean",), None), Call(("a", "b", "c"), float("inf"))], scores=scores)
    (row,) = separation([rec])
    # kind, steps, prompts a step, median gap (0 and 1), share tied (1 of 2), median samples differing (4 and 3), best two's gap
    assert row == ["brute", "1", "3", "0.5", "0.50", "3.5", "0"]


def test_a_path_finished_live_is_compared_with_the_whole_exhaustive_record() -> None:
    """bench/racing.py's totals: a racing path that left its record at step 1 and was finished live
    counts the live calls against the calls of the *whole* exhaustive record (a replay's own
    exhaustive count stops where it left), and its live PDR is the one compared."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench.racing import AttackResult, summarize
    from bench.racing_records import AttackRecordFile
    from bench.racing_replay import Replay, ScoringWay, StepReplay

    rec = AttackRecordFile(attack="x", search="greedy", model="m", dataset="d", prompt_id="p", clean_prompt="clean",
                           samples=10, seed=0, mode="choices", source={"pdr": 0.5, "pdr_ci95": [0.3, 0.7]})
    exhaustive, raced = ScoringWay("exhaustive", "exhaustive"), ScoringWay("r", "racing", RacingSettings())
    whole = Replay(rec, exhaustive, [StepReplay("ranking", 3, 30, 30, True), StepReplay("step", 5, 50, 50, True),
                                     StepReplay("step", 5, 50, 50, True)], chosen="adv")
    left = Replay(rec, raced, [StepReplay("ranking", 3, 30, 30, True), StepReplay("step", 5, 50, 20, False)],
                  diverged_at=1)
    result = AttackResult("rec", rec, {"exhaustive": whole, "r": left})
    live = {"rec": {"r": {"pdr": 0.4, "calls": 65}}}
    got = summarize([result], raced, live)
    assert got["exhaustive_calls"] == 130 and got["calls"] == 65 and got["calls_ratio"] == 2.0
    assert got["within_interval"] == 1.0 and got["mean_pdr_drop"] == 0.1
    assert summarize([result], raced, {})["attacks_counted"] == 0  # not finished: not counted


def _bench_modules() -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def test_a_drawn_record_keeps_each_samples_answers_together_across_prompts() -> None:
    """bench/racing_scale.py draws samples with replacement, one draw for every prompt: what two prompts
    answered on one sample stays paired (the paired differences a race sees keep their distribution)."""
    _bench_modules()
    from bench.racing_records import AttackRecordFile
    from bench.racing_scale import drawn

    a = [1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    b = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    rec = AttackRecordFile(attack="x", search="brute", model="m", dataset="d", prompt_id="p", clean_prompt="a",
                           samples=8, seed=0, mode="choices", source={}, scores={"a": a, "b": b},
                           margins={"a": [float(i) for i in range(8)]})
    big = drawn(rec, 500, np.random.default_rng(3))
    assert big.samples == 500 and len(big.scores["a"]) == len(big.scores["b"]) == len(big.margins["a"]) == 500
    # the margin names the recorded sample each drawn one repeats: both prompts answer as they did there
    for t, i in enumerate(int(m) for m in big.margins["a"]):
        assert (big.scores["a"][t], big.scores["b"][t]) == (a[i], b[i])
    assert len({int(m) for m in big.margins["a"]}) == 8  # every recorded sample drawn at this size


def test_the_projection_saves_more_with_more_samples_and_nothing_on_identical_candidates() -> None:
    """A brute-force step with one clearly best candidate and two clearly worse: racing drops the worse
    ones earlier in relative terms as N grows, and keeps exhaustive search's choice. Identical
    candidates can never be separated: every call is made at every N."""
    _bench_modules()
    from bench.racing_records import AttackRecordFile, Call
    from bench.racing_scale import project, summary

    rng = np.random.default_rng(0)
    n = 200
    base = (rng.random(n) < 0.8).astype(float)

    def record(scores: dict[str, list[float]]) -> AttackRecordFile:
        return AttackRecordFile(attack="x", search="brute", model="m", dataset="d", prompt_id="p", clean_prompt="clean",
                                samples=n, seed=0, mode="choices", source={}, scores={"clean": list(base), **scores},
                                calls=[Call(("clean",), None), Call(tuple(scores), float("inf"))])

    def flipped(share: float, seed: int) -> list[float]:
        flip = np.random.default_rng(seed).random(n) < share
        return list(np.where(flip, 1.0, base))  # right on more samples: worse for the attacker

    separated = record({"best": list(base), "worse": flipped(0.5, 1), "worst": flipped(0.6, 2)})
    got = summary(project([separated], RacingSettings(), sizes=(200, 1000), draws=2))
    assert got["200"]["steps_as_exhaustive"] == got["1000"]["steps_as_exhaustive"] == 1.0
    assert 1.0 < got["200"]["calls_ratio"] < got["1000"]["calls_ratio"]

    tied = record({"one": list(base), "two": list(base), "three": list(base)})
    got = summary(project([tied], RacingSettings(), sizes=(200, 1000), draws=2))
    assert got["200"]["calls_ratio"] == got["1000"]["calls_ratio"] == 1.0
    assert got["1000"]["steps_as_exhaustive"] == 1.0


def test_the_dry_run_estimates_follow_the_committed_replay() -> None:
    """``pre run --dry-run`` estimates racing at ``MEASURED_SHARE``: the shares the replay of the committed
    records measured (``python bench/racing.py replay`` writes them to racing.json); a new record that
    moves them must move the estimate too."""
    from promptrobust.engine.measuring.racing import MEASURED_SHARE

    measured = orjson.loads((Path(__file__).resolve().parents[1] / "bench/results/racing.json").read_bytes())
    assert MEASURED_SHARE == pytest.approx(measured["share_by_search"], abs=5e-4)
