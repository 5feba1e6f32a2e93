"""A run plan: everything ``pre run`` decides, decided once, before any model loads or folder is made.

    plan = build_plan("openai:gpt-4o-mini", ["sst2", "rte"], evaluation=EvaluationSettings(limit=100),
                      attacks=attack_settings("textbugger,checklist"), scheduler=SchedulerSettings(rpm=500))
    outcome = promptrobust.engine.runs.executor.run_plan(plan)    # or: await execute(plan, session=session)

``build_plan`` checks in the order a user wants to hear of problems, cheapest first, each a
``PromptRobustError`` naming the setting to change: the model and its arguments (values, chat
input, one batch size), the credential of an API model (its key is read, nothing is sent), the
datasets (registry names or ``Task`` values; one target each, as lm-evaluation-harness writes one
result per task; a user's own task from ``TaskChoice``), the data paths, then per target its task,
mode and shots, decided once (``engine.measuring.target.decide_target``; the base-model rule is said
as a note), the prompts and the Semantic attack's prompts from a promptbench checkout. What a plan
decides is what runs: the workbench takes each target as given. ``attack_settings`` turns attack names and options
into validated ``AttackSettings``, building each attack once so that a bad option is said now.
The plan's values (``RunPlan``, ``RunTarget``) and their running live in ``engine.runs.execute``;
the executor (``engine.runs.executor``) runs it as it runs every command's plan.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson

from promptrobust.attacks.needs import check_attack_extras
from promptrobust.attacks.registry import attack_options, get_attack, list_attacks, prompt_set_of, recipe_of
from promptrobust.engine.errors import SettingsError
from promptrobust.engine.measuring.settings import AttackSettings, EvaluationSettings, parse_budget
from promptrobust.engine.measuring.target import MeasurementTarget, decide_target
from promptrobust.engine.measuring.workbench import SemanticPrompts
from promptrobust.engine.runs.execute import RunPlan, RunTarget
from promptrobust.engine.runs.executor import OutputOptions
from promptrobust.engine.runs.run_estimate import estimate_run, format_run_estimate
from promptrobust.engine.runs.notes import Note
from promptrobust.engine.runs.prompt_choice import PROMPT_TYPES, choose_prompts
from promptrobust.engine.runs.run_results import RESULTS_FILE_FORMAT
from promptrobust.engine.runs.task_choice import COLUMN_SETTINGS, TaskChoice
from promptrobust.engine.serving.registry import (
    DEFAULT_MODEL,
    ModelSpec,
    check_available,
    check_values,
    parse_model_args,
    registration_of,
    resolve_model,
)
from promptrobust.engine.serving.prices import load_prices
from promptrobust.engine.serving.scheduler_settings import SchedulerSettings
from promptrobust.tasks.base import Task
from promptrobust.tasks.placeholders import check_no_content_placeholder
from promptrobust.tasks.promptbench_import import load_promptbench_prompts
from promptrobust.tasks.own import resolve_task

__all__ = [
    "COLUMN_SETTINGS", "PromptChoice", "TaskChoice", "attack_settings", "base_model_note", "build_plan", "check_paths", "dry_run",
    "check_results_file", "model_and_scheduler",
]

#: ``attack_settings(names="all")``: every registered attack.
ALL_ATTACKS = "all"


@dataclass(frozen=True)
class PromptChoice:
    """Which prompts a run scores; the first given wins: ``text``, ``promptbench``, ``ids``, else the ``type`` set."""

    ids: tuple[str, ...] = ()
    """Stored prompt ids of the dataset (``pre list prompts --dataset NAME``)."""
    type: str = "task"
    """The stored set to score when no ids are given: task, role, semantic, or all (task + role)."""
    text: str | None = None
    """One literal instruction (prompt id "custom")."""
    promptbench: str | None = None
    """A promptbench checkout whose own prompts of ``type`` are scored (its zero- or few-shot file)."""

    def __post_init__(self) -> None:
        if self.type not in PROMPT_TYPES:
            raise SettingsError(f"prompt_type must be one of {', '.join(PROMPT_TYPES)} (got {self.type!r})")
        if not isinstance(self.ids, tuple) or not all(isinstance(i, str) and i.strip() for i in self.ids):
            raise SettingsError("prompt ids must be a tuple of non-empty ids", setting="prompt")
        if self.text is not None and not (isinstance(self.text, str) and self.text.strip()):
            raise SettingsError("prompt_text is empty: give the instruction text, or none to use the stored prompts")


def dry_run(plan: RunPlan) -> list[str]:
    """What ``plan`` will cost, before it runs (``pre run --dry-run``; ``engine.runs.run_estimate``):
    requests, tokens and US dollars, every candidate on every sample and with racing."""
    return format_run_estimate(plan, estimate_run(plan))


def model_and_scheduler(model: str | ModelSpec = DEFAULT_MODEL, model_args: Mapping[str, Any] | str | None = None,
                        scheduler: SchedulerSettings | None = None, *, chat: bool = False) -> tuple[ModelSpec, SchedulerSettings]:
    """The model resolved with its arguments checked, and the scheduler settings that go with it.

    ``chat``: send inputs as chat messages (lm-eval's ``--apply_chat_template``: the backend's own
    switch, its registration's ``chat_switch``: ``api=chat`` for OpenAI-compatible servers,
    ``chat=true`` in process). Batch size lives in one place: the scheduler's ``batch_size`` and a
    ``batch_size`` model argument mean the same micro-batch and may not disagree (a backend that
    takes a ``batch_size`` argument cuts its passes at that size too)."""
    args = parse_model_args(model_args) if isinstance(model_args, str) or model_args is None else dict(model_args)
    spec = model.with_args(args) if isinstance(model, ModelSpec) else resolve_model(model, args)
    backend = registration_of(spec)
    if chat:
        if backend.chat_switch is None:
            raise SettingsError(f"the {backend.name} backend takes no chat input: drop --apply_chat_template", setting="model_args")
        key, value = backend.chat_switch
        current = spec.args.get(key)
        if current is not None and str(current).lower() not in (str(value).lower(), "auto"):
            raise SettingsError(f"chat input and the model argument {key}={current} disagree: give one", setting="model_args")
        spec = replace(spec, args={**spec.args, key: value})
    check_values(spec)  # bad values fail before any model loads or folder is made
    scheduler = scheduler or SchedulerSettings()
    given, in_args = scheduler.batch_size, spec.args.get("batch_size")
    if given is not None and in_args is not None and int(in_args) != given:
        raise SettingsError(f"batch_size {given} and the model argument batch_size={in_args} disagree: "
                            "batch size is set in one place, batch_size", setting="batch_size")
    size = given if given is not None else (int(in_args) if in_args is not None else None)
    if size is not None:
        scheduler = replace(scheduler, batch_size=size)
        if "batch_size" in backend.argument_names:  # the backend cuts its forward passes at this size too
            spec = replace(spec, args={**spec.args, "batch_size": size})
    if scheduler.price is None and backend.http_api:  # an API model's cost: the shipped price table's figure, if it lists it
        scheduler = replace(scheduler, price=load_prices().price_of(spec.name))
    return spec, scheduler


def attack_settings(names: str | Sequence[str] | None, *, options: Sequence[str] = (), budget: str | int | None = None,
                    holdout: float | None = None, **fields: Any) -> AttackSettings | None:
    """Validated ``AttackSettings`` for ``names`` (comma-separated or a list; 'all': every attack), or
    None without attacks. ``options``: "KEY=VALUE" items, each given to the named attacks that take
    KEY; every attack is built once with them, so a bad value is said before any model loads.
    ``budget``: a number or 'unlimited'; ``fields``: the other ``AttackSettings`` fields."""
    if names is None:
        if holdout is not None:
            raise SettingsError("holdout splits the samples of the attack protocol: add an attack, or drop the holdout",
                                setting="holdout")
        return None
    chosen = _attack_names(names)
    per_attack = _split_options(chosen, options)
    check_attack_extras(chosen)  # a word attack on the lean install: its extra, named now
    _check_meaning_nli(fields.get("meaning_nli"))
    for name in chosen:
        get_attack(name, **per_attack[name])  # no resources load; a bad option value fails here
    return AttackSettings(attacks=tuple(chosen), budget=parse_budget(budget), holdout=holdout,
                          options={k: v for k, v in per_attack.items() if v}, **fields)


def _check_meaning_nli(model: object) -> None:
    """A ``meaning_nli`` written as a path (``/``, ``./``, ``../``, ``~``) must be a folder: said now, not
    after the first attack's search. A Hugging Face id is looked up when the first attack starts."""
    if not isinstance(model, str) or not model.strip():
        return
    if model.startswith(("/", "./", "../", "~")) and not Path(model).expanduser().is_dir():
        raise SettingsError(f"no NLI model folder at {model}: pass a folder with config.json and weights, or a "
                            "Hugging Face id such as cross-encoder/nli-deberta-v3-base", setting="meaning_nli")


