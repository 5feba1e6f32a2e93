"""The analyses a user starts (``pre eval``, ``pre transfer``, ``pre defend``, ``pre attention``)
as plans, the shape of ``engine.runs.plan``: ``plan_*`` decides everything from settings before any
model loads or folder is made (inputs read, paths checked, the model's arguments and one batch
size, the evaluation's task, mode and shots); each plan is a job of the one executor
(``engine.runs.executor.run_plan``): it runs on the executor's session and writes its run folder
(records, tables, config.json, results.json in the one layout), returning the result and the
folder. The CLI prints; nothing here knows of flags.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from promptrobust.attacks.registry import INSERTION_ATTACKS
from promptrobust.engine.analysis.attention import AttentionComparison, compare_prompts, worst_source
from promptrobust.engine.analysis.defense import DefenseResult, defend
from promptrobust.engine.analysis.prompt_eval import (
    PromptEvalResult,
    PromptItem,
    evaluate_prompts,
    items_from_rows,
    pair_row,
    read_prompt_file,
    relabel_by_content,
)
from promptrobust.engine.analysis.scoring import text_table
from promptrobust.engine.analysis.sources import SELECTION_NOTE, SourceRecord, SourceSettings, load_source_records
from promptrobust.engine.analysis.transfer import TransferResult, transfer, transfer_settings
from promptrobust.engine.errors import SettingsError
from promptrobust.engine.measuring.settings import EvaluationSettings
from promptrobust.engine.measuring.statistics import AT_CHANCE_NOTE, format_apdr
from promptrobust.engine.measuring.target import MeasurementTarget, decide_target
from promptrobust.engine.runs.executor import Context, OutputOptions, SessionOptions
from promptrobust.engine.runs.notes import Note
from promptrobust.engine.runs.plan import base_model_note, check_paths, model_and_scheduler
from promptrobust.engine.runs.run_folder import RunFolder, WrittenWith
from promptrobust.engine.runs.session import SessionFacts
from promptrobust.engine.safe_io.redact import scrub
from promptrobust.engine.serving.registry import DEFAULT_MODEL, ModelSpec, parse_model_args
from promptrobust.engine.serving.scheduler_settings import SchedulerSettings
from promptrobust.tasks.placeholders import check_no_content_placeholder
from promptrobust.tasks.promptbench_import import load_adversarial_prompts

#: Also part of this surface, for a front end that shows the results: ``SourceSettings`` (how
#: transfer and defense re-score records), ``format_apdr`` and ``AT_CHANCE_NOTE`` (how an APDR
#: figure and a score at chance are written; engine.measuring.statistics).
__all__ = [
    "AT_CHANCE_NOTE", "AttentionPlan", "DefensePlan", "EvalPlan", "Outcome", "SourcePlan", "SourceSettings", "TransferPlan",
    "format_apdr", "plan_attention", "plan_defense", "plan_eval", "plan_transfer",
]

R = TypeVar("R")
SourcePlanT = TypeVar("SourcePlanT", bound="SourcePlan")


@dataclass(frozen=True)
class Outcome(Generic[R]):
    """An analysis' result and the run folder it was written to."""

    result: R
    folder: Path
    notes: tuple[str, ...] = ()
    """What the analysis said beside its result (a base model's shots, rows of another dataset, ...);
    what planning said is the plan's ``notes``."""


# -- pre eval --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvalPlan:
    """Prompts (or clean/adversarial pairs) to score on one model and dataset."""

    items: tuple[PromptItem, ...]
    source: str
    """The prompts file or promptbench checkout they came from."""
    model: ModelSpec
    target: MeasurementTarget
    """The evaluation, decided: task, settings, mode and shots (``decide_target``)."""
    scheduler: SchedulerSettings
    prompt_type: str = "all"
    """Only items of this prompt type (all: every one)."""
    output: OutputOptions = field(default_factory=OutputOptions)
    notes: tuple[str | Note, ...] = ()
    """What planning said: reading the prompts (a promptbench block incomplete or relabelled) and the
    base-model rule (3-shot), before anything is scored."""

    @property
    def evaluation(self) -> EvaluationSettings:
        return self.target.evaluation

    def session_options(self) -> SessionOptions:
        return SessionOptions.of(self.output, self.scheduler)

    async def run(self, context: Context) -> Outcome[PromptEvalResult]:
        """Score the plan's prompts; results.jsonl (pairs), results.md, config.json and results.json."""
        with RunFolder(self.output.output_dir, ["eval", self.model.name, self.evaluation.dataset]) as folder:
            result = await evaluate_prompts(context.session, list(self.items), model=self.model, target=self.target,
                                            prompt_type=self.prompt_type, keep_samples=self.output.log_samples)
            configs = {"evaluation": self.evaluation.config(), "prompts_file": self.source}
            _write(folder, self.output, result, result.sample_log, context.facts(), configs)
            folder.write_text("results.md", _eval_markdown(result))
        return Outcome(result, folder.final, tuple(result.notes))


