"""A run plan: everything ``pre run`` decides, decided once, before any model loads or folder is made.

    plan = build_plan("openai:gpt-4o-mini", ["sst2", "rte"], evaluation=EvaluationSettings(limit=100),
                      attacks=attack_settings("textbugger,checklist"), scheduler=SchedulerSettings(rpm=500))
    outcome = promptrobust.engine.runs.api.run_plan(plan)        # or: await session.run(plan)

``build_plan`` checks in the order a user wants to hear of problems, cheapest first, each a
``PromptRobustError`` naming the setting to change: the model and its arguments (values, chat
input, one batch size), the credential of an API model (its key is read, nothing is sent), the
datasets (registry names or ``Task`` values; one target each, as lm-evaluation-harness writes one
result per task; a user's own task from ``TaskChoice``), the data paths, then per target the mode (``engine.measuring.mode``, the one
decision), the shots (the paper's base-model rule, with a note), the prompts and the Semantic
attack's prompts from a promptbench checkout. ``attack_settings`` turns attack names and options
into validated ``AttackSettings``, building each attack once so that a bad option is said now.
Running it is ``engine.runs.execute``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from promptrobust.attacks.needs import check_attack_extras
from promptrobust.attacks.registry import attack_options, get_attack, list_attacks
from promptrobust.engine.errors import SettingsError
from promptrobust.engine.measuring.mode import decide_mode
from promptrobust.engine.measuring.settings import AttackSettings, EvaluationSettings, Mode, parse_budget
from promptrobust.engine.measuring.workbench import SemanticPrompts, with_selection
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
from promptrobust.engine.serving.scheduler_settings import SchedulerSettings
from promptrobust.tasks.base import Prompt, Task
from promptrobust.tasks.placeholders import check_no_content_placeholder
from promptrobust.tasks.promptbench_import import load_promptbench_prompts
from promptrobust.tasks.own import OwnTask, resolve_task
from promptrobust.tasks.registry import get_task, list_tasks

__all__ = [
    "COLUMN_SETTINGS", "Note", "OutputOptions", "PromptChoice", "RunPlan", "RunTarget", "TaskChoice", "attack_settings",
    "base_model_note", "build_plan", "check_paths", "check_results_file", "model_and_scheduler",
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


@dataclass(frozen=True)
class OutputOptions:
    """Where a run's answers and folders go, and what its folder records."""

    output_dir: str = "runs"
    """Folder that receives one run folder per target."""
    cache: str | None = None
    """Score cache file; None: the default cache (``engine.serving.cache.default_cache_path``)."""
    use_cache: bool = True
    """Read and write the score cache."""
    log_samples: bool = False
    """Write samples.jsonl: every input, answer and score (with attacks: the clean and final prompt of each record)."""
    command: tuple[str, ...] | None = None
    """The command recorded in results.json (secrets redacted); None: this process's command line."""
    config: Mapping[str, Any] = field(default_factory=dict)
    """config.json: the caller's own options (the CLI's parsed flags); empty: the plan's settings."""
    results_file: str | None = None
    """Also one JSON file with every target's results (lm-eval's ``--output_path FILE.json``), written
    when the run ends (``engine.runs.run_results.results_file_document``); None: none."""

    def __post_init__(self) -> None:
        if not (isinstance(self.output_dir, str) and self.output_dir.strip()):
            raise SettingsError("output_dir must be a folder name")
        if self.results_file is not None and not str(self.results_file).endswith(".json"):
            raise SettingsError(f"results_file {self.results_file} must end in .json", setting="output_dir")


@dataclass(frozen=True)
class RunTarget:
    """One dataset (or a user's task) of a plan: one run folder, one result."""

    task: Task
    """The task measured; ``evaluation.dataset`` is its name, the name records carry."""
    evaluation: EvaluationSettings
    """The plan's evaluation settings with this target's dataset."""
    mode: Mode
    """The mode as the task decides it (a backend without label log-probs still generates; said when it starts)."""
    shots: int
    """Worked examples before each sample (the base-model rule applied)."""
    prompts: tuple[Prompt, ...]
    """The prompts scored (and, with attacks, ranked)."""
    semantic_prompts: SemanticPrompts | None = None
    """The Semantic attack's prompts from a promptbench checkout; None: the built-in set."""

    def __post_init__(self) -> None:
        if self.evaluation.dataset != self.task.name:
            raise SettingsError(f"dataset {self.evaluation.dataset!r} is not the target's task {self.task.name!r}")
        if not self.prompts:
            raise SettingsError(f"no prompts to score on {self.task.name}", setting="prompt_type")

    @property
    def label_scoring(self) -> bool:
        """Whether mode choices (label log-probs) can score this target: the one mode decision asked
        for it (a task with free-text answers cannot)."""
        return decide_mode("choices", self.task) == "choices"


