"""How the Ray sweep executor places and feeds its model workers (``RayOptions``), apart from
the executor itself (``ray_executor``) so that reading them costs nothing: the command line
derives its flags from these fields."""

from __future__ import annotations

import math
from dataclasses import dataclass

from promptrobust.engine.errors import PromptRobustError

__all__ = ["RayExecutorError", "RayOptions"]


class RayExecutorError(PromptRobustError, ValueError):
    """Ray is missing or an option is bad; one line naming the fix."""


@dataclass(frozen=True)
class RayOptions:
    """How the Ray executor places and feeds its model workers."""

    address: str | None = None
    """Ray cluster to join ("auto", "ray://HOST:10001", "HOST:6379"); None: start a local Ray instance."""
    num_cpus: float = 0.5
    """CPUs each worker reserves for its life (fractional: workers mostly wait on I/O or a GPU)."""
    num_gpus: float = 0.0
    """GPUs each worker reserves (1 for an in-process vLLM/HF model on one GPU, N for tensor parallel)."""
    workers_per_model: int = 1
    """Workers per model; the cells of a model are spread over them by a stable hash."""
    max_in_flight: int | None = None
    """Units (jobs) sent to one worker at a time; None: the sweep's max_jobs."""
    unit_timeout: float | None = None
    """Seconds a unit may run before its worker is presumed lost and the unit re-sent; None: no limit."""
    max_attempts: int = 3
    """Times a unit is sent before its job is recorded as failed (a unit that kills every worker)."""
    worker_cache_dir: str | None = None
    """Node-local folder for the workers' caches; None: the node's temp folder."""
    spread: bool = True
    """Place workers on different nodes where possible (Ray's SPREAD), so a lost node takes few of them."""

    def __post_init__(self) -> None:
        def check(cond: bool, message: str, setting: str | None = None) -> None:
            if not cond:
                raise RayExecutorError(message, setting=setting)

        check(isinstance(self.num_cpus, (int, float)) and self.num_cpus > 0 and math.isfinite(self.num_cpus),
              f"the CPUs each worker reserves must be a positive number, e.g. 0.5 (got {self.num_cpus!r})", "num_cpus")
        check(isinstance(self.num_gpus, (int, float)) and self.num_gpus >= 0 and math.isfinite(self.num_gpus),
              f"the GPUs each worker reserves must be a number >= 0 (got {self.num_gpus!r})", "num_gpus")
        check(isinstance(self.workers_per_model, int) and self.workers_per_model >= 1,
              f"the workers per model must be a whole number >= 1 (got {self.workers_per_model!r})", "workers_per_model")
        check(self.max_in_flight is None or (isinstance(self.max_in_flight, int) and self.max_in_flight >= 1),
              f"the units in flight per worker must be a whole number >= 1 (got {self.max_in_flight!r})", "max_in_flight")
        check(self.unit_timeout is None or (isinstance(self.unit_timeout, (int, float)) and self.unit_timeout > 0),
              f"the unit timeout must be a positive number of seconds (got {self.unit_timeout!r})", "unit_timeout")
        check(isinstance(self.max_attempts, int) and self.max_attempts >= 1,
              f"max_attempts must be a whole number >= 1 (got {self.max_attempts!r})")