def plan_eval(prompts: str | None = None, *, promptbench_adv: str | None = None, source_model: str | None = None,
              source_shot: str | None = None, model: str = DEFAULT_MODEL, model_args: str | Mapping[str, object] | None = None,
              evaluation: EvaluationSettings | None = None, scheduler: SchedulerSettings | None = None,
              prompt_type: str = "all", output: OutputOptions | None = None) -> EvalPlan:
    """A prompts file (``prompts``) or the paper's published pairs (``promptbench_adv``: a checkout,
    its adv_prompts folder or one .md file, optionally only those found on ``source_model`` and of
    ``source_shot``), read and checked now."""
    evaluation = evaluation or EvaluationSettings()
    check_paths(data_dir=evaluation.data_dir, data_file=evaluation.data_file, promptbench_adv=promptbench_adv)
    spec, scheduler = model_and_scheduler(model, model_args, scheduler)
    notes: list[str | Note] = []
    if promptbench_adv:
        pairs = load_adversarial_prompts(promptbench_adv, model=source_model, dataset=evaluation.dataset, shot=source_shot,  # type: ignore[arg-type]
                                         content=INSERTION_ATTACKS)
        notes = [*pairs.skipped, *pairs.relabelled]
        items = items_from_rows(Path(promptbench_adv), [pr.to_row() for pr in pairs])
    elif source_model or source_shot:
        raise SettingsError("source_model and source_shot choose among promptbench's published prompts: "
                            "give a promptbench checkout too", setting="promptbench_adv")
    elif prompts and _is_adversarial_archive(prompts):  # one of the paper's archive files: read as --promptbench-adv
        pairs = load_adversarial_prompts(prompts, dataset=evaluation.dataset, content=INSERTION_ATTACKS)
        notes = [*pairs.skipped, *pairs.relabelled]
        items = items_from_rows(Path(prompts), [pr.to_row() for pr in pairs])
    elif prompts:
        items, relabelled = relabel_by_content(read_prompt_file(prompts), Path(prompts).name)
        notes = list(relabelled)
    else:
        raise SettingsError("give a prompts file or a promptbench checkout", setting="prompts")
    check_no_content_placeholder((it.id, t) for it in items for t in (it.prompt, it.clean, it.adversarial))
    target = decide_target(evaluation, base_model=spec.base_model, strict=True)
    shots = base_model_note(spec, target)  # said before scoring, not after
    return EvalPlan(tuple(items), str(prompts or promptbench_adv), spec, target, scheduler, prompt_type,
                    output or OutputOptions(), (*notes, *([shots] if shots is not None else [])))


def _is_adversarial_archive(path: str) -> bool:
    """A promptbench adv_prompts ``.md`` file (its pairs start "Attacked prompt:"), not a plain prompts file."""
    p = Path(path)
    if p.suffix.lower() != ".md" or not p.is_file():
        return False
    try:
        return any(line.startswith("Attacked prompt:") for line in p.read_text(encoding="utf-8").splitlines())
    except (OSError, UnicodeDecodeError):
        return False  # read_prompt_file says what is wrong with it


def _eval_markdown(result: PromptEvalResult) -> str:
    clean = [c.to_dict() for c in result.clean]
    parts = [text_table(clean, ["prompt_id", "score", "ci95", "at_chance", "prompt"], name="clean", title="Clean scores").markdown()]
    if result.records:
        cols = ["id", "attack", "clean", "adversarial", "pdr", "pdr_ci95", "mcnemar_p", "at_chance"]
        parts.append(text_table([pair_row(r) for r in result.records], cols, name="pairs", title="Pairs").markdown())
        cols = ["attack", "n", "pdr_mean", "pdr_std", "pdr_ci95_low", "pdr_ci95_high"]
        parts.append(text_table(result.apdr, cols, name="apdr", title="APDR (sample std, ddof=1)").markdown())
    return "\n".join(parts)


# -- pre transfer and pre defend -----------------------------------------------------------------------