@dataclass(frozen=True)
class RunPlan:
    """What a run does, decided: the model, one target per dataset, the attacks, the limits and outputs."""

    model: ModelSpec
    """The resolved model (arguments checked, chat input and batch size applied)."""
    targets: tuple[RunTarget, ...]
    """One per dataset, in the order given."""
    scheduler: SchedulerSettings
    """Limits of the model's scheduler (its batch size agreeing with the model's arguments)."""
    attacks: AttackSettings | None = None
    """The protocol's attacks (rank the prompts, attack the top k); None: clean scores only."""
    output: OutputOptions = field(default_factory=OutputOptions)
    """Where answers and folders go."""
    notes: tuple[Note, ...] = ()
    """What the plan decided that a user should hear (the base-model rule); a run says them once its model is up."""

    def __post_init__(self) -> None:
        if not self.targets:
            raise SettingsError("a run plan needs at least one dataset", setting="dataset")
        if self.attacks is not None and not self.attacks.attacks:
            raise SettingsError("attacks is empty: give attack names, or no attack settings for clean scores")

    def describe(self) -> dict[str, Any]:
        """The plan's settings as config.json holds them when no caller options are given."""
        return {
            "model": self.model.name, "backend": self.model.backend, "model_args": dict(self.model.args),
            "datasets": [t.task.name for t in self.targets], "evaluation": self.targets[0].evaluation.config(),
            "scheduler": self.scheduler, "attack": self.attacks, "prompts": {t.task.name: [p.id for p in t.prompts] for t in self.targets},
            "output": {"output_dir": self.output.output_dir, "cache": self.output.cache, "use_cache": self.output.use_cache,
                       "log_samples": self.output.log_samples},
        }


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
    for name in chosen:
        get_attack(name, **per_attack[name])  # no resources load; a bad option value fails here
    return AttackSettings(attacks=tuple(chosen), budget=parse_budget(budget), holdout=holdout,
                          options={k: v for k, v in per_attack.items() if v}, **fields)


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
) -> RunPlan:
    """Decide a run (see the module docstring); nothing is loaded but the small prompt files.
    ``datasets``: registry names (aliases accepted) or ``Task`` values, one run folder each;
    ``evaluation``'s own dataset is replaced by each target's."""
    spec, scheduler = model_and_scheduler(model, model_args, scheduler, chat=chat)
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
    shots = evaluation.shots_for(spec.base_model)
    note = base_model_note(spec, evaluation)
    notes: tuple[Note, ...] = (note,) if note is not None else ()
    targets = tuple(_target(task, evaluation, prompts, attacks, shots) for task in tasks)
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
    50), as the Semantic attack scores its semantic set; options the user gave for the strings win."""
    if attacks is None or not checkout or "checklist" not in attacks.attacks:
        return attacks
    given = attacks.options.get("checklist", {})
    if set(given) & {"promptbench", "count", "length", "strings_seed"}:
        return attacks
    options = {**attacks.options, "checklist": {**given, "promptbench": checkout}}
    get_attack("checklist", **options["checklist"])  # an unreadable checkout is said before any model loads
    return attacks.with_(options=options)


def base_model_note(spec: ModelSpec, evaluation: EvaluationSettings) -> Note | None:
    """What the paper's base-model rule did (``EvaluationSettings.shots_for``: no shots given, a
    base model: 3-shot), said before anything is scored; None when it did nothing."""
    shots = evaluation.shots_for(spec.base_model)
    if evaluation.shots is not None or not shots:
        return None
    return Note(f"{spec.name} is a base model: {shots}-shot, as the paper evaluates base models; "
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


def _is_builtin(task: Task) -> bool:
    """The registry's own task of that name (a changed copy or a user's task is carried as a value)."""
    if isinstance(task, OwnTask) or task.name not in list_tasks():
        return False
    return get_task(task.name) == task


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


def _target(task: Task, evaluation: EvaluationSettings, choice: PromptChoice, attacks: AttackSettings | None,
            shots: int) -> RunTarget:
    own = None if _is_builtin(task) else task  # a built-in dataset is found again by its name
    task = with_selection(task, evaluation.sample_selection)
    mode = decide_mode(evaluation.mode, task, strict=True)
    chosen = choose_prompts(task, prompt_ids=",".join(choice.ids) or None, prompt_type=choice.type, text=choice.text,
                            promptbench=choice.promptbench, shots=shots)  # bad prompt ids fail before any model loads
    semantic = None
    if attacks is not None and "semantic" in attacks.attacks and choice.promptbench:
        found = load_promptbench_prompts(choice.promptbench, task.name, types=["semantic"], shot="few" if shots else "zero")
        check_no_content_placeholder((p.id, p.text) for p in found)
        semantic = SemanticPrompts([(p.language, p.text) for p in found], f"promptbench checkout {choice.promptbench}")
    return RunTarget(task=task, evaluation=evaluation.with_(dataset=task.name, task=own), mode=mode, shots=shots,
                     prompts=tuple(chosen), semantic_prompts=semantic)
