"""The limits of one model's scheduler, as one frozen value (httpx ``Limits`` style):
built by the CLI, sweeps and the Python API alike and handed whole to the ``Scheduler``."""

from __future__ import annotations

from dataclasses import dataclass

from promptrobust.engine.errors import require as _check, require_positive_or_none as _positive_or_none, require_whole as _whole
from promptrobust.engine.serving.prices import Price, parse_price
from promptrobust.engine.serving.retry import RetryPolicy

__all__ = ["SchedulerSettings"]


@dataclass(frozen=True)
class SchedulerSettings:
    """Limits of one model's scheduler, shared by every job that uses the model."""

    concurrency: int = 64
    """Backend calls in flight at once (HTTP and vLLM backends)."""
    batch_size: int | None = None
    """Micro-batch size for in-process backends; None: the backend's own default."""
    rpm: float | None = None
    """Requests-per-minute limit (API backends); None: unlimited."""
    tpm: float | None = None
    """Tokens-per-minute limit (API backends); None: unlimited."""
    max_wait_ms: float = 5.0
    """How long a partial batch waits for more requests before it is sent."""
    max_retries: int = 7
    """Retries of one failed backend call (429, 5xx, timeouts, malformed answers) before it fails its job."""
    request_timeout: float | None = None
    """Seconds one backend call may take before it counts as failed and is retried; None: the backend's default."""
    price: Price | str | None = None
    """What the model's tokens cost (API models; ``engine.serving.prices``), or its text "IN,OUT" in US
    dollars per million input and output tokens (``--price-per-mtok``), read here: the cost said while
    it runs and after; None: not priced (an in-process model, or no price known)."""

    def __post_init__(self) -> None:
        _whole(self.concurrency, "concurrency", 1)
        _check(self.batch_size is None or (isinstance(self.batch_size, int) and self.batch_size >= 1),
               f"batch_size must be a whole number >= 1 (got {self.batch_size!r})")
        _positive_or_none(self.rpm, "rpm")
        _positive_or_none(self.tpm, "tpm")
        _check(self.max_wait_ms >= 0, f"max_wait_ms must be >= 0 (got {self.max_wait_ms!r})")
        _whole(self.max_retries, "max_retries", 0)
        _positive_or_none(self.request_timeout, "request_timeout")
        if isinstance(self.price, str):
            object.__setattr__(self, "price", parse_price(self.price))
        _check(self.price is None or isinstance(self.price, Price), "price must be a Price (US dollars per million tokens)")

    @property
    def token_price(self) -> Price | None:
        """``price`` as read (a ``Price``, or None)."""
        return self.price if isinstance(self.price, Price) else None

    def retry_policy(self) -> RetryPolicy:
        """The scheduler's ``RetryPolicy``: one first attempt plus ``max_retries``."""
        return RetryPolicy(max_attempts=self.max_retries + 1)