def _attack_names(names: str | Sequence[str]) -> list[str]:
    known = [name for name, _ in list_attacks()]
    if isinstance(names, str) and names.strip().lower() == ALL_ATTACKS:
        return known
    items = names.split(",") if isinstance(names, str) else list(names)
    chosen = list(dict.fromkeys(n.strip().lower() for n in items if n.strip()))
    if not chosen:
        raise SettingsError(f"attacks is empty: use one of {', '.join(known)} or 'all'")
    unknown = [n for n in chosen if n not in known]
    if unknown:
        raise SettingsError(f"unknown attack {unknown[0]!r}: use one of {', '.join(known)} or 'all'", setting="attacks")
    return chosen


def _split_options(names: Sequence[str], items: Sequence[str]) -> dict[str, dict[str, str]]:
    """KEY=VALUE items among the chosen attacks that take KEY."""
    per_attack: dict[str, dict[str, str]] = {n: {} for n in names}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SettingsError(f"attack option {item!r} is not KEY=VALUE (example: mlm=/models/bert)", setting="attack_options")
        takers = [n for n in names if key in attack_options(n)]
        if not takers:
            raise SettingsError(f"attack option {key}: none of {', '.join(names)} takes it; see `pre list attacks`",
                                setting="attack_options")
        for n in takers:
            per_attack[n][key] = value.strip()
    return per_attack