@dataclass(frozen=True)
class SourcePlan:
    """Attack records of earlier runs to re-score: on a target model (transfer) or spell-corrected (defense)."""

    sources: tuple[SourceRecord, ...]
    """The records chosen (attacked, with an adversarial prompt, matching the settings' filters)."""
    settings: SourceSettings
    model: ModelSpec | None
    """The model scoring them; None (a defense only): each record's own model."""
    model_args: Mapping[str, Any]
    """The model arguments given (with each record's own model too)."""
    scheduler: SchedulerSettings
    output: OutputOptions = field(default_factory=OutputOptions)
    distance: int = 2
    """A defense's largest edit distance of a spelling correction (1 or 2)."""
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.distance not in (1, 2):
            raise SettingsError(f"distance must be 1 or 2 (got {self.distance!r})", setting="distance")

    def session_options(self) -> SessionOptions:
        return SessionOptions.of(self.output, self.scheduler)


@dataclass(frozen=True)
class TransferPlan(SourcePlan):
    """Attack records of earlier runs, their adversarial prompts to be scored on a target model."""

    async def run(self, context: Context) -> Outcome[TransferResult]:
        """Transfer records, transfer.md/.csv (APDR per source -> target and attack), records.csv, results.json."""
        assert self.model is not None, "plan_transfer gives every transfer plan its target model"
        datasets = sorted({s.record.dataset for s in self.sources})[:2]
        with RunFolder(self.output.output_dir, ["transfer", self.model.name, *datasets]) as folder:
            result = await transfer(context.session, list(self.sources), model=self.model, settings=self.settings,
                                    keep_samples=self.output.log_samples)
            _write(folder, self.output, result, result.sample_log, context.facts(), {"sources": self.settings})
            columns = ["source_model", "target_model", "attack", "n", "pdr_mean", "pdr_std", "pdr_ci95_low", "pdr_ci95_high"]
            _tables(folder, "transfer", text_table(result.apdr, columns, name="transfer", title="Transfer APDR (source -> target)"),
                    result.rows())
        said = (*self.notes, SELECTION_NOTE)  # the plan said its notes and its selection before scoring
        return Outcome(result, folder.final, tuple(n for n in result.notes if not n.startswith(said)))


@dataclass(frozen=True)
class DefensePlan(SourcePlan):
    """Attack records of earlier runs, their adversarial prompts to be spell-corrected and scored."""

    async def run(self, context: Context) -> Outcome[DefenseResult]:
        """Defended records, defense.md/.csv (PDR without/with the defense per attack), records.csv, results.json."""
        models = sorted({self.model.name} if self.model else {s.record.model for s in self.sources})[:2]
        with RunFolder(self.output.output_dir, ["defend", *models]) as folder:
            result = await defend(context.session, list(self.sources), model=self.model.name if self.model else None,
                                  model_args=self.model_args, settings=self.settings, distance=self.distance,
                                  keep_samples=self.output.log_samples)
            _write(folder, self.output, result, result.sample_log, context.facts(),
                   {"sources": self.settings, "distance": self.distance})
            columns = ["model", "attack", "n", "pdr_without", "pdr_without_std", "pdr_with", "pdr_with_std",
                       "pdr_with_ci95_low", "pdr_with_ci95_high", "recovered"]
            _tables(folder, "defense", text_table(result.summary, columns, name="defense", title="Spell-check defense"),
                    result.rows())
        return Outcome(result, folder.final, tuple(result.notes))


def _plan_sources(kind: type[SourcePlanT], paths: Sequence[str], settings: SourceSettings, model: str | None,
                  model_args: str | Mapping[str, object] | None, scheduler: SchedulerSettings | None,
                  output: OutputOptions | None, distance: int = 2) -> SourcePlanT:
    check_paths(data_dir=settings.data_dir, data_file=settings.data_file)
    args = parse_model_args(model_args) if isinstance(model_args, str) or model_args is None else dict(model_args)
    spec, scheduler = model_and_scheduler(model, args, scheduler) if model else (None, scheduler or SchedulerSettings())
    chosen, notes = settings.select(load_source_records(list(paths)))
    return kind(tuple(chosen), settings, spec, dict(spec.args) if spec else args, scheduler, output or OutputOptions(),
                distance, tuple(notes))


def plan_transfer(sources: Sequence[str], *, model: str | None, model_args: str | Mapping[str, object] | None = None,
                  settings: SourceSettings | None = None,
                  scheduler: SchedulerSettings | None = None, output: OutputOptions | None = None) -> TransferPlan:
    """The adversarial prompts of the run folders ``sources``, to be scored on the target ``model``."""
    if not model:
        raise SettingsError("a transfer needs a target model: the model the adversarial prompts are moved to", setting="model")
    return _plan_sources(TransferPlan, sources, transfer_settings(settings), model, model_args, scheduler, output)


