"""What each command's ``results.json`` holds, as the one layout's ``ResultsDocument``
(``engine.runs.run_folder``): built here from the typed results the library returns, so the
CLI (and any API caller) only hands them over. Clean scores of a prompt set (``pre run``) are
``EvaluationResult.document``.

- ``protocol_document``: the protocol's ranking and attack records (``pre run --attack``);
- ``records_document``: scored prompts and pair/transfer/defense records
  (``pre eval``, ``pre transfer``, ``pre defend``);
- ``results_file_document``: lm-eval's ``--output_path FILE.json``: every target's results.json
  in one file, keyed by dataset, with the run folder each came from.
- ``sweep_document`` and ``merged_sweep_document``: a sweep folder's records (``pre sweep``,
  ``pre sweep merge``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from promptrobust.engine.measuring.records import AttackRecord
from promptrobust.engine.measuring.statistics import apdr_rows
from promptrobust.engine.measuring.records import read_jsonl
from promptrobust.engine.serving.scheduler import identity_of
from promptrobust.engine.measuring.records import now
from promptrobust.engine.runs.run_folder import ResultsDocument, SweepFolder, WrittenWith, recorded_command, redact_argv

if TYPE_CHECKING:
    from promptrobust.engine.measuring.protocol import ProtocolResult
    from promptrobust.engine.measuring.workbench import Workbench
from promptrobust.engine.measuring.settings import AttackSettings

__all__ = ["RESULTS_FILE_FORMAT", "cost_by_attack", "merged_sweep_document", "protocol_document", "records_document",
           "results_file_document", "sweep_document"]

#: The layout of the one results file a run writes when asked (``OutputOptions.results_file``).
RESULTS_FILE_FORMAT = "promptrobust-results-file/1"


def _attack_configs(settings: AttackSettings) -> dict[str, Any]:
    return {"attacks": list(settings.attacks), "top_k": settings.top_k, "budget": settings.budget,
            "early_stopping": settings.early_stopping, "chunk_size": settings.chunk_size, "holdout": settings.holdout,
            **({"search": settings.search, "error_rate": settings.error_rate, "racing_tolerance": settings.racing_tolerance}
               if settings.search is not None else {}),
            **({"meaning_nli": settings.meaning_nli} if settings.meaning_nli is not None else {}),
            "options": {k: dict(v) for k, v in settings.options.items()}}


def protocol_document(run: WrittenWith, *, result: ProtocolResult,
                      tasks: Sequence[Mapping[str, Any]] = ()) -> ResultsDocument:
    """``pre run --attack`` (``ProtocolResult.to_dict``): the ranked prompt set, then the APDR
    of each attack over its records; ``tasks``: a user's own task's provenance."""
    records: list[AttackRecord] = list(result.records)
    attacks = result.attack_settings
    return ResultsDocument(
        command=recorded_command(run.argv), models=[result.model_identity] if result.model_identity else [], model=result.settings.get("model"),
        dataset=result.settings.get("dataset"), measurement=result.measurement or None,
        configs={**dict(run.configs), **({"attack": _attack_configs(attacks)} if attacks is not None else {})},
        clean=[c.to_dict() for c in result.clean], records=records, apdr=apdr_rows(records, ["kind", "attack"]),
        extra_results={
            "cost_by_attack": cost_by_attack(records),
            "skipped_clean_zero": [f"{r.attack} on {r.prompt_id}" for r in result.skipped],
            "failures": [f"{r.attack} on {r.prompt_id}: {r.error}" for r in result.failures],
            **({"held_out": {
                "fraction": result.settings.get("holdout"), "samples": result.settings.get("held_out_samples"),
                "split": result.settings.get("holdout_split"), "clean": result.held_out_clean,
            }} if getattr(result, "held_out_clean", None) is not None else {}),
        },
        samples=result.settings.get("samples"), logged_samples=run.logged, started=result.started or now(),
        wall_seconds=result.wall_seconds, chance_rate=result.chance_rate,
        counters=dict(run.counters or {}), tasks=tasks,
    )


class AttackCost(TypedDict):
    """One row of results.json's ``cost_by_attack``: an attack's records under one search, summed."""

    attack: str
    search: str
    records: int
    model_requests: int
    requests_sent: int
    samples_evaluated: int
    saved_by_early_stopping: int
    saved_by_racing: int
    input_tokens: int
    output_tokens: int
    usd: float | None


def cost_by_attack(records: Sequence[AttackRecord]) -> list[AttackCost]:
    """Per attack (and the search that scored its candidates): what its records cost: model requests
    asked and sent, (prompt, sample) pairs scored, those a race or exact early stopping never asked,
    tokens and, for a priced model, US dollars."""
    rows: dict[tuple[str, str], AttackCost] = {}
    for r in records:
        if r.status == "failed" or r.kind != "attack":
            continue
        c = r.cost
        row = rows.setdefault((r.attack, r.search or r.early_stopping), {
            "attack": r.attack, "search": r.search or f"early stopping {r.early_stopping}", "records": 0,
            "model_requests": 0, "requests_sent": 0, "samples_evaluated": 0, "saved_by_early_stopping": 0,
            "saved_by_racing": 0, "input_tokens": 0, "output_tokens": 0, "usd": None})
        row["records"] += 1
        row["model_requests"] += c.model_requests
        row["requests_sent"] += c.requests_sent
        row["samples_evaluated"] += c.samples_evaluated
        row["saved_by_early_stopping"] += c.saved_by_early_stopping
        row["saved_by_racing"] += c.saved_by_racing
        row["input_tokens"] += c.input_tokens
        row["output_tokens"] += c.output_tokens
        if c.usd is not None:
            row["usd"] = round((row["usd"] or 0.0) + c.usd, 6)
    return list(rows.values())


def _unique(values: Sequence[Any]) -> Any:
    distinct = {repr(v): v for v in values}
    return next(iter(distinct.values())) if len(distinct) == 1 else None


def _clean_of_records(records: Sequence[AttackRecord]) -> list[dict[str, Any]]:
    """Each record's clean half once per (model, dataset, prompt)."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in records:
        if r.status == "failed":
            continue
        out.setdefault((r.model, r.dataset, r.clean_prompt), {
            "prompt_id": r.prompt_id, "prompt_type": r.prompt_type, "model": r.model, "dataset": r.dataset,
            "score": r.clean_score, "ci95": list(r.clean_ci95) if r.clean_ci95 else None, "at_chance": r.at_chance,
            "chance_rate": r.chance_rate, "prompt": r.clean_prompt,
        })
    return list(out.values())


