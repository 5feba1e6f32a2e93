"""The baseline really is promptbench's loop: one call per (candidate, sample), no cache."""

from __future__ import annotations

from promptrobust.engine.serving.cache import ScoreCache
from bench.reference import ReferenceScorer
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


async def test_label_scoring_reference_reads_labels_as_the_engine_does() -> None:
    """``mode="choices"``: one score_choices call per sample, the label of highest log-probability, the engine's score."""
    import zlib

    from promptrobust.engine.measuring.evaluator import Evaluator
    from promptrobust.engine.serving.scheduler import Scheduler
    from promptrobust.engine.serving.scheduler_settings import SchedulerSettings
    from promptrobust.engine.serving.types import Completion, Request
    from promptrobust.tasks import get_task

    def answer(r: Request) -> Completion:  # log-probs that depend on the whole input: some right, some wrong
        return Completion(choice_logprobs=tuple(-(zlib.crc32((r.input_text() + c).encode()) % 97) / 10 for c in r.choices))

    task = get_task("rotten_tomatoes")
    samples = task.load(limit=12, seed=0)
    prompts = ["Is this review positive or negative?", "Classify the sentiment of the review."]
    ref_backend = CountingBackend(batching=True, answer=answer)
    ref = ReferenceScorer(ref_backend, task, samples, chat=True, mode="choices")
    ref_scores = [c.score for c in await ref(prompts)]
    assert ref_backend.calls == len(prompts) * len(samples) and all(len(b) == 1 for b in ref_backend.batches)
    assert {r.kind for b in ref_backend.batches for r in b} == {"score_choices"}
    async with Scheduler(CountingBackend(batching=True, answer=answer), settings=SchedulerSettings(batch_size=8)) as scheduler:
        ev = Evaluator(scheduler, task, samples, mode="choices", chat=True)
        engine_scores = [(await ev.evaluate(p)).score for p in prompts]
    assert ref_scores == engine_scores
    assert all(0.0 < s < 1.0 for s in ref_scores)  # some answers right, some wrong: the labels are really read
