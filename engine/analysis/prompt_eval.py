"""Scoring given prompts, or given (clean, adversarial) pairs, on a model:
what ``pre eval --prompts FILE`` does, as a library call.

A pairs file is a ready robustness test: the adversarial prompts of a paper,
of another model, or of promptbench's published lists (imported into this
shape). Each pair becomes an attack record (attack name from the file, else
"given") with the clean and adversarial scores and their 95% intervals, the
PDR with its paired bootstrap interval, McNemar's p and the chance flag; the
file's other columns (e.g. ``source_model``, ``shots``) ride along in the
record's ``extra`` so ``pre report --group-by`` can use them.
"""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from promptrobust.engine.analysis.scoring import (
    AnalysisInputError,
    prepare,
    sample_rows,
    score_prompts,
)
from promptrobust.engine.measuring.records import AttackRecord, records_summary
from promptrobust.engine.measuring.statistics import apdr_rows
from promptrobust.engine.measuring.records import now
from promptrobust.engine.measuring.records import RecordFrames
from promptrobust.engine.runs.plan import base_model_note
from promptrobust.engine.runs.run_results import identities, records_document
from promptrobust.engine.runs.run_folder import ResultsDocument, WrittenAsResults, WrittenWith
from promptrobust.engine import progress as events
from promptrobust.engine.measuring.settings import EvaluationSettings
from promptrobust.engine.measuring.target import MeasurementTarget, decide_target
from promptrobust.engine.measuring.workbench import CleanScore, ScoredPrompt
from promptrobust.tasks.errors import PromptFileError  # the one class for every prompt file
from promptrobust.tasks.base import Prompt, Task

if TYPE_CHECKING:
    from promptrobust.engine.runs.session import Session
    from promptrobust.engine.serving.registry import ModelSpec

__all__ = ["PromptEvalResult", "PromptFileError", "PromptItem", "evaluate_prompts", "read_prompt_file"]

#: Columns with a meaning of their own; every other column is kept as an extra.
KNOWN_COLUMNS = frozenset({"id", "prompt", "text", "clean", "adversarial", "attack", "prompt_type", "dataset"})


@dataclass(frozen=True)
class PromptItem:
    """One entry of a prompts file: a single prompt, or a clean/adversarial pair."""

    id: str
    prompt: str | None = None
    clean: str | None = None
    adversarial: str | None = None
    attack: str = "given"
    prompt_type: str = "given"
    dataset: str | None = None
    """The dataset the pair was made for, when the file says (rows of other datasets are not scored)."""
    extra: Mapping[str, Any] = field(default_factory=dict)
    """The file's other columns (source_model, shots, ...), kept on the record."""

    @property
    def is_pair(self) -> bool:
        return self.clean is not None


# --------------------------------------------------------------------------- reading


def read_prompt_file(path: str | Path) -> list[PromptItem]:
    """Prompts (or pairs) from a JSONL, JSON, CSV/TSV or plain text file.

    .jsonl: one object a line, {"prompt"} (or "text") or {"clean", "adversarial"},
    optional "id", "attack", "prompt_type", "dataset" and any other columns;
    .json: a list of such objects (or strings); .csv/.tsv: a header row with the
    same names; anything else: one prompt a line (blank lines and # comments skipped).
    """
    path = Path(path)
    if not path.is_file():
        raise PromptFileError(f"prompts file {path} does not exist; pass a .jsonl, .csv or .txt file of prompts")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise PromptFileError(f"prompts file {path} is not UTF-8 text; save it as UTF-8") from None
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append((n, orjson.loads(line)))
                except orjson.JSONDecodeError:
                    raise PromptFileError(f"{path} line {n} is not valid JSON; write one JSON object per line") from None
    elif suffix == ".json":
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError:
            raise PromptFileError(f"{path} is not valid JSON; write a list of prompt objects") from None
        if not isinstance(data, list):
            raise PromptFileError(f"{path} must hold a JSON list of prompt objects")
        rows = list(enumerate(data, 1))
    elif suffix in (".csv", ".tsv"):
        reader = csv.DictReader(text.splitlines(), delimiter="\t" if suffix == ".tsv" else ",")
        known = {"prompt", "text", "clean", "adversarial"}
        if not reader.fieldnames or not known & {f.strip().lower() for f in reader.fieldnames}:
            raise PromptFileError(f"{path} needs a header row with a 'prompt' column, or 'clean' and 'adversarial' columns")
        rows = [
            (n, {(k or "").strip().lower(): _cell(v) for k, v in row.items() if k is not None})
            for n, row in enumerate(reader, 2)
        ]
    else:
        rows = [
            (n, line.rstrip("\r"))
            for n, line in enumerate(text.split("\n"), 1)
            if line.strip() and not line.lstrip().startswith("#")
        ]
    items = [_item(path, n, row) for n, row in rows]
    if not items:
        raise PromptFileError(f"prompts file {path} holds no prompts")
    if len({it.is_pair for it in items}) > 1:
        raise PromptFileError(f"{path} mixes single prompts and clean/adversarial pairs; put them in separate files")
    seen: set[str] = set()
    for it in items:
        if it.id in seen:
            raise PromptFileError(f"{path}: id {it.id!r} appears more than once; ids must be unique")
        seen.add(it.id)
    return items