def records_document(run: WrittenWith, *, records: Sequence[AttackRecord], models: Sequence[Mapping[str, Any]],
                     started: str | None, wall_seconds: float, clean: Sequence[Mapping[str, Any]] | None = None,
                     apdr: Sequence[Mapping[str, Any]] = (), extra_results: Mapping[str, Any] | None = None,
                     measurement: Mapping[str, Any] | None = None, dataset: str | None = None,
                     chance_rate: float | None = None, clean_from: str | None = None,
                     model: str | None = None, tasks: Sequence[Mapping[str, Any]] = ()) -> ResultsDocument:
    """``pre eval``, ``pre transfer``, ``pre defend``: records of given prompts re-scored.

    ``clean`` defaults to the records' clean halves (``clean_from`` then names their kind);
    ``model`` to the one model name the records carry; ``tasks``: the provenance of each user's
    own task measured."""
    if model is None and records:
        model = _unique([r.model for r in records])
    if measurement is None and records:
        measurement = _unique([r.measurement.to_dict() for r in records])
    if dataset is None and records:
        dataset = _unique([r.dataset for r in records])
    if chance_rate is None and records:
        chance_rate = _unique([r.chance_rate for r in records])
    rows = [dict(c) for c in clean] if clean is not None else _clean_of_records(records)
    return ResultsDocument(
        command=recorded_command(run.argv), models=models, model=model, dataset=dataset, measurement=measurement,
        configs=dict(run.configs), clean=rows,
        records=records, apdr=apdr,
        extra_results={**({"clean_from": clean_from} if clean_from else {}), **dict(extra_results or {})},
        samples=(measurement or {}).get("samples"), logged_samples=run.logged, started=started or now(),
        wall_seconds=wall_seconds, chance_rate=chance_rate, counters=dict(run.counters or {}), tasks=tasks,
    )


