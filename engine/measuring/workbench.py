"""One owner of measuring: a ``Workbench`` is one (model, dataset, settings)
evaluation, prepared once, with typed methods for everything that measures.

``open_workbench`` turns a decided ``MeasurementTarget`` (task, settings, shots and mode, chosen
once by ``engine.measuring.target.decide_target``) and the model's started scheduler into a
``Workbench``: the samples, the worked examples, the chance rate; the only thing it still decides
is a backend's downgrade of label scoring to generation. Then:

- ``Workbench.score_prompts``: THE prompt-scoring loop (clean score of each
  prompt with its interval, chance flag, per-sample scores and its own cost);
  ranking, ``Session.evaluate``, ``pre run``, ``pre eval``, transfer and
  defense all score through it;
- ``Workbench.pair``: a clean prompt and a given other prompt -> one ``pair``,
  ``transfer`` or ``defense`` record;
- ``Workbench.attack``: one attack on one prompt -> one ``attack`` record;
- ``Workbench.sample_log``: per-sample answers of records' prompts (--log-samples).

The protocol (rank the set, attack the top k) sits on it: ``engine.measuring.protocol``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from promptrobust.engine import progress
from promptrobust.engine.errors import PromptRobustError
from promptrobust.engine.measuring.statistics import (
    is_at_chance,
    majority_rate,
    mcnemar_p,
    pdr_interval,
    prompt_set_pdr,
    score_interval,
)
from promptrobust.engine.measuring.evaluator import Evaluator, PromptEvaluation
from promptrobust.attacks.registry import prompt_set_of
from promptrobust.attacks.result import performance_drop_rate
from promptrobust.engine.measuring.mode import decide_mode
from promptrobust.engine.measuring.racing import RacingSettings
from promptrobust.engine.measuring.records import AttackRecord, Cost, PromptSetStatistic
from promptrobust.engine.measuring.settings import AttackSettings, EvaluationSettings, MeasurementSettings
from promptrobust.engine.measuring.target import MeasurementTarget
from promptrobust.engine.serving.backends.base import Backend
from promptrobust.engine.serving.registry import ModelSpec
from promptrobust.engine.serving.scheduler import Scheduler
from promptrobust.tasks.base import Prompt, Sample, Task
from promptrobust.tasks.errors import TaskError
from promptrobust.tasks.fewshot import few_shot_examples
from promptrobust.tasks.prompt_sets import load_prompts
from promptrobust.tasks.sampling import seeded_subset
from promptrobust.tasks.adversarial_samples import load_adversarial_samples
from promptrobust.tasks.adversarial_samples import source_name as adversarial_source_name

@dataclass
class Workbench:
    """Everything one (model, dataset, settings) evaluation needs, built once."""

    spec: ModelSpec
    task: Task
    samples: list[Sample]
    examples: list[Sample]
    evaluation: EvaluationSettings
    shots: int
    mode: str
    scheduler: Scheduler
    chance_rate: float | None

    def evaluator(self, *, chunk_size: int = 32, early_stopping: bool = True,
                  racing: RacingSettings | None = None) -> Evaluator:
        """A fresh evaluator (its own cost counters) on the shared scheduler; ``racing``: race each
        search step's candidates (``engine.measuring.racing``)."""
        return Evaluator(
            self.scheduler,
            self.task,
            self.samples,
            mode=self.mode,  # type: ignore[arg-type]
            parser=self.evaluation.parser,
            examples=self.examples,
            chunk_size=chunk_size,
            early_stopping=early_stopping,
            racing=racing,
            seed=self.evaluation.seed,
            max_tokens=self.evaluation.max_new_tokens,
            stop=self.evaluation.stop,
            system_instruction=self.evaluation.system_instruction,
        )

    @property
    def binary(self) -> bool:
        """Per-sample scores are 0/1 (accuracy-like), so Wilson and McNemar apply (not to
        macro-F1, a label metric whose per-sample scores are contributions)."""
        return self.task.supports_choices and self.task.metric.decomposable

    def measurement(self) -> MeasurementSettings:
        """The settings every number of this workbench is made under (no attack: budget and options blank)."""
        generate = self.mode == "generate"
        return MeasurementSettings(
            mode=self.mode,
            parser=self.evaluation.parser if generate else None,
            max_new_tokens=(self.evaluation.max_new_tokens or self.task.max_tokens) if generate else None,
            samples=len(self.samples),
            sample_selection=sample_selection_of(self.evaluation),
            shots=self.shots,
            input_format="chat" if self.scheduler.backend.is_chat else "completion",
            metric=self.task.metric.name,
            seed=self.evaluation.seed,
            stop=tuple(self.evaluation.stop) if generate and self.evaluation.stop is not None else None,
            system_instruction=self.evaluation.system_instruction or None,
            searched=False,
            approximate_labels=self.mode == "choices" and self.label_scoring().startswith("approximate"),
        )

    def measurement_facts(self, measurement: MeasurementSettings | None = None) -> dict[str, Any]:
        """``measurement`` (default: this workbench's) as results.json's ``configs.measurement``:
        the settings plus, in choices mode, which label-scoring path ran (exact, or approximated)."""
        m = measurement or self.measurement()
        out = m.to_dict()
        if m.mode == "choices":
            out["label_scoring"] = self.label_scoring()
        return out

    def label_scoring(self) -> str:
        """How the backend scores labels (exact, or the HTTP top-20 approximation), as records say it."""
        return label_scoring(self.scheduler.backend)

    async def score_prompts(
        self,
        prompts: Sequence[Prompt],
        *,
        keep_records: bool = False,
        on_done: Callable[["ScoredPrompt"], None] | None = None,
    ) -> list["ScoredPrompt"]:
        """THE prompt-scoring loop: the exact clean score of every prompt (no early
        stopping), each with its interval, chance flag, per-sample scores and its own
        cost (a fresh evaluator per prompt), all submitted at once to the shared
        scheduler. Returned in input order; ``on_done`` is called as each finishes."""

        async def one(prompt: Prompt) -> ScoredPrompt:
            evaluator = self.evaluator(early_stopping=False)
            started = time.monotonic()
            evaluation = await evaluator.evaluate(prompt.text, keep_records=keep_records)
            c = evaluator.requests
            cost = Cost(
                candidate_evaluations=1, model_requests=c.requests, requests_sent=c.sent, cache_hits=c.cache_hits,
                deduplicated=c.deduplicated, samples_evaluated=evaluator.cost.samples_evaluated,
                input_tokens=c.input_tokens, output_tokens=c.output_tokens, usd=_usd(self, c.input_tokens, c.output_tokens),
                wall_seconds=round(time.monotonic() - started, 3),
            )
            scored = ScoredPrompt(prompt, clean_score(self, prompt, evaluation), evaluation, cost)
            if on_done is not None:
                on_done(scored)
            return scored

        with progress.reserve(len(prompts) * len(self.samples), kind="ranking"):  # progress: the whole loop's requests, known now
            return list(await asyncio.gather(*(one(p) for p in prompts)))

    async def attack(self, prompt: Prompt, attack_name: str, settings: AttackSettings, *,
                     clean: "CleanScore | None" = None, semantic_prompts: "SemanticPrompts | None" = None) -> AttackRecord:
        """One attack on one prompt: its ``attack`` record (``attack_one``)."""
        return await attack_one(self, prompt, attack_name, settings, clean=clean, semantic_prompts=semantic_prompts)

    def pair(
        self,
        *,
        prompt_id: str,
        attack: str,
        clean: CleanScore,
        adversarial: CleanScore,
        kind: str = "pair",
        prompt_type: str = "given",
        settings: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
        source_model: str | None = None,
        defense: str | None = None,
    ) -> AttackRecord:
        """The record of a clean prompt paired with a given other prompt, both scored on these
        samples (``clean`` and ``adversarial``, from ``score_prompts``): both scores with
        intervals, the PDR with its paired interval, McNemar's p and the chance flag, as an attack
        record has. ``kind``: pair, transfer (``source_model``) or defense (``defense``). A clean
        score of 0 leaves no PDR ("skipped_clean_zero"). Its work is shared with the other records
        that use the same prompts, so its cost is marked shared."""
        from promptrobust.attacks.result import performance_drop_rate

        stats = pair_statistics(clean.sample_scores, adversarial.sample_scores, binary=self.binary, chance=self.chance_rate)
        skipped = clean.score == 0
        if skipped:
            stats["pdr_ci95"] = None
        return AttackRecord(
            **self.describe(),
            prompt_id=prompt_id, attack=attack, prompt_type=prompt_type,
            clean_prompt=clean.prompt.text, clean_score=clean.score,
            adversarial_prompt=adversarial.prompt.text, adversarial_score=adversarial.score,
            pdr=None if skipped else performance_drop_rate(clean.score, adversarial.score),
            status="skipped_clean_zero" if skipped else "attacked",
            budget=None, early_stopping="off", **stats,
            clean_sample_scores=list(clean.sample_scores), adversarial_sample_scores=list(adversarial.sample_scores),
            cost=Cost(shared=True),
            settings=dict(settings or {}), extra=dict(extra or {}),
            # An input here (an attack finds its own): two pairs with one clean prompt
            # and different adversarial prompts are two measurements, not reruns of one.
            adversarial_given=True,
            kind=kind, source_model=source_model, defense=defense,
        )

    async def sample_log(self, records: Sequence[AttackRecord], *,
                         held_out_ids: set[str] | None = None) -> list[dict[str, Any]]:
        """Per-sample answers of each record's clean and final adversarial prompt
        (``--log-samples``). Both prompts were scored when the record was made, so
        this reads the cache (or joins requests in flight) rather than querying again.
        ``held_out_ids``: the samples a run held out (``engine/measuring/holdout.py``); each row then
        says ``held_out`` (True: a sample the ranking and the search never saw)."""
        rows: list[dict[str, Any]] = []
        for r in records:
            if r.status == "failed":
                continue
            roles = [("clean", r.clean_prompt)] + ([("adversarial", r.adversarial_prompt)] if r.adversarial_prompt else [])
            for role, text in roles:
                evaluation = await self.evaluator(early_stopping=False).evaluate(text, keep_records=True)
                rows += [{"run_key": r.run_key, "kind": r.kind, "attack": r.attack, "prompt_id": r.prompt_id,
                          "role": role, "prompt": text, **vars(s),
                          **({"held_out": s.sample_id in held_out_ids} if held_out_ids is not None else {})}
                         for s in evaluation.records]
        return rows

    def task_provenance(self) -> list[dict[str, Any]]:
        """results.json's ``tasks``: a user's own task's provenance (its file, definition, data
        and their hashes); empty for a built-in dataset."""
        provenance = self.task.provenance()
        return [provenance] if provenance else []

    def describe(self) -> dict[str, Any]:
        """What was measured and under which settings (written into results and records); a
        user's own task adds its definition hash (``task_definition``)."""
        m = self.measurement()
        own = {"task_definition": self.task.definition_hash} if self.task.definition_hash is not None else {}
        return {
            "model": self.spec.name, "backend": self.spec.backend, "dataset": self.task.name, "metric": m.metric,
            "samples": m.samples, "seed": m.seed, "shots": m.shots, "mode": m.mode, "parser": m.parser,
            "max_new_tokens": m.max_new_tokens, "input_format": m.input_format, "sample_selection": m.sample_selection,
            "label_scoring": self.label_scoring() if m.mode == "choices" else None,
            "stop": list(m.stop) if m.stop is not None else None,
            "system_instruction": m.system_instruction,
            **own,
        }


