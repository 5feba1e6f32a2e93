"""Validated, frozen configuration values (vLLM ``SamplingParams`` style).

Two values describe a piece of work, and everything that runs one (the CLI,
sweeps, the Python API) builds these same objects, so a setting is checked in
one place and means the same thing everywhere:

- ``EvaluationSettings``: what to evaluate and how to query the model;
- ``AttackSettings``: how the paper's protocol attacks the prompts.

The scheduler's limits are ``engine.serving.scheduler_settings.SchedulerSettings``.

Errors are ``SettingsError`` (a ``ValueError``) whose message names the field
and the fix, so the CLI can print it as one line.
"""

from __future__ import annotations

import os
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, Literal, SupportsInt

from promptrobust.engine.errors import SettingsError, require as _check, require_whole as _whole
from promptrobust.engine.measuring.racing import DEFAULT_ERROR_RATE, RacingSettings
from promptrobust.tasks.base import MAX_NEW_TOKENS, Task

Mode = Literal["choices", "generate"]
ParserName = Literal["last_word", "robust"]
#: Which samples of a split are evaluated (``EvaluationSettings.sample_selection``).
SampleSelection = Literal["seeded", "first"]

#: The dataset measured when none is named.
DEFAULT_DATASET = "rotten_tomatoes"
#: The paper's shots for base models (they only make sense few-shot).
BASE_MODEL_SHOTS = 3
#: ``AttackSettings.budget`` value that means "no cap" (promptbench's query budget is unlimited).
UNLIMITED = None


