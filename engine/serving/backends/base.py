"""The one interface every backend implements.

Backends know nothing of tasks or attacks: they turn Requests into
Completions. The scheduler decides how requests reach them: in-process
backends (``batching = True``) receive micro-batches through
``complete_batch``; HTTP backends (``batching = False``) receive one request
at a time through ``complete`` under a concurrency and rate limit, with
retries driven by the errors below.

A backend implements ``complete_batch`` (``Backend``, abstract there), or
``complete`` when it answers one request per call (``PerRequestBackend``,
abstract there): neither default calls the other in a circle.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Sequence

from promptrobust.engine.errors import PromptRobustError
from promptrobust.engine.serving.types import Completion, ModelIdentity, Request


#: A log-probability may exceed 0 by this much (rounding in a softmax); anything larger, NaN or
#: infinite is an impossible number, which no backend's answer may carry.
LOGPROB_TOLERANCE = 1e-3
#: The probabilities of distinct tokens read at one position may add up to at most 1 plus this (rounding
#: in a softmax); more is a distribution no model gives, which no backend's answer may carry either.
MASS_TOLERANCE = 1e-3


class BackendError(PromptRobustError):
    """A failure that retrying will not fix (bad request, missing model...); one line naming the fix."""


class BackendUnavailable(BackendError):
    """The backend cannot be reached or started at all (unreachable endpoint,
    missing package, missing API key). The CLI turns it into exit code 2."""


class RequestFailedError(BackendError):
    """A request that still failed after all its retries.

    The message is one line: the last cause (HTTP status, timeout, malformed
    answer) and the fix (``--max-retries``, ``--request-timeout``). ``cause`` is
    the last ``TransientBackendError``; ``attempts`` how many calls were made.
    """

    def __init__(self, message: str, *, cause: BaseException | None = None, attempts: int = 0):
        super().__init__(message)
        self.cause = cause
        self.attempts = attempts


class BadAnswerError(BackendError):
    """An answer the backend could not really give, which a retry would give again: impossible
    log-probabilities, JSON nested deeper than any real answer. Never scored, never cached, not
    retried: the request fails at once with one line naming what came and what to check."""


class TransientBackendError(PromptRobustError):
    """A failure worth retrying: 429, 5xx, timeouts, dropped connections, and
    answers that lack what the request needs (malformed JSON, no content, no
    log-probs when they were asked for): those are never scored or cached.

    ``retry_after`` is the server's own wait hint in seconds, when it gave one.
    ``spends_attempt`` is False for a failure that says nothing about the request
    (its endpoint refused the connection during an outage): the retry does not
    count against the request's attempts; the backend bounds the wait itself
    (``Backend.wait_until_ready``).
    """

    def __init__(self, message: str, *, retry_after: float | None = None, status: int | None = None,
                 spends_attempt: bool = True):
        super().__init__(message)
        self.retry_after = retry_after
        self.status = status
        self.spends_attempt = spends_attempt


def cut_into_batches(order: Sequence[int], batch_size: int) -> list[list[int]]:
    """Consecutive runs of at most ``batch_size`` indices, in the given order."""
    return [list(order[k : k + batch_size]) for k in range(0, len(order), batch_size)]


def cut_least_padding(order: Sequence[int], lengths: Sequence[int], batch_size: int, overhead: int,
                      max_positions: int | None = None) -> list[list[int]]:
    """Consecutive runs of ``order`` (sorted by ``lengths``) that cost the fewest padded positions.

    A batch costs its rows times its longest row, plus ``overhead`` positions
    (what one more forward pass costs, in positions): where lengths jump, a
    smaller batch wastes less on padding than a full one; where they do not,
    batches stay full. A batch holds at most ``batch_size`` rows and, when
    ``max_positions`` is given, at most that many padded positions (a single
    row always fits). Exact dynamic programme over the cut points.
    """
    n = len(order)
    best = [0] * (n + 1)
    cut = [0] * (n + 1)
    for i in range(1, n + 1):
        width = lengths[order[i - 1]]  # sorted: the last row of a run is its longest
        best[i] = -1
        for j in range(max(0, i - batch_size), i):  # largest batch first: it wins ties
            if max_positions is not None and i - j > 1 and (i - j) * width > max_positions:
                continue
            cost = best[j] + (i - j) * width + overhead
            if best[i] < 0 or cost < best[i]:
                best[i], cut[i] = cost, j
    runs: list[list[int]] = []
    i = n
    while i > 0:
        runs.append(list(order[cut[i] : i]))
        i = cut[i]
    return runs[::-1]


class Backend(ABC):
    """A model that answers Requests."""

    #: "hf", "openai", "vllm", ... (part of the cache key through ``identity``)
    kind: str = ""
    #: True: the scheduler sends micro-batches; False: single concurrent requests.
    batching: bool = True
    #: Largest batch the backend wants at once (only used when ``batching``).
    max_batch_size: int = 16
    #: Whether the scheduler may put off ``start()`` until the first request that
    #: misses the cache (a fully cached run then never loads weights). Only
    #: sound when ``identity``, ``is_chat`` and ``supports_choice_scoring`` are
    #: known before ``start()``; the scheduler checks that they can be read.
    defer_start: bool = True

    @property
    def supports_choice_scoring(self) -> bool:
        """Whether ``score_choices`` requests get real label log-probabilities.

        Decided once (at construction or ``start()``), never mid-run. When False
        the evaluator switches a ``choices`` evaluation to ``generate`` and says
        so; the backend refuses ``score_choices`` requests rather than answer
        them with generated text.
        """
        return True

    @property
    @abstractmethod
    def identity(self) -> ModelIdentity:
        """Model identity including weights revision; keys the cache."""

    @property
    def is_chat(self) -> bool:
        """Whether inputs should be given as chat messages (model has a chat template)."""
        return False

    def capability_probe(self) -> Request | None:
        """A request whose answer decides what the backend can do (e.g. whether an
        API server returns log-probabilities), or None when nothing is left to decide.

        The scheduler sends it right after ``start()``, through its cache (a rerun
        asks nothing), before any job builds requests, and hands the answer to
        ``probe_answered``. A ``BackendError`` from it is fine when it settled the
        question (``supports_choice_scoring`` became False).
        """
        return None

    def probe_answered(self, request: Request, completion: Completion) -> None:
        """Learn from the answer to ``capability_probe()`` (fresh, or from the cache)."""

    async def start(self) -> None:
        """Load weights / open clients. Called once before the first request."""

    async def wait_until_ready(self) -> None:
        """Wait until a call can reach the model (an endpoint outage is over); raise a ``BackendError``
        when it will not within the backend's bound. The scheduler awaits it before every attempt,
        outside the attempt's ``request_timeout``; default: ready at once."""

    async def close(self) -> None:
        """Release resources."""

    def arrange_batches(self, requests: Sequence[Request], batch_size: int) -> list[list[int]]:
        """Split requests (indices) into batches of at most ``batch_size``; default: sorted by input length.

        Only used for ``batching`` backends; similar lengths waste the least padding.
        """
        return cut_into_batches(sorted(range(len(requests)), key=lambda i: len(requests[i].input_text())), batch_size)

    @abstractmethod
    async def complete_batch(self, requests: Sequence[Request]) -> list[Completion]:
        """Answer a batch, in order."""

    async def complete(self, request: Request) -> Completion:
        """Answer one request; default: a batch of one."""
        (out,) = await self.complete_batch([request])
        return out


class PerRequestBackend(Backend):
    """A backend that answers one request per call (a model server over HTTP, vLLM's engine, which batches
    on its own): the scheduler sends single requests under its concurrency limit."""

    batching = False

    @abstractmethod
    async def complete(self, request: Request) -> Completion:
        """Answer one request."""

    async def complete_batch(self, requests: Sequence[Request]) -> list[Completion]:
        """Answer each request concurrently."""
        return list(await asyncio.gather(*(self.complete(r) for r in requests)))