def label_scoring(backend: Backend) -> str:
    """How a backend scores labels (exact, or the HTTP top-20 approximation), as records say it."""
    return getattr(backend, "label_scoring", None) or "exact: label tokens scored in process"


def sample_selection_of(evaluation: EvaluationSettings) -> str:
    """How the samples were chosen, as records say it: the selection rule, and for the joint attack on
    adversarial samples their source (so reports never pool them with the dataset's own samples)."""
    if evaluation.adversarial_samples:
        return f"{evaluation.sample_selection}, adversarial samples {adversarial_source_name(evaluation.adversarial_samples)}"
    return evaluation.sample_selection


def load_samples(task: Task, evaluation: EvaluationSettings) -> list[Sample]:
    """The evaluation samples: the first ``limit`` of the task's draw, or a fraction of it
    (lm-eval's ``--limit 0.1``), resolved here where the data is loaded, once."""
    fraction = isinstance(evaluation.limit, float)
    if evaluation.adversarial_samples:  # the joint attack: the adversarial samples, in the seeded order
        pool = load_adversarial_samples(task, evaluation.adversarial_samples)
        drawn = seeded_subset(pool, None, evaluation.seed, first=evaluation.sample_selection == "first")
        return list(drawn[: evaluation.limit_for(len(drawn))])
    samples = task.load(limit=None if fraction else evaluation.limit, seed=evaluation.seed,  # type: ignore[arg-type]
                        data_dir=evaluation.data_dir, data_file=evaluation.data_file)
    return list(samples[: evaluation.limit_for(len(samples))]) if fraction else list(samples)


