"""The one result record, and the one reader and writer of record files.

An ``AttackRecord`` holds one measurement: a clean prompt, the prompt an attack
(or a transfer, a defense, a pairs file) put against it, both scores with
their 95% intervals, the PDR, the settings under which it was made, and what
it cost. Its ``kind`` says which measurement it is:

- ``attack``: an attack's own search found the adversarial prompt (``pre run --attack``, sweeps);
- ``pair``: a given clean/adversarial pair was scored (``pre eval --prompts PAIRS``);
- ``transfer``: an adversarial prompt found on ``source_model`` was scored on another model;
- ``defense``: the adversarial prompt was repaired by ``defense`` before scoring.

Reports group by (kind, ``MeasurementSettings``) and never pool kinds.

Rows written before records carried a kind (release 0.1.0) get one inferred
from what they hold (``infer_kind``), in this order: the ``settings`` entry
``analysis`` ("transfer", "defense", "eval" -> pair) that 0.1.0 wrote; else a
``settings`` entry ``undefended_prompt`` or ``defense`` -> defense, or
``source_model`` -> transfer; else ``adversarial_given`` true -> pair; else
attack. Records are appended to ``results.jsonl`` the moment they exist (one
flushed line each, so a crash loses nothing finished; ``cost`` stays a nested
object there) and consolidated into ``results.parquet`` (cost flattened into
columns) for analysis with polars.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict

import orjson

if TYPE_CHECKING:  # DataFrames are built when asked for
    import pandas as pd
    import polars as pl

from promptrobust.engine.measuring.settings import DEFAULT_SAMPLE_SELECTION, MeasurementSettings

#: ``nothing_to_change``: the attack could try no change of the prompt (every word protected, say),
#: so it measured nothing: no PDR, its ``note`` says why; never averaged, like a skipped record.
Status = Literal["attacked", "skipped_clean_zero", "failed", "nothing_to_change"]
Kind = Literal["attack", "pair", "transfer", "defense"]
KINDS: tuple[str, ...] = ("attack", "pair", "transfer", "defense")
#: The kind of a ``results.jsonl`` row that is a clean score, not a record: a clean-only ``pre run``
#: writes one per prompt (``EvaluationResult.rows``). Readers of records pass over it (``is_record_row``).
CLEAN_KIND = "clean"


def is_record_row(row: Mapping[str, Any]) -> bool:
    """Whether a ``results.jsonl`` row is a record (of any kind), not a clean score."""
    return row.get("kind") != CLEAN_KIND


def now() -> str:
    """The time now in UTC, as every record and results document writes it (ISO 8601, seconds)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def infer_kind(row: Mapping[str, Any]) -> str:
    """The kind of a row that does not say (written before 0.2); the rule is in the module docstring."""
    kind = row.get("kind")
    if kind in KINDS:
        return str(kind)
    settings = given if isinstance(given := row.get("settings"), Mapping) else {}
    analysis = settings.get("analysis")
    if analysis in ("transfer", "defense"):
        return str(analysis)
    if analysis == "eval":
        return "pair"
    if "undefended_prompt" in settings or "defense" in settings:
        return "defense"
    if "source_model" in settings:
        return "transfer"
    if row.get("adversarial_given"):
        return "pair"
    return "attack"


class PromptSetStatistic(TypedDict):
    """Semantic's statistic over its whole prompt set (``statistics.prompt_set_pdr``; ``AttackRecord.prompt_set_pdr``)."""

    statistic: str
    prompts: int
    mean: float | None
    std: float | None
    ci95: list[float] | None
    interval: str
    worst: float
    best: float


class CleanSamplesScore(TypedDict, total=False):
    """The joint attack's clean prompt on the dataset's own, clean samples (``AttackRecord.clean_samples``)."""

    score: float
    ci95: list[float]
    samples: int
    sample_selection: str
    #: 1 - (both adversarial) / (clean prompt, clean samples); None where the clean score is 0.
    pdr_both_adversarial: float | None


