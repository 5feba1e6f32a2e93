"""`pre report RUN_DIR...`: the paper's tables and pictures from finished runs.

Finds every results.jsonl (attack records) and results.json (clean scores)
under the given run or sweep folders, recursively, skipping hidden folders
(unfinished ``.NAME.partial`` runs), and writes Markdown and CSV tables, PNG
plots and one self-contained HTML page. Markdown tables also go to stdout.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from promptrobust.cli.errors import UserError

HELP = "tables, plots and an HTML page (APDR, clean scores, cost, word frequency) from finished runs"

EPILOG = """\
examples:
  pre report runs/20250101-120000_smollm2-135m-instruct_sst2
  pre report runs/sweeps/embedded                     # every run under a sweep folder
  pre report runs/a runs/b --output report/ --format md,html
  pre report runs/sweeps/embedded --word-threshold 0.1 --top 20

Outputs (in --output, default <first RUN_DIR>/report/):
  report.md       every table (also printed to stdout)
  *.csv           one file per table: one row per cell, mean/std/count columns
  *.png           APDR bars and heat maps, word-frequency bars
  report.html     one self-contained page: tables, plots, the most damaging
                  adversarial prompts next to their clean originals

APDR cells are the mean ± sample standard deviation (ddof=1) of PDR over the
records in the cell; a cell with one record shows the mean only.
"""

FORMATS = ("md", "csv", "png", "html")
RESULT_NAMES = ("results.jsonl", "results.json")
_REQUIRED = ("model", "dataset", "attack", "pdr", "clean_prompt", "adversarial_prompt")


def add_parser(sub: Any, formatter: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser("report", help=HELP, description=HELP, epilog=EPILOG, formatter_class=formatter)
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run folders, sweep folders or results files (searched recursively)")
    p.add_argument("--output", default=None, metavar="DIR", help="folder for the report files (None: <first RUN_DIR>/report)")
    p.add_argument("--format", default=",".join(FORMATS), metavar="LIST", help="comma-separated outputs among md, csv, png, html")
    p.add_argument("--top", type=int, default=10, metavar="N", help="most damaging adversarial prompts listed in report.html and worst_prompts.csv")
    p.add_argument("--words", type=int, default=15, metavar="N", help="words listed each way in the word-frequency analysis")
    p.add_argument(
        "--word-threshold",
        type=float,
        metavar="PDR",
        default=None,
        help="PDR that splits robust (<=) from vulnerable (>) prompts in the word-frequency analysis (None: the median)",
    )
    p.add_argument("--quiet", action="store_true", help="do not print the Markdown tables to stdout")
    p.set_defaults(handler=handle)


# ---------------------------------------------------------------- loading


@dataclass
class RunData:
    records: Any  # polars.DataFrame of attack records (possibly empty)
    clean: Any  # polars.DataFrame: model, dataset, shots, prompt_id, score, source
    files: list[Path] = field(default_factory=list)


def find_result_files(paths: list[str]) -> list[Path]:
    """results.jsonl / results.json under ``paths`` (hidden folders skipped), deduplicated."""
    found: dict[Path, None] = {}
    for raw in paths:
        p = Path(raw)
        if not p.exists():
            raise UserError(f"{raw} does not exist: pass run folders, sweep folders or results files")
        if p.is_file():
            if p.name not in RESULT_NAMES:
                raise UserError(f"{raw} is not a results.jsonl or results.json file: pass its run folder instead")
            found[p.resolve()] = None
            continue
        for root, dirs, files in os.walk(p):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in RESULT_NAMES:
                if name in files:
                    found[(Path(root) / name).resolve()] = None
    return sorted(found)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise UserError(f"{path} is not valid JSON ({exc}): remove it or rerun that run") from None
    return data if isinstance(data, dict) else None


def _shots_of(path: Path, data: dict[str, Any]) -> int | None:
    if isinstance(data.get("shots"), int):
        return data["shots"]
    config = path.parent / "config.json"
    if config.is_file():
        cfg = _read_json(config) or {}
        if isinstance(cfg.get("shots"), int):
            return cfg["shots"]
    for rec in data.get("attacked") or []:
        if isinstance(rec, dict) and isinstance(rec.get("shots"), int):
            return rec["shots"]
    return None


def clean_rows(path: Path) -> list[dict[str, Any]]:
    """Clean scores of one results.json: from "prompts" (pre run) or "clean_scores" (pre run --attack)."""
    data = _read_json(path)
    if not data or "model" not in data or "dataset" not in data:
        return []  # some other summary (e.g. of a sweep): nothing to report from it
    base = {"model": str(data["model"]), "dataset": str(data["dataset"]), "shots": _shots_of(path, data), "source": str(path.parent)}
    if isinstance(data.get("prompts"), list):
        return [
            {**base, "prompt_id": str(r["prompt_id"]), "score": float(r["score"])}
            for r in data["prompts"]
            if isinstance(r, dict) and "prompt_id" in r and isinstance(r.get("score"), (int, float))
        ]
    scores = data.get("clean_scores")
    if isinstance(scores, dict):
        return [{**base, "prompt_id": str(k), "score": float(v)} for k, v in scores.items() if isinstance(v, (int, float))]
    return []


def sweep_clean_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Clean scores a sweep keeps inside its records ("clean_scores": every prompt of the cell), once per cell."""
    seen: set[tuple[Any, ...]] = set()
    out: list[dict[str, Any]] = []
    for r in records:
        scores = r.get("clean_scores")
        if not isinstance(scores, dict):
            continue
        for prompt_id, score in scores.items():
            key = (r["model"], r["dataset"], r.get("shots"), prompt_id, r["source"])
            if key in seen or not isinstance(score, (int, float)):
                continue
            seen.add(key)
            shots = r.get("shots")
            out.append({"model": str(r["model"]), "dataset": str(r["dataset"]), "shots": shots if isinstance(shots, int) else None,
                        "source": r["source"], "prompt_id": str(prompt_id), "score": float(score)})
    return out