async def open_workbench(target: MeasurementTarget, spec: ModelSpec,
                         start: Callable[[], Awaitable[Scheduler]]) -> Workbench:
    """The workbench of a decided ``target``: its samples and worked examples loaded and their
    lengths checked first (a data problem is said before any model loads or server is reached),
    then the scheduler ``start`` gives. The target's task, shots and mode are taken as given; the
    one decision left is the backend's: a model that cannot score label log-probs generates instead
    (``decide_mode``, said once per model)."""
    task, evaluation = target.task, target.evaluation
    samples = load_samples(task, evaluation)
    examples = few_shot(task, target.shots, seed=evaluation.seed, data_dir=evaluation.data_dir)
    check_input_lengths(task, samples, examples)
    scheduler = await start()
    progress.watch(scheduler.stats)  # progress: requests done / cache hits / sent come from here
    return Workbench(
        spec=spec,
        task=task,
        samples=list(samples),
        examples=examples,
        evaluation=evaluation,
        shots=target.shots,
        mode=decide_mode(target.mode, task, scheduler.backend),
        scheduler=scheduler,
        chance_rate=_chance_rate(task, samples),
    )


#: No model's context holds an input longer than this (about 250k tokens): such a
#: sample is a data problem, and is reported before any model loads.
MAX_INPUT_CHARS = 1_000_000