def task_provenances(benches: Sequence[Workbench]) -> list[dict[str, Any]]:
    """results.json's ``tasks``: the provenance of each distinct user's own task the workbenches
    measured (``Workbench.task_provenance``); empty when they measured built-in datasets only."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for b in benches:
        for p in b.task_provenance():
            out.setdefault((p["definition_hash"], p["data_hash"]), p)
    return list(out.values())


def identities(benches: Sequence[Workbench]) -> list[dict[str, Any]]:
    """The identity of each distinct model the workbenches queried."""
    out: dict[str, dict[str, Any]] = {}
    for b in benches:
        ident = identity_of(b.scheduler)
        out.setdefault(repr(sorted(ident.items(), key=str)), ident)
    return list(out.values())


def merged_sweep_document(folder: SweepFolder, shards: Sequence[str | Path], *, started: str, wall_seconds: float,
                          argv: Sequence[str] | None = None) -> ResultsDocument:
    """``pre sweep merge``'s results.json: the merged folder's records as an unsharded sweep's
    (``sweep_document``), its config.json as the sweep's config, and where the records came from:
    per shard folder its own command, versions and models (from its results.json, when it has one)."""
    import orjson

    sources, models = [], []
    for shard in map(Path, shards):
        summary = shard / "results.json"
        try:
            data = orjson.loads(summary.read_bytes()) if summary.is_file() else {}
        except orjson.JSONDecodeError:
            data = {}
        data = data if isinstance(data, dict) else {}
        sources.append({"folder": str(shard), "command": data.get("command"), "versions": data.get("versions"),
                        "date": data.get("date")})
        models += [m for m in data.get("models") or [] if isinstance(m, dict) and m not in models]
    config_path = Path(folder.path) / "config.json"
    config = orjson.loads(config_path.read_bytes()) if config_path.is_file() else {}
    return sweep_document(folder, facts={"models": models, "counters": {}}, configs={"sweep": config, "merged_from": sources},
                          started=started, wall_seconds=wall_seconds, argv=argv)


def sweep_document(folder: SweepFolder, *, facts: Mapping[str, Any], configs: Mapping[str, Any], started: str,
                   wall_seconds: float, argv: Sequence[str] | None = None,
                   tasks: Sequence[Mapping[str, Any]] = ()) -> ResultsDocument:
    """A sweep folder's results.json: every record it holds (a resumed sweep's too), the
    clean score of each attacked prompt, and the APDR per (kind, model, dataset, attack);
    ``tasks``: the provenance of the grid's own tasks."""
    rows = read_jsonl(folder.results, warn=False) if folder.results.exists() else []
    records = [AttackRecord.from_dict(r) for r in rows]
    return records_document(
        WrittenWith(argv=argv, configs=configs, counters=facts["counters"]), records=records, models=facts["models"],
        started=started, wall_seconds=wall_seconds,
        apdr=apdr_rows(records, ["kind", "model", "dataset", "attack"]), clean_from="attack", tasks=tasks,
    )


def results_file_document(argv: Sequence[str] | None, folders: Mapping[str, Path]) -> dict[str, Any]:
    """One file with the results of every target of a run, as lm-eval's ``--output_path FILE.json``
    holds every task's: ``results`` maps each dataset to its run folder's results.json (the one
    layout), ``run_folders`` to the folder holding the rest (records, samples, config)."""
    import orjson

    return {
        "format": RESULTS_FILE_FORMAT,
        "command": redact_argv(recorded_command(argv)),
        "results": {name: orjson.loads((folder / "results.json").read_bytes()) for name, folder in folders.items()},
        "run_folders": {name: str(folder) for name, folder in folders.items()},
    }
