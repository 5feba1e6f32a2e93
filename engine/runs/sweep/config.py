"""A sweep's configuration: the grid (models x datasets x shots x prompt types x attacks),
the settings of every job, loaded from TOML (``load_config``) or built in Python, and what
a sweep folder's records depend on (``resume_key``)."""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from promptrobust.engine.errors import PromptRobustError, SettingsError
from promptrobust.engine.measuring.settings import AttackSettings, EvaluationSettings, parse_budget
from promptrobust.engine.safe_io.redact import scrub
from promptrobust.engine.serving.scheduler_settings import SchedulerSettings

__all__ = ["Job", "SweepConfig", "SweepConfigError", "config_dict", "load_config", "model_settings", "resume_key"]


class SweepConfigError(PromptRobustError, ValueError):
    """A config problem; the message names the field."""


_TOP_KEYS = {"sweep", "grid", "models"}


#: [sweep] keys -> which settings value they belong to.
_EVALUATION_KEYS = {"limit", "seed", "mode", "parser", "max_new_tokens", "sample_selection"}


_ATTACK_KEYS = {"top_k", "budget", "early_stopping", "chunk_size", "holdout"}


_SCHEDULER_KEYS = {"concurrency", "batch_size", "rpm", "tpm", "max_retries", "request_timeout"}


_SWEEP_KEYS = {"name", "output_dir", "cache", "max_jobs"} | _EVALUATION_KEYS | _ATTACK_KEYS | _SCHEDULER_KEYS


_GRID_KEYS = {"models", "datasets", "prompt_types", "shots", "attacks"}


_MODEL_KEYS = {"model_args", "rpm", "tpm", "concurrency", "batch_size", "max_retries", "request_timeout"}


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

    def __post_init__(self) -> None:
        _expect(bool(_NAME.match(self.name)), f"sweep.name {self.name!r} must be a plain folder name (letters, digits, . _ -), not a path")
        for key in ("models", "datasets", "attacks", "prompt_types", "shots"):
            _expect(isinstance(getattr(self, key), tuple) and len(getattr(self, key)) > 0, f"grid.{key} must be a non-empty list")
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
            for d in self.datasets
            for s in self.shots
            for t in self.prompt_types
            for a in self.attacks
        ]

    def job_evaluation(self, job: Job) -> EvaluationSettings:
        return self.evaluation.with_(dataset=job.dataset, shots=job.shots)

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
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise SweepConfigError(f"{p} is not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise SweepConfigError(f"{p} is not a UTF-8 text file") from None
    _reject_unknown(data, _TOP_KEYS, f"{p}: unknown section or key ", "")
    sweep = data.get("sweep", {})
    grid = data.get("grid")
    _expect(isinstance(sweep, dict), f"{p}: [sweep] must be a table")
    _expect(isinstance(grid, dict), f"{p}: missing [grid] section with models, datasets and attacks")
    for section, allowed, table in (("sweep", _SWEEP_KEYS, sweep), ("grid", _GRID_KEYS, grid)):
        _reject_unknown(table, allowed, f"{p}: unknown key ", f"{section}.")
    for key in ("models", "datasets", "attacks"):
        _expect(key in grid, f"{p}: grid.{key} is missing")

    from promptrobust.engine.serving.registry import resolve_model

    models = _names(grid["models"], "grid.models")
    for m in models:
        try:
            resolve_model(m)
        except ValueError as exc:
            raise SweepConfigError(f"grid.models: {exc}") from None

    from promptrobust.tasks.registry import get_task

    datasets = _names(grid["datasets"], "grid.datasets")
    canonical = []
    for d in datasets:
        try:
            canonical.append(get_task(d).name)
        except ValueError as exc:
            raise SweepConfigError(f"grid.datasets: {exc}") from None

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
        isinstance(shots, list) and shots and all((isinstance(s, int) and s >= 0) or s == "auto" for s in shots),
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

    pick = lambda keys: {k: sweep[k] for k in keys if k in sweep}  # noqa: E731
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
        prompt_types=tuple(prompt_types),
        shots=shots_values,
        attacks=tuple(attacks),
        evaluation=_settings(EvaluationSettings, {"dataset": canonical[0], **pick(_EVALUATION_KEYS)}, "sweep"),
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


def resume_key(config: Mapping[str, Any]) -> dict[str, Any]:
    """What every record of a sweep folder depends on (from its config.json): the evaluation
    settings (the dataset is per job) and the attack's top k, budget and options. A folder is
    resumed only under the same key; growing the grid (models, datasets, attacks) is fine."""
    evaluation = {f"evaluation.{k}": v for k, v in dict(config.get("evaluation") or {}).items() if k != "dataset"}
    attack = dict(config.get("attack") or {})
    return {**evaluation, **{f"attack.{k}": attack.get(k) for k in ("top_k", "budget", "options")}}


def config_dict(cfg: SweepConfig) -> dict[str, Any]:
    out = asdict(cfg)
    out["output_dir"] = str(cfg.output_dir)
    return scrub(out)  # no credentials from base URLs in config.json
