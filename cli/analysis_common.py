"""What `pre eval`, `pre transfer` and `pre defend` share: their flag groups, the
settings built from them and the printing helpers (the session, the progress line
and the run folder's record files are ``cli/analysis_session.py``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from promptrobust.cli.common import (
    add_data_arguments,
    add_model_arguments,
    add_output_arguments,
    add_query_arguments,
    add_scheduler_arguments,
)
from promptrobust.cli.flag_settings import check_paths
from promptrobust.cli.errors import UserError

PROMPT_TYPES = ("task", "role", "semantic", "all")

FROM_RECORDS_NOTE = """\
Data and query flags left out (--dataset, --limit, --seed, --shots, --mode,
--parser, --max-tokens, --data-dir/--data-file) take each source record's own
value, so a prompt is re-measured as it was made; a base model gets at least
3 shots (the paper)."""


def add_arguments(p: argparse.ArgumentParser, *, from_records: bool = False) -> None:
    """Model, data, query, scheduler and output flags (cli.common's groups)."""
    g = p.add_argument_group("model and data")
    add_model_arguments(g, default=None if from_records else "")
    add_data_arguments(g)
    g.add_argument("--prompt-type", default="all", choices=PROMPT_TYPES, help="only prompts of this type (task, role, semantic)")
    g = p.add_argument_group("how to query the model")
    add_query_arguments(g)
    add_scheduler_arguments(g)
    add_output_arguments(p.add_argument_group("where things go"))
    if from_records:
        p.set_defaults(dataset=None, seed=None, mode=None, parser=None)


def add_source_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--source", nargs="+", required=True, metavar="RUN_DIR", help="run folders (or folders of them) with attack records")
    p.add_argument("--attack", default=None, help="only records of these attacks (comma-separated)")


def source_settings(args: argparse.Namespace) -> Any:
    """``SourceSettings`` from the flags: every flag left out means "the record's own"."""
    from promptrobust.engine.analysis.sources import SourceSettings

    check_paths(args)
    if isinstance(args.limit, float):
        raise UserError(f"--limit {args.limit}: a fraction of the dataset is taken by `pre run`; here give a number of samples")
    return SourceSettings(
        dataset=args.dataset, limit=args.limit, seed=args.seed, shots=args.shots, mode=args.mode, parser=args.parser,
        max_new_tokens=args.max_tokens, data_dir=args.data_dir, data_file=args.data_file,
        attacks=tuple(a.strip() for a in (args.attack or "").split(",") if a.strip()), prompt_type=args.prompt_type,
    )


def model_args(args: argparse.Namespace) -> dict[str, Any]:
    from promptrobust.engine.serving.registry import parse_model_args

    return parse_model_args(args.model_args)


def print_notes(notes: Sequence[str]) -> None:
    for note in notes:
        print(f"pre: {note}", file=sys.stderr)


def ci_text(ci: Sequence[float] | None) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "-"


def short(text: str, width: int = 60) -> str:
    one = " ".join(text.split())
    return one if len(one) <= width else one[: width - 1] + "…"