class InputTooLongError(PromptRobustError, ValueError):
    """A sample that no model could read; the message names it and the fix."""


def check_input_lengths(task: Task, samples: Sequence[Sample], examples: Sequence[Sample]) -> None:
    """Fail up front (not after minutes of scoring) on an input no context can hold."""
    for sample in samples:
        size = len(task.render("", sample, examples))
        if size > MAX_INPUT_CHARS:
            raise InputTooLongError(
                f"sample {sample.id} renders to {size:,} characters, more than any model's context "
                f"(~{MAX_INPUT_CHARS:,}); fix or drop it in the data file"
            )


def few_shot(task: Task, shots: int, *, seed: int = 0, data_dir: str | None = None) -> list[Sample]:
    """``shots`` worked examples from the task's fixed few-shot set (none for 0)."""
    if shots <= 0:
        return []
    return list(few_shot_examples(task, seed, k=shots, data_dir=data_dir))


def _chance_rate(task: Task, samples: Sequence[Sample]) -> float | None:
    """The score of always giving the most frequent label (the majority rate for accuracy)."""
    if not task.supports_choices or not samples:
        return None
    targets = [s.target for s in samples]
    own = task.metric.majority_score(targets)
    return majority_rate(targets) if own is None else own


# -- clean scores -----------------------------------------------------------------------


