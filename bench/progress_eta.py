"""How wrong is the progress line's ETA? Recorded runs replayed through the progress model.

A recording (``$PRE_PROGRESS_RECORD=FILE pre ...``, see ``engine/progress/recording.py``)
holds a real run's progress events and counters with their times. Replaying it on a fake
clock shows the ETA the line would have printed at every second; the run's true remaining
time at that second is known (the recording says when its last answer arrived). This
script prints the error curve: at 10%, 20%, ... of the run, the ETA shown, the true
remaining time and the relative error, and how long the line said "estimating" after the
first answers had arrived.

``--before RECORDING``: the same table for the progress model of another commit (default
``BEFORE_REF``, the last one before the model was rebuilt), replayed from a recording made
with that commit's code (``record-before``), so both curves are each model on its own
emitters' events.

    # record a run with the current code, and with main's code
    PRE_PROGRESS_RECORD=after.jsonl python -m promptrobust.cli.main run ...
    PYTHONPATH=/path/to/main-checkout python bench/progress_eta.py record-before before.jsonl -- run ...
    # the error curves, side by side
    python bench/progress_eta.py compare after.jsonl --before before.jsonl --out bench/results/progress_eta.md
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import types
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import orjson

CHECKPOINTS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
#: The last commit with the single-file progress model (engine/progress.py) this script compares against.
BEFORE_REF = "324ed8f"


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    fraction: float
    t: float
    remaining: float  # the true remaining time at ``t``
    eta: float | None  # what the line showed (None: estimating)

    @property
    def error(self) -> float | None:
        """(ETA - true remaining) / true remaining."""
        if self.eta is None or self.remaining <= 0:
            return None
        return (self.eta - self.remaining) / self.remaining


@dataclasses.dataclass(frozen=True)
class Curve:
    end: float
    first_answer: float | None  # when the first answer the backend sent arrived
    first_eta: float | None  # when an ETA was first shown after that
    checkpoints: list[Checkpoint]

    def worst_after(self, fraction: float) -> float | None:
        """The largest |relative error| at the checkpoints from ``fraction`` on, once answers had
        arrived (before them nothing is known); inf: one said estimating."""
        start = self.first_answer if self.first_answer is not None else float("inf")
        errors = [abs(c.error) if c.error is not None else float("inf")
                  for c in self.checkpoints if c.fraction >= fraction and c.t >= start]
        return max(errors) if errors else None


def error_curve(replayed: Iterable[Any], fractions: Sequence[float] = CHECKPOINTS) -> Curve:
    """Checkpoints of a replay (``engine.progress.recording.replay``'s items)."""
    looks = list(replayed)
    if not looks:
        return Curve(0.0, None, None, [])
    end = looks[0].end
    first_answer = next((x.t for x in looks if x.status.sent > 0), None)
    first_eta = next((x.t for x in looks if first_answer is not None and x.t >= first_answer
                      and (x.status.eta is not None or x.status.done >= x.status.total)), None)
    points = []
    for f in fractions:
        at = f * end
        seen = [x for x in looks if x.t <= at]
        if not seen:
            continue
        last = seen[-1]
        eta = last.status.eta
        if last.status.total and last.status.done >= last.status.total:
            eta = 0.0
        points.append(Checkpoint(f, last.t, end - last.t, eta))
    return Curve(end, first_answer, first_eta, points)


# -- the progress model of another commit -------------------------------------------------------


def model_of(ref: str) -> types.ModuleType:
    """The single-file progress module of ``ref`` (before the package split), loaded apart."""
    root = Path(__file__).resolve().parents[1]
    source = subprocess.run(["git", "-C", str(root), "show", f"{ref}:engine/progress.py"], capture_output=True,
                            text=True, check=True).stdout
    module = types.ModuleType(f"progress_at_{ref}")
    module.__dict__["__name__"] = module.__name__
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{ref}:engine/progress.py", "exec"), module.__dict__)  # noqa: S102 - our own code of another commit
    return module


def replay_with(module: types.ModuleType, lines: list[dict[str, Any]]) -> Iterable[Any]:
    """Replay ``lines`` through ``module``'s ProgressState, its own event classes built from the lines."""
    from promptrobust.engine.progress.recording import replay

    def make_event(data: dict[str, Any]) -> Any:
        cls = getattr(module, str(data.get("type")), None)
        if cls is None or not dataclasses.is_dataclass(cls):
            return None
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    state = module.ProgressState(lambda: 0.0)
    return replay(lines, state=state, make_event=make_event, make_watch=module.Watch)


# -- recording a run with another commit's code ----------------------------------------------------


def record_before(out: Path, argv: list[str]) -> int:
    """Run ``pre ARGV`` with the code on ``sys.path`` (a checkout of another commit, whose progress
    module cannot record) and record its progress timeline to ``out`` in the same format."""
    import time

    import promptrobust.cli.main as cli
    from promptrobust.engine import progress as old

    if not hasattr(old, "ProgressState") or hasattr(old, "recording"):
        raise SystemExit("record-before wants the code of a commit before engine/progress/recording.py "
                         "(PYTHONPATH=that checkout); this code records itself: PRE_PROGRESS_RECORD=FILE")
    sink = open(out, "wb")  # noqa: SIM115 - closed at the end
    began = time.monotonic()
    sources: list[int] = []
    last: list[list[int]] = []

    def write(line: dict[str, Any]) -> None:
        sink.write(orjson.dumps({"t": round(time.monotonic() - began, 3), **line}) + b"\n")
        sink.flush()

    apply, counts = old.ProgressState.apply, old.ProgressState.counts

    def recording_apply(self: Any, event: Any) -> bool:
        if isinstance(event, old.Watch):
            if id(event.stats) not in sources:
                sources.append(id(event.stats))
                s = event.stats
                write({"event": {"type": "Watch", "source": len(sources) - 1,
                                 "counts": [int(s.completed), int(s.cache_hits), int(s.backend_requests)]}})
        else:
            write({"event": {"type": type(event).__name__, **dataclasses.asdict(event)}})
        return bool(apply(self, event))

    def recording_counts(self: Any) -> tuple[int, int, int]:
        raw = [[int(s.completed), int(s.cache_hits), int(s.backend_requests)] for s, _ in self._stats]
        if raw != last:
            last[:] = raw
            write({"counts": raw})
        return tuple(counts(self))  # type: ignore[return-value]

    old.ProgressState.apply = recording_apply  # type: ignore[method-assign]
    old.ProgressState.counts = recording_counts  # type: ignore[method-assign]
    try:
        return int(cli.main(argv))
    finally:
        write({"end": True})
        sink.close()


# -- the table -------------------------------------------------------------------------------------


def _fmt(value: float | None) -> str:
    return "estimating" if value is None else f"{value:.0f} s"


def _err(value: float | None) -> str:
    return "-" if value is None else f"{value:+.0%}"


def table(curves: dict[str, Curve]) -> list[str]:
    """One row per checkpoint; per model: the true remaining time of its own run, the ETA shown, the error."""
    names = list(curves)
    head = "| share of the run | " + " | ".join(f"{n}: true remaining | ETA | error" for n in names) + " |"
    lines = [head, "|" + "---|" * (1 + 3 * len(names))]
    for f in CHECKPOINTS:
        row = []
        for n in names:
            points = [c for c in curves[n].checkpoints if c.fraction == f]
            row += [_fmt(points[0].remaining), _fmt(points[0].eta), _err(points[0].error)] if points else ["-"] * 3
        lines.append(f"| {f:.0%} | " + " | ".join(row) + " |")
    lines.append("")
    for n in names:
        c = curves[n]
        wait = None if c.first_answer is None or c.first_eta is None else c.first_eta - c.first_answer
        worst = c.worst_after(0.2)
        lines.append(f"- {n}: run {c.end:.0f} s; first answer at {_fmt(c.first_answer)}, first ETA "
                     f"{'never' if wait is None else f'{wait:.0f} s after it'}; worst |error| from 20% on (after the first answer): "
                     f"{'estimating' if worst == float('inf') else f'{worst:.0%}'}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record-before", help="run pre with the code on PYTHONPATH and record its progress")
    rec.add_argument("out", type=Path)
    rec.add_argument("pre_args", nargs=argparse.REMAINDER)
    cmp = sub.add_parser("compare", help="the ETA's error curve of recordings")
    cmp.add_argument("after", type=Path, help="a recording made with this code")
    cmp.add_argument("--before", type=Path, help="a recording made with the code of --ref (record-before)")
    cmp.add_argument("--ref", default=BEFORE_REF, help=f"the commit whose progress model replays --before (default {BEFORE_REF})")
    cmp.add_argument("--title", default="", help="what the recorded run was (for the table)")
    cmp.add_argument("--out", type=Path, help="append the table to this Markdown file")
    args = parser.parse_args(argv)
    if args.command == "record-before":
        pre_args = args.pre_args[1:] if args.pre_args[:1] == ["--"] else args.pre_args
        return record_before(args.out, pre_args)

    from promptrobust.engine.progress.recording import read, replay

    curves = {"after": error_curve(replay(read(args.after)))}
    if args.before is not None:
        curves = {"before": error_curve(replay_with(model_of(args.ref), read(args.before))), **curves}
    text = "\n".join([f"### {args.title or args.after.name}", "", *table(curves), ""])
    print(text)
    if args.out is not None:
        with open(args.out, "a") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
