"""The flag groups of the commands, and the settings values built from the parsed flags.

A setting is spelled once, in its settings class: its flag is the field's name with dashes
(``errors.FLAG_OF`` names the few exceptions), the flag's default is the field's default, its
help is the docstring under the field, and the parsed flags become the settings value itself,
whose ``__post_init__`` validates them (a bad value is one line naming the flag, exit code 2).
"""

from __future__ import annotations

import argparse
import ast
import functools
import os
import inspect
import textwrap
import types
import typing
from dataclasses import MISSING, fields
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar

from promptrobust.cli.errors import UserError, flag_for
from promptrobust.cli.lm_eval import generation_fields, limit_value
from promptrobust import AttackSettings, EvaluationSettings, SchedulerSettings
from promptrobust.engine.runs.catalog import BUILT_IN_BACKENDS, DEFAULT_DATASET, DEFAULT_MODEL
from promptrobust.engine.runs.catalog import PROMPT_TYPES as catalog_prompt_types

if TYPE_CHECKING:  # the plans load what they plan with: read when a command runs, not for --help
    from promptrobust.engine.analysis.commands import SourceSettings
    from promptrobust.engine.runs.executor import OutputOptions
    from promptrobust.engine.runs.plan import TaskChoice
    from promptrobust.engine.runs.task_choice import Target

#: The prompt sets a command may take (catalog.PROMPT_TYPES), or all (task + role).
PROMPT_TYPES = (*catalog_prompt_types, "all")


class Subcommands(Protocol):
    """The subcommand table ``pre``'s parser hands each command's ``add_parser`` (argparse's
    ``add_subparsers()`` value, whose class is private)."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser: ...

#: What a flag adds to its field's docstring (the command line's own ways of setting it).
EXTRA_HELP = {
    "batch_size": "--model-args batch_size= means the same; the one place to set it",
}


#: A frozen settings value whose fields name the flags (``settings_from``).
SettingsT = TypeVar("SettingsT")


@functools.cache
def field_docs(kind: type) -> dict[str, str]:
    """The docstring under each field of a dataclass (the vLLM ``SamplingParams`` habit), read from its source."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(kind)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, after in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr) \
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def _help(kind: type, name: str) -> str:
    """The field's docstring as flag help: "None: X" (Python's absence) reads "default: X"."""
    text = field_docs(kind).get(name, "").rstrip(".").replace("None: ", "default: ").replace("``", "")
    if text[1:2].islower():  # "Seed for ..." -> "seed for ...", but "CPUs each ..." stays
        text = text[:1].lower() + text[1:]
    text = text.replace("%", "%%")  # argparse formats help with %: a docstring's "8%" is text
    return f"{text} ({EXTRA_HELP[name]})" if name in EXTRA_HELP else text


def _type_and_choices(annotation: Any) -> tuple[Any, tuple[Any, ...] | None]:
    """argparse's type and choices for a field annotation (``int | None`` -> int, a Literal -> its values)."""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    args = [a for a in typing.get_args(annotation) if a is not type(None)] if union else [annotation]
    inner = args[0] if len(args) == 1 else annotation
    if typing.get_origin(inner) is Literal:
        return str, typing.get_args(inner)
    return (inner if inner in (int, float, str) else str), None


def add_field(g: argparse._ArgumentGroup, kind: type, name: str, **overrides: object) -> None:
    """The flag of one settings field: name, type, choices, default and help derived from the field."""
    field = next(f for f in fields(kind) if f.name == name)
    kind_type, choices = _type_and_choices(typing.get_type_hints(kind)[name])
    spec: dict[str, Any] = {"dest": name, "type": kind_type, "help": _help(kind, name),
                            "default": None if field.default is MISSING else field.default}
    if choices:
        spec["choices"] = choices
    else:
        spec["metavar"] = flag_for(name)[2:].upper().replace("-", "_")
    spec.update(overrides)
    if spec["default"] is argparse.SUPPRESS and field.default not in (MISSING, None):  # absent unless given: say the default
        spec["help"] += f" (default: {field.default})"
    g.add_argument(flag_for(name), **spec)


