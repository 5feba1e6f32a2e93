"""Reading finished runs for a report: attack records and clean scores.

Every ``results.jsonl`` (attack records) and ``results.json`` (run summary
with clean scores) under the given paths is read, recursively, skipping
hidden folders (unfinished ``.NAME.partial`` runs). Records are normalised
into plain dicts that tolerate older writers (flat cost fields, no status,
no run_key), reruns of one measurement are counted once, and each record
carries the *setting* it was measured under, so that records of different
settings are never pooled. Numbers that cannot be right (a NaN, a PDR that
contradicts its scores) and records of a kind this version does not know are
judged by ``checks``: kept apart, never averaged, and said once in the report.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

import promptrobust.engine.analysis.report.checks as checks
from promptrobust.engine.analysis.report.checks import INVALID, ReadProblems
from promptrobust.engine.measuring.statistics import is_at_chance, record_status
from promptrobust.engine.errors import PromptRobustError
from promptrobust.engine.measuring.records import KINDS, infer_kind, is_record_row
from promptrobust.engine.runs.run_folder import FORMAT as RESULTS_FORMAT
from promptrobust.engine.measuring.settings import MeasurementSettings, int_or_none as _int_or_none

RESULT_NAMES = ("results.jsonl", "results.json")
REQUIRED = ("model", "dataset", "attack", "clean_prompt")
COST_FIELDS = (
    "candidate_evaluations", "model_requests", "requests_sent", "cache_hits", "deduplicated",
    "saved_by_early_stopping", "pruned_candidates", "samples_evaluated", "wall_seconds",
    "saved_by_racing", "races", "raced_out", "input_tokens", "output_tokens", "usd",
)
#: fields of the record itself; anything else on a row is an extra column (e.g. a pairs file's source_model)
KNOWN_FIELDS = frozenset((
    *REQUIRED, *COST_FIELDS, "backend", "prompt_id", "prompt_type", "shots", "clean_score", "adversarial_prompt",
    "adversarial_score", "pdr", "status", "error", "mode", "parser", "max_new_tokens", "input_format", "label_scoring", "sample_selection", "samples",
    "metric", "seed", "budget", "early_stopping", "clean_ci95", "adversarial_ci95", "pdr_ci95", "mcnemar_p",
    "chance_rate", "at_chance", "clean_sample_scores", "adversarial_sample_scores", "cost", "settings",
    "prompt_scores", "run_key", "job_id", "extra", "budget_exhausted", "perturbed_words", "clean_scores",
    "kind", "source_model", "defense", "sample_selection", "attack_options", "adversarial_given",
    "substitutions", "final_similarity", "held_out", "meaning",  # meaning checks, held-out samples
    "stop", "system_instruction",  # lm-eval habits (--gen_kwargs until=, --system_instruction)
    "task_definition",  # a user's own task: its definition hash
    "prompt_set_pdr",  # Semantic: the mean PDR over its prompt set
    "clean_samples",  # a joint prompt + sample attack: the clean prompt on the clean samples
    "search",  # a search whose choices may differ from exhaustive scoring (racing, with its error rate)
    "note",  # why a record measured nothing (an attack with nothing to change)
))


class ReportInputError(PromptRobustError, ValueError):
    """Paths or files a report cannot be built from (the CLI exits with code 2)."""


#: A report section's key: the measurement settings a record was made under, as
#: they apply to its kind, without the fields the tables lay out as rows and
#: columns (``settings.TABLE_DIMENSIONS``: shots, metric, input format).
Setting = MeasurementSettings


def section_setting(row: Mapping[str, Any], kind: str) -> MeasurementSettings:
    """The section key of a record (or of a clean score: ``kind="clean"``)."""
    return MeasurementSettings.of(readable_settings(row)).for_kind(kind).without()


_WHOLE_NUMBERS = ("samples", "seed", "shots", "budget", "max_new_tokens")
_TEXTS = ("mode", "parser", "metric", "input_format", "sample_selection", "label_scoring", "system_instruction")


def readable_settings(row: Mapping[str, Any], problems: ReadProblems | None = None) -> dict[str, Any]:
    """``row`` with the fields ``MeasurementSettings`` reads made readable (a hand-edited file can
    hold anything): whole numbers within 64 bits, names as text, stop sequences as a list of
    strings, attack options as a mapping; anything else there is read as missing (numbers
    counted in ``problems``)."""
    out = dict(row)
    for k in _WHOLE_NUMBERS:
        if out.get(k) is None:
            continue
        value = _int_or_none(out[k])
        out[k] = value if value is not None and -(2**63) <= value < 2**63 else None
        if out[k] is None and problems is not None:
            problems.unreadable_numbers += 1
    for k in _TEXTS:
        if out.get(k) is not None and not isinstance(out[k], str):
            out[k] = None
    if out.get("stop") is not None and not (isinstance(out["stop"], list) and all(isinstance(x, str) for x in out["stop"])):
        out["stop"] = None
    if out.get("attack_options") is not None and not isinstance(out["attack_options"], Mapping):
        out["attack_options"] = None
    return out


def _float_or_none(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer beyond a float's range
        return None


@dataclass
class RunData:
    """Everything a report is built from."""

    records: list[dict[str, Any]]
    """Normalised attack records, reruns counted once (every status)."""
    clean: list[dict[str, Any]]
    """Clean scores: model, dataset, shots, setting, prompt_id, score, ci95, at_chance, chance_rate, source."""
    files: list[Path] = field(default_factory=list)
    reruns_dropped: int = 0
    problems: ReadProblems = field(default_factory=ReadProblems)
    """Numbers and kinds that could not be used (``checks``), for the report's notes."""
    made_with: list[str] = field(default_factory=list)
    """The software versions the run folders say they were made with (``made_with``)."""