@dataclass(frozen=True)
class CleanScore:
    """One prompt's score on every sample, with its uncertainty: the one score type (`pre run`'s
    clean scores, `pre eval`'s, and both sides of every pair that transfer and defend score)."""

    prompt: Prompt
    score: float
    ci95: tuple[float, float]
    at_chance: bool
    sample_scores: tuple[float, ...] = dataclasses.field(repr=False)  # a repr that fits a line
    """Per-sample scores in sample order (the statistics pair them by position)."""
    unparseable: int = 0
    extra: Mapping[str, object] = dataclasses.field(default_factory=dict, repr=False)
    """A prompts file's other columns (`pre eval`), written beside the score."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt_id": self.prompt.id,
            "prompt_type": self.prompt.type,
            "language": self.prompt.language,
            "prompt": self.prompt.text,
            "score": self.score,
            "ci95": list(self.ci95),
            "at_chance": self.at_chance,
            "unparseable": self.unparseable,
            **self.extra,
        }


@dataclass(frozen=True)
class ScoredPrompt:
    """One prompt scored by ``Workbench.score_prompts``."""

    prompt: Prompt
    clean: CleanScore
    evaluation: PromptEvaluation
    """Scores per sample (and, when kept, what happened on each sample)."""
    cost: Cost
    """This prompt's own requests (its own evaluator) and wall time."""


def clean_score(bench: Workbench, prompt: Prompt, evaluation: PromptEvaluation) -> CleanScore:
    scores = tuple(evaluation.sample_scores)
    ci = tuple(score_interval(scores, binary=bench.binary)) if scores else (evaluation.score, evaluation.score)
    return CleanScore(
        prompt=prompt,
        score=evaluation.score,
        ci95=(float(ci[0]), float(ci[1])),
        at_chance=is_at_chance(ci, bench.chance_rate),
        sample_scores=scores,
        unparseable=evaluation.unparseable,
    )


# -- one attack ----------------------------------------------------------------------


def protected_words(task: Task) -> frozenset[str]:
    """Words no attack may touch: the labels, their verbalizers and the task's special words."""
    words = {w.lower() for w in task.protected_words}
    words |= {str(label).lower() for label in task.labels}
    words |= {str(v).lower() for v in task.verbalizers.values()}
    return frozenset(words)


@dataclass(frozen=True)
class SemanticPrompts:
    """The Semantic attack's prompt set and where it came from (recorded as ``prompt_set``)."""

    prompts: list[tuple[str, str]]
    source: str


#: What the Semantic attack scores unless a prompt set is given.
OWN_SEMANTIC_SET = "promptrobust's own semantic prompts (tasks/prompts/semantic)"


def semantic_prompts_for(task: Task, attack_name: str) -> list[tuple[str, str]]:
    """The candidates of an attack that scores one of the task's prompt sets (Semantic's) as
    (language, prompt); nothing for other attacks."""
    prompt_type = prompt_set_of(attack_name)
    if prompt_type is None:
        return []
    prompts = [(p.language, p.text) for p in load_prompts(task, types=[prompt_type])]
    if not prompts and task.own_prompts() is not None:
        raise TaskError(f"task {task.name} has no semantic prompts for the Semantic attack; add prompts with "
                        "type = \"semantic\" and a language to the task")
    return prompts


def pair_statistics(clean: Sequence[float], adversarial: Sequence[float], *, binary: bool, chance: float | None) -> dict[str, Any]:
    """Intervals, paired test and chance flag of a clean/adversarial pair on the same samples."""
    clean_ci = score_interval(clean, binary=binary)
    pdr_ci = pdr_interval(clean, adversarial)
    return {
        "clean_ci95": [float(clean_ci[0]), float(clean_ci[1])],
        "adversarial_ci95": [float(x) for x in score_interval(adversarial, binary=binary)],
        "pdr_ci95": [float(pdr_ci[0]), float(pdr_ci[1])] if pdr_ci is not None else None,
        "mcnemar_p": mcnemar_p(clean, adversarial) if binary else None,
        "chance_rate": chance,
        "at_chance": is_at_chance(clean_ci, chance),
    }


