"""One scheduler per model, shared by every job in the process.

A request's path: cache lookup -> join an identical in-flight request ->
bounded queue -> a worker -> the backend -> cache write -> every waiter.

* In-process backends (``backend.batching``) get micro-batches: the batch
  worker waits for the first request, keeps collecting until the batch size or
  ``max_wait_ms``, and lets the backend split what it has into batches
  (``arrange_batches``: by input length for less padding, or, for the hf
  backend, by shared prefix when that computes fewer tokens).
* HTTP-like backends get ``concurrency`` workers, each sending one request at
  a time through the RPM/TPM limiter and the retry policy; before each attempt
  the backend may hold it while its endpoints are down (``wait_until_ready``),
  which spends neither the attempt nor its ``request_timeout``. vLLM's AsyncLLM is
  in this group too: it batches continuously by itself, it only needs enough
  requests in flight.

The queue is bounded (``max_pending``), workers are a fixed set of tasks, and
``submit_many`` keeps a bounded window of requests outstanding, so 100k
pending requests cost neither 100k tasks nor unbounded memory.

Failures stay small and honest:

* A backend call that takes longer than ``request_timeout`` (HTTP-like
  backends) counts as a transient failure and is retried.
* A completion that lacks what its request needs (no text for ``generate``, no
  or misaligned log-probabilities for ``score_choices``) is a transient failure
  too: it is never cached and never handed to a job.
* A completion with an impossible number (a label log-probability that is NaN,
  infinite or above 0) is a ``BadAnswerError`` at once: the backend computed
  it and would again, so it is one line, never retried, cached or scored; only
  its own request fails (the rest of its micro-batch is answered as usual).
* A request that still fails after the retry policy's attempts raises one
  ``RequestFailedError`` with a one-line message naming the cause and the fix.
* An answer longer than its ``max_tokens`` could hold (``answer_bound``: a server
  that ignores max_tokens) is cut to that bound before it is scored, cached or
  shown; the completion's note says so, ``answers_cut`` counts it, and the
  terminal says it once per model.

The backend is started lazily when it allows it (``Backend.defer_start``): on
the first request that misses the cache, so a fully cached run never loads
weights.
"""

from __future__ import annotations

import asyncio
import functools
import math
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace

from promptrobust.engine.serving.backends.base import (
    Backend,
    BackendError,
    BadAnswerError,
    LOGPROB_TOLERANCE,
    RequestFailedError,
    TransientBackendError,
)
from promptrobust.engine.serving.cache import ScoreCache
from promptrobust.engine.serving.prices import Price
from promptrobust.engine.serving.ratelimit import RateLimiter
from promptrobust.engine.serving.retry import RetryPolicy, call_with_retries
from promptrobust.engine.serving.scheduler_settings import SchedulerSettings
from promptrobust.engine.serving.types import Completion, ModelIdentity, Request, request_key


@dataclass
class SchedulerStats:
    """Counters read by progress displays and result records."""

    submitted: int = 0  # requests asked of this scheduler
    completed: int = 0  # requests answered (any source)
    cache_hits: int = 0  # answered from the persistent cache
    deduplicated: int = 0  # joined an identical request already in flight
    backend_requests: int = 0  # requests that reached the backend
    batches: int = 0  # backend calls (a batch counts once)
    retries: int = 0  # attempts made again after a failed one (each one more request to the backend)
    outage_waits: int = 0  # attempts not made: every endpoint refused connections, so the request waited (free)
    failures: int = 0
    probes: int = 0  # start-up capability probes (answered from the cache or the backend)
    input_tokens: int = 0  # prompt tokens of the answers the backend gave (as the server reports them)
    output_tokens: int = 0  # completion tokens of those answers
    answers_cut: int = 0  # answers longer than max_tokens allows, cut to answer_bound
    backend_seconds: float = 0.0  # time spent inside backend calls
    started: float = field(default_factory=time.monotonic)
    price: Price | None = None  # US dollars per million tokens (a priced API model), for ``usd``

    @property
    def usd(self) -> float | None:
        """What the tokens so far cost at ``price`` (None: no price known)."""
        return None if self.price is None else self.price.usd(self.input_tokens, self.output_tokens)

    @property
    def saved(self) -> int:
        """Backend calls avoided by the cache and by in-flight deduplication."""
        return self.cache_hits + self.deduplicated

    def snapshot(self) -> dict[str, float]:
        return {
            "submitted": self.submitted,
            "completed": self.completed,
            "cache_hits": self.cache_hits,
            "deduplicated": self.deduplicated,
            "backend_requests": self.backend_requests,
            "batches": self.batches,
            "retries": self.retries,
            "outage_waits": self.outage_waits,
            "failures": self.failures,
            "probes": self.probes,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "backend_seconds": round(self.backend_seconds, 3),
            # only when it happened: a run whose server honours max_tokens writes what it wrote before
            **({"answers_cut": self.answers_cut} if self.answers_cut else {}),
        }


