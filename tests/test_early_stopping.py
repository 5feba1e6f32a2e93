"""Exact early stopping: same winner as exhaustive evaluation, fewer requests."""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from promptrobust.engine.measuring.evaluator import Evaluator
from promptrobust.engine.serving.scheduler import Scheduler
from promptrobust.engine.serving.scheduler_settings import SchedulerSettings
from promptrobust.testing.backends import CountingBackend, TableTask, table_answer


def winner(scores: list[tuple[str, float, bool]], to_beat: float) -> tuple[str, float] | None:
    """The search's rule: first complete candidate with the minimum score, if it beats to_beat."""
    complete = [(p, s) for p, s, ok in scores if ok]
    if not complete:
        return None
    best = min(complete, key=lambda ps: ps[1])
    best = next(ps for ps in complete if ps[1] == best[1])
    return best if best[1] < to_beat else None


async def _score(table, prompts, n, to_beat, chunk, early):  # noqa: ANN001, ANN202
    task = TableTask(n=n, table=table)
    backend = CountingBackend(batching=True, max_batch_size=16, answer=table_answer(table))
    async with Scheduler(backend, settings=SchedulerSettings(max_wait_ms=0)) as sched:
        ev = Evaluator(sched, task, task.load(), mode="generate", chunk_size=chunk, early_stopping=early)
        out = await ev(prompts, to_beat=to_beat)
    return [(c.prompt, c.score, c.complete) for c in out], backend.calls, ev.cost


tables = st.integers(min_value=2, max_value=7).flatmap(
    lambda k: st.integers(min_value=1, max_value=24).flatmap(
        lambda n: st.tuples(
            st.just(k),
            st.just(n),
            st.lists(
                st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]) | st.floats(0, 1), min_size=n, max_size=n),
                min_size=k,
                max_size=k,
            ),
            st.floats(0, 1.01),
            st.integers(min_value=1, max_value=8),
        )
    )
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables)
def test_early_stopping_picks_the_same_prompt_as_exhaustive(case) -> None:  # noqa: ANN001
    k, n, rows, to_beat, chunk = case
    prompts = [f"p{i}" for i in range(k)]
    table = {(prompts[i], str(j)): rows[i][j] for i in range(k) for j in range(n)}
    fast, fast_calls, cost = asyncio.run(_score(table, prompts, n, to_beat, chunk, True))
    full, full_calls, _ = asyncio.run(_score(table, prompts, n, to_beat, chunk, False))
    assert winner(fast, to_beat) == winner(full, to_beat)
    assert fast_calls <= full_calls == k * n
    assert fast_calls + cost.saved_by_early_stopping == full_calls
    # A stopped candidate's reported score is a true lower bound.
    for (p, s, ok), (_, exact, _) in zip(fast, full):
        assert s <= exact + 1e-12
        if ok:
            assert s == exact


def test_early_stopping_saves_requests_on_a_clear_case() -> None:
    n = 40
    prompts = ["good", "bad1", "bad2", "bad3"]
    table = {}
    for j in range(n):
        table[("good", str(j))] = 0.0  # the attacker's best: drives the metric to 0
        for p in prompts[1:]:
            table[(p, str(j))] = 1.0
    fast, calls, cost = asyncio.run(_score(table, prompts, n, 0.15, 8, True))
    assert winner(fast, 0.15) == ("good", 0.0)
    assert cost.pruned_candidates == 3
    assert calls == n + 3 * 8  # 8/40 = 0.2 >= 0.15: the losers stop after one chunk
    assert cost.saved_by_early_stopping == 3 * (n - 8)


def test_no_to_beat_means_exact_scores_for_everyone() -> None:
    n = 12
    prompts = ["a", "b"]
    table = {(p, str(j)): (1.0 if p == "a" else 0.0) for p in prompts for j in range(n)}
    out, calls, _ = asyncio.run(_score(table, prompts, n, None, 4, True))
    assert out == [("a", 1.0, True), ("b", 0.0, True)]
    assert calls == 2 * n


def test_duplicate_candidates_are_scored_once() -> None:
    n = 5
    table = {(p, str(j)): 0.5 for p in ("x", "y") for j in range(n)}
    out, calls, cost = asyncio.run(_score(table, ["x", "y", "x"], n, None, 5, True))
    assert calls == 2 * n and cost.duplicate_candidates == 1
    assert [o[0] for o in out] == ["x", "y", "x"]


def test_the_leader_is_finished_first_so_harmless_candidates_stop_early() -> None:
    # "a" halves the metric; b, c, d do not hurt at all (nobody beats to_beat=1.01 by to_beat alone).
    n = 24
    prompts = ["a", "b", "c", "d"]
    table = {("a", str(j)): float(j % 2) for j in range(n)}
    table.update({(p, str(j)): 1.0 for p in prompts[1:] for j in range(n)})
    out, calls, cost = asyncio.run(_score(table, prompts, n, 1.01, 6, True))
    assert winner(out, 1.01) == ("a", 0.5)
    # Round 1: everyone sees 6 samples; round 2: "a" (lowest mean) is finished while
    # the others see 6 more; then b, c, d (12/24 at best = a's exact 0.5, and a comes
    # first) stop. In lockstep they would have run to 18 samples.
    assert calls == n + 3 * 12
    assert cost.saved_by_early_stopping == 3 * 12


def test_semantic_set_stops_prompts_that_cannot_be_the_worst() -> None:
    # The Semantic attack wants the set's lowest score whether or not it beats the clean prompt:
    # a prompt whose lower bound passes another's exact score cannot be it.
    from promptrobust.attacks.registry import get_attack

    n = 24
    clean, worst, harmless = "clean", "worst", ["h1", "h2", "h3"]
    table = {(clean, str(j)): 0.0 for j in range(n)}  # nothing in the set beats the clean prompt...
    table.update({(worst, str(j)): float(j % 2) for j in range(n)})  # ...the worst scores 0.5
    table.update({(p, str(j)): 1.0 for p in harmless for j in range(n)})

    async def attack(early: bool):  # noqa: ANN202
        task = TableTask(n=n, table=table)
        backend = CountingBackend(batching=True, max_batch_size=16, answer=table_answer(table))
        async with Scheduler(backend, settings=SchedulerSettings(max_wait_ms=0)) as sched:
            ev = Evaluator(sched, task, task.load(), mode="generate", chunk_size=6, early_stopping=early)
            outcome = await get_attack("semantic", every_score=False).run(clean, ev, semantic_prompts=[worst, *harmless], budget=10)
        return outcome, backend.calls, ev.cost

    fast, fast_calls, cost = asyncio.run(attack(True))
    slow, slow_calls, _ = asyncio.run(attack(False))
    assert (fast.adversarial_prompt, fast.adversarial_score) == (slow.adversarial_prompt, slow.adversarial_score) == (worst, 0.5)
    assert slow_calls == n + 4 * n
    assert cost.saved_by_early_stopping == 3 * 12 and fast_calls == slow_calls - 36