def _record_base(bench: Workbench, prompt: Prompt, attack: str, settings: AttackSettings) -> dict[str, Any]:
    described = bench.describe()
    return {
        **described,
        "prompt_id": prompt.id,
        "prompt_type": prompt.type,
        "attack": attack,
        "clean_prompt": prompt.text,
        "budget": settings.budget,
        "early_stopping": settings.early_stopping,
        "search": settings.search,
        "chance_rate": bench.chance_rate,
        "kind": "attack",
        "attack_options": dict(settings.options.get(attack, {})),
    }


async def load_meaning_judge(settings: AttackSettings | None) -> None:
    """Load the NLI model that judges meaning verdicts (``AttackSettings.meaning_nli``) before a run or
    sweep asks any model anything: one that cannot be had, or is not an NLI model, fails it in one
    line (``AttackResourceError``) instead of failing each attack after its clean scores. Loaded once
    per process; each attack then finds it loaded."""
    if settings is None or not settings.meaning_nli:
        return
    from promptrobust.attacks.nli_check import load_nli_judge

    progress.phase(f"loading the NLI model {settings.meaning_nli} (meaning verdicts)", line=False)
    await asyncio.to_thread(load_nli_judge, settings.meaning_nli)


async def attack_one(
    bench: Workbench,
    prompt: Prompt,
    attack_name: str,
    settings: AttackSettings,
    *,
    clean: CleanScore | None = None,
    semantic_prompts: Sequence[str | tuple[str, str] | Prompt] | SemanticPrompts | None = None,
) -> AttackRecord:
    """Attack one prompt; the record carries both scores, their intervals and the PDR.
    ``semantic_prompts``: the Semantic attack's candidates (default: our own set), recorded
    as the record's ``settings.prompt_set``."""
    from promptrobust.attacks.registry import get_attack

    started = time.monotonic()
    if clean is None:
        clean = clean_score(bench, prompt, await bench.evaluator().evaluate(prompt.text))
    base = _record_base(bench, prompt, attack_name, settings)
    if clean.score == 0:
        # A clean score of 0 leaves no PDR (it would divide by 0), so the prompt is not attacked. This is
        # our deviation: promptbench attacks it (its goal function skips only `acc < 0`, which never holds);
        # docs/fidelity.md, "clean score 0".
        return AttackRecord(
            **base, clean_score=0.0, status="skipped_clean_zero", clean_ci95=list(clean.ci95),
            at_chance=clean.at_chance, clean_sample_scores=list(clean.sample_scores),
            cost=Cost(wall_seconds=round(time.monotonic() - started, 3)),
        )
    evaluator = bench.evaluator(chunk_size=settings.chunk_size, early_stopping=settings.early_stopping == "exact",
                                racing=settings.racing())
    evaluator.reference_prompt = prompt.text  # its label margins order a race's samples when no prompt is to be beaten
    attack = get_attack(attack_name, **settings.options.get(attack_name, {}))
    semantic_source = OWN_SEMANTIC_SET if semantic_prompts is None else "given"
    if isinstance(semantic_prompts, SemanticPrompts):
        semantic_source = semantic_prompts.source
        semantic_prompts = semantic_prompts.prompts
    outcome = await attack.run(
        prompt.text,
        evaluator,
        protected=protected_words(bench.task),
        seed=bench.evaluation.seed,
        budget=settings.budget,
        semantic_prompts=semantic_prompts_for(bench.task, attack_name) if semantic_prompts is None else semantic_prompts,
        meaning_nli=settings.meaning_nli,
    )
    cost = Cost(
        candidate_evaluations=outcome.queries,
        model_requests=evaluator.requests.requests,
        requests_sent=evaluator.requests.sent,
        cache_hits=evaluator.requests.cache_hits,
        deduplicated=evaluator.requests.deduplicated,
        saved_by_early_stopping=evaluator.cost.saved_by_early_stopping,
        pruned_candidates=evaluator.cost.pruned_candidates,
        saved_by_racing=evaluator.cost.saved_by_racing,
        races=evaluator.cost.races,
        raced_out=evaluator.cost.raced_out,
        input_tokens=evaluator.requests.input_tokens,
        output_tokens=evaluator.requests.output_tokens,
        usd=_usd(bench, evaluator.requests.input_tokens, evaluator.requests.output_tokens),
        samples_evaluated=outcome.samples_evaluated,
        wall_seconds=round(time.monotonic() - started, 3),
    )
    if outcome.nothing_to_change:  # it tried no change: no PDR (0 would read as robustness), the note says why
        return AttackRecord(
            **base, clean_score=outcome.clean_score, adversarial_prompt=outcome.adversarial_prompt,
            status="nothing_to_change", note=outcome.nothing_to_change, clean_ci95=list(clean.ci95),
            at_chance=clean.at_chance, clean_sample_scores=list(clean.sample_scores), cost=cost,
            settings=dict(outcome.settings),
        )
    # Per-sample scores of the winner for the paired statistics: a separate evaluator
    # (its requests are cache hits or in flight, and do not count as the attack's cost).
    adversarial = await bench.evaluator().evaluate(outcome.adversarial_prompt)
    scores_a_set = attack.recipe.prompt_set is not None
    set_pdr = await _prompt_set_pdr(bench, clean, getattr(outcome, "prompt_scores", ())) if scores_a_set else None
    stats = pair_statistics(clean.sample_scores, adversarial.sample_scores, binary=bench.binary, chance=bench.chance_rate)
    return AttackRecord(
        **{**base, "chance_rate": stats.pop("chance_rate")},
        clean_score=outcome.clean_score,
        adversarial_prompt=outcome.adversarial_prompt,
        adversarial_score=outcome.adversarial_score,
        pdr=outcome.pdr,
        **stats,
        clean_sample_scores=list(clean.sample_scores),
        adversarial_sample_scores=list(adversarial.sample_scores),
        cost=cost,
        budget_exhausted=outcome.budget_exhausted,
        perturbed_words=outcome.perturbed_words,
        settings={**outcome.settings, **({"prompt_set": semantic_source} if scores_a_set else {})},
        prompt_scores=[list(x) for x in getattr(outcome, "prompt_scores", ())],
        substitutions=[list(x) for x in getattr(outcome, "substitutions", ())],
        final_similarity=dict(getattr(outcome, "final_similarity", {}) or {}),
        meaning=dict(outcome.meaning) if outcome.meaning else None,
        prompt_set_pdr=set_pdr,
    )