@dataclass(frozen=True)
class Cost:
    """What one record's measurement cost (its own, not its batch's)."""

    candidate_evaluations: int = 0
    """Candidate prompts scored (the query budget used)."""
    model_requests: int = 0
    """(prompt, sample) requests asked for."""
    requests_sent: int = 0
    """Of those, sent to the backend."""
    cache_hits: int = 0
    deduplicated: int = 0
    saved_by_early_stopping: int = 0
    """(candidate, sample) pairs never requested thanks to exact early stopping."""
    pruned_candidates: int = 0
    samples_evaluated: int = 0
    """(candidate, sample) pairs scored, the clean prompt included."""
    saved_by_racing: int = 0
    """(candidate, sample) pairs a race never requested (``early_stopping="racing"``)."""
    races: int = 0
    """Search steps decided by a race."""
    raced_out: int = 0
    """Candidates a race dropped before their last sample."""
    input_tokens: int = 0
    """Prompt tokens of the requests sent to the model (as the server or tokenizer reports them)."""
    output_tokens: int = 0
    """Completion tokens of those requests."""
    usd: float | None = None
    """What those tokens cost at the model's price (``engine.serving.prices``); None: not priced."""
    wall_seconds: float = 0.0
    """This record's own wall time."""
    shared: bool = False
    """The record's work was shared with other records (pairs, transfers, defenses: every
    prompt is scored once for all the records that use it, all at the same time), so no
    cost is its own: every count here is left at 0. The run's totals are in results.json."""

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "Cost":
        data = data or {}
        return cls(**{f.name: data[f.name] for f in fields(cls) if data.get(f.name) is not None})