def record_rows(path: Path, sibling_jsonl: set[Path]) -> list[dict[str, Any]]:
    """Attack records of a results.jsonl, or of results.json's "attacked" when its JSONL is gone."""
    from promptrobust.engine.records import read_jsonl

    if path.name == "results.jsonl":
        rows = read_jsonl(path)
    elif path.parent / "results.jsonl" in sibling_jsonl:
        return []
    else:
        data = _read_json(path) or {}
        rows = [r for r in data.get("attacked") or [] if isinstance(r, dict)]
    for r in rows:
        missing = [c for c in _REQUIRED if c not in r]
        if missing:
            raise UserError(f"{path}: a record lacks {missing[0]!r}; is this a `pre run --attack` results file?")
        r["settings"] = orjson.dumps(r.get("settings", {}), default=str).decode()
        r["source"] = str(path.parent)
    return rows


def load_runs(paths: list[str]) -> RunData:
    """Every attack record and clean score under ``paths``."""
    import polars as pl

    files = find_result_files(paths)
    jsonls = {f for f in files if f.name == "results.jsonl"}
    records: list[dict[str, Any]] = []
    clean: list[dict[str, Any]] = []
    for f in files:
        rows = record_rows(f, jsonls)
        records += rows
        if f.name == "results.json":
            clean += clean_rows(f)
        else:
            clean += sweep_clean_rows(rows)
    if not records and not clean:
        where = ", ".join(paths)
        raise UserError(f"no results.jsonl or results.json under {where}: run `pre run --attack ...` or `pre sweep` first")
    rec_frame = pl.DataFrame(records, infer_schema_length=None) if records else pl.DataFrame()
    if records:
        rec_frame = rec_frame.with_columns(
            pl.col("pdr").cast(pl.Float64),
            *[pl.col(c).cast(pl.Utf8) for c in ("model", "dataset", "attack", "clean_prompt", "adversarial_prompt")],
        ).filter(pl.col("pdr").is_not_null() & pl.col("pdr").is_not_nan())
    clean_schema = {"model": pl.Utf8, "dataset": pl.Utf8, "shots": pl.Int64, "source": pl.Utf8, "prompt_id": pl.Utf8, "score": pl.Float64}
    clean_frame = pl.DataFrame(clean, schema=clean_schema)
    return RunData(rec_frame, clean_frame, files)


# ---------------------------------------------------------------- building


def parse_formats(spec: str) -> set[str]:
    chosen = {f.strip().lower() for f in spec.split(",") if f.strip()}
    unknown = sorted(chosen - set(FORMATS))
    if unknown or not chosen:
        bad = unknown[0] if unknown else spec
        raise UserError(f"unknown format {bad!r} in --format: use md, csv, png, html (comma-separated)")
    return chosen


def output_folder(args: argparse.Namespace) -> Path:
    if args.output:
        return Path(args.output)
    first = Path(args.run_dirs[0])
    return (first.parent if first.is_file() else first) / "report"