async def _prompt_set_pdr(bench: Workbench, clean: CleanScore,
                          prompt_scores: Sequence[tuple[str, str, float]]) -> PromptSetStatistic | None:
    """Semantic's statistic over its whole set (``statistics.prompt_set_pdr``). Every prompt of the set
    was scored exactly by the search, so its per-sample scores come from the cache."""
    rows = []
    for _, text, score in prompt_scores:
        evaluation = await bench.evaluator().evaluate(text)
        rows.append((text, score, performance_drop_rate(clean.score, score), evaluation.sample_scores))
    return prompt_set_pdr(clean.score, clean.sample_scores, rows, seed=bench.evaluation.seed)


def _usd(bench: Workbench, input_tokens: int, output_tokens: int) -> float | None:
    """What the tokens cost at the model's price (None: an unpriced model)."""
    price = bench.scheduler.settings.token_price
    return None if price is None else round(price.usd(input_tokens, output_tokens), 6)


def failed_record(bench: Workbench, prompt: Prompt, attack_name: str, settings: AttackSettings,
                  clean: CleanScore | None, reason: str) -> AttackRecord:
    """The record of an attack that could not run (a missing resource, a dead endpoint)."""
    base = _record_base(bench, prompt, attack_name, settings)
    return AttackRecord(
        **base,
        clean_score=clean.score if clean else 0.0,
        clean_ci95=list(clean.ci95) if clean else None,
        at_chance=clean.at_chance if clean else False,
        status="failed",
        error=reason,
    )
