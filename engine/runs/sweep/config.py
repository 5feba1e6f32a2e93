"""A sweep's configuration: the grid (models x datasets and users' own tasks x shots x prompt
types x attacks), the settings of every job, loaded from TOML (``load_config``) or built in
Python, and what a sweep folder's records depend on (``resume_key``, ``check_tasks_unchanged``).

A user's own task is a grid entry like a dataset (``tasks = ["tickets.toml"]``, paths relative
to the sweep config): it travels as its task file's path with the hashes it had when the sweep
was planned (``SweepTask``), every process that runs its jobs (a shard, a Ray worker) reads the
file again, and a file that changed since is an error, never a silent mix of two definitions."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import re
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from promptrobust.engine.errors import PromptRobustError, SettingsError
from promptrobust.engine.measuring.settings import DEFAULT_DATASET, AttackSettings, EvaluationSettings, parse_budget
from promptrobust.engine.safe_io.bounded_toml import TomlNestingError, load_toml
from promptrobust.engine.safe_io.redact import scrub
from promptrobust.engine.serving.scheduler_settings import SchedulerSettings
from promptrobust.tasks.base import Task

if TYPE_CHECKING:  # read when a task is (the command line reads this module for --help)
    from promptrobust.tasks.own import OwnTask

__all__ = ["Job", "SweepConfig", "SweepConfigError", "SweepTask", "check_tasks_unchanged", "config_dict", "load_config",
           "model_settings", "resume_key"]


class SweepConfigError(PromptRobustError, ValueError):
    """A config problem; the message names the field."""


_TOP_KEYS = {"sweep", "grid", "models"}


def _fields(kind: type, *, but: Collection[str] = ()) -> set[str]:
    return {f.name for f in dataclasses.fields(kind)} - set(but)


#: [sweep] keys -> which settings value they belong to: every field of each settings value, under
#: its own name (spelled once, in the settings class), but the grid's own axes and what a sweep
#: does not take (attack options: a grid of attacks shares one set of settings).
_EVALUATION_KEYS = _fields(EvaluationSettings, but={"dataset", "shots", "task",  # grid.datasets, grid.tasks, grid.shots
                                                     "adversarial_samples"})  # the joint attack: `pre run` only, for now


_ATTACK_KEYS = _fields(AttackSettings, but={"attacks", "options"})  # grid.attacks; no per-attack options


_SCHEDULER_KEYS = _fields(SchedulerSettings)


_SWEEP_KEYS = {"name", "output_dir", "cache", "max_jobs"} | _EVALUATION_KEYS | _ATTACK_KEYS | _SCHEDULER_KEYS


_GRID_KEYS = {"models", "datasets", "tasks", "prompt_types", "shots", "attacks"}


#: [models."NAME"] keys: the model's arguments and its scheduler's limits.
_MODEL_KEYS = {"model_args"} | _SCHEDULER_KEYS


_PROMPT_TYPES = ("task", "role")


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


@dataclass(frozen=True)
class Job:
    """One cell of the grid with one attack. ``shots`` None = the paper's rule (3 for base models)."""

    model: str
    dataset: str
    shots: int | None
    prompt_type: str
    attack: str

    @property
    def id(self) -> str:
        raw = f"{self.model}|{self.dataset}|{_shots_text(self.shots)}|{self.prompt_type}|{self.attack}"
        return hashlib.sha1(raw.encode()).hexdigest()[:12]

    @property
    def cell(self) -> tuple[str, str, int | None, str]:
        """Jobs of one cell share its clean ranking (and a shard keeps them together)."""
        return (self.model, self.dataset, self.shots, self.prompt_type)

    def label(self) -> str:
        return f"{self.model} / {self.dataset} / {_shots_text(self.shots)}-shot {self.prompt_type} / {self.attack}"


def _shots_text(shots: int | None) -> str:
    return "auto" if shots is None else str(shots)


