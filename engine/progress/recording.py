"""A run's progress timeline on file, and the same timeline played back.

``$PRE_PROGRESS_RECORD=FILE`` makes the progress reporter of ``pre`` (and of the
Python API) write a run's timeline to FILE (replaced: one run a file), one JSON object a line:

- ``{"t": 1.25, "event": {"type": "Planned", "requests": 500, "scope": ""}}`` for every event
  (a ``Watch`` names its counters by number, with their values then:
  ``{"type": "Watch", "source": 0, "counts": [0, 0, 0]}``);
- ``{"t": 1.31, "counts": [[completed, cache_hits, backend_requests], ...]}`` whenever a
  watched scheduler's counters changed (one triple per source, in ``Watch`` order);
- ``{"t": 153.2, "end": true}`` when the reporter stopped.

``t`` is seconds since the reporter started. Nothing is recorded about prompts or
answers: only counts, phase texts and search positions. A recording of a run with a
wrong ETA is what a bug report about it needs; ``replay`` feeds one through
``ProgressState`` on a fake clock (tests/test_progress_eta.py does, with committed
recordings of real runs). Lines are appended and flushed one by one; a torn last
line (a killed process) is skipped by ``read``.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson

import promptrobust.engine.progress.events as ev
from promptrobust.engine.progress.state import ProgressState, Status

RECORD_ENV = "PRE_PROGRESS_RECORD"

_TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (ev.Phase, ev.PhaseEnd, ev.PhaseDone, ev.Planned, ev.SearchStep, ev.Jobs, ev.JobStarted,
                ev.JobEnded, ev.Work, ev.Fallback)
}


class Recorder:
    """Appends a progress timeline to a file (see the module's docstring for the lines)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file: IO[bytes] | None = open(self.path, "wb")  # noqa: SIM115 - closed by ``close``
        self._sources: list[int] = []  # id() of each watched counters object, in Watch order
        self._lock = threading.Lock()

    @classmethod
    def from_environment(cls) -> "Recorder | None":
        path = os.environ.get(RECORD_ENV, "").strip()
        if not path:
            return None
        try:
            return cls(path)
        except OSError as exc:
            print(f"pre: cannot record progress to {path} ({exc.strerror}); set {RECORD_ENV} to a writable file",
                  file=sys.stderr)
            return None

    def write(self, t: float, event: ev.Event | None, counts: list[tuple[int, int, int]] | None) -> None:
        line: dict[str, Any] = {"t": round(t, 3)}
        if event is not None:
            line["event"] = self._event(event)
            if line["event"] is None:
                return
        if counts is not None:
            line["counts"] = [list(c) for c in counts]
        self._append(line)

    def _event(self, event: ev.Event) -> dict[str, Any] | None:
        if isinstance(event, ev.Watch):
            key = id(event.stats)
            if key in self._sources:
                return None
            self._sources.append(key)
            stats = event.stats
            counts = [int(stats.completed), int(stats.cache_hits), int(stats.backend_requests)]
            return {"type": "Watch", "source": len(self._sources) - 1, "counts": counts}
        return {"type": type(event).__name__, **dataclasses.asdict(event)}

    def _append(self, line: dict[str, Any]) -> None:
        with self._lock:
            if self._file is None:
                return
            try:
                self._file.write(orjson.dumps(line) + b"\n")
                self._file.flush()
            except OSError:  # a full disk ends the recording, never the run
                self._close()

    def close(self, t: float) -> None:
        self._append({"t": round(t, 3), "end": True})
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None


def read(path: str | Path) -> list[dict[str, Any]]:
    """The lines of a recording (a torn last line is left out)."""
    out = []
    for raw in Path(path).read_bytes().splitlines():
        try:
            out.append(orjson.loads(raw))
        except orjson.JSONDecodeError:
            continue
    return out


def event_of(data: dict[str, Any]) -> ev.Event | None:
    """The event a recorded line describes (None for ``Watch``, which needs live counters)."""
    kind = data.get("type")
    if kind == "Watch" or kind not in _TYPES:
        return None
    fields = {k: v for k, v in data.items() if k != "type"}
    if kind == "Jobs":
        fields["shapes"] = tuple(tuple(s) for s in fields.get("shapes", ()))
    if kind == "JobStarted":
        fields["shape"] = tuple(fields["shape"])
    event: ev.Event = _TYPES[kind](**fields)
    return event


class _ManualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class RecordedCounters:
    """A watched scheduler's counters as the recording says they were."""

    completed: int = 0
    cache_hits: int = 0
    backend_requests: int = 0


@dataclass(frozen=True)
class Replayed:
    """The status a progress model showed at recorded time ``t``; ``end``: when the run's last
    answer arrived (the last change of the counters), what an ETA at ``t`` predicts."""

    t: float
    status: Status
    end: float


def replay(lines: Iterable[dict[str, Any]], *, every: float = 1.0, state: Any = None,
           make_event: Callable[[dict[str, Any]], Any] = event_of,
           make_watch: Callable[[Any], Any] = ev.Watch) -> Iterator[Replayed]:
    """Play a recording through ``ProgressState`` on a fake clock, looking at it every ``every``
    recorded seconds (as the reporter's heartbeat does) and after every change of the counters.

    ``state``, ``make_event`` and ``make_watch`` let a benchmark play the same recording through
    another progress model (bench/progress_eta.py: the one before this one)."""
    timeline = sorted(lines, key=lambda line: float(line["t"]))
    end = max((float(x["t"]) for x in timeline if "counts" in x), default=0.0)
    clock = _ManualClock()
    if state is None:
        state = ProgressState(clock)
    else:
        state.clock = clock
        state.started = 0.0
    sources: list[RecordedCounters] = []
    next_look = every
    for line in timeline:
        t = float(line["t"])
        while next_look < t:
            clock.now = next_look
            yield Replayed(next_look, state.status(), end)
            next_look += every
        clock.now = t
        data = line.get("event")
        if data is not None:
            if data.get("type") == "Watch":
                counters = RecordedCounters(*data.get("counts", (0, 0, 0)))
                sources.append(counters)
                state.apply(make_watch(counters))
            else:
                event = make_event(data)
                if event is not None:
                    state.apply(event)
        counts = line.get("counts")
        if counts is not None:
            for counters, (completed, hits, sent) in zip(sources, counts):
                counters.completed, counters.cache_hits, counters.backend_requests = completed, hits, sent
            yield Replayed(t, state.status(), end)
