"""Settings values from the parsed flags, and the checks on flags that come before any model loads.

Each ``*_settings(args)`` turns the flags of ``cli/common.py`` into the validated
settings value the library takes. A command never validates a number itself: the
settings' ``__post_init__`` does, and a bad value becomes one line (naming the flag)
and exit code 2.
"""

from __future__ import annotations

import argparse
from typing import Any

from promptrobust.cli.errors import flag_for
from promptrobust.engine.measuring.settings import AttackSettings, EvaluationSettings, parse_budget
from promptrobust.engine.errors import SettingsError
from promptrobust.engine.serving.scheduler_settings import SchedulerSettings


#: settings field -> the flag that sets it (so an error names what the user typed; the one
#: naming rule is ``cli.errors.flag_for``)
FLAGS = {
    name: flag_for(name)
    for name in (
        "limit", "seed", "shots", "mode", "parser", "max_new_tokens", "concurrency", "batch_size", "rpm", "tpm",
        "max_retries", "request_timeout", "top_k", "budget", "chunk_size", "early_stopping", "dataset",
        "sample_selection", "holdout",
    )
}


def _flag_error(exc: SettingsError) -> SettingsError:
    text = str(exc)
    field_name = text.split(" ", 1)[0]
    if field_name in FLAGS:
        text = FLAGS[field_name] + text[len(field_name):]
    return SettingsError(text)


def _build(kind: Any, **values: Any) -> Any:
    try:
        return kind(**values)
    except SettingsError as exc:
        raise _flag_error(exc) from None


def scheduler_settings(args: argparse.Namespace) -> SchedulerSettings:
    return _build(SchedulerSettings,
        concurrency=args.concurrency,
        batch_size=args.batch_size,
        rpm=args.rpm,
        tpm=args.tpm,
        max_retries=getattr(args, "max_retries", SchedulerSettings.max_retries),
        request_timeout=getattr(args, "request_timeout", None),
    )


def dataset_names(text: str) -> list[str]:
    """``--dataset a,b``: several datasets in one command (each checked before anything runs)."""
    from promptrobust.cli.errors import UserError
    from promptrobust.tasks.registry import get_task

    names = [d.strip() for d in str(text).split(",") if d.strip()]
    if not names:
        raise UserError("--dataset is empty: give a dataset name (see `pre list datasets`)")
    return list(dict.fromkeys(get_task(d).name for d in names))


def evaluation_settings(args: argparse.Namespace, *, limit: Any = "args") -> EvaluationSettings:
    return _build(EvaluationSettings,
        dataset=args.dataset.split(",")[0].strip() if isinstance(args.dataset, str) else args.dataset,
        limit=args.limit if limit == "args" else limit,
        seed=args.seed,
        shots=args.shots,
        mode=args.mode,
        parser=args.parser,
        max_new_tokens=getattr(args, "max_tokens", None),
        data_dir=getattr(args, "data_dir", None),
        data_file=getattr(args, "data_file", None),
        sample_selection=getattr(args, "sample_selection", "seeded"),
    )


def attack_settings(args: argparse.Namespace, names: list[str], options: dict[str, dict[str, str]]) -> AttackSettings:
    try:
        budget = parse_budget(args.budget)
    except SettingsError as exc:
        raise _flag_error(exc) from None
    return _build(
        AttackSettings,
        attacks=tuple(names),
        top_k=args.top_k,
        budget=budget,
        early_stopping=args.early_stopping,
        chunk_size=args.chunk_size,
        options={k: v for k, v in options.items() if v},
        holdout=getattr(args, "holdout", None),
    )


def config_of(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed command line as written to config.json (no handler objects, no credentials)."""
    from promptrobust.engine.safe_io.redact import scrub

    skip = {"handler", "command"}
    return scrub({k: v for k, v in sorted(vars(args).items()) if k not in skip})  # no credentials in base URLs


def check_paths(args: argparse.Namespace) -> None:
    """Data paths that do not exist fail before any model is loaded."""
    import os

    from promptrobust.cli.errors import UserError

    for flag in ("data_dir", "data_file", "promptbench", "promptbench_adv"):
        path = getattr(args, flag, None)
        if path and not os.path.exists(path):
            raise UserError(f"--{flag.replace('_', '-')} {path} does not exist")


def report_sample_count(bench: Any, evaluation: EvaluationSettings) -> None:
    """Say so when --limit asks for more samples than the dataset has."""
    import sys

    if evaluation.limit is not None and len(bench.samples) < evaluation.limit:
        print(
            f"pre: {bench.task.name} has {len(bench.samples)} samples; using all {len(bench.samples)} (--limit {evaluation.limit})",
            file=sys.stderr,
        )