def settings_from(args: argparse.Namespace, kind: type[SettingsT], **values: object) -> SettingsT:
    """``kind`` built from the flags named like its fields (``values`` win); its checks validate them."""
    given = {f.name: getattr(args, f.name) for f in fields(kind) if hasattr(args, f.name)}  # type: ignore[arg-type]
    return kind(**{**given, **values})


def add_model_arguments(g: argparse._ArgumentGroup, *, default: str | None = DEFAULT_MODEL) -> None:
    g.add_argument("--model", default=default,
                   help=f"registry name, HF id/folder, or BACKEND:ID ({', '.join(BUILT_IN_BACKENDS)}, or a plugin's)")
    g.add_argument("--model-args", default="",
                   help="backend arguments key=value,... e.g. dtype=bfloat16,batch_size=8 or base_url=http://host:8000/v1 "
                        "(what each backend takes: `pre list backends`)")


def add_data_arguments(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--dataset", default=None,
                   help="dataset name, or several comma-separated (one run folder each; see `pre list datasets`); "
                        "a task file; or hf:PATH with --input-column etc. (default: rotten_tomatoes)")
    for name in ("data_dir", "data_file"):
        add_field(g, EvaluationSettings, name)
    add_field(g, EvaluationSettings, "limit", type=limit_value)
    for name in ("shots", "seed", "sample_selection"):
        add_field(g, EvaluationSettings, name)


def add_task_arguments(p: argparse.ArgumentParser) -> None:
    """Your own task (docs/your-task.md): a task file, or a data file's columns (``TaskChoice``)."""
    from promptrobust.engine.runs.task_choice import TaskChoice  # a settings value: cheap to read for --help

    g = p.add_argument_group("your own task (docs/your-task.md): a task file, or --data-file FILE (or --dataset hf:PATH) "
                             "with its columns")
    from promptrobust.engine.runs.task_choice import LISTS

    add_field(g, TaskChoice, "task", metavar="FILE")
    for f in fields(TaskChoice):
        if f.name in LISTS:  # repeatable, or comma-separated
            add_field(g, TaskChoice, f.name, action="append", default=None)
        elif f.name != "task":
            add_field(g, TaskChoice, f.name)


def add_query_arguments(g: argparse._ArgumentGroup) -> None:
    for name in ("mode", "parser", "max_new_tokens"):
        add_field(g, EvaluationSettings, name)


def add_scheduler_arguments(g: argparse._ArgumentGroup) -> None:
    """Every limit of the model's scheduler (``SchedulerSettings``), one flag per field; its price as IN,OUT."""
    for f in fields(SchedulerSettings):
        if f.name != "price":
            add_field(g, SchedulerSettings, f.name)
    g.add_argument("--price-per-mtok", default=None, metavar="IN,OUT",
                   help="US dollars per million input and output tokens of an API model (default: the price table "
                        "shipped with pre, for the models it lists): the cost said while it runs and in results.json")


def add_output_arguments(g: argparse._ArgumentGroup) -> None:
    """Where answers and run folders go, and what is shown while running."""
    g.add_argument("--cache", default=None, help="score cache file (default: ~/.cache/promptrobust/scores.sqlite or $PRE_CACHE_DIR)")
    g.add_argument("--no-cache", action="store_true", help="do not read or write the score cache")
    g.add_argument("--output-dir", default="runs", help="folder that receives one run folder per dataset")
    g.add_argument("--log-samples", action="store_true", help="write samples.jsonl with every input, answer and score")
    add_no_progress(g)


def add_no_progress(g: argparse._ArgumentGroup | argparse.ArgumentParser) -> None:
    """``--no-progress``: on every command that queries a model (``cli/main.py`` picks the reporter by it)."""
    g.add_argument("--no-progress", action="store_true",
                   help="no progress line or phase lines; one status line every 30 s still shows a long job is alive "
                        "($PRE_PROGRESS_EVERY seconds; PRE_PROGRESS=off for none)")


