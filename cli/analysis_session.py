"""What `pre eval`, `pre transfer` and `pre defend` share at run time: the session built
from the flags, the progress line, library errors as one line, and the run folder's
record files."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from promptrobust.cli.errors import UserError
from promptrobust.cli.flag_settings import scheduler_settings


class ProgressLine:
    """The library's progress sink, passed on to the run's progress reporter (``engine.progress``):
    the work is a phase, its counters are watched (the reporter draws them; ``enabled`` is kept
    for callers, the reporter already knows --no-progress)."""

    def __init__(self, enabled: bool, label: str = "") -> None:
        self.enabled = enabled
        self.label = label

    def start(self, total: int, counters: Callable[[], Mapping[str, float]]) -> None:
        from promptrobust.engine import progress

        progress.phase(f"{self.label.strip(' []') or 'scoring'}: {total} requests")
        owner = getattr(counters, "__self__", None)  # stats.snapshot: watch the stats (watched once)
        progress.watch(owner if hasattr(owner, "backend_requests") else _Counters(counters))

    async def stop(self) -> None:
        return None


class _Counters:
    """Counters given as a callable, read as the attributes ``engine.progress`` polls."""

    def __init__(self, read: Callable[[], Mapping[str, float]]) -> None:
        self._read = read

    @property
    def completed(self) -> float:
        return self._read().get("completed", 0)

    @property
    def cache_hits(self) -> float:
        return self._read().get("cache_hits", 0)

    @property
    def backend_requests(self) -> float:
        return self._read().get("backend_requests", 0)


@contextmanager
def library_errors() -> Iterator[None]:
    """Bad input found by the library becomes one line and exit code 2."""
    from promptrobust.engine.analysis.scoring import AnalysisInputError

    try:
        yield
    except AnalysisInputError as exc:
        from promptrobust.cli.errors import one_line

        raise UserError(one_line(exc)) from None


def run_in_session(args: argparse.Namespace, call: Callable[[Any], Any]) -> tuple[Any, dict[str, Any]]:
    """``await call(session)`` on a Session built from the flags, closed afterwards;
    returns the result and the session's facts (model identities, counters) for results.json."""
    from promptrobust.engine.runs.run_results import session_facts
    from promptrobust.engine.runs.session import Session
    from promptrobust.engine.runs.sync import run_sync

    from promptrobust.cli.lm_eval_model import one_batch_size
    from promptrobust.engine.serving.registry import parse_model_args, resolve_model

    if args.model:  # batch size in one place: --batch-size and --model-args batch_size= agree (cli/lm_eval_model.py)
        one_batch_size(resolve_model(args.model, parse_model_args(args.model_args)), args)

    async def go() -> tuple[Any, dict[str, Any]]:
        async with Session(cache=args.cache, settings=scheduler_settings(args), use_cache=not args.no_cache) as session:
            result = await call(session)
            return result, session_facts(session)

    with library_errors():
        return run_sync(go)


def write_records(folder: Any, records: Sequence[Any], sample_log: Sequence[Mapping[str, Any]] = ()) -> int:
    """results.jsonl (+ .parquet) and, with --log-samples, samples.jsonl; returns the sample lines written."""
    folder.write_records(records)
    return folder.write_jsonl("samples.jsonl", sample_log)


def write_results(folder: Any, args: argparse.Namespace, result: Any, facts: Mapping[str, Any], logged: int,
                  configs: Mapping[str, Any]) -> None:
    """results.json: the library result in the one layout (its ``to_dict``), with this command's line."""
    folder.write_results(result.to_dict(
        argv=getattr(args, "argv", ["pre", args.command or ""]), configs=configs, logged=logged, counters=facts["counters"],
    ))