@dataclass(frozen=True)
class SweepTask:
    """A user's own task in a sweep's grid: its task file, read by every process that runs its
    jobs, and the hashes it had when the sweep was planned (a changed file is refused)."""

    path: str
    """The task file (absolute)."""
    name: str
    """The task's name: its jobs' and records' dataset."""
    definition_hash: str
    """``TaskDefinition.definition_hash`` when planned."""
    data_hash: str
    """The SHA-256 of its evaluation data when planned (``OwnTask.data_hash``)."""

    @classmethod
    def of(cls, path: str | os.PathLike[str]) -> "SweepTask":
        """The grid entry of the task file at ``path``, read now."""
        where = str(Path(path).resolve())
        task = _read_task(where, _stamp(where))
        return cls(where, task.name, str(task.definition_hash), _data_hash(task))

    def load(self) -> Task:
        """The task, read from its file (again only when the file changed), checked against the planned hashes."""
        task = _read_task(self.path, _stamp(self.path))
        for what, planned, now in (("definition", self.definition_hash, task.definition_hash),
                                   ("data", self.data_hash, _data_hash(task))):
            if planned != now:
                raise SweepConfigError(
                    f"task file {self.path}: its {what} changed since the sweep was planned ({planned[:16]} -> "
                    f"{str(now)[:16]}); the sweep's processes would measure two versions of task {self.name}: "
                    "restore the file, or plan the sweep again under another name")
        return task


def _stamp(path: str) -> tuple[int, int] | None:
    """A file's modification time and size (None: not a local file): a changed file reads again."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


@functools.lru_cache(maxsize=64)
def _read_task(path: str, stamp: tuple[int, int] | None) -> OwnTask:
    from promptrobust.tasks.own import load_task_file

    return load_task_file(path)


def _data_hash(task: OwnTask) -> str:
    """The task's data hash, computed again only when its data file changed (a hub dataset: once)."""
    location = task.definition.data.location
    return _hash_of(task, location, _stamp(location))


@functools.lru_cache(maxsize=64)
def _hash_of(task: OwnTask, location: str, stamp: tuple[int, int] | None) -> str:
    return str(task.data_hash())


@dataclass(frozen=True)
class SweepConfig:
    """A grid of models x datasets x shots x prompt types x attacks, with the settings of every job.

    Built by ``load_config`` from TOML or directly in Python; either way the
    settings objects validate every value."""

    name: str
    output_dir: Path
    models: tuple[str, ...]
    datasets: tuple[str, ...]
    attacks: tuple[str, ...]
    prompt_types: tuple[str, ...] = ("task",)
    shots: tuple[int | None, ...] = (None,)
    evaluation: EvaluationSettings = field(default_factory=EvaluationSettings)
    """Evaluation settings of every job (its dataset and shots come from the grid)."""
    attack: AttackSettings = field(default_factory=AttackSettings)
    """Attack settings of every job (its attack comes from the grid)."""
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    """Default scheduler limits; ``model_options`` override them per model."""
    cache: str | None = None
    max_jobs: int = 8
    model_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    source: str = ""
    tasks: tuple[SweepTask, ...] = ()
    """Users' own tasks, beside ``datasets`` in the grid (``grid.tasks``: task files)."""

    def __post_init__(self) -> None:
        _expect(bool(_NAME.match(self.name)), f"sweep.name {self.name!r} must be a plain folder name (letters, digits, . _ -), not a path")
        for key in ("models", "attacks", "prompt_types", "shots"):
            _expect(isinstance(getattr(self, key), tuple) and len(getattr(self, key)) > 0, f"grid.{key} must be a non-empty list")
        _expect(isinstance(self.datasets, tuple) and isinstance(self.tasks, tuple), "grid.datasets and grid.tasks must be lists")
        _expect(len(self.datasets) + len(self.tasks) > 0, "grid.datasets (and grid.tasks) must name at least one dataset or task file")
        names = [*self.datasets, *(t.name for t in self.tasks)]
        twice = next((n for n in names if names.count(n) > 1), None)
        _expect(twice is None, f"grid: {twice!r} is named twice (datasets and tasks share one namespace); give each task its own name")
        _expect(isinstance(self.max_jobs, int) and self.max_jobs >= 1, "sweep.max_jobs must be a whole number >= 1")

    @property
    def folder(self) -> Path:
        return self.output_dir / self.name

    def with_(self, **changes: Any) -> "SweepConfig":
        return replace(self, **changes)

    def jobs(self) -> list[Job]:
        return [
            Job(m, d, s, t, a)
            for m in self.models
            for d in (*self.datasets, *(task.name for task in self.tasks))
            for s in self.shots
            for t in self.prompt_types
            for a in self.attacks
        ]

    def own_task(self, name: str) -> Task | None:
        """The user's own task of that name in the grid (read and checked), None for a dataset."""
        entry = next((t for t in self.tasks if t.name == name), None)
        return entry.load() if entry is not None else None

    def task_of(self, name: str) -> Task:
        """The task a job of ``name`` measures: a user's own task, or the built-in dataset."""
        from promptrobust.tasks.registry import get_task

        own = self.own_task(name)
        return own if own is not None else get_task(name)

    def job_evaluation(self, job: Job) -> EvaluationSettings:
        own = self.own_task(job.dataset)
        extra = {"task": own} if own is not None else {}
        return self.evaluation.with_(dataset=job.dataset, shots=job.shots, **extra)

    def task_provenances(self) -> list[dict[str, Any]]:
        """results.json's ``tasks``: the provenance of each user's own task of the grid."""
        return [dict(t.load().provenance() or {}) for t in self.tasks]

    def job_attack(self, job: Job) -> AttackSettings:
        return self.attack.with_(attacks=(job.attack,))