def find_result_files(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """results.jsonl / results.json under ``paths`` (hidden folders skipped), deduplicated and sorted."""
    found: dict[Path, None] = {}
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise ReportInputError(f"{raw} does not exist: pass run folders, sweep folders or results files")
        if p.is_file():
            if p.name not in RESULT_NAMES:
                raise ReportInputError(f"{raw} is not a results.jsonl or results.json file: pass its run folder instead")
            found[p.resolve()] = None
            continue
        for root, dirs, files in os.walk(p):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in RESULT_NAMES:
                if name in files:
                    found[(Path(root) / name).resolve()] = None
    return sorted(found)


def _read_json(path: Path) -> dict[str, Any] | None:
    raw = path.read_bytes()
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        try:
            data = json.loads(raw)  # NaN and Infinity (Python's json writes them): judged by ``checks``
        except ValueError:
            raise ReportInputError(f"{path} is not valid JSON ({exc}): remove it or rerun that run") from None
    return data if isinstance(data, dict) else None


def normalise(row: Mapping[str, Any], source: str, problems: ReadProblems | None = None) -> dict[str, Any]:
    """One record as a flat dict with every field a report reads; numbers that cannot
    be used are read as missing, and a record whose PDR cannot be right gets the status
    ``invalid`` (``checks``), each counted in ``problems``."""
    problems = problems if problems is not None else ReadProblems()
    missing = [c for c in REQUIRED if c not in row]
    if missing:
        raise ReportInputError(f"{source}: a record lacks {missing[0]!r}; is this a `pre run --attack` results file?")
    row = readable_settings(row, problems)
    nested = given if isinstance(given := row.get("cost"), Mapping) else {}
    cost = {k: _measured(nested.get(k, row.get(k)), problems, high=1e15, low=0.0) for k in COST_FIELDS}
    clean_samples, adversarial_samples, dropped = checks.sample_scores(row.get("clean_sample_scores"),
                                                                       row.get("adversarial_sample_scores"))
    problems.dropped_sample_scores += dropped
    extras = {k: v for k, v in row.items() if k not in KNOWN_FIELDS}
    if isinstance(row.get("extra"), Mapping):
        extras.update(row["extra"])
    rec: dict[str, Any] = {
        "model": str(row["model"]), "dataset": str(row["dataset"]), "attack": str(row["attack"]),
        "backend": str(row.get("backend") or ""), "prompt_id": str(row.get("prompt_id") or ""),
        "prompt_type": str(row.get("prompt_type") or ""), "shots": _int_or_none(row.get("shots")),
        "clean_prompt": str(row["clean_prompt"]), "adversarial_prompt": str(row.get("adversarial_prompt") or ""),
        "clean_score": _float_or_none(row.get("clean_score")), "adversarial_score": _float_or_none(row.get("adversarial_score")),
        "pdr": _float_or_none(row.get("pdr")), "error": row.get("error"),
        "mode": row.get("mode"), "parser": row.get("parser"), "max_new_tokens": _int_or_none(row.get("max_new_tokens")),
        "samples": _int_or_none(row.get("samples")), "seed": _int_or_none(row.get("seed")), "budget": _int_or_none(row.get("budget")),
        "metric": str(row.get("metric") or ""), "early_stopping": str(row.get("early_stopping") or ""),
        "clean_ci95": _interval(row.get("clean_ci95"), problems), "pdr_ci95": _interval(row.get("pdr_ci95"), problems),
        "adversarial_ci95": _interval(row.get("adversarial_ci95"), problems),
        "mcnemar_p": _measured(row.get("mcnemar_p"), problems, low=0.0, high=1.0),
        "chance_rate": _measured(row.get("chance_rate"), problems, *checks.SCORE_RANGE),
        "clean_sample_scores": clean_samples, "adversarial_sample_scores": adversarial_samples,
        "settings": row.get("settings") if isinstance(row.get("settings"), Mapping) else {},
        "run_key": str(row.get("run_key") or ""), "job_id": row.get("job_id"),
        "cost": cost, "wall_seconds": cost["wall_seconds"], "source": source, "extras": extras,
        "clean_scores": row.get("clean_scores") if isinstance(row.get("clean_scores"), Mapping) else None,
        # issue 23: meaning checks and held-out samples
        "substitutions": _substitutions(row.get("substitutions")),
        "final_similarity": _similarity(row.get("final_similarity"), problems),
        "held_out": _held_out(row.get("held_out"), problems),
    }
    rec["status"] = record_status({**rec, "status": row.get("status")})
    if rec["status"] == "attacked" and rec["pdr"] is None:
        rec["status"] = "failed"
        rec["error"] = rec["error"] or "record has no PDR"
    at_chance = row.get("at_chance")
    if at_chance is None:
        at_chance = is_at_chance(rec["clean_ci95"], rec["chance_rate"])
    rec["at_chance"] = bool(at_chance)
    kind = infer_kind(row)
    where = f"{rec['model']} / {rec['dataset']} / {rec['attack']} / {rec['prompt_id'] or '?'} in {Path(source).name}"
    if row.get("kind") not in (None, "", *KINDS):  # never counted as an attack
        kind = str(row["kind"])
        problems.unknown_kinds[kind] += 1
        rec["status"], rec["error"] = INVALID, f"unknown record kind {kind!r}"
        problems.invalid.append(f"{where}: {rec['error']}")
    elif rec["status"] == "attacked":
        problem = checks.pdr_problem(rec["pdr"], rec["clean_score"], rec["adversarial_score"])
        if problem:
            rec["status"], rec["error"] = INVALID, problem
            problems.invalid.append(f"{where}: {problem}")
    rec["kind"] = kind
    settings = rec["settings"]
    rec["source_model"] = row.get("source_model") or (settings.get("source_model") if kind in ("transfer", "defense") else None)
    rec["defense"] = row.get("defense") or (settings.get("defense") if kind == "defense" else None)
    rec["task_definition"] = row.get("task_definition")  # a user's own task (name_definitions)
    rec["setting"] = section_setting(row, kind)
    rec["has_sample_scores"] = bool(rec["clean_sample_scores"]) and bool(rec["adversarial_sample_scores"])
    rec["meaning"] = row.get("meaning") if isinstance(row.get("meaning"), Mapping) else None  # issue 30: the verdict
    # Semantic: the statistic over the whole prompt set, and the scores it is derived from in older records
    rec["prompt_set_pdr"] = row.get("prompt_set_pdr") if isinstance(row.get("prompt_set_pdr"), Mapping) else None
    rec["prompt_scores"] = row.get("prompt_scores") if isinstance(row.get("prompt_scores"), list) else []
    rec["clean_samples"] = row.get("clean_samples") if isinstance(row.get("clean_samples"), Mapping) else None
    if not rec["run_key"]:
        rec["run_key"] = legacy_run_key(rec)
    return rec


def _measured(value: Any, problems: ReadProblems, low: float = -math.inf, high: float = math.inf) -> float | None:
    """A number a record may lack (p-value, rate, cost): None when missing or unusable (counted)."""
    x = _float_or_none(value)
    out = checks.number(x, low, high)
    if value is not None and out is None:
        problems.unreadable_numbers += 1
    return out


def _interval(value: Any, problems: ReadProblems) -> list[float] | None:
    out = checks.interval(value)
    if value is not None and out is None:
        problems.unreadable_numbers += 1
    return out


def _substitutions(value: Any) -> list[list[str]]:
    """[old, new] text pairs; anything else in the list is left out."""
    if not isinstance(value, list):
        return []
    return [[str(p[0]), str(p[1])] for p in value if isinstance(p, (list, tuple)) and len(p) == 2]


def _similarity(value: Any, problems: ReadProblems) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        return {}
    return {**value, **{k: _measured(value.get(k), problems) for k in ("angular", "cosine") if k in value}}


def _held_out(value: Any, problems: ReadProblems) -> dict[str, Any] | None:
    """The held-out re-scoring, its numbers usable; None without a usable PDR."""
    if not isinstance(value, Mapping):
        return None
    out = {**value, "pdr": _measured(value.get("pdr"), problems, checks.PDR_FLOOR, 1.0),
           "pdr_ci95": _interval(value.get("pdr_ci95"), problems),
           "mcnemar_p": _measured(value.get("mcnemar_p"), problems, 0.0, 1.0),
           "clean_score": _measured(value.get("clean_score"), problems, *checks.SCORE_RANGE),
           "adversarial_score": _measured(value.get("adversarial_score"), problems, *checks.SCORE_RANGE),
           "samples": _int_or_none(value.get("samples"))}
    return out if out["pdr"] is not None else None


def legacy_run_key(rec: Mapping[str, Any]) -> str:
    """The measurement key of a record written before run_key existed: the same kind,
    model, dataset, clean prompt (and given adversarial prompt), attack and
    ``MeasurementSettings`` is a rerun."""
    kind = rec.get("kind") or "attack"
    given = rec.get("adversarial_prompt") if kind != "attack" else ""
    parts = [kind, given, *(rec.get(k) for k in ("model", "dataset", "clean_prompt", "attack")),
             MeasurementSettings.of(rec).for_kind(kind).to_dict()]
    return "legacy-" + hashlib.sha1(orjson.dumps(parts, default=str)).hexdigest()[:16]


def _record_rows(path: Path, has_jsonl: set[Path], summary: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The records of ``path``: a results.jsonl's rows, else (an old results.json alone) its ``attacked``."""
    from promptrobust.engine.measuring.records import read_jsonl  # warns on a torn last line

    if path.name == "results.jsonl":  # a clean-only run's rows are its results.json's clean scores, read there
        return [r for r in read_jsonl(path, non_finite=True) if is_record_row(r)]  # a NaN is judged here (checks)
    if path.parent / "results.jsonl" in has_jsonl:
        return []
    return [r for r in (summary or {}).get("attacked") or [] if isinstance(r, dict)]


def _clean_from_summary(path: Path, data: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Clean scores a results.json (``path``, read as ``data``) holds: "clean" (list with intervals),
    "clean_scores" ({prompt_id: score}) or "prompts" (pre run / pre eval of single prompts)."""
    if data and data.get("format") == RESULTS_FORMAT:
        return _clean_from_document(path, data)
    if not data or "model" not in data or "dataset" not in data:
        return []  # a sweep summary or another file: nothing to read from it
    config = _read_json(path.parent / "config.json") if (path.parent / "config.json").is_file() else None
    merged = {**(config or {}), **data}
    shots = _int_or_none(merged.get("shots"))
    if shots is None:
        shots = next((_int_or_none(r.get("shots")) for r in data.get("attacked") or [] if isinstance(r, dict)), None)
    base = {"model": str(data["model"]), "dataset": str(data["dataset"]), "shots": shots,
            "setting": section_setting(merged, "clean"), "source": str(path.parent), "from": "run"}
    out: list[dict[str, Any]] = []
    run_chance = data.get("chance_rate")  # one majority-class rate per run (its samples)
    if isinstance(data.get("clean"), list):
        for r in data["clean"]:
            if isinstance(r, dict) and isinstance(r.get("score"), (int, float)):
                out.append(_clean_row(base, r.get("prompt_id") or r.get("id"), r["score"], r.get("ci95"),
                                      r.get("at_chance"), r.get("chance_rate", run_chance)))
    elif isinstance(data.get("prompts"), list):  # before clean_scores: it holds the intervals
        for r in data["prompts"]:
            if isinstance(r, dict) and isinstance(r.get("score"), (int, float)) and (r.get("prompt_id") or r.get("id")):
                out.append(_clean_row(base, r.get("prompt_id") or r.get("id"), r["score"], r.get("ci95"),
                                      r.get("at_chance"), r.get("chance_rate", run_chance)))
    elif isinstance(data.get("clean_scores"), dict):
        out += [_clean_row(base, k, v, chance=run_chance) for k, v in data["clean_scores"].items() if isinstance(v, (int, float))]
    return out


def _clean_from_document(path: Path, data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Clean scores of a results.json in the one layout (``engine.runs.run_folder``)."""
    results = given if isinstance(given := data.get("results"), Mapping) else {}
    measurement = (data.get("configs") or {}).get("measurement") or {}
    definitions = {t.get("name"): t.get("definition_hash") for t in data.get("tasks") or [] if isinstance(t, Mapping)}
    out = []
    for r in results.get("clean") or []:
        if not isinstance(r, Mapping) or not isinstance(r.get("score"), (int, float)):
            continue
        model = r.get("model") or data.get("model")
        dataset = r.get("dataset") or data.get("dataset")
        if model is None or dataset is None:
            continue
        base = {"model": str(model), "dataset": str(dataset), "shots": _int_or_none(measurement.get("shots")),
                "setting": section_setting(measurement, "clean"), "source": str(path.parent),
                "from": str(results.get("clean_from") or "run"), "task_definition": definitions.get(str(dataset))}
        out.append(_clean_row(base, r.get("prompt_id"), r["score"], r.get("ci95"), r.get("at_chance"),
                              r.get("chance_rate", data.get("chance_rate"))))
    return out


def _clean_row(base: Mapping[str, Any], prompt_id: Any, score: Any, ci95: Any = None,
               at_chance: Any = None, chance: Any = None) -> dict[str, Any]:
    """One clean score; its score is checked by ``load_runs`` (a NaN or 1e308 is left out there)."""
    ci = checks.interval(ci95)
    chance_f = checks.number(_float_or_none(chance), *checks.SCORE_RANGE)
    flag = bool(at_chance) if at_chance is not None else is_at_chance(ci, chance_f)
    return {**base, "prompt_id": str(prompt_id), "score": _float_or_none(score), "ci95": ci, "at_chance": flag,
            "chance_rate": chance_f}


def _clean_from_records(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Clean scores carried by the records themselves (``pre eval`` pairs, sweeps, any attack run),
    plus the whole prompt set a sweep record lists in ``clean_scores``."""
    out: list[dict[str, Any]] = []
    for r in records:
        if r["clean_score"] is None or r["status"] in ("failed", INVALID):
            continue
        base = {"model": r["model"], "dataset": r["dataset"], "shots": r["shots"],
                "setting": r["setting"].for_kind("clean"), "source": r["source"], "from": r["kind"]}
        out.append(_clean_row(base, r["prompt_id"] or r["clean_prompt"], r["clean_score"], r["clean_ci95"],
                              r["at_chance"], r["chance_rate"]))
        if r["clean_scores"]:  # a sweep record lists its whole prompt set
            ranking = {**base, "from": "run"}
            out += [_clean_row(ranking, k, v) for k, v in r["clean_scores"].items() if isinstance(v, (int, float))]
    return out


def name_definitions(rows: Sequence[dict[str, Any]]) -> None:
    """A user's task measured under two definitions (an edited task file) is two tasks: where one
    name carries several definition hashes, each row's dataset becomes ``NAME@HASH`` (its first 8
    digits), so no table pools them under one name. Rows of one definition keep the task's name."""
    hashes: dict[str, set[str]] = {}
    for r in rows:
        if r.get("task_definition"):
            hashes.setdefault(r["dataset"], set()).add(str(r["task_definition"]))
    for r in rows:
        if len(hashes.get(r["dataset"], ())) > 1:
            r["dataset"] = f"{r['dataset']}@{str(r.get('task_definition') or 'unknown')[:8]}"


def dedupe_reruns(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """One record per run_key: the latest finished one (files are read in
    time order), a failed one only when no rerun finished."""
    chosen: dict[str, dict[str, Any]] = {}
    for r in records:
        old = chosen.get(r["run_key"])
        unfinished = ("failed", INVALID)
        if old is None or not (r["status"] in unfinished and old["status"] not in unfinished):
            chosen[r["run_key"]] = r
    kept = list(chosen.values())
    return kept, len(records) - len(kept)


def _summaries(files: Sequence[Path]) -> dict[Path, dict[str, object] | None]:
    """The results.json of each run folder of ``files`` (one given or beside a results.jsonl), read
    once: None where a folder has none (or it is not a JSON object)."""
    out: dict[Path, dict[str, object] | None] = {}
    for folder in dict.fromkeys(f.parent for f in files):
        summary = folder / "results.json"
        out[summary] = _read_json(summary) if summary.is_file() else None
    return out


def made_with(summaries: Iterable[Mapping[str, Any] | None]) -> list[str]:
    """Each distinct version of promptrobust the run folders' results.json (``summaries``) say made
    them (their ``versions``): the release, the commit of a checkout, and whether that checkout had
    uncommitted changes. Folders without a summary (or one without versions) say nothing."""
    out: dict[str, None] = {}
    for data in summaries:
        versions = data.get("versions") if data else None
        if not isinstance(versions, Mapping) or not versions.get("promptrobust"):
            continue
        commit = versions.get("git_commit")
        text = f"promptrobust {versions['promptrobust']}"
        if isinstance(commit, str) and commit:
            text += f" at {commit[:10]}" + (" with uncommitted changes" if versions.get("git_dirty") is True else "")
        out[text] = None
    return sorted(out)


def load_runs(paths: Sequence[str | os.PathLike[str]]) -> RunData:
    """Every attack record and clean score under ``paths``."""
    files = find_result_files(paths)
    jsonls = {f for f in files if f.name == "results.jsonl"}
    problems = ReadProblems()
    raw: list[dict[str, Any]] = []
    summary_clean: list[dict[str, Any]] = []
    summaries = _summaries(files)
    for f in files:
        raw += [normalise(row, str(f.parent), problems) for row in _record_rows(f, jsonls, summaries.get(f))]
        if f.name == "results.json":
            summary_clean += _clean_from_summary(f, summaries[f])
    if not raw and not summary_clean:
        where = ", ".join(map(str, paths))
        raise ReportInputError(f"no results.jsonl or results.json under {where}: run `pre run --attack ...` or `pre sweep` first")
    records, dropped = dedupe_reruns(raw)
    # A summary written before runs recorded their mode/samples takes the setting of its own records.
    by_source = {r["source"]: r["setting"].for_kind("clean") for r in records}
    for c in summary_clean:
        if c["source"] in by_source:
            c["setting"] = by_source[c["source"]]
    name_definitions([*records, *summary_clean])  # before the records' own clean scores copy their names
    # A run's summary lists every prompt it scored; its records add the ones it lacks (pre eval pairs).
    def key(c: Mapping[str, Any]) -> tuple[Any, ...]:
        return (c["source"], c["model"], c["dataset"], c["shots"], c["setting"], c["prompt_id"])

    seen = {key(c) for c in summary_clean}
    clean = list(summary_clean)
    for c in _clean_from_records(records):
        k = key(c)
        if k not in seen:
            seen.add(k)
            clean.append(c)
    usable = [c for c in clean if checks.score(c["score"]) is not None]
    problems.bad_clean_scores += [f"{c['score']!r} for {c['prompt_id']} in {Path(str(c['source'])).name}"
                                  for c in clean if checks.score(c["score"]) is None]
    return RunData(records, usable, files, dropped, problems, made_with(summaries.values()))