def add_attack_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("attacks (see `pre list attacks`)")
    g.add_argument("--attack", default=None, help="attack name, comma-separated names, or 'all'")
    add_field(g, AttackSettings, "top_k")
    add_field(g, AttackSettings, "budget", type=str, default="unlimited")
    add_field(g, AttackSettings, "early_stopping")
    for name in ("error_rate", "racing_tolerance", "chunk_size"):
        add_field(g, AttackSettings, name)
    add_field(g, AttackSettings, "holdout", metavar="FRACTION",
              help=_help(AttackSettings, "holdout") + " (e.g. --limit 200 --holdout 0.5)")
    add_field(g, AttackSettings, "meaning_nli", metavar="MODEL")
    g.add_argument("--attack-option", dest="attack_options", action="append", default=[], metavar="KEY=VALUE",
                   help="attack setting, repeatable (e.g. mlm=/models/bert-base-uncased for bertattack); see `pre list attacks`")


def add_analysis_arguments(p: argparse.ArgumentParser, *, from_records: bool = False) -> None:
    """Model, data, prompt type, query, scheduler and output flags of eval, transfer and defend."""
    g = p.add_argument_group("model and data")
    add_model_arguments(g, default=None if from_records else DEFAULT_MODEL)
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


def datasets(args: argparse.Namespace) -> list[str]:
    """``--dataset a,b``: several datasets in one command (none given: an empty list)."""
    return [d.strip() for d in str(args.dataset or "").split(",") if d.strip()]


def task_choice(args: argparse.Namespace) -> TaskChoice:
    """``TaskChoice`` from --task and the column flags (none given: the datasets named)."""
    from promptrobust.engine.runs.task_choice import TaskChoice

    from promptrobust.engine.runs.task_choice import LISTS

    lists = {name: tuple(getattr(args, name, None) or ()) for name in LISTS}
    return settings_from(args, TaskChoice, **lists)


def targets(args: argparse.Namespace) -> list[Target]:
    """What the command measures: --task FILE, --data-file (or --dataset hf:PATH) with its columns, or --dataset names
    (a free-text task given by its columns takes --prompt-text as its prompt); messages name the flags."""
    return task_choice(args).targets(datasets(args), getattr(args, "data_file", None),
                                     prompt_text=getattr(args, "prompt_text", None), spell=flag_for)


def evaluation_settings(args: argparse.Namespace, target: Target | None = None) -> EvaluationSettings:
    """``EvaluationSettings`` from the data and query flags (and lm-eval's --gen_kwargs, --system_instruction)
    for ``target`` (a dataset name, or a user's own task; default: the first --dataset)."""
    target = target if target is not None else (datasets(args) or [DEFAULT_DATASET])[0]
    what = {"dataset": target} if isinstance(target, str) else {"dataset": target.name, "task": target}
    return settings_from(args, EvaluationSettings, **what, **generation_fields(args))


def scheduler_settings(args: argparse.Namespace) -> SchedulerSettings:
    return settings_from(args, SchedulerSettings, price=getattr(args, "price_per_mtok", None))


def source_settings(args: argparse.Namespace) -> SourceSettings:
    """``SourceSettings`` from the flags: every flag left out means "the record's own"."""
    from promptrobust.engine.analysis.commands import SourceSettings

    attacks = tuple(a.strip() for a in (args.attack or "").split(",") if a.strip())
    return settings_from(args, SourceSettings, attacks=attacks)


def output_options(args: argparse.Namespace, *, results_file: bool = False) -> OutputOptions:
    """Where the command's folders go, and what they record: the command line and the flags.
    ``results_file``: the command writes one results file when ``--output-dir`` (lm-eval's
    ``--output_path``) names a ``.json`` file, its run folders beside it; elsewhere such a name
    is refused instead of becoming a folder called ``results.json``."""
    from promptrobust.engine.runs.executor import OutputOptions

    output_dir, target = args.output_dir, None
    if str(output_dir).endswith(".json"):
        if not results_file:
            raise UserError(f"--output-dir {output_dir}: pre {args.command} writes a run folder; give a folder "
                            "(a .json results file is pre run's, as lm-eval's --output_path)")
        output_dir, target = os.path.dirname(output_dir) or ".", output_dir
    return OutputOptions(output_dir=output_dir, cache=getattr(args, "cache", None),
                         use_cache=not getattr(args, "no_cache", False), log_samples=getattr(args, "log_samples", False),
                         command=tuple(getattr(args, "argv", ["pre", args.command or ""])), config=flag_values(args),
                         results_file=target)


def flag_values(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed command line as config.json holds it (no handler objects; the library removes credentials)."""
    return {k: v for k, v in sorted(vars(args).items()) if k not in ("handler", "command")}