def build_plan(
    model: str | ModelSpec = DEFAULT_MODEL,
    datasets: Sequence[str | Task] = ("rotten_tomatoes",),
    *,
    model_args: Mapping[str, Any] | str | None = None,
    chat: bool = False,
    evaluation: EvaluationSettings | None = None,
    prompts: PromptChoice | None = None,
    attacks: AttackSettings | None = None,
    scheduler: SchedulerSettings | None = None,
    output: OutputOptions | None = None,
    ready: bool = True,
) -> RunPlan:
    """Decide a run (see the module docstring); nothing is loaded but the small prompt files.
    ``datasets``: registry names (aliases accepted) or ``Task`` values, one run folder each;
    ``evaluation``'s own dataset is replaced by each target's. ``ready=False`` (a dry run, which only
    estimates) does not ask that the model can run from here: no API key or backend extra needed."""
    spec, scheduler = model_and_scheduler(model, model_args, scheduler, chat=chat)
    if ready:
        check_available(spec)  # a missing extra or API key is said before any data loads (the key is read, nothing sent)
    evaluation = evaluation or EvaluationSettings()
    prompts = prompts or PromptChoice()
    tasks = _tasks(datasets)
    check_paths(data_dir=evaluation.data_dir, data_file=evaluation.data_file, promptbench=prompts.promptbench)
    check_adversarial_samples(evaluation.adversarial_samples, attacks)
    output = output or OutputOptions()
    if output.results_file:
        check_results_file(output.results_file)
    attacks = with_promptbench_checklist(attacks, prompts.promptbench)
    targets = tuple(_target(spec, task, evaluation, prompts, attacks) for task in tasks)
    note = base_model_note(spec, targets[0].measured)
    notes: tuple[Note, ...] = (note,) if note is not None else ()
    return RunPlan(model=spec, targets=targets, scheduler=scheduler, attacks=attacks, output=output, notes=notes)


def check_adversarial_samples(source: str | None, attacks: AttackSettings | None) -> None:
    """The joint attack's adversarial samples: a file that exists, or 'hub'; and an attack to run on them."""
    if source is None:
        return
    if attacks is None:
        raise SettingsError("adversarial samples are for the joint attack on prompt and sample: add --attack",
                            setting="adversarial_samples")
    if source != "hub" and not Path(source).expanduser().is_file():
        raise SettingsError(f"adversarial samples {source}: no such file; give a file in AdvGLUE's layout (or rows in "
                            "the task's columns), or 'hub' for adv_glue", setting="adversarial_samples")