def build(data: RunData, *, top: int = 10, words: int = 15, word_threshold: float | None = None, plots: bool = True) -> dict[str, Any]:
    """All tables (and, with ``plots``, PNG bytes) of a report, in page order."""
    from promptrobust.cli import report_tables as rt
    from promptrobust.cli import word_frequency as wfq

    out: dict[str, Any] = {"clean": [], "apdr": [], "cost": [], "words": [], "worst": None, "plots": [], "words_plot": None, "notes": []}
    if data.clean.height:
        out["clean"].append(rt.clean_table(data.clean))
    else:
        out["notes"].append("no clean scores: no results.json with clean scores was found")
    if data.records.height == 0:
        out["notes"].append("no attack records (results.jsonl): run `pre run --attack ...` for APDR, cost and word tables")
        return out
    out["apdr"] = rt.apdr_tables(data.records)
    out["cost"].append(rt.cost_table(data.records))
    out["worst"] = rt.worst_prompts(data.records, top)
    if out["worst"].height == 0:
        out["notes"].append("no attack lowered a score (every PDR <= 0): no adversarial prompts to show")
    try:
        wf = wfq.analyse(data.records, threshold=word_threshold, top=words)
    except ValueError as exc:
        out["notes"].append(f"word frequency skipped: {exc}")
        wf = None
    if wf is not None:
        out["words"] = wfq.tables(wf)
    if plots:
        try:
            from promptrobust.cli import report_plots as rp
        except ModuleNotFoundError as exc:
            if exc.name != "matplotlib":
                raise
            raise UserError("matplotlib is not installed: pip install matplotlib, or pass --format md,csv") from None

        by_attack, by_model, _, model_attack = out["apdr"]
        out["plots"] = [
            ("apdr_by_attack", "APDR by attack", rp.apdr_bars(by_attack, "attack")),
            ("apdr_by_model", "APDR by model", rp.apdr_bars(by_model, "model")),
            ("heatmap_attack_x_dataset", "APDR heat map: attack x dataset", rp.heatmap(by_attack, "attack", "dataset")),
            ("heatmap_model_x_attack", "APDR heat map: model x attack", rp.heatmap(model_attack, "model", "attack")),
        ]
        if wf is not None:
            out["words_plot"] = rp.word_bars(wf.robust_words(), wf.vulnerable_words())
    return out


def _meta(data: RunData) -> list[str]:
    runs = sorted({str(f.parent) for f in data.files})
    recs = data.records
    lines = [f"{len(runs)} run folder(s), {recs.height} attack record(s), {data.clean.height} clean prompt score(s)"]
    if recs.height:
        for col in ("model", "dataset", "attack"):
            lines.append(f"{col}s: " + ", ".join(sorted(set(recs[col].to_list()))))
    return lines


def write(built: dict[str, Any], data: RunData, folder: Path, formats: set[str]) -> list[Path]:
    """Write the chosen formats into ``folder``; returns the files written."""
    from promptrobust.cli.report_html import Page, render

    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create report folder {folder} ({exc.strerror}): pass --output to a writable folder") from None
    tables = [*built["clean"], *built["apdr"], *built["cost"], *built["words"]]
    written: list[Path] = []
    if "md" in formats:
        md = ["# promptrobust report", "", *(f"- {m}" for m in _meta(data)), ""]
        md += [f"> {n}\n" for n in built["notes"]]
        md += [t.markdown() for t in tables]
        path = folder / "report.md"
        path.write_text("\n".join(md), encoding="utf-8")
        written.append(path)
    if "csv" in formats:
        written += [Path(t.write_csv(folder)) for t in tables]
        if built["worst"] is not None:
            path = folder / "worst_prompts.csv"
            built["worst"].write_csv(path)
            written.append(path)
    if "png" in formats:
        pngs = [(name, png) for name, _, png in built["plots"]]
        if built["words_plot"] is not None:
            pngs.append(("word_frequency", built["words_plot"]))
        for name, png in pngs:
            path = folder / f"{name}.png"
            path.write_bytes(png)
            written.append(path)
    if "html" in formats:
        page = Page(
            title="promptrobust report",
            meta=_meta(data),
            clean=built["clean"],
            apdr=built["apdr"],
            cost=built["cost"],
            plots=[(caption, png) for _, caption, png in built["plots"]],
            worst=built["worst"],
            words=built["words"],
            words_plot=built["words_plot"],
            notes=built["notes"],
        )
        path = folder / "report.html"
        path.write_text(render(page), encoding="utf-8")
        written.append(path)
    return written


def handle(args: argparse.Namespace) -> int:
    formats = parse_formats(args.format)
    if args.top < 1:
        raise UserError(f"--top must be at least 1 (got {args.top})")
    if args.words < 1:
        raise UserError(f"--words must be at least 1 (got {args.words})")
    data = load_runs(args.run_dirs)
    built = build(data, top=args.top, words=args.words, word_threshold=args.word_threshold, plots=bool(formats & {"png", "html"}))
    folder = output_folder(args)
    written = write(built, data, folder, formats)
    if not args.quiet:
        for note in built["notes"]:
            print(f"> {note}\n")
        for t in [*built["clean"], *built["apdr"], *built["cost"], *built["words"]]:
            print(t.markdown())
    print(f"pre: report in {folder} ({len(written)} files)", file=sys.stderr)
    return 0