@dataclass
class AttackRecord:
    """One (model, dataset, prompt, attack) measurement."""

    model: str
    dataset: str
    prompt_id: str
    attack: str
    clean_prompt: str
    clean_score: float
    adversarial_prompt: str = ""
    adversarial_score: float | None = None
    pdr: float | None = None
    """1 - adversarial / clean; negative when the attack helped; None when not attacked."""
    status: Status = "attacked"
    error: str | None = None
    backend: str = ""
    prompt_type: str = "task"
    shots: int = 0
    mode: str = "generate"
    parser: str | None = "last_word"
    max_new_tokens: int | None = None
    input_format: str = ""
    stop: list[str] | None = None
    """generate mode: stop sequences other than the task's own (``--gen_kwargs until=``)."""
    system_instruction: str | None = None
    """Text sent before every input (``--system_instruction``)."""
    label_scoring: str | None = None
    """choices mode: exact label log-probs, or the HTTP top-20 approximation (backends/openai/scoring.py)."""
    samples: int = 0
    metric: str = ""
    seed: int = 0
    budget: int | None = None
    """Candidate evaluations allowed; None = unlimited (promptbench)."""
    early_stopping: str = "exact"
    """How the search's candidates were scored: exact (early stopping that keeps the exhaustive
    result), off (every candidate on every sample) or racing (``search`` says its error rate)."""
    search: str | None = None
    """A search whose choices may differ from exhaustive scoring: its description (racing with its
    error rate, ``engine.measuring.racing``); None (not written) when the choices are exhaustive's.
    Records of different searches are different measurements (``MeasurementSettings.search``)."""
    clean_ci95: list[float] | None = None
    adversarial_ci95: list[float] | None = None
    pdr_ci95: list[float] | None = None
    mcnemar_p: float | None = None
    chance_rate: float | None = None
    at_chance: bool = False
    clean_sample_scores: list[float] = field(default_factory=list)
    adversarial_sample_scores: list[float] = field(default_factory=list)
    cost: Cost = field(default_factory=Cost)
    budget_exhausted: bool = False
    perturbed_words: int = 0
    settings: dict[str, Any] = field(default_factory=dict)
    """The attack's settings, deviations from its recipe included."""
    prompt_scores: list[list[Any]] = field(default_factory=list)
    """Semantic: [language, prompt, score] of every prompt tried."""
    job_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    """Free columns carried from the input (e.g. a pairs file's source_model)."""
    adversarial_given: bool = False
    """The adversarial prompt was an input (a pairs file, a transfer, a defense), not found by a search."""
    kind: str = ""
    """attack, pair, transfer or defense (see the module docstring); inferred when left empty."""
    source_model: str | None = None
    """transfer (and defense of a transferred record): the model the adversarial prompt was found on."""
    defense: str | None = None
    """defense: the defense's name (e.g. spellcheck)."""
    sample_selection: str = DEFAULT_SAMPLE_SELECTION
    attack_options: dict[str, str] = field(default_factory=dict)
    """attack: the options the attack was built with (``--attack-option``)."""
    run_key: str = ""
    # -- meaning checks and held-out samples (issue 23) --
    substitutions: list[list[str]] = field(default_factory=list)
    """[old, new] text of every changed stretch of the prompt."""
    final_similarity: dict[str, Any] = field(default_factory=dict)
    """The adversarial prompt's whole-prompt sentence similarity to the clean one."""
    meaning: dict[str, Any] | None = None
    """The independent meaning verdict (``attacks.meaning_check``): kept, changed or not checked, with its
    evidence; None when the record has none (pairs, older records): never counted as acceptable."""
    held_out: dict[str, Any] | None = None
    """The clean and adversarial prompts re-scored on samples the search never saw."""
    prompt_set_pdr: PromptSetStatistic | None = None
    """Semantic: the statistic over its whole prompt set (``prompt_set_statistic``): the mean PDR of
    every prompt of the set against the clean prompt (an APDR over the set's prompts, the figure the
    paper's Semantic APDR is) with its interval, beside ``pdr``, which is the worst prompt's. None
    (and not written) for every other attack."""
    clean_samples: CleanSamplesScore | None = None
    """The joint attack on prompt and sample: the clean prompt scored on the dataset's own (clean)
    samples (score, interval, count), beside ``clean_score`` (clean prompt, adversarial samples) and
    ``adversarial_score`` (both adversarial); the paper's AdvGLUE table. None (not written) otherwise."""
    task_definition: str | None = None
    """A user's own task (``tasks.own``): its definition hash, so records of two edits of one
    task name are two measurements, never reruns of one; None (and not written) for the
    built-in datasets, which their name identifies."""
    note: str | None = None
    """Why a record that is not a measurement is so (status ``nothing_to_change``: what kept every
    word of the prompt); None (and not written) otherwise."""

    def __repr__(self) -> str:
        """One line: what was measured and its numbers (the per-sample scores are in the fields)."""
        numbers = ", ".join(f"{name}={_short(value)}" for name, value in (
            ("clean", self.clean_score), ("adversarial", self.adversarial_score), ("pdr", self.pdr)) if value is not None)
        error = f", error={self.error[:60]!r}" if self.error else ""
        return (f"AttackRecord(kind={self.kind!r}, model={self.model!r}, dataset={self.dataset!r}, attack={self.attack!r}, "
                f"prompt_id={self.prompt_id!r}, status={self.status!r}, {numbers + ', ' if numbers else ''}"
                f"samples={self.samples}{error})")

    def __post_init__(self) -> None:
        if not self.kind:
            self.kind = infer_kind(self.to_dict())
        if self.kind not in KINDS:
            raise ValueError(f"record kind must be one of {', '.join(KINDS)} (got {self.kind!r})")
        if self.kind == "transfer" and self.source_model is None:
            self.source_model = self.settings.get("source_model")
        if self.kind == "defense" and self.defense is None:
            self.defense = self.settings.get("defense")
        if not self.run_key:
            self.run_key = self.measurement_key()

    @property
    def measurement(self) -> MeasurementSettings:
        """The settings this number was made under, as they apply to its kind (the grouping key)."""
        return MeasurementSettings.of(self.to_dict()).for_kind(self.kind)

    def measurement_key(self) -> str:
        """Same key = a rerun of the same measurement (reports count it once): the
        kind, what was measured (model, dataset, prompts, attack, source, defense)
        and the ``MeasurementSettings`` (and a user's task's definition hash). The adversarial
        prompt is part of it when it was given rather than searched for, so two pairs on one
        clean prompt stay two."""
        parts = [
            self.kind, self.adversarial_prompt if self.kind != "attack" else "",
            self.model, self.backend, self.dataset, self.clean_prompt, self.attack, self.source_model, self.defense,
            self.measurement.to_dict(), sorted((str(k), str(v)) for k, v in self.settings.items()),
        ]
        if self.task_definition is not None:  # only then, so built-in datasets keep their keys
            parts.append(self.task_definition)
        return hashlib.sha1(orjson.dumps(parts, default=str)).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        row = asdict(self)
        if row["task_definition"] is None:  # built-in datasets: rows as they always were
            del row["task_definition"]
        if row["prompt_set_pdr"] is None:  # only Semantic records have one
            del row["prompt_set_pdr"]
        if row["clean_samples"] is None:  # only joint prompt + sample attacks have one
            del row["clean_samples"]
        if row["search"] is None:  # only searches whose choices may differ from exhaustive scoring
            del row["search"]
        if not row["cost"]["races"]:  # only raced searches: other rows as they always were
            for key in ("saved_by_racing", "races", "raced_out"):
                del row["cost"][key]
        if row["cost"]["usd"] is None:  # priced API models only
            del row["cost"]["usd"]
        if row["note"] is None:  # only records that measured nothing have one
            del row["note"]
        return row

    def to_polars(self) -> pl.DataFrame:
        """This record as a one-row table, exactly as the run folder's results.parquet holds it
        (cost flattened into columns, nested values as JSON text)."""
        return rows_frame([orjson.loads(record_line(self))])

    def to_pandas(self) -> pd.DataFrame:
        """The same one-row table in pandas (needs the [pandas] extra: pandas and pyarrow)."""
        from promptrobust.extras import require_extra

        require_extra("pandas", "AttackRecord.to_pandas()")
        return self.to_polars().to_pandas()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "AttackRecord":
        """A record from a JSON row; older rows (flat cost fields, missing fields) are read too."""
        names = {f.name for f in fields(cls)}
        row = {k: v for k, v in data.items() if k in names}
        cost = data.get("cost")
        row["cost"] = Cost.from_dict(cost if isinstance(cost, Mapping) else data)
        if not isinstance(row.get("settings"), dict):
            row["settings"] = {}
        row.setdefault("model", "")
        row.setdefault("dataset", "")
        row.setdefault("prompt_id", "")
        row.setdefault("attack", "")
        row.setdefault("clean_prompt", "")
        row.setdefault("clean_score", 0.0)
        if "status" not in data:
            row["status"] = "attacked"
        if not isinstance(row.get("attack_options"), dict):
            row.pop("attack_options", None)
        row["kind"] = infer_kind(data)
        return cls(**row)


