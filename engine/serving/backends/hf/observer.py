"""What the hf backend tells an observer while it computes: benchmark and test hooks, not options.

A benchmark or a test that wants to see inside the backend (how many forward
passes ran and of which kind, how close each greedy answer came to another
token) hands an observer to the backend (``HFBackend(..., observer=...)`` or
``backend.observer = ...``); the backend calls it and does nothing more for it.
The base class ignores everything, so an observer overrides only what it reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from promptrobust.engine.serving.types import Request

__all__ = ["GreedyMargins", "HFObserver", "PassKind"]

#: ``prefix``: a cached prefix computed alone; ``prefix_batch``: several new prefixes in one pass;
#: ``rows``: the requests' rows (label scoring, or the first step of generation); ``step``: a decode step.
PassKind = Literal["prefix", "prefix_batch", "rows", "step"]


class HFObserver:
    """Hooks the hf backend calls; each does nothing here."""

    #: Whether ``greedy_step`` is wanted: reading the top two logits of every step costs a little.
    wants_greedy_gaps: bool = False

    def forward_pass(self, kind: PassKind, rows: int, columns: int, keep: int) -> None:
        """One forward pass of the model: ``rows`` sequences of ``columns`` new positions each (padding included);
        ``keep`` logit columns read (0: the decoder alone ran, without the output layer)."""

    def greedy_step(self, requests: Sequence[Request], gaps: Sequence[float]) -> None:
        """One greedy decode step: each still-writing request's gap between its two highest logits."""


class GreedyMargins(HFObserver):
    """Each greedy request's smallest gap between its two highest logits over its decode steps: how far
    its text is from changing under float rounding (bench/certify.py's certificate reads it)."""

    wants_greedy_gaps = True

    def __init__(self) -> None:
        self.margins: dict[Request, float] = {}

    def greedy_step(self, requests: Sequence[Request], gaps: Sequence[float]) -> None:
        for request, gap in zip(requests, gaps):
            self.margins[request] = min(self.margins.get(request, float("inf")), gap)
