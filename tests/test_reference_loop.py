"""The baseline really is promptbench's loop: one call per (candidate, sample), no cache."""

from __future__ import annotations

from promptrobust.engine.cache import ScoreCache
from promptrobust.engine.reference import ReferenceScorer
from promptrobust.testing.backends import CountingBackend, TableTask, table_answer


async def test_one_model_call_per_candidate_and_sample_and_no_cache(tmp_path) -> None:  # noqa: ANN001
    n = 7
    prompts = ["p0", "p1", "p0"]  # a repeated candidate is scored again, as promptbench does
    table = {(p, str(j)): (j % 2) * 1.0 for p in ("p0", "p1") for j in range(n)}
    task = TableTask(n=n, table=table)
    backend = CountingBackend(batching=True, answer=table_answer(table))
    cache = ScoreCache(tmp_path / "untouched.sqlite")
    scorer = ReferenceScorer(backend, task, task.load())
    out = await scorer(prompts, to_beat=0.0)
    assert backend.calls == len(prompts) * n
    assert all(len(batch) == 1 for batch in backend.batches)  # never batched
    assert scorer.cost.model_calls == len(prompts) * n
    assert [c.score for c in out] == [3 / 7, 3 / 7, 3 / 7]
    assert all(c.complete for c in out)  # no early stopping, whatever to_beat says
    assert cache.count() == 0 and cache.stats.hits == cache.stats.misses == 0
    # Generation with the task's length and the paper's parser, never label scoring.
    assert {r.kind for b in backend.batches for r in b} == {"generate"}