def _short(x: float) -> str:
    return f"{x:.4g}" if isinstance(x, float) else repr(x)


def records_summary(records: Sequence[AttackRecord]) -> str:
    """'4 records (3 attacked, 1 skipped), APDR 0.222': the headline of records (for result reprs).
    The APDR here is the plain mean PDR; its interval is ``statistics.summarize_pdrs``'s."""
    counts: dict[str, int] = {}
    for r in records:
        counts[r.status] = counts.get(r.status, 0) + 1
    words = {"attacked": "attacked", "skipped_clean_zero": "skipped", "failed": "failed",
             "nothing_to_change": "with nothing to change"}
    parts = ", ".join(f"{n} {words.get(s, s)}" for s, n in counts.items())
    pdrs = [r.pdr for r in records if r.status == "attacked" and r.pdr is not None]
    apdr = f", APDR {sum(pdrs) / len(pdrs):.3f}" if pdrs else ""
    noun = "record" if len(records) == 1 else "records"
    return f"{len(records)} {noun}" + (f" ({parts})" if parts else "") + apdr


def append_jsonl(path: str | os.PathLike[str], records: Iterable[AttackRecord | Mapping[str, Any]]) -> None:
    """Append records whole and fsynced, or not at all (a full disk leaves no torn line; atomic_io)."""
    from promptrobust.engine.safe_io import atomic_io

    atomic_io.append_bytes(path, b"".join(record_line(rec) for rec in records))


