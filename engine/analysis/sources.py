"""Attack records of earlier runs as the input of an analysis (transfer,
defense, attention), and how each is re-evaluated.

Records are read with the one reader of run folders (``engine.measuring.records``);
each keeps the folder it came from and that run's data source, so it can be
re-scored on the same samples.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson

from promptrobust.engine.analysis.scoring import AnalysisInputError
from promptrobust.engine.measuring.records import AttackRecord, is_record_row, read_jsonl, results_files
from promptrobust.engine.measuring.settings import EvaluationSettings
from promptrobust.engine.errors import SettingsError
from promptrobust.tasks.base import PROMPT_TYPES, Task
from promptrobust.tasks.own import task_from_provenance

__all__ = ["SourceRecord", "SourceSettings", "load_source_records", "most_vulnerable", "select_sources"]


#: Which source records an analysis re-scores: ``most_vulnerable``, the paper's transfer selection
#: (per source model, dataset, attack and prompt type, the adversarial prompt with the highest
#: source PDR), or ``all`` attacked records.
Selection = Literal["most_vulnerable", "all"]
SELECTIONS: tuple[str, ...] = ("most_vulnerable", "all")
#: How the selection's note starts (``pre transfer`` says the plan's once, not the re-check's again).
SELECTION_NOTE = "transfer selection most_vulnerable:"
MOST_VULNERABLE_RULE = ("the most vulnerable adversarial prompt (highest source PDR) per source model, dataset, attack "
                        "and prompt type (task/role, zero-/few-shot), as the paper's transfer table takes them")


def most_vulnerable(sources: Sequence[SourceRecord]) -> tuple[list[SourceRecord], str]:
    """The paper's transfer selection (``MOST_VULNERABLE_RULE``), in the sources' order, and a note
    saying how many records it kept. Ties of the source PDR go to the first prompt id, then text."""
    best: dict[tuple[Any, ...], SourceRecord] = {}
    for s in sources:
        r = s.record
        key = (r.model, r.dataset, r.task_definition, r.attack, r.prompt_type, "few" if r.shots else "zero")
        held = best.get(key)
        if held is None or _vulnerability(s) > _vulnerability(held):
            best[key] = s
    kept = {id(s) for s in best.values()}
    chosen = [s for s in sources if id(s) in kept]
    note = (f"{SELECTION_NOTE} {len(chosen)} of {len(sources)} source record(s), {MOST_VULNERABLE_RULE}; "
            "selection all (--all-records) re-scores every one")
    return chosen, note


def _vulnerability(s: SourceRecord) -> tuple[float, str, str]:
    """Higher is more vulnerable: the source PDR, then (for ties) the earlier prompt id and text."""
    r = s.record
    inverse = lambda text: "".join(chr(0x10FFFF - ord(c)) for c in text)  # noqa: E731 (earlier text ranks higher)
    return (r.pdr if r.pdr is not None else float("-inf"), inverse(r.prompt_id), inverse(r.adversarial_prompt))


@dataclass(frozen=True)
class SourceRecord:
    """One attack record read from a run folder, with that run's data source."""

    record: AttackRecord
    run_dir: Path
    data_dir: str | None = None
    data_file: str | None = None
    task: Task | None = None
    """A user's own task the record was measured on, read back from its run folder's results.json
    (``tasks.own.task_from_provenance``); None for a built-in dataset, which its name finds."""


#: Record kinds whose adversarial prompts a transfer or a defense starts from.
SOURCE_KINDS = ("attack", "pair")


def load_source_records(paths: Sequence[str | Path]) -> list[SourceRecord]:
    """Every attack (and given-pair) record in ``results.jsonl`` files under
    ``paths`` (run folders, folders of run folders, or the files themselves).
    Transfer and defense records are re-measurements of such a record, not
    sources of their own, so a runs/ folder they were written into still
    gives each adversarial prompt once."""
    out: list[SourceRecord] = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise AnalysisInputError(f"source {path} does not exist; pass a run folder written by `pre run --attack`")
        files = results_files([path])
        if not files:
            raise AnalysisInputError(f"no results.jsonl under {path}; pass run folders written by `pre run --attack`")
        for f in files:
            data_dir, data_file = _data_source(f.parent / "config.json")
            tasks = _RecordedTasks(f.parent / "results.json")
            for n, row in enumerate(read_jsonl(f), 1):
                if not is_record_row(row):  # a clean-only run's clean scores: no prompt to transfer or defend
                    continue
                missing = [k for k in ("model", "dataset", "attack", "clean_prompt") if k not in row]
                if missing:
                    raise AnalysisInputError(f"{f} line {n} is not an attack record (missing {', '.join(missing)})")
                record = AttackRecord.from_dict(row)
                if record.kind in SOURCE_KINDS:
                    out.append(SourceRecord(record, f.parent, data_dir, data_file, tasks.of(record)))
    if not out:
        raise AnalysisInputError(f"no attack records in {', '.join(map(str, paths))}; run `pre run --attack ...` first")
    return out