def _expect(cond: bool, message: str) -> None:
    if not cond:
        raise SweepConfigError(message)


def _reject_unknown(table: dict[str, Any], allowed: set[str], message: str, prefix: str) -> None:
    bad = sorted(set(table) - allowed)
    if bad:
        raise SweepConfigError(f"{message}{prefix}{bad[0]} (allowed: {', '.join(sorted(allowed))})")


def _names(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        value = [value]
    _expect(isinstance(value, list) and all(isinstance(v, str) for v in value), f"{where} must be a list of names")
    _expect(len(value) > 0, f"{where} is empty: the grid needs at least one entry")
    return list(dict.fromkeys(value))


def _settings(kind: Any, values: dict[str, Any], where: str) -> Any:
    try:
        return kind(**values)
    except SettingsError as exc:
        raise SweepConfigError(f"{where}.{exc}") from None
    except TypeError as exc:
        raise SweepConfigError(f"{where}: {exc}") from None


def _one_batch_size(model: str, opts: dict[str, Any], sweep_batch: Any) -> None:
    """Batch size is set in one place: ``batch_size`` (sweep or model) and ``model_args = "batch_size=N"``
    may not disagree."""
    from promptrobust.engine.serving.registry import ModelArgsError, parse_model_args

    try:
        in_args = parse_model_args(str(opts.get("model_args", ""))).get("batch_size")
    except ModelArgsError:
        return  # the model args' own check names the problem
    given = opts.get("batch_size", sweep_batch)
    if in_args is not None and given is not None and str(in_args) != str(given):
        raise SweepConfigError(
            f"models.{model}: batch_size {given} and model_args batch_size={in_args} disagree; set it in one place (batch_size)"
        )


def load_config(path: str | os.PathLike[str]) -> SweepConfig:
    """Parse and validate a sweep TOML file (every problem names its field)."""
    p = Path(path)
    if not p.is_file():
        raise SweepConfigError(f"sweep config {p} does not exist")
    try:
        data = load_toml(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise SweepConfigError(f"{p} is not valid TOML: {exc}") from None
    except TomlNestingError as exc:
        raise SweepConfigError(f"{p}: {exc}; flatten the file") from None
    except UnicodeDecodeError:
        raise SweepConfigError(f"{p} is not a UTF-8 text file") from None
    _reject_unknown(data, _TOP_KEYS, f"{p}: unknown section or key ", "")
    sweep = data.get("sweep", {})
    grid = data.get("grid")
    _expect(isinstance(sweep, dict), f"{p}: [sweep] must be a table")
    _expect(isinstance(grid, dict), f"{p}: missing [grid] section with models, datasets and attacks")
    assert isinstance(grid, dict)  # said above, in one line, when it is not
    for section, allowed, table in (("sweep", _SWEEP_KEYS, sweep), ("grid", _GRID_KEYS, grid)):
        _reject_unknown(table, allowed, f"{p}: unknown key ", f"{section}.")
    for key in ("models", "attacks"):
        _expect(key in grid, f"{p}: grid.{key} is missing")
    _expect("datasets" in grid or "tasks" in grid, f"{p}: grid.datasets is missing (or grid.tasks: your own task files)")

    from promptrobust.engine.serving.registry import resolve_model

    models = _names(grid["models"], "grid.models")
    for m in models:
        try:
            resolve_model(m)
        except ValueError as exc:
            raise SweepConfigError(f"grid.models: {exc}") from None

    from promptrobust.tasks.registry import get_task

    datasets = _names(grid["datasets"], "grid.datasets") if "datasets" in grid else []
    canonical = []
    for d in datasets:
        try:
            canonical.append(get_task(d).name)
        except ValueError as exc:
            raise SweepConfigError(f"grid.datasets: {exc}") from None
    tasks = []
    for path in _names(grid["tasks"], "grid.tasks") if "tasks" in grid else []:
        try:  # relative to the sweep config's folder, as a task file's own paths are to its folder
            tasks.append(SweepTask.of(Path(path) if Path(path).is_absolute() else p.resolve().parent / path))
        except PromptRobustError as exc:
            raise SweepConfigError(f"grid.tasks: {exc}") from None

    from promptrobust.attacks.registry import list_attacks

    known_attacks = [name for name, _ in list_attacks()]
    attacks_raw = grid["attacks"]
    attacks = known_attacks if attacks_raw == "all" else _names(attacks_raw, "grid.attacks")
    for a in attacks:
        _expect(a in known_attacks, f"grid.attacks: unknown attack {a!r} (known: {', '.join(known_attacks)}, or \"all\")")

    prompt_types = _names(grid.get("prompt_types", ["task"]), "grid.prompt_types")
    for t in prompt_types:
        _expect(t in _PROMPT_TYPES, f"grid.prompt_types: {t!r} is not one of {', '.join(_PROMPT_TYPES)}")
    shots = grid.get("shots", ["auto"])
    shots = [shots] if isinstance(shots, (int, str)) else shots
    _expect(
        isinstance(shots, list) and bool(shots) and all((isinstance(s, int) and s >= 0) or s == "auto" for s in shots),
        'grid.shots must be a non-empty list of numbers of examples or "auto", e.g. [0, 3]',
    )
    shots_values = tuple(dict.fromkeys(None if s == "auto" else s for s in shots))

    options = data.get("models", {})
    _expect(isinstance(options, dict), "[models] must be a table of per-model options")
    for name, opts in options.items():
        _expect(name in models, f"models.{name}: not in grid.models")
        _expect(isinstance(opts, dict), f"models.{name} must be a table of options")
        _reject_unknown(opts, _MODEL_KEYS, "unknown key ", f"models.{name}.")
        scheduler_part = {k: v for k, v in opts.items() if k != "model_args"}
        _settings(SchedulerSettings, scheduler_part, f"models.{name}")
        _one_batch_size(name, opts, sweep.get("batch_size"))

    def pick(keys: set[str]) -> dict[str, Any]:
        """The [sweep] keys of one settings value (TOML arrays become the tuples settings hold)."""
        return {k: tuple(sweep[k]) if isinstance(sweep[k], list) else sweep[k] for k in keys if k in sweep}

    attack_values = pick(_ATTACK_KEYS)
    if "budget" in attack_values:
        try:
            attack_values["budget"] = parse_budget(attack_values["budget"])
        except SettingsError as exc:
            raise SweepConfigError(f"sweep.{exc}") from None
    return SweepConfig(
        name=str(sweep.get("name") or p.stem),
        output_dir=Path(sweep.get("output_dir", "runs/sweeps")),
        models=tuple(models),
        datasets=tuple(canonical),
        tasks=tuple(tasks),
        prompt_types=tuple(prompt_types),
        shots=shots_values,
        attacks=tuple(attacks),
        evaluation=_settings(EvaluationSettings, {"dataset": canonical[0] if canonical else DEFAULT_DATASET,
                                                  **pick(_EVALUATION_KEYS)}, "sweep"),
        attack=_settings(AttackSettings, {"attacks": tuple(attacks), **attack_values}, "sweep"),
        scheduler=_settings(SchedulerSettings, pick(_SCHEDULER_KEYS), "sweep"),
        cache=sweep.get("cache"),
        max_jobs=sweep.get("max_jobs", 8),
        model_options={k: dict(v) for k, v in options.items()},
        source=str(p),
    )


def model_settings(cfg: SweepConfig, model: str) -> SchedulerSettings:
    """Scheduler settings for one model: the sweep's, overridden by [models.NAME]."""
    opts = {k: v for k, v in cfg.model_options.get(model, {}).items() if k != "model_args"}
    return replace(cfg.scheduler, **opts)


#: The attack settings a record's content depends on; a key a folder's config.json lacks (written by an
#: older version) reads as the setting's default. Exact early stopping chooses what exhaustive scoring
#: chooses, so "exact" and "off" are one key; racing, its error rate and tolerance are another.
_RECORD_ATTACK_KEYS = ("top_k", "budget", "options", "holdout", "meaning_nli")
_RACING_KEYS = ("error_rate", "racing_tolerance")


def resume_key(config: Mapping[str, Any]) -> dict[str, Any]:
    """What every record of a sweep folder depends on (from its config.json): the evaluation
    settings (the dataset is per job) and the attack's top k, budget, options, held-out share, the
    NLI model of its meaning verdicts and whether (and how) it raced candidates. A folder is resumed
    only under the same key; growing the grid (models, datasets, attacks) is fine."""
    evaluation = {f"evaluation.{k}": v for k, v in dict(config.get("evaluation") or {}).items() if k != "dataset"}
    attack = dict(config.get("attack") or {})
    defaults = asdict(AttackSettings())
    racing = attack.get("early_stopping", defaults["early_stopping"]) == "racing"
    kept = _RECORD_ATTACK_KEYS + (_RACING_KEYS if racing else ())
    return {**evaluation, **{f"attack.{k}": attack.get(k, defaults[k]) for k in kept},
            "attack.early_stopping": "racing" if racing else "exhaustive"}


def check_tasks_unchanged(folder: Path, cfg: SweepConfig) -> None:
    """A sweep folder resumed with a user's task whose file (definition or data) changed since its
    records were made is refused: a rerun would skip their prompts as done and mix two versions of
    one task. New tasks in the grid are fine, as new datasets are."""
    config, results = folder / "config.json", folder / "results.jsonl"
    if not (config.is_file() and results.is_file() and results.stat().st_size):
        return
    try:
        old = {t["name"]: t for t in orjson.loads(config.read_bytes()).get("tasks") or []}
    except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError):
        return  # resume_key's own check says what is wrong with the file
    for task in cfg.tasks:
        before = old.get(task.name)
        if before is not None and (before.get("definition_hash"), before.get("data_hash")) != (task.definition_hash, task.data_hash):
            raise SweepConfigError(
                f"{folder} holds records of task {task.name} made from another version of {task.path} (its definition or "
                "data changed); resuming would mix them: give the sweep another name or output folder, or restore the file")


def config_dict(cfg: SweepConfig) -> dict[str, Any]:
    out = asdict(cfg)
    out["output_dir"] = str(cfg.output_dir)
    return scrub(out)  # no credentials from base URLs in config.json