def _cell(value: Any) -> Any:
    """A CSV cell: whole numbers as ints (so "3" groups with a JSONL 3), else the text."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return value


def _item(path: Path, n: int, row: Any) -> PromptItem:
    where = f"{path} entry {n}"
    if isinstance(row, str):
        if not row.strip():
            raise PromptFileError(f"{where} is an empty prompt")
        return PromptItem(id=f"p{n}", prompt=row)
    if not isinstance(row, dict):
        raise PromptFileError(f"{where} must be a prompt string or an object with 'prompt' or 'clean'/'adversarial'")
    rid = str(row.get("id") if row.get("id") not in (None, "") else f"p{n}")
    common: dict[str, Any] = {  # the keywords both kinds of item share
        "id": rid,
        "attack": str(row.get("attack") or "given"),
        "prompt_type": str(row.get("prompt_type") or "given"),
        "dataset": str(row["dataset"]) if row.get("dataset") else None,
        "extra": _extra_columns(row),
    }
    clean, adv = row.get("clean"), row.get("adversarial")
    if clean is not None or adv is not None:
        if not (isinstance(clean, str) and clean.strip() and isinstance(adv, str) and adv.strip()):
            raise PromptFileError(f"{where} needs both a non-empty 'clean' and 'adversarial' prompt")
        return PromptItem(clean=clean, adversarial=adv, **common)
    prompt = row.get("prompt", row.get("text"))
    if not isinstance(prompt, str) or not prompt.strip():
        raise PromptFileError(f"{where} has no 'prompt' (or 'text'), nor 'clean' and 'adversarial'")
    return PromptItem(prompt=prompt, **common)


def items_from_rows(source: Path, rows: Sequence[object]) -> list[PromptItem]:
    """Prompt items from rows read elsewhere (a promptbench checkout's published pairs), each
    checked as a prompts file's entry is; ``source`` names where they came from in errors."""
    return [_item(source, n, row) for n, row in enumerate(rows, 1)]


def relabel_by_content(items: Sequence[PromptItem], source: str) -> tuple[list[PromptItem], list[str]]:
    """Pairs labelled with one of the paper's attacks, checked against their content as
    ``--promptbench-adv`` checks the archive's blocks: a pair that only inserts CheckList's string or
    StressTest's tautologies under another attack's label is relabelled (``labelled_attack`` keeps
    the file's label); a pair labelled CheckList or StressTest that changes words is left out (it is
    another attack's, which one the file does not say). One note per (label, content) says so."""
    from dataclasses import replace

    from promptrobust.attacks.registry import INSERTION_ATTACKS as insertions
    from promptrobust.attacks.registry import list_attacks

    known = {name for name, _ in list_attacks()}
    kept: list[PromptItem] = []
    moved: dict[tuple[str, str], int] = {}
    for it in items:
        label = it.attack.lower()
        if not it.is_pair or label not in known:
            kept.append(it)
            continue
        shown = insertions.shown_by(it.clean or "", it.adversarial or "")
        if shown is not None and shown != label:
            moved[(label, shown)] = moved.get((label, shown), 0) + 1
            kept.append(replace(it, attack=shown, extra={**it.extra, "labelled_attack": it.attack}))
        elif shown is None and insertions.inserts(label) is not None:
            moved[(label, "")] = moved.get((label, ""), 0) + 1
        else:
            kept.append(it)
    notes = [
        (f"{source}: {n} pair(s) labelled {label} hold {shown} prompts ({insertions.inserts(shown)} inserted, nothing else "
         f"changed); relabelled {shown} (labelled_attack keeps the file's label)") if shown else
        (f"{source}: {n} pair(s) labelled {label} change words instead of inserting {insertions.inserts(label)} (another "
         "attack's prompts, which one the file does not say); left out")
        for (label, shown), n in moved.items()
    ]
    return kept, notes


def _extra_columns(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row's other columns. One named like a record field (``shots``,
    ``model``) describes where the pair came from, not this evaluation, so it is
    kept as ``source_<name>`` (``pre report --group-by source_shots``)."""
    from dataclasses import fields

    taken = {f.name for f in fields(AttackRecord)}
    out: dict[str, Any] = {}
    for key, value in row.items():
        if key in KNOWN_COLUMNS or value in (None, ""):
            continue
        name = key
        if key in taken and not key.startswith("source_"):  # source_model: already names the source
            name = f"source_{key}" if f"source_{key}" not in row else f"file_{key}"
        out[name] = value
    return out


def as_items(prompts: str | Path | Sequence[PromptItem | str | tuple[str, str]]) -> list[PromptItem]:
    """Prompt items from a file path, or from prompt strings / (clean, adversarial) tuples."""
    if isinstance(prompts, (str, Path)):
        return read_prompt_file(prompts)
    items: list[PromptItem] = []
    for n, p in enumerate(prompts, 1):
        if isinstance(p, PromptItem):
            items.append(p)
        elif isinstance(p, str):
            items.append(PromptItem(id=f"p{n}", prompt=p))
        elif isinstance(p, (tuple, list)) and len(p) == 2:
            items.append(PromptItem(id=f"p{n}", clean=str(p[0]), adversarial=str(p[1])))
        else:
            raise AnalysisInputError(f"prompt {n} must be a string, a (clean, adversarial) pair or a PromptItem")
    if not items:
        raise AnalysisInputError("no prompts to evaluate")
    if len({it.is_pair for it in items}) > 1:
        raise AnalysisInputError("give either single prompts or (clean, adversarial) pairs, not both")
    return items


# --------------------------------------------------------------------------- evaluating


@dataclass
class PromptEvalResult(RecordFrames, WrittenAsResults):
    """Scores of a prompts file on one model: every clean score, and for pairs
    one record each plus the APDR per attack (``statistics.summarize_pdrs``)."""

    settings: dict[str, Any]
    """model, backend, dataset, metric, samples, seed, shots, mode, parser, max_new_tokens, input_format."""
    chance_rate: float | None
    clean: list[CleanScore]
    records: list[AttackRecord] = field(default_factory=list)
    apdr: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sample_log: list[dict[str, Any]] = field(default_factory=list)
    wall_seconds: float = 0.0
    measurement: dict[str, Any] | None = None
    """``MeasurementSettings`` of the scores (a pair's record has it for its kind too)."""
    models: list[dict[str, Any]] = field(default_factory=list)
    started: str = ""
    dataset: str | None = None
    tasks: list[dict[str, Any]] = field(default_factory=list)
    """A user's own task: its provenance (``Task.provenance``), for results.json."""

    def __repr__(self) -> str:
        mean = f"{self.mean_score:.3f}" if self.clean else "none"
        pairs = f", {records_summary(self.records)}" if self.records else ""
        return (f"PromptEvalResult(model={self.settings.get('model')!r}, dataset={self.settings.get('dataset')!r}, "
                f"prompts={len(self.clean)}, mean_score={mean}{pairs})")

    @property
    def is_pairs(self) -> bool:
        return bool(self.records)

    def frame_rows(self) -> list[dict[str, Any]]:
        """``to_polars()``/``to_pandas()`` rows: the pairs' records as results.parquet holds them; a
        file of single prompts (no records): one row per prompt with its clean score."""
        return super().frame_rows() if self.records else [c.to_dict() for c in self.clean]

    @property
    def mean_score(self) -> float:
        return sum(c.score for c in self.clean) / len(self.clean)

    def document(self, run: WrittenWith = WrittenWith()) -> ResultsDocument:
        return records_document(
            run, records=self.records, models=self.models, started=self.started, wall_seconds=self.wall_seconds,
            clean=[c.to_dict() for c in self.clean], apdr=self.apdr,
            measurement=self.measurement, dataset=self.settings.get("dataset"), chance_rate=self.chance_rate,
            model=self.settings.get("model"),
            extra_results={"mean_score": self.mean_score, "notes": self.notes}, tasks=self.tasks,
        )


def pair_row(r: AttackRecord) -> dict[str, Any]:
    """One line of the pairs table."""
    return {
        "id": r.prompt_id, "attack": r.attack, "clean": r.clean_score, "clean_ci95": r.clean_ci95,
        "adversarial": r.adversarial_score, "adversarial_ci95": r.adversarial_ci95, "pdr": r.pdr,
        "pdr_ci95": r.pdr_ci95, "mcnemar_p": r.mcnemar_p, "at_chance": r.at_chance, "status": r.status,
        **dict(r.extra),
    }


async def evaluate_prompts(
    session: Session,
    prompts: str | Path | Sequence[PromptItem | str | tuple[str, str]],
    *,
    model: str | ModelSpec | None = None,
    model_args: Mapping[str, object] | None = None,
    settings: EvaluationSettings | None = None,
    prompt_type: str = "all",
    keep_samples: bool = False,
    target: MeasurementTarget | None = None,
) -> PromptEvalResult:
    """Score ``prompts`` (a file path, prompt strings, or (clean, adversarial)
    pairs) on ``model`` with ``settings`` (default: the paper's protocol). ``target``: the
    evaluation as a plan decided it (``EvalPlan``); None: decided here from ``settings``.

    Rows of a file whose ``dataset`` column names another dataset are left out
    (and said so in ``notes``); ``prompt_type`` other than "all" keeps only rows
    of that type.
    """
    import time

    from promptrobust.engine.serving.registry import DEFAULT_MODEL

    spec = session.resolve(model or DEFAULT_MODEL, model_args)
    if target is None:
        target = decide_target(settings or EvaluationSettings(), base_model=spec.base_model)
    items = as_items(prompts)
    items, notes = _filter(items, target.task, prompt_type)
    bench = await prepare(session, spec, target)
    shots_note = base_model_note(spec, target)
    if shots_note is not None:
        notes.append(shots_note.text)
    texts = [t for it in items for t in ((it.clean, it.adversarial) if it.is_pair else (it.prompt,))]
    distinct = list(dict.fromkeys(t for t in texts if t is not None))
    events.phase(f"eval: {len(distinct) * len(bench.samples)} requests")
    started, began = time.monotonic(), now()
    scores = await score_prompts(bench, distinct, keep_samples=keep_samples)
    result = PromptEvalResult(
        settings=bench.describe(), chance_rate=bench.chance_rate, clean=_clean_scores(items, scores), notes=notes,
        wall_seconds=round(time.monotonic() - started, 3), measurement=bench.measurement().to_dict(),
        models=identities([bench]), started=began, tasks=bench.task_provenance(),
    )
    if items[0].is_pair:
        result.records = [
            bench.pair(prompt_id=it.id, attack=it.attack, clean=scores[it.clean].clean, adversarial=scores[it.adversarial].clean,  # type: ignore[index]
                prompt_type=it.prompt_type, settings={"analysis": "eval"}, extra=it.extra, kind="pair",
            )
            for it in items
        ]
        result.apdr = apdr_rows(result.records, ["attack"])
    if keep_samples:
        ids: dict[str, tuple[str, str]] = {}
        for it in items:
            for role, text in (("clean", it.clean), ("adversarial", it.adversarial), ("prompt", it.prompt)):
                if text is not None:
                    ids.setdefault(text, (it.id, role))
        result.sample_log = [
            {"prompt_id": ids[t][0], "role": ids[t][1], **row} for t in distinct for row in sample_rows(scores[t])
        ]
    return result


def _filter(items: list[PromptItem], task: Task, prompt_type: str) -> tuple[list[PromptItem], list[str]]:
    """Rows for the evaluated task (or for the dataset whose prompts it uses: promptbench's sst2
    pairs apply to rotten_tomatoes; a user's own task: rows of its name), of the asked prompt type."""
    from promptrobust.tasks.registry import canonical_name, prompt_dataset

    notes: list[str] = []
    dataset = task.name
    if any(it.dataset for it in items):
        accepted = {dataset} if task.definition_hash is not None else {dataset, prompt_dataset(dataset)}

        def on_dataset(it: PromptItem) -> bool:
            if it.dataset is None or it.dataset in accepted:
                return True
            try:
                return canonical_name(it.dataset) in accepted
            except ValueError:
                return False

        kept = [it for it in items if on_dataset(it)]
        others = sorted({str(it.dataset) for it in items if not on_dataset(it)})
        if not kept:
            raise AnalysisInputError(
                f"no prompt of the file is for dataset {dataset} (its dataset column says {', '.join(others)}); pass --dataset"
            )
        if others:
            notes.append(f"{len(items) - len(kept)} row(s) for other datasets ({', '.join(others)}) not scored")
        items = kept
    if prompt_type != "all":
        kept = [it for it in items if it.prompt_type == prompt_type]
        if not kept:
            types = sorted({it.prompt_type for it in items})
            raise AnalysisInputError(f"no prompt of type {prompt_type!r} (the file has {', '.join(types)}); use prompt type 'all'",
                                     setting="prompt_type")
        items = kept
    return items, notes


def _clean_scores(items: Sequence[PromptItem], scores: Mapping[str, ScoredPrompt]) -> list[CleanScore]:
    """Each distinct clean prompt once (the first id that uses it), or every single prompt, named
    by its item (id, type and the file's other columns)."""
    out: list[CleanScore] = []
    seen: set[str] = set()
    for it in items:
        text = it.clean if it.is_pair else it.prompt
        assert text is not None
        if text in seen:
            continue
        seen.add(text)
        named = Prompt(id=it.id, dataset=scores[text].prompt.dataset, type=it.prompt_type, text=text)  # type: ignore[arg-type]
        out.append(dataclasses.replace(scores[text].clean, prompt=named, extra={} if it.is_pair else dict(it.extra)))
    return out