class _RecordedTasks:
    """The users' own tasks a run folder's results.json recorded (its ``tasks``), each read back
    once, when a record of it is met."""

    def __init__(self, results: Path) -> None:
        self.results = results
        self._read: dict[str, Task] = {}

    def of(self, record: AttackRecord) -> Task | None:
        """The task of ``record``: None for a built-in dataset; a user's task by its definition hash."""
        wanted = record.task_definition
        if wanted is None:
            return None
        if wanted not in self._read:
            entry = next((t for t in self._entries() if t.get("name") == record.dataset and t.get("definition_hash") == wanted), None)
            if entry is None:
                raise AnalysisInputError(f"{self.results}: no recorded definition of task {record.dataset} ({wanted}), "
                                         "which its records were measured on; pass the run folder pre wrote whole")
            self._read[wanted] = task_from_provenance(entry, where=str(self.results))
        return self._read[wanted]

    def _entries(self) -> list[dict[str, object]]:
        if not self.results.is_file():
            return []
        try:
            data = orjson.loads(self.results.read_bytes())
        except orjson.JSONDecodeError:
            raise AnalysisInputError(f"{self.results} is not valid JSON; rerun that run") from None
        tasks = data.get("tasks") if isinstance(data, dict) else None
        return [t for t in tasks or [] if isinstance(t, dict)]


def _data_source(config: Path) -> tuple[str | None, str | None]:
    """The run's --data-dir/--data-file (top level, or under "evaluation")."""
    if not config.is_file():
        return None, None
    try:
        data = orjson.loads(config.read_bytes())
    except orjson.JSONDecodeError:
        return None, None
    if not isinstance(data, dict):
        return None, None
    nested = given if isinstance(given := data.get("evaluation"), dict) else {}
    pick = lambda k: data.get(k) or nested.get(k)  # noqa: E731
    return pick("data_dir"), pick("data_file")


def data_source_notes(sources: Sequence[SourceRecord], settings: SourceSettings) -> list[str]:
    """The data a source folder's config.json names (``data_file``, ``data_dir``), announced: its
    rows are sent to the model. A path outside that run folder is refused unless the same setting
    is given again (``settings``): a folder someone handed over must not make pre read, and send
    to a model, any file it points at."""
    notes: dict[str, str] = {}
    for s in sources:
        for setting in ("data_file", "data_dir"):
            recorded = getattr(s, setting)
            if not recorded or getattr(settings, setting):
                continue  # none recorded, or the user named the data again (theirs is used)
            path = Path(recorded)
            inside = path.resolve().is_relative_to(s.run_dir.resolve())
            if not inside:
                raise AnalysisInputError(
                    f"{s.run_dir / 'config.json'} names {setting} {recorded}, outside that run folder: pre reads it and "
                    "sends its rows to the model only when you name it again", setting=setting)
            notes.setdefault(f"{setting} {recorded}", f"records of {s.run_dir} are re-scored on {setting} {recorded}, "
                             "as its config.json names it")
    return list(notes.values())


def select_sources(
    sources: Iterable[SourceRecord],
    *,
    dataset: str | None = None,
    attacks: Sequence[str] = (),
    prompt_type: str | None = None,
) -> tuple[list[SourceRecord], list[str]]:
    """The attacked records after the filters, and a note per kind of record
    left out (records that were skipped or failed have no adversarial prompt)."""

    chosen = list(sources)
    notes: list[str] = []
    unusable = [s for s in chosen if s.record.status != "attacked" or not s.record.adversarial_prompt]
    if unusable:
        notes.append(f"{len(unusable)} source record(s) left out: not attacked (skipped or failed), no adversarial prompt")
        chosen = [s for s in chosen if s not in unusable]
    if dataset:
        wanted = _canonical(dataset)
        present = sorted({s.record.dataset for s in chosen})
        chosen = [s for s in chosen if _canonical(s.record.dataset) == wanted]
        if not chosen:
            raise AnalysisInputError(
                f"no source record is on dataset {dataset!r} (they are on {', '.join(present)}); drop --dataset to use the records' own"
            )
    if attacks:
        wanted_attacks = {a.strip().lower() for a in attacks if a.strip()}
        chosen = [s for s in chosen if s.record.attack.lower() in wanted_attacks]
        if not chosen:
            raise AnalysisInputError(f"no source record is from attack(s) {', '.join(sorted(wanted_attacks))}")
    if prompt_type and prompt_type != "all":
        chosen = [s for s in chosen if s.record.prompt_type == prompt_type]
        if not chosen:
            raise AnalysisInputError(f"no source record has prompt type {prompt_type!r}; use prompt type 'all'", setting="prompt_type")
    if not chosen:
        raise AnalysisInputError("no attacked source record to analyse (every record was skipped or failed)")
    return chosen, notes