def record_line(record: AttackRecord | Mapping[str, Any]) -> bytes:
    """A record as its line of results.jsonl."""
    row = record.to_dict() if isinstance(record, AttackRecord) else dict(record)
    return orjson.dumps(row, default=str, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"


def read_jsonl(path: str | os.PathLike[str], *, warn: bool = True, non_finite: bool = False) -> list[dict[str, Any]]:
    """Rows of a JSONL file. A torn last line (a crash mid-write) is skipped with a
    one-line warning on stderr; a bad line elsewhere is skipped the same way. A line
    holding NaN or Infinity (Python's json writes them; JSON has no such numbers) is
    read with ``non_finite=True`` (reports judge such numbers themselves), else skipped
    with a warning that says so."""
    out: list[dict[str, Any]] = []
    raw = Path(path).read_bytes()
    lines = raw.splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            out.append(orjson.loads(line))
            continue
        except orjson.JSONDecodeError:
            pass
        try:
            row = json.loads(line)  # accepts NaN, Infinity and -Infinity
        except ValueError:
            torn = number == len(lines) and not raw.endswith(b"\n")
            what = "is not complete JSON (torn write?)" if torn else "is not valid JSON (cut short by a crash, or edited)"
        else:
            if non_finite:
                out.append(row)
                continue
            what = "holds NaN or Infinity, which JSON does not allow"
        if warn:
            print(f"pre: warning: {path}: line {number} {what}; skipped", file=sys.stderr)
    return out


def results_files(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_file():
            files.append(p)
            continue
        for f in sorted(p.rglob("results.jsonl")):
            # Hidden folders are work in progress (.NAME.partial runs, .NAME.work-* merges): never results.
            if not any(part.startswith(".") for part in f.relative_to(p).parts[:-1]):
                files.append(f)
    return files


def flat_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A record row for tables: cost fields as top-level columns, nested values as JSON text."""
    out = {k: v for k, v in row.items() if k != "cost"}
    cost = row.get("cost")
    if isinstance(cost, Mapping):
        out.update(cost)
    for key in ("settings", "extra", "prompt_scores", "clean_scores", "attack_options", "substitutions", "final_similarity",
                "meaning",
                "held_out", "prompt_set_pdr", "clean_samples"):
        if key in out and not isinstance(out[key], str):
            out[key] = orjson.dumps(out[key], default=str).decode()
    return out


def rows_frame(rows: Sequence[Mapping[str, Any]]) -> pl.DataFrame:
    """Record rows (as results.jsonl holds them) as results.parquet holds them: one row each, cost flattened."""
    import polars as pl

    return pl.DataFrame([flat_row(r) for r in rows], infer_schema_length=None) if rows else pl.DataFrame()


def consolidate_parquet(jsonl: str | os.PathLike[str], parquet: str | os.PathLike[str]) -> int:
    """Write all records of ``jsonl`` to ``parquet`` atomically (cost flattened); returns the row count."""
    from promptrobust.engine.safe_io import atomic_io

    frame = rows_frame(read_jsonl(jsonl) if Path(jsonl).exists() else [])
    atomic_io.write_parquet(parquet, frame)
    return frame.height


class RecordFrames:
    """``to_polars()`` and ``to_pandas()`` of a result: its ``records``, one row each exactly as the
    run folder's results.parquet holds them (a result without records says what its rows are by
    overriding ``frame_rows``)."""

    def frame_rows(self) -> list[dict[str, Any]]:
        """The rows, as results.jsonl holds them (the same bytes, read back)."""
        return [orjson.loads(record_line(r)) for r in getattr(self, "records")]

    def to_polars(self) -> pl.DataFrame:
        return rows_frame(self.frame_rows())

    def to_pandas(self) -> pd.DataFrame:
        """The same table in pandas (needs the [pandas] extra: pandas and pyarrow)."""
        from promptrobust.extras import require_extra

        require_extra("pandas", f"{type(self).__name__}.to_pandas()")
        return self.to_polars().to_pandas()
