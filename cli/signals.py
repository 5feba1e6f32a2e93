"""Signals end a run the way Ctrl-C does: one line, no half-written run folder.

SIGTERM (``kill``, ``timeout``, a batch scheduler's preemption) is turned into
SIGINT, which asyncio answers by cancelling the running work; the run folder's
context manager then discards its ``.partial`` directory and the CLI prints one
line. Every answer that finished is already in the score cache, so a rerun
sends only what is missing. asyncio's teardown chatter about cancelled futures
("Future exception was never retrieved") is silenced: one line is enough.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

#: Exit codes a shell reports for a process ended by SIGINT / SIGTERM.
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


class SignalState:
    def __init__(self) -> None:
        self.terminated = False

    @property
    def exit_code(self) -> int:
        return EXIT_TERMINATED if self.terminated else EXIT_INTERRUPTED

    @property
    def verb(self) -> str:
        return "terminated" if self.terminated else "interrupted"


@contextmanager
def terminate_as_interrupt() -> Iterator[SignalState]:
    """Within the block, SIGTERM behaves like Ctrl-C (and says it was SIGTERM)."""
    state = SignalState()

    def on_term(signum: int, frame: FrameType | None) -> None:
        state.terminated = True
        signal.raise_signal(signal.SIGINT)

    try:
        previous = signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread (e.g. called from a notebook worker): leave signals alone
        yield state
        return
    try:
        yield state
    finally:
        signal.signal(signal.SIGTERM, previous)


def quiet_asyncio_teardown() -> None:
    """Drop asyncio's log lines about futures cancelled by an interrupt."""
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