def _canonical(name: str) -> str:
    from promptrobust.tasks.registry import canonical_name

    try:
        return canonical_name(name)
    except ValueError:
        return name


@dataclass(frozen=True)
class SourceSettings:
    """How source records are re-scored. Every field left at None means "the
    record's own value", so by default a record is re-measured exactly as it
    was made (same dataset, samples, seed, shots, mode, parser and length)."""

    dataset: str | None = None
    """Only records of this dataset."""
    limit: int | None = None
    """Samples per record; None: the record's own sample count."""
    seed: int | None = None
    """Sample-order seed; None: the record's."""
    shots: int | None = None
    """Few-shot examples; None: the record's, and at least 3 when the scoring model is a base model (the paper)."""
    mode: str | None = None
    """choices | generate; None: the record's."""
    parser: str | None = None
    """Answer parser in generate mode; None: the record's (else last_word)."""
    max_new_tokens: int | None = None
    """Generation length; None: the record's (else the task's)."""
    data_dir: str | None = None
    """Dataset folder; None: the source run's."""
    data_file: str | None = None
    """Dataset file; None: the source run's."""
    attacks: tuple[str, ...] = ()
    """Only records of these attacks (empty: all)."""
    prompt_type: str = "all"
    """Only records of this prompt type: task, role, semantic or all."""
    selection: Selection | None = None
    """Which of the records left by the filters are re-scored: most_vulnerable (the paper's transfer
    selection, ``MOST_VULNERABLE_RULE``) or all; None: the analysis's own default (transfer:
    most_vulnerable; defense: all)."""

    def __post_init__(self) -> None:
        if not isinstance(self.attacks, tuple):
            raise SettingsError("attacks must be a tuple of attack names")
        if self.selection is not None and self.selection not in SELECTIONS:
            raise SettingsError(f"selection must be one of {', '.join(SELECTIONS)} (got {self.selection!r})",
                                setting="selection")
        if self.prompt_type not in (*PROMPT_TYPES, "all"):
            raise SettingsError(f"prompt_type must be one of task, role, semantic, all (got {self.prompt_type!r})")
        # Validate the given values the way EvaluationSettings does.
        EvaluationSettings(
            dataset=self.dataset or "rotten_tomatoes", limit=self.limit, seed=self.seed or 0, shots=self.shots,
            mode=self.mode or "generate", parser=self.parser or "last_word",  # type: ignore[arg-type]
            max_new_tokens=self.max_new_tokens,
        )

    def select(self, sources: Iterable[SourceRecord]) -> tuple[list[SourceRecord], list[str]]:
        """The records to re-score and what to say about them (records left out; data read from
        a source folder's config.json, see ``data_source_notes``)."""
        chosen, notes = select_sources(sources, dataset=self.dataset, attacks=self.attacks, prompt_type=self.prompt_type)
        if self.selection == "most_vulnerable":
            chosen, note = most_vulnerable(chosen)
            notes.append(note)
        return chosen, notes + data_source_notes(chosen, self)

    def evaluation_for(self, source: SourceRecord, *, base_model: bool) -> EvaluationSettings:
        """The evaluation that re-scores ``source`` on a model (``base_model``: it needs few-shot prompts)."""
        r = source.record
        shots = self.shots if self.shots is not None else r.shots
        if self.shots is None and base_model:
            shots = max(shots or 0, EvaluationSettings().shots_for(True))
        own = source.task is not None  # a user's task reads the data its definition names
        return EvaluationSettings(
            dataset=r.dataset,
            task=source.task,
            limit=self.limit if self.limit is not None else (r.samples or None),
            seed=self.seed if self.seed is not None else r.seed,
            shots=shots,
            mode=(self.mode or r.mode or "generate"),  # type: ignore[arg-type]
            parser=(self.parser or r.parser or "last_word"),  # type: ignore[arg-type]
            max_new_tokens=self.max_new_tokens if self.max_new_tokens is not None else r.max_new_tokens,
            data_dir=self.data_dir or (None if own else source.data_dir),
            data_file=self.data_file or (None if own else source.data_file),
        )


def group_by_evaluation(
    sources: Sequence[SourceRecord], settings: SourceSettings, *, base_model: bool
) -> dict[EvaluationSettings, list[SourceRecord]]:
    """Records that share one evaluation (first-seen order)."""
    groups: dict[EvaluationSettings, list[SourceRecord]] = {}
    for s in sources:
        groups.setdefault(settings.evaluation_for(s, base_model=base_model), []).append(s)
    return groups


def source_fields(source: SourceRecord) -> dict[str, object]:
    """What a derived record keeps of its source (in its settings)."""
    r = source.record
    return {
        "source_model": r.model,
        "source_backend": r.backend,
        "source_run": str(source.run_dir),
        "source_clean_score": r.clean_score,
        "source_adversarial_score": r.adversarial_score,
        "source_pdr": r.pdr,
        "source_samples": r.samples,
        "source_shots": r.shots,
        "source_mode": r.mode,
    }