def with_promptbench_checklist(attacks: AttackSettings | None, checkout: str | None) -> AttackSettings | None:
    """With ``--promptbench CHECKOUT``, CheckList inserts the checkout's own fixed strings (the paper's
    50), as the Semantic attack scores its semantic set; options the user gave for the strings win
    (``Recipe.promptbench_options``)."""
    if attacks is None or not checkout:
        return attacks
    options = dict(attacks.options)
    for name in attacks.attacks:
        taken = recipe_of(name).promptbench_options(options.get(name, {}), checkout)
        if taken is not None:
            get_attack(name, **taken)  # an unreadable checkout is said before any model loads
            options[name] = {key: str(value) for key, value in taken.items()}
    return attacks if options == dict(attacks.options) else attacks.with_(options=options)


def base_model_note(spec: ModelSpec, target: MeasurementTarget) -> Note | None:
    """What the paper's base-model rule did when the target was decided (no shots given, a base
    model: 3-shot), said before anything is scored; None when it did nothing."""
    if not target.shots_by_rule:
        return None
    return Note(f"{spec.name} is a base model: {target.shots}-shot, as the paper evaluates base models; "
                "set shots to 0 for zero-shot", setting="shots")


def _tasks(datasets: Sequence[str | Task] | str) -> list[Task]:
    items = [datasets] if isinstance(datasets, (str, Task)) else list(datasets)
    names = [d for d in items if isinstance(d, Task) or (isinstance(d, str) and d.strip())]
    if not names:
        raise SettingsError("dataset is empty: give a dataset name (see `pre list datasets`)")
    tasks: dict[str, Task] = {}
    for d in names:  # each name is checked before anything runs; a name given twice runs once
        task = resolve_task(d if isinstance(d, Task) else d.strip())  # a name, a task file, or a Task value
        tasks.setdefault(task.name, task)
    return list(tasks.values())


def check_paths(**paths: str | None) -> None:
    """Paths given by setting (``data_file=...``) that do not exist fail before any model is loaded."""
    for setting, path in paths.items():
        if path and not os.path.exists(path):
            raise SettingsError(f"{setting} {path} does not exist", setting=setting)


def check_results_file(path: str) -> None:
    """A results file may replace an earlier one (its run folders stay), never a folder or another file."""
    if os.path.isdir(path):
        raise SettingsError(f"{path} is a folder: give a new .json file for the results, or a folder for the run folders",
                            setting="output_dir")
    if os.path.lexists(path):
        try:
            ours = orjson.loads(Path(path).read_bytes()).get("format") == RESULTS_FILE_FORMAT
        except (OSError, ValueError, AttributeError):
            ours = False
        if not ours:
            raise SettingsError(f"{path} exists and is not a results file pre wrote: give another file name",
                                setting="output_dir")


def _target(spec: ModelSpec, task: Task, evaluation: EvaluationSettings, choice: PromptChoice,
            attacks: AttackSettings | None) -> RunTarget:
    measured = decide_target(evaluation, base_model=spec.base_model, strict=True, task=task)
    task = measured.task
    chosen = choose_prompts(task, prompt_ids=",".join(choice.ids) or None, prompt_type=choice.type, text=choice.text,
                            promptbench=choice.promptbench, shots=measured.shots)  # bad prompt ids fail before any model loads
    semantic = None
    prompt_set = next((s for s in map(prompt_set_of, attacks.attacks) if s), None) if attacks is not None else None
    if prompt_set is not None and choice.promptbench:
        found = load_promptbench_prompts(choice.promptbench, task.name, types=[prompt_set],
                                         shot="few" if measured.shots else "zero")
        check_no_content_placeholder((p.id, p.text) for p in found)
        semantic = SemanticPrompts([(p.language, p.text) for p in found], f"promptbench checkout {choice.promptbench}")
    return RunTarget(measured=measured, prompts=tuple(chosen), semantic_prompts=semantic)