@dataclass(frozen=True)
class EvaluationSettings:
    """What to evaluate and how to query the model. Defaults are the paper's protocol."""

    dataset: str = DEFAULT_DATASET
    """Dataset name (``pre list datasets``) or a task file; with ``task``, that task's name."""
    limit: int | float | None = None
    """Evaluate at most this many samples, or this fraction of them, e.g. 0.1 (as lm-eval takes a
    limit; resolved where the data is loaded); None: the paper's sample size."""
    seed: int = 0
    """Seed for the order samples are drawn in and for attacks."""
    shots: int | None = None
    """Worked examples before each sample; None: 0 for chat/instruct models, 3 for base models (the paper)."""
    mode: Mode = "generate"
    """generate: decode and parse the last word (the paper); choices: score label log-probs (fast)."""
    parser: ParserName = "last_word"
    """Answer parser in generate mode (last_word is the paper's rule)."""
    max_new_tokens: int | None = None
    """Most new tokens in generate mode; None: the task's own length (the paper's 20 for label tasks, stop at EOS)."""
    data_dir: str | None = None
    """Read the dataset from local files in this folder instead of the hub."""
    data_file: str | None = None
    """Read the dataset from this local file (parquet, jsonl, csv, tsv)."""
    sample_selection: SampleSelection = "seeded"
    """seeded: a seeded random draw of the paper's N (stratified where the task is); first: the
    first N rows in source order, as promptbench takes them (``tasks/sampling.py``)."""
    stop: tuple[str, ...] | None = None
    """Stop sequences in generate mode (lm-eval's ``until``); None: the task's own (EOS only for label tasks)."""
    stop_origin: Literal["lm-eval"] | None = field(default=None, compare=False)
    """Why ``stop`` is set when nobody gave it: "lm-eval" for a command in lm-eval's spelling, whose generate
    tasks stop at their few-shot delimiter (``engine.runs.lm_eval_args.LM_EVAL_UNTIL``), a deviation from
    the paper's EOS-only stop; results.json records it (``configs.evaluation``). None: not set that way.
    Provenance only: two settings that stop alike are equal whoever set the stop."""
    system_instruction: str | None = None
    """Text sent before every input: a system message to chat models, a first paragraph otherwise (lm-eval's)."""
    adversarial_samples: str | None = None
    """The joint attack on prompt and sample (the paper's AdvGLUE study): measure on adversarial
    samples instead of the dataset's, from a file (AdvGLUE's layout, or rows in the task's columns)
    or ``"hub"`` (``adv_glue``; ``tasks/adversarial_samples.py``); records say so in ``sample_selection``."""
    task: Task | None = field(default=None, hash=False)  # a Task need not be hashable; equality still counts
    """A user's own task (``tasks.own``: a task file's path, read here, or a task value from
    ``load_task_file``, ``task_from_columns`` or code), measured instead of a built-in dataset;
    ``dataset`` then holds its name."""

    def __post_init__(self) -> None:
        if isinstance(self.task, (str, os.PathLike)):  # a task file: read (and checked) once, here
            from promptrobust.tasks.own import load_task_file

            object.__setattr__(self, "task", load_task_file(self.task))
        _check(not isinstance(self.dataset, Task),
               "dataset is a dataset's name; give your own task as task=TASK (a task file or a task value)")
        if self.task is not None:
            _check(isinstance(self.task, Task), f"task must be a task file or a Task (got {type(self.task).__name__})")
            _check(self.dataset in (DEFAULT_DATASET, self.task.name),
                   f"dataset {self.dataset!r} and task {self.task.name!r} disagree; give one of them")
            object.__setattr__(self, "dataset", self.task.name)
        _check(isinstance(self.dataset, str) and bool(self.dataset.strip()), "dataset must be a dataset name")
        _check(self.limit is None or (isinstance(self.limit, int) and not isinstance(self.limit, bool) and self.limit >= 1)
               or (isinstance(self.limit, float) and 0 < self.limit < 1),
               f"limit must be a whole number >= 1 or a fraction between 0 and 1 (got {self.limit!r})")
        _whole(self.seed, "seed", 0)
        _check(self.shots is None or (isinstance(self.shots, int) and self.shots >= 0),
               f"shots must be 0 or more (got {self.shots!r})")
        _check(self.mode in ("choices", "generate"), f"mode must be 'choices' or 'generate' (got {self.mode!r})")
        _check(self.parser in ("last_word", "robust"), f"parser must be 'last_word' or 'robust' (got {self.parser!r})")
        _check(self.max_new_tokens is None or (isinstance(self.max_new_tokens, int) and 1 <= self.max_new_tokens <= MAX_NEW_TOKENS),
               f"max_new_tokens must be a whole number >= 1 and at most {MAX_NEW_TOKENS} (got {self.max_new_tokens!r})")
        _check(self.sample_selection in ("seeded", "first"),
               f"sample_selection must be 'seeded' or 'first' (got {self.sample_selection!r})")
        _check(self.stop is None or (isinstance(self.stop, tuple) and all(isinstance(s, str) and s for s in self.stop)),
               f"stop must be a tuple of non-empty strings (got {self.stop!r})")
        _check(self.stop_origin in (None, "lm-eval") and (self.stop_origin is None or self.stop is not None),
               f"stop_origin must be 'lm-eval' (with the stop sequences it set) or None (got {self.stop_origin!r})")
        _check(self.system_instruction is None or (isinstance(self.system_instruction, str) and bool(self.system_instruction.strip())),
               "system_instruction must be non-empty text")
        _check(self.adversarial_samples is None or (isinstance(self.adversarial_samples, str)
                                                    and bool(self.adversarial_samples.strip())),
               "adversarial_samples must be a file of adversarial samples or 'hub'")

    def shots_for(self, base_model: bool) -> int:
        """The one place the rule lives: a base model without explicit shots gets the paper's 3."""
        if self.shots is not None:
            return self.shots
        return BASE_MODEL_SHOTS if base_model else 0

    def limit_for(self, available: int) -> int:
        """How many of ``available`` samples this evaluation takes: all of them without a limit,
        at most ``limit``, or a fraction's share of them (at least 1), as lm-eval counts it."""
        if self.limit is None:
            return available
        if isinstance(self.limit, float):
            return max(1, round(self.limit * available))
        return min(self.limit, available)

    def with_(self, **changes: Any) -> "EvaluationSettings":
        return replace(self, **changes)

    def config(self) -> dict[str, Any]:
        """The settings as config files record them: a user's task by its name and definition
        hash (results.json's ``tasks`` holds its whole provenance)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        if self.stop_origin is None:  # recorded only where it explains a stop nobody gave
            del out["stop_origin"]
        if self.task is not None:
            out["task"] = {"name": self.task.name, "definition_hash": self.task.definition_hash}
        return out


@dataclass(frozen=True)
class AttackSettings:
    """How the protocol attacks: rank the prompt set, attack the top k with each attack."""

    attacks: tuple[str, ...] = ()
    """Attack names (``pre list attacks``)."""
    top_k: int = 3
    """Attack the k best prompts of the set (the paper: 3)."""
    budget: int | None = UNLIMITED
    """Most candidate prompt evaluations per attacked prompt; None: unlimited (promptbench)."""
    early_stopping: Literal["exact", "off", "racing"] = "exact"
    """exact (default, the paper's result): stop candidates that can no longer win, every step chooses
    as exhaustive scoring; off: every candidate on every sample; racing: a candidate leaves a step
    once shown worse at ``error_rate``: fewer model calls (1.12x fewer at 200 samples and 1.23x at
    500 on the recorded attacks of bench/results/racing.md), the prompt kept is scored exactly but
    may differ from exhaustive's with at most that chance per step (``engine.measuring.racing``).
    ``pre run --dry-run`` says the cost both ways."""
    error_rate: float = DEFAULT_ERROR_RATE
    """racing: per search step, the most likely chance that the best candidate is not the one kept."""
    racing_tolerance: float = 0.0
    """racing: stop a step once no candidate can beat the leader by more than this (0: near ties are compared exactly)."""
    chunk_size: int = 32
    """Samples per early-stopping round."""
    options: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per-attack options, e.g. {"bertattack": {"mlm": "/models/bert"}}."""
    holdout: float | None = None
    """Fraction of the samples held out of the ranking and the search and used only to re-score
    the chosen prompts (engine/measuring/holdout.py); None: every sample is searched (the paper)."""
    meaning_nli: str | None = None
    """An NLI model (Hugging Face id or folder, e.g. cross-encoder/nli-deberta-v3-base) that judges the
    replaced words of the meaning verdict by mutual entailment, instead of the offline encoders (not
    calibrated by promptrobust; records name it). None: the shipped check."""

    def __post_init__(self) -> None:
        _check(isinstance(self.attacks, tuple), "attacks must be a tuple of attack names")
        _whole(self.top_k, "top_k", 1)
        _check(self.budget is None or (isinstance(self.budget, int) and self.budget >= 1),
               f"budget must be a whole number >= 1 or None for unlimited (got {self.budget!r})")
        _check(self.early_stopping in ("exact", "off", "racing"),
               f"early_stopping must be 'exact', 'off' or 'racing' (got {self.early_stopping!r})")
        _check(isinstance(self.error_rate, float) and 0 < self.error_rate < 1,
               f"error_rate must be a fraction between 0 and 1, e.g. 0.05 (got {self.error_rate!r})")
        _check(isinstance(self.racing_tolerance, float) and 0 <= self.racing_tolerance < 1,
               f"racing_tolerance must be between 0 and 1, e.g. 0.01 (got {self.racing_tolerance!r})")
        _whole(self.chunk_size, "chunk_size", 1)
        _check(self.holdout is None or (isinstance(self.holdout, (int, float)) and not isinstance(self.holdout, bool)
                                        and 0 < self.holdout < 1),
               f"holdout must be a fraction between 0 and 1, e.g. 0.5 (got {self.holdout!r})")
        unknown = sorted(set(self.options) - set(self.attacks))
        _check(not unknown, f"options given for {unknown[0] if unknown else ''!r}, which is not among the attacks")
        _check(self.meaning_nli is None or (isinstance(self.meaning_nli, str) and bool(self.meaning_nli.strip())),
               f"meaning_nli must name an NLI model, e.g. cross-encoder/nli-deberta-v3-base (got {self.meaning_nli!r})")

    def with_(self, **changes: Any) -> "AttackSettings":
        return replace(self, **changes)

    def racing(self) -> RacingSettings | None:
        """The race of each search step, or None when candidates are scored exactly."""
        if self.early_stopping != "racing":
            return None
        return RacingSettings(error_rate=self.error_rate, tolerance=self.racing_tolerance)

    @property
    def search(self) -> str | None:
        """How records name a search whose choices may differ from exhaustive scoring (None: they cannot)."""
        race = self.racing()
        return race.describe() if race is not None else None


def parse_budget(text: str | int | None) -> int | None:
    """``--budget`` value: a whole number >= 1, or 'unlimited' / 'none' / 'inf'."""
    if text is None or isinstance(text, int):
        return text
    value = str(text).strip().lower()
    if value in ("unlimited", "none", "inf", "infinite"):
        return None
    try:
        number = int(value)
    except ValueError:
        raise SettingsError(f"budget must be a whole number or 'unlimited' (got {text!r})") from None
    _check(number >= 1, f"budget must be at least 1 or 'unlimited' (got {number})")
    return number


#: How the evaluation samples were chosen when a record does not say (the task's
#: own draw with the seed: ``Task.load(limit=, seed=)``).
DEFAULT_SAMPLE_SELECTION = "seeded"

#: ``MeasurementSettings`` fields a report lays out as table rows and columns
#: (they follow the model or the dataset: shots -> "few-shot" rows, metric and
#: input format -> the dataset and model columns) instead of report sections.
TABLE_DIMENSIONS = ("shots", "metric", "input_format")


def int_or_none(value: object) -> int | None:
    """``value`` as a whole number, or None (missing, a bool, or not a number): for rows written by any release."""
    if not isinstance(value, (SupportsInt, str)) or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an infinite float
        return None


@dataclass(frozen=True)
class MeasurementSettings:
    """Under which settings a number was made: THE grouping key of records,
    reports, merges and resume. Two numbers with different values here are
    never pooled.

    Built once per measurement (``from_workbench`` by the engine, ``of`` from a
    written row); ``parser`` and ``max_new_tokens`` only mean something in
    generate mode and are None otherwise; ``budget`` and ``attack_options``
    only for an attack's own search (``for_kind`` clears them for the other
    kinds, so a given pair never shows an "unlimited budget")."""

    mode: str = "unknown"
    parser: str | None = None
    max_new_tokens: int | None = None
    samples: int | None = None
    sample_selection: str = DEFAULT_SAMPLE_SELECTION
    shots: int | None = None
    input_format: str = ""
    metric: str = ""
    seed: int | None = None
    budget: int | None = None
    attack_options: tuple[tuple[str, str], ...] = ()
    stop: tuple[str, ...] | None = None
    """generate mode: stop sequences other than the task's own (lm-eval's ``until``)."""
    system_instruction: str | None = None
    """Text sent before every input (a system message, or a first paragraph)."""
    searched: bool = True
    """False for kinds without a search (pairs, transfers, defenses, clean scores): budget and options do not apply."""
    approximate_labels: bool = False
    """choices mode over HTTP with labels read from the top-20 first-token log-probs (a record's
    ``label_scoring`` starting with "approximate"): never pooled with exact label scores."""
    search: str | None = None
    """An attack whose search may choose otherwise than exhaustive scoring (racing, with its error
    rate): never pooled with exhaustive ones; None: exhaustive's choices (exact early stopping included)."""

    def __post_init__(self) -> None:
        _check(isinstance(self.attack_options, tuple), "attack_options must be a tuple of (key, value) pairs")

    @classmethod
    def of(cls, row: object) -> "MeasurementSettings":
        """The settings of a record or results row (a mapping; old rows with missing fields are read too)."""
        get = row.get if hasattr(row, "get") else (lambda k, d=None: getattr(row, k, d))
        mode = str(get("mode") or "unknown")
        generate = mode == "generate"
        options = get("attack_options") or {}
        return cls(
            mode=mode,
            parser=(get("parser") or None) if generate else None,
            max_new_tokens=int_or_none(get("max_new_tokens")) if generate else None,
            samples=int_or_none(get("samples")),
            sample_selection=str(get("sample_selection") or DEFAULT_SAMPLE_SELECTION),
            shots=int_or_none(get("shots")),
            input_format=str(get("input_format") or ""),
            metric=str(get("metric") or ""),
            seed=int_or_none(get("seed")),
            budget=int_or_none(get("budget")),
            attack_options=tuple(sorted((str(k), str(v)) for k, v in dict(options).items())),
            approximate_labels=mode == "choices" and str(get("label_scoring") or "").startswith("approximate"),
            stop=tuple(str(x) for x in get("stop")) if generate and get("stop") else None,
            system_instruction=str(get("system_instruction")) if get("system_instruction") else None,
            search=str(get("search")) if get("search") else None,
        )

    def for_kind(self, kind: str) -> "MeasurementSettings":
        """These settings as they apply to ``kind``: only an attack searched, so only it has a budget and options."""
        if kind == "attack":
            return replace(self, searched=True)
        return replace(self, budget=None, attack_options=(), searched=False, search=None)

    def without(self, names: tuple[str, ...] = TABLE_DIMENSIONS) -> "MeasurementSettings":
        """The value with ``names`` blanked (a report section's key: see ``TABLE_DIMENSIONS``)."""
        blank: dict[str, Any] = {}
        for name in names:
            default = MeasurementSettings.__dataclass_fields__[name].default
            if default is MISSING:  # a programming error: only fields with a default can be blanked
                raise ValueError(f"MeasurementSettings.{name} has no default to blank it to")
            blank[name] = default
        return replace(self, **blank)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "mode": self.mode, "parser": self.parser, "max_new_tokens": self.max_new_tokens, "samples": self.samples,
            "sample_selection": self.sample_selection, "shots": self.shots, "input_format": self.input_format,
            "metric": self.metric, "seed": self.seed,
        }
        if self.approximate_labels:  # only then, so exact measurements keep the keys they had
            out["label_scoring"] = "approximate"
        if self.stop is not None:  # likewise: only when set
            out["stop"] = list(self.stop)
        if self.system_instruction is not None:
            out["system_instruction"] = self.system_instruction
        if self.searched:
            out["budget"] = self.budget
            out["attack_options"] = dict(self.attack_options)
            if self.search is not None:  # only then, so exhaustive searches keep the keys they had
                out["search"] = self.search
        return out

    def label(self) -> str:
        """'mode generate, parser last_word, max_new_tokens 20, 100 samples, seed 0, budget unlimited'
        (fields left blank are not printed; the budget only where a search ran)."""
        parts = [f"mode {self.mode}"]
        if self.mode == "generate":
            parts.append(f"parser {self.parser or '?'}")
            parts.append(f"max_new_tokens {self.max_new_tokens if self.max_new_tokens is not None else '?'}")
        if self.stop is not None:
            parts.append("stop " + "|".join(repr(x) for x in self.stop))
        if self.system_instruction is not None:
            parts.append("system instruction " + repr(self.system_instruction[:40]))
        if self.approximate_labels:
            parts.append("labels approximated (top-20 log-probs)")
        parts.append(f"{self.samples if self.samples is not None else '?'} samples")
        if self.sample_selection != DEFAULT_SAMPLE_SELECTION:
            parts.append(f"samples {self.sample_selection}")
        if self.shots is not None:
            parts.append(f"{self.shots}-shot")
        if self.metric:
            parts.append(f"metric {self.metric}")
        if self.input_format:
            parts.append(f"{self.input_format} input")
        if self.seed is not None:
            parts.append(f"seed {self.seed}")
        if self.searched:
            parts.append("budget " + ("unlimited" if self.budget is None else str(self.budget)))
            parts += [f"{k}={v}" for k, v in self.attack_options]
        return ", ".join(parts)

    def slug(self) -> str:
        """A short file-name-safe form of the label (report table names)."""
        parts = [self.mode]
        if self.mode == "generate":
            parts += [str(self.parser or "x"), f"t{self.max_new_tokens if self.max_new_tokens is not None else 'x'}"]
        if self.approximate_labels:
            parts.append("approx")
        if self.stop is not None or self.system_instruction is not None:
            import hashlib

            parts.append("i" + hashlib.sha1(repr((self.stop, self.system_instruction)).encode()).hexdigest()[:6])
        parts.append(f"n{self.samples if self.samples is not None else 'x'}")
        if self.sample_selection != DEFAULT_SAMPLE_SELECTION:
            parts.append(self.sample_selection)
        if self.seed is not None:
            parts.append(f"s{self.seed}")
        if self.searched:
            parts.append("bunl" if self.budget is None else f"b{self.budget}")
            if self.attack_options:
                import hashlib

                parts.append("o" + hashlib.sha1(repr(self.attack_options).encode()).hexdigest()[:6])
        return "-".join(parts)

    def sort_key(self) -> tuple[Any, ...]:
        return (self.mode, self.approximate_labels, str(self.stop), str(self.system_instruction), str(self.parser), self.max_new_tokens or 0, self.samples or 0, self.sample_selection,
                self.shots or 0, self.metric, self.input_format, self.seed or 0, not self.searched, self.budget or 0,
                self.attack_options)