@dataclass
class JobCounters:
    """What one job's requests cost; schedulers are shared, so each job keeps its own."""

    requests: int = 0
    cache_hits: int = 0
    deduplicated: int = 0
    sent: int = 0  # requests this job put on the backend's queue
    input_tokens: int = 0  # prompt tokens of the answers to the requests this job sent (as the server reports them)
    output_tokens: int = 0  # completion tokens of those answers

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class _Job:
    key: str
    request: Request
    future: asyncio.Future[Completion]
    counted: bool = True  # False for the start-up capability probe (counted apart, as ``probes``)


class Scheduler:
    """Routes requests for one model to its backend, with cache and limits."""

    def __init__(
        self,
        backend: Backend,
        *,
        cache: ScoreCache | None = None,
        settings: SchedulerSettings | None = None,
        owns_backend: bool = True,
        limiter: RateLimiter | None = None,
        retry_policy: RetryPolicy | None = None,
        max_pending: int = 4096,
        seed: int = 0,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        """``settings``: the limits, whole (``SchedulerSettings()`` when None). The other keywords are
        not settings: ``owns_backend`` False when the caller starts and closes the backend (one backend,
        several schedulers); ``limiter`` a rate limiter shared with others (instead of one built from
        ``settings.rpm``/``tpm``); ``retry_policy`` replaces ``settings.retry_policy()`` (tests and
        benchmarks shorten the waits); ``max_pending`` bounds the queue; ``seed`` the retry jitter;
        ``sleep`` the waits between attempts (tests)."""
        settings = settings if settings is not None else SchedulerSettings()
        if not isinstance(settings, SchedulerSettings):
            raise TypeError(f"settings must be a SchedulerSettings, not {type(settings).__name__}")
        self.settings = settings
        #: Seconds one call of an HTTP-like backend may take (None: the backend's own).
        #: In-process (batching) backends run in a thread that cannot be cut short,
        #: so a retry would only queue behind it: they are not timed out here.
        self.request_timeout = settings.request_timeout
        self.backend = backend
        self.owns_backend = owns_backend
        self.cache = cache
        self.batch_size = settings.batch_size or backend.max_batch_size
        self.max_wait = settings.max_wait_ms / 1000.0
        self.concurrency = settings.concurrency
        self.max_pending = max_pending
        self.stats = SchedulerStats(price=settings.token_price)
        self._identity: ModelIdentity | None = None
        self._model_tag = ""
        self._limiter = limiter or (RateLimiter(rpm=settings.rpm, tpm=settings.tpm) if (settings.rpm or settings.tpm) else None)
        self._retry = retry_policy or settings.retry_policy()
        self._rng = random.Random(seed)
        self._sleep = sleep or asyncio.sleep
        self._queue: asyncio.Queue[_Job] | None = None
        self._inflight: dict[str, asyncio.Future[Completion]] = {}
        # Counts this scheduler's cache writes: a call whose cache lookup is older than the
        # last write looks again before it sends (a twin may have been answered meanwhile).
        self._cache_writes = 0
        self._start_failures = 0  # failed backend starts, and the last one's error: the calls waiting behind it share it
        self._start_error: BaseException | None = None
        self._workers: list[asyncio.Task[None]] = []
        self._started = False
        self._backend_started = False  # loaded (when owned) and its capability probe answered
        self._backend_loaded = False
        self._start_lock: asyncio.Lock | None = None
        self._backend_lock: asyncio.Lock | None = None

    # -- lifecycle -----------------------------------------------------------
    async def start(self) -> None:
        """Start the workers, and the backend unless it may wait for a cache miss (idempotent)."""
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._started:
                return
            self._queue = asyncio.Queue(maxsize=self.max_pending)
            if self.backend.batching:
                self._workers = [asyncio.create_task(self._batch_worker(), name="pre-batch-worker")]
            else:
                self._workers = [
                    asyncio.create_task(self._single_worker(), name=f"pre-worker-{i}")
                    for i in range(self.concurrency)
                ]
            try:
                if self._may_defer_start():
                    self._set_identity()
                else:
                    await self.ensure_backend()
            except BaseException:
                await self.close()
                raise
            self.stats.started = time.monotonic()
            self._started = True

    def _set_identity(self) -> None:
        self._identity = self.backend.identity
        self._model_tag = f"{self._identity.backend}:{self._identity.name}"

    def _may_defer_start(self) -> bool:
        """Whether the backend can wait for the first cache miss: it says so, and what
        jobs read before any request (identity, chat format, label scoring) is known."""
        if not self.owns_backend or not getattr(self.backend, "defer_start", False):
            return False
        try:
            self.backend.identity  # noqa: B018 - reading is the check
            self.backend.is_chat  # noqa: B018
            self.backend.supports_choice_scoring  # noqa: B018
        except Exception:  # noqa: BLE001 - not knowable yet: start now
            return False
        return True

    @property
    def backend_started(self) -> bool:
        """Whether this scheduler has started its backend (False for a fully cached run)."""
        return self._backend_started

    async def ensure_backend(self) -> None:
        """Start the backend now if this scheduler owns it and has not yet (idempotent)."""
        if self._backend_started:
            return
        if self._backend_lock is None:
            self._backend_lock = asyncio.Lock()
        failures_before = self._start_failures
        async with self._backend_lock:
            if self._backend_started:
                return
            if self._start_failures != failures_before:
                # The start this call waited behind failed: its error, not another load per waiter
                # (a call that comes after the failure tries again).
                assert self._start_error is not None
                raise self._start_error
            try:
                await self._start_backend()
            except Exception as exc:  # a cancelled start is no failure: the next waiter tries
                self._start_error = exc
                self._start_failures += 1
                raise
            self._start_error = None  # not kept (nor the frames its traceback holds) once started

    async def _start_backend(self) -> None:
        """Start the backend (when this scheduler owns it), then send its capability probe."""
        if self.owns_backend and not self._backend_loaded:
            from promptrobust.engine import progress  # progress: the model load is a phase

            name = getattr(self.backend.identity, "name", "the model")
            with progress.during(f"loading {name} (first request not in the cache)" if self.backend.batching else f"connecting to {name}"):
                await self.backend.start()
            self._backend_loaded = True
        if self._identity is None:  # a deferred start keeps the identity its cache keys used
            self._set_identity()
        await self._probe_capabilities()  # a failed probe fails the start: its waiters are told, the next call probes again
        self._backend_started = True

    async def _probe_capabilities(self) -> None:
        """Send the backend's capability probe (if any) through the cache, so that what
        it can do is decided before any job builds requests, and a rerun asks nothing."""
        probe = self.backend.capability_probe()
        if probe is None:
            return
        assert self._identity is not None and self._queue is not None
        key = request_key(self._identity, probe)
        answer = self.cache.get_many([key]).get(key) if self.cache is not None else None
        problem = completion_problem(probe, answer) if answer is not None else None
        if problem is not None:
            assert self.cache is not None
            self.cache.note_damaged(key, problem)
            answer = None
        self.stats.probes += 1
        if answer is None:
            fut: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()
            self._inflight[key] = fut
            await self._queue.put(_Job(key, probe, fut, counted=False))
            try:
                answer = await asyncio.shield(fut)
            except RequestFailedError as exc:
                raise RequestFailedError(f"start-up check of {self._model_tag}: {exc}", cause=exc.cause,
                                         attempts=exc.attempts) from None
            except BackendError:
                if self.backend.supports_choice_scoring:
                    raise
                return  # decided: the model cannot score labels (the backend said so, once)
        self.backend.probe_answered(probe, answer)

    async def close(self) -> None:
        for task in self._workers:
            task.cancel()
        for task in self._workers:
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        self._workers = []
        if self._backend_loaded and self.owns_backend:
            await self.backend.close()
        self._backend_started = self._backend_loaded = False
        self._started = False
        self._identity = None

    async def __aenter__(self) -> "Scheduler":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- submitting ------------------------------------------------------------
    async def submit(self, request: Request) -> Completion:
        """Answer one request (from cache, a joined in-flight twin, or the backend)."""
        (out,) = await self.submit_many([request])
        return out

    async def submit_many(
        self, requests: Sequence[Request], *, window: int | None = None, counters: JobCounters | None = None
    ) -> list[Completion]:
        """Answer many requests, keeping at most ``window`` of them outstanding.

        Cache lookups are done in chunks (one SQL query per chunk). Results come
        back in request order. The first backend error is raised after the
        outstanding requests of this call have settled.
        """
        await self.start()
        return await self._submit(requests, window=window, counters=counters)

    async def _submit(
        self, requests: Sequence[Request], *, window: int | None, counters: JobCounters | None
    ) -> list[Completion]:
        assert self._identity is not None
        window = window or self.max_pending
        results: list[Completion | None] = [None] * len(requests)
        sent_here: list[int] = []  # the requests this call put on the backend's queue: their tokens are its cost
        sent_keys: set[str] = set()
        outstanding: deque[tuple[int, asyncio.Future[Completion]]] = deque()
        chunk = 512
        first_error: BaseException | None = None

        async def settle_oldest() -> None:
            nonlocal first_error
            index, fut = outstanding.popleft()
            try:
                # Shielded: the future may be shared with twins of other jobs; cancelling this
                # call must not cancel their answer.
                results[index] = await asyncio.shield(fut)
                self.stats.completed += 1
            except asyncio.CancelledError:
                fut.add_done_callback(_read_outcome)  # as for the rest outstanding (below)
                raise
            except Exception as exc:  # noqa: BLE001 - re-raised below, after the rest settle
                if first_error is None:
                    first_error = exc

        try:
            for start in range(0, len(requests), chunk):
                part = requests[start : start + chunk]
                keys = [request_key(self._identity, r) for r in part]
                hits = self.cache.get_many(keys) if self.cache is not None else {}
                looked_up = self._cache_writes
                for offset, (key, request) in enumerate(zip(keys, part)):
                    index = start + offset
                    self.stats.submitted += 1
                    if counters is not None:
                        counters.requests += 1
                    hit = hits.get(key)
                    problem = completion_problem(request, hit) if hit is not None else None
                    if problem is not None:
                        # A cached row this request cannot use (damaged, or from a version that
                        # cached impossible numbers): a miss, recomputed and overwritten.
                        assert self.cache is not None
                        self.cache.note_damaged(key, problem)
                        hit = None
                    if hit is None and key not in self._inflight:
                        if not self._backend_started:
                            await self.ensure_backend()  # the first cache miss loads the model
                        if self.cache is not None and looked_up != self._cache_writes:
                            # This call waited since its lookup (its window, the queue, the model's load)
                            # and answers were cached meanwhile: one may be this request's twin, sent by
                            # another job and already off the in-flight table. Look again (one indexed
                            # row, only for a request about to be sent).
                            hit = self.cache.look_again(key, usable=functools.partial(_answers, request),
                                                        first_missed=key not in sent_keys)
                            if hit is not None:
                                hits[key] = hit  # later copies of it in this chunk read it here
                    if hit is not None:
                        self.stats.cache_hits += 1
                        if counters is not None:
                            counters.cache_hits += 1
                        self.stats.completed += 1
                        results[index] = hit
                        continue
                    fut = self._inflight.get(key)  # read after every wait above: a twin may be in flight now
                    if fut is not None:
                        self.stats.deduplicated += 1
                        if counters is not None:
                            counters.deduplicated += 1
                    else:
                        if counters is not None:
                            counters.sent += 1
                        sent_here.append(index)
                        sent_keys.add(key)
                        fut = asyncio.get_running_loop().create_future()
                        self._inflight[key] = fut
                        assert self._queue is not None
                        job = _Job(key, request, fut)
                        try:
                            self._queue.put_nowait(job)
                        except asyncio.QueueFull:
                            # Shielded: twins may join this future while the queue is full; were this
                            # call cancelled here, the request would never be queued and they would
                            # wait forever.
                            try:
                                await asyncio.shield(self._queue.put(job))
                            except asyncio.CancelledError:
                                fut.add_done_callback(_read_outcome)
                                raise
                    outstanding.append((index, fut))
                    while len(outstanding) >= window:
                        await settle_oldest()
            while outstanding:
                await settle_oldest()
        except asyncio.CancelledError:
            # This call is cancelled; what it left outstanding may be another job's too, and runs
            # on. Its error, if any, is read here, so that asyncio does not log it as never retrieved.
            for _, fut in outstanding:
                fut.add_done_callback(_read_outcome)
            raise
        if first_error is not None:
            raise first_error
        if counters is not None:
            for index in sent_here:
                answer = results[index]
                if answer is not None:
                    counters.input_tokens += answer.prompt_tokens
                    counters.output_tokens += answer.completion_tokens
        return results  # type: ignore[return-value]

    # -- workers -----------------------------------------------------------------
    async def _collect(self) -> list[_Job]:
        """Wait for one job, then gather more until the batch window closes."""
        assert self._queue is not None
        jobs = [await self._queue.get()]
        # Look ahead a few batches so requests of similar length can be grouped.
        limit = self.batch_size * 4
        deadline = time.monotonic() + self.max_wait
        while len(jobs) < limit:
            try:
                jobs.append(self._queue.get_nowait())
                continue
            except asyncio.QueueEmpty:
                pass
            if len(jobs) >= self.batch_size:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                jobs.append(await asyncio.wait_for(self._queue.get(), remaining))
            except TimeoutError:
                break
        return jobs

    async def _batch_worker(self) -> None:
        while True:
            jobs = await self._collect()
            requests = [j.request for j in jobs]
            try:
                plan = self.backend.arrange_batches(requests, self.batch_size)
            except Exception:  # noqa: BLE001 - a planning hint must never stop the worker; the batch reports real errors
                plan = Backend.arrange_batches(self.backend, requests, self.batch_size)
            for batch in plan:
                await self._run_batch([jobs[i] for i in batch])

    async def _run_batch(self, jobs: list[_Job]) -> None:
        requests = [j.request for j in jobs]

        async def call() -> list[Completion]:
            return await self.backend.complete_batch(requests)

        await self._dispatch(jobs, call)

    async def _single_worker(self) -> None:
        assert self._queue is not None
        while True:
            job = await self._queue.get()

            async def call(request: Request = job.request) -> list[Completion]:
                # An endpoint outage is waited out here, before the attempt and outside its timeout.
                await self.backend.wait_until_ready()
                # Every attempt, retries included, takes its place under the limits.
                if self._limiter is not None:
                    await self._limiter.acquire(request.estimated_tokens())
                if self.request_timeout is None:
                    return [await self.backend.complete(request)]
                try:
                    return [await asyncio.wait_for(self.backend.complete(request), self.request_timeout)]
                except TimeoutError:
                    raise TransientBackendError(
                        f"no answer within {self.request_timeout:g}s (--request-timeout)"
                    ) from None

            await self._dispatch([job], call)

    async def _dispatch(self, jobs: list[_Job], call: Callable[[], object]) -> None:
        def on_retry(attempt: int, exc: BaseException, delay: float) -> None:
            # A wait for an endpoint that refused connections sent nothing: not a retry (its cost is time).
            if getattr(exc, "spends_attempt", True):
                self.stats.retries += 1
            else:
                self.stats.outage_waits += 1

        async def checked_call() -> list[tuple[Completion, str | None]]:
            """The completions, each with what is impossible about its numbers (None: nothing)."""
            completions = await call()  # type: ignore[misc]
            if len(completions) != len(jobs):
                raise RuntimeError(f"backend returned {len(completions)} completions for {len(jobs)} requests")
            checked = []
            for job, completion in zip(jobs, completions):
                impossible = _impossible_number(completion)  # its own job fails below; a retry would compute the same
                problem = None if impossible is not None else _shape_problem(job.request, completion)
                if problem is not None:
                    raise TransientBackendError(f"malformed answer: {problem}")
                checked.append((completion, impossible))
            return checked

        started = time.monotonic()
        try:
            checked = await call_with_retries(
                checked_call, self._retry, sleep=self._sleep, rng=self._rng, on_retry=on_retry
            )
        except asyncio.CancelledError:
            for job in jobs:
                self._finish(job, exc=asyncio.CancelledError())
            raise
        except Exception as exc:  # noqa: BLE001 - handed to every waiter
            self.stats.failures += sum(j.counted for j in jobs)
            if isinstance(exc, TransientBackendError):
                exc = self._gave_up(exc)
            for job in jobs:
                self._finish(job, exc=exc)
            return
        finally:
            self.stats.backend_seconds += time.monotonic() - started
        counted = sum(j.counted for j in jobs)
        self.stats.batches += 1 if counted else 0
        self.stats.backend_requests += counted
        for job, (completion, _) in zip(jobs, checked):
            if job.counted:
                self.stats.input_tokens += completion.prompt_tokens
                self.stats.output_tokens += completion.completion_tokens
        # An answer with an impossible number fails its own request at once (one line, never cached or
        # scored); the other requests of its micro-batch, other jobs' too, are answered as usual.
        sound: list[tuple[_Job, Completion]] = []
        for job, (completion, impossible) in zip(jobs, checked):
            if impossible is None:
                sound.append((job, self._bounded(job.request, completion)))
                continue
            self.stats.failures += job.counted
            self._finish(job, exc=BadAnswerError(
                f"impossible answer from {self._model_tag}: {impossible}; the backend computes impossible "
                "numbers (a retry would get the same): check the model and its dtype"))
        if not sound:
            return
        jobs, completions = [j for j, _ in sound], [c for _, c in sound]
        if self.cache is not None:
            try:
                self.cache.put_many((job.key, self._model_tag, c) for job, c in zip(jobs, completions))
                self._cache_writes += 1
            except Exception as exc:  # noqa: BLE001 - a cache failure must reach the caller, not kill the worker
                for job in jobs:
                    self._finish(job, exc=exc)
                return
        for job, completion in zip(jobs, completions):
            self._finish(job, result=completion)

    def _bounded(self, request: Request, completion: Completion) -> Completion:
        """``completion`` with its text cut to ``answer_bound`` (counted, noted, said once)."""
        cut = cut_answer(request, completion)
        if cut is not completion:
            self.stats.answers_cut += 1
            from promptrobust.engine import progress

            progress.fallback(f"answer-cut:{self._model_tag}", f"{self._model_tag}: {cut.note}; such answers are cut before "
                              "they are scored, cached or shown (the server ignores max_tokens?)")
        return cut

    def _gave_up(self, last: TransientBackendError) -> RequestFailedError:
        """The one error a request that exhausted its retries fails with (one line, names the fix)."""
        attempts = self._retry.max_attempts
        cause = " ".join(str(last).split()) or type(last).__name__
        if len(cause) > 240:
            cause = cause[:237] + "..."
        retries = f"--max-retries (now {attempts - 1})"
        lowered = cause.lower()
        if "timed out" in lowered or "no answer within" in lowered:
            now = f"now {self.request_timeout:g}s" if self.request_timeout is not None else "now the backend's own"
            hint = f"raise --request-timeout ({now}) or {retries}"
        elif last.status == 429:
            hint = f"raise {retries} or lower --rpm/--concurrency"
        else:
            hint = f"raise {retries} or check the server"
        message = f"request failed after {attempts} attempt{'s' if attempts != 1 else ''}: {cause}; {hint}"
        err = RequestFailedError(message, cause=last, attempts=attempts)
        err.__cause__ = None
        return err

    def _finish(self, job: _Job, *, result: Completion | None = None, exc: BaseException | None = None) -> None:
        if self._inflight.get(job.key) is job.future:
            del self._inflight[job.key]
        if job.future.done():
            return
        if exc is not None:
            job.future.set_exception(exc)
        else:
            job.future.set_result(result)  # type: ignore[arg-type]


#: The most characters an answer may hold per token its ``max_tokens`` allowed, above a floor: a
#: tokenizer's tokens average a few characters and rarely exceed 64, so only a server that ignores
#: max_tokens sends more (one seen: 600,000 words for max_tokens 20).
ANSWER_CHARS_PER_TOKEN = 64
ANSWER_CHARS_FLOOR = 1000


def answer_bound(max_tokens: int) -> int:
    """The most characters an answer of ``max_tokens`` new tokens is kept with."""
    return ANSWER_CHARS_FLOOR + ANSWER_CHARS_PER_TOKEN * max(1, max_tokens)


def cut_answer(request: Request, completion: Completion) -> Completion:
    """``completion`` as it is, or, when its text is longer than ``answer_bound`` allows, cut to
    the bound (under greedy decoding a prefix is what an answer that stopped sooner would read)
    with a note saying so."""
    text = completion.text
    bound = answer_bound(request.decoding.max_tokens)
    if not isinstance(text, str) or len(text) <= bound:
        return completion
    note = f"an answer of {len(text):,} characters cut to {bound:,}: max_tokens {request.decoding.max_tokens} allows no more"
    return replace(completion, text=text[:bound], note=f"{completion.note}; {note}" if completion.note else note)


def _read_outcome(fut: asyncio.Future[Completion]) -> None:
    if not fut.cancelled():
        fut.exception()


def _answers(request: Request, completion: Completion) -> bool:
    return completion_problem(request, completion) is None


def completion_problem(request: Request, completion: object) -> str | None:
    """What a completion lacks for its request, or None when it can be scored and cached."""
    problem = _shape_problem(request, completion)
    if problem is not None or request.kind == "generate":
        return problem
    return _impossible_number(completion)


def _shape_problem(request: Request, completion: object) -> str | None:
    """What a completion lacks in kind or count for its request (its numbers aside: ``_impossible_number``)."""
    if not isinstance(completion, Completion):
        return f"the backend returned {type(completion).__name__}, not a Completion"
    if request.kind == "generate":
        if not isinstance(completion.text, str):
            return "no text for a generate request"
        return None
    logprobs = completion.choice_logprobs
    if logprobs is None:
        return "no label log-probabilities for a score_choices request"
    if len(logprobs) != len(request.choices):
        return f"{len(logprobs)} label log-probabilities for {len(request.choices)} choices"
    return None


def _impossible_number(completion: object) -> str | None:
    """What is impossible about a completion's label log-probabilities (one a model cannot give), or None."""
    logprobs = getattr(completion, "choice_logprobs", None)
    for v in logprobs or ():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
            return "a label log-probability is not a number"
        if v in (math.inf, -math.inf):
            return "a label log-probability is infinite"
        if v > LOGPROB_TOLERANCE:
            return f"a label log-probability is above 0 ({v:g}: a probability above 1)"
    return None


def identity_of(scheduler: Scheduler) -> dict[str, object]:
    """A model's identity as its backend reports it (name, revision, weights hash in ``extra``)."""
    ident = scheduler.backend.identity
    return {"backend": ident.backend, "name": ident.name, "revision": ident.revision, "extra": dict(ident.extra)}