def plan_defense(sources: Sequence[str], *, model: str | None = None, model_args: str | Mapping[str, object] | None = None,
                 distance: int = 2,
                 settings: SourceSettings | None = None, scheduler: SchedulerSettings | None = None,
                 output: OutputOptions | None = None) -> DefensePlan:
    """The adversarial prompts of ``sources``, spell-corrected and scored on ``model`` (None: each record's own)."""
    return _plan_sources(DefensePlan, sources, settings or SourceSettings(), model, model_args, scheduler, output, distance)


def _tables(folder: RunFolder, name: str, summary: Any, rows: list[dict[str, object]]) -> None:
    records = text_table(rows, list(rows[0]), name="records", title="Records")
    summary.write_csv(folder.partial)
    records.write_csv(folder.partial)
    folder.write_text(f"{name}.md", summary.markdown() + "\n" + records.markdown())


# -- pre attention ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionPlan:
    """A clean and an adversarial prompt, the model and the sample whose word importance is compared."""

    clean: str
    adversarial: str
    model: str
    model_args: Mapping[str, Any]
    evaluation: EvaluationSettings
    sample_index: int = 0
    methods: tuple[str, ...] = ("gradient", "deletion")
    device: str = "cpu"
    output: OutputOptions = field(default_factory=OutputOptions)

    def session_options(self) -> SessionOptions:
        """No scheduler is queried (the model runs in this process for its gradients); the cache is not read."""
        return SessionOptions(use_cache=False)

    async def run(self, context: Context) -> Outcome[AttentionComparison]:
        """Word importance of both prompts: gradient.png, deletion.png, attention.html and .json, config.json."""
        import asyncio

        with RunFolder(self.output.output_dir, ["attention", self.model, self.evaluation.dataset]) as folder:
            result = await asyncio.to_thread(compare_prompts, self.clean, self.adversarial, model=self.model,
                                             model_args=self.model_args, settings=self.evaluation,
                                             sample_index=self.sample_index, device=self.device, methods=self.methods)
            result.write(folder.partial)
            folder.write_json("config.json", scrub({**self.output.config, "evaluation": self.evaluation.config()}))
        return Outcome(result, folder.final)


def plan_attention(*, clean: str | None = None, adversarial: str | None = None, record: str | None = None,
                   prompt_type: str = "all", model: str | None = None, model_args: str | Mapping[str, object] | None = None,
                   evaluation: Mapping[str, Any] | None = None, sample_index: int = 0, methods: Sequence[str] = ("gradient", "deletion"),
                   device: str = "cpu", output: OutputOptions | None = None) -> AttentionPlan:
    """Both prompts given, or taken from the ``record`` run folder's worst record (the largest PDR
    whose prompt changed), whose model, dataset, seed and shots are used unless given: ``evaluation``
    holds the ``EvaluationSettings`` fields given (None values mean "the record's, else the default")."""
    given = {k: v for k, v in dict(evaluation or {}).items() if v is not None}
    check_paths(data_dir=given.get("data_dir"), data_file=given.get("data_file"))
    if sample_index < 0:
        raise SettingsError(f"sample_index must be 0 or more (got {sample_index})", setting="sample_index")
    found = None
    if record:
        if clean or adversarial:
            raise SettingsError("take the prompts from a record or give clean and adversarial prompts, not both", setting="record")
        source = worst_source(record, prompt_type=prompt_type)
        found = source.record
        clean, adversarial = found.clean_prompt, found.adversarial_prompt
        own = {"dataset": found.dataset, "task": source.task, "seed": found.seed, "shots": found.shots}
        given = {**{k: v for k, v in own.items() if v is not None}, **given}
    elif not (clean and adversarial):
        raise SettingsError("give a clean and an adversarial prompt, or a record run folder to take them from", setting="clean")
    return AttentionPlan(clean=str(clean), adversarial=str(adversarial), model=model or (found.model if found else DEFAULT_MODEL),
                         model_args=parse_model_args(model_args) if isinstance(model_args, str) else dict(model_args or {}),
                         evaluation=EvaluationSettings(**given), sample_index=sample_index,
                         methods=tuple(methods), device=device, output=output or OutputOptions())




# -- what eval, transfer and defense share -------------------------------------------------------------------


def _write(folder: RunFolder, output: OutputOptions, result: Any, sample_log: Sequence[Mapping[str, Any]],
           facts: SessionFacts, configs: Mapping[str, Any]) -> None:
    """results.jsonl (+ .parquet), samples.jsonl (when logged), config.json and results.json."""
    folder.write_records(result.records)
    logged = folder.write_jsonl("samples.jsonl", sample_log)
    folder.write_json("config.json", scrub({**output.config, **configs}))
    folder.write_results(result.document(WrittenWith(argv=output.argv, configs=configs, logged=logged,
                                                     counters=facts["counters"])))
