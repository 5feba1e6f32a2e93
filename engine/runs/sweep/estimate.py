"""What a sweep will cost, per model: jobs, model requests, tokens and (for API models) dollars.

``pre sweep --dry-run`` prints it before anything runs. Requests come from
``describe_plan`` (below) (upper bounds before cache and early stopping). Tokens
per request are measured, not assumed: each job's prompts rendered with the
task's shipped few-shot examples standing in for samples (same format; the real
samples may be longer or shorter), at 4 characters a token (the scheduler's own
estimate), plus the answer's token budget. Dollars use a price table the user can
edit (``presets/prices.toml``; ``--prices FILE``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from promptrobust.attacks.registry import recipe_of
from promptrobust.engine.measuring.racing import MEASURED_SHARE, search_kind
from promptrobust.engine.runs.run_folder import completed_keys
from promptrobust.engine.runs.sweep.config import Job, SweepConfig
from promptrobust.engine.serving.prices import Price, load_prices as load_price_table
from promptrobust.engine.serving.registry import backend_registration, parse_model_args, resolve_model
from promptrobust.tasks.base import Task

#: Characters per token, as ``Request.estimated_tokens`` counts them.
CHARS_PER_TOKEN = 4


def attack_candidates(attack: str, words: float, budget: int | None) -> int:
    """Candidate prompts one attacked prompt costs in the worst case (every word walked,
    the paper's unlimited budget), capped by ``budget``: the recipe's own count
    (``Recipe.worst_case_candidates``: per word its candidates plus the word-importance
    one, e.g. TextFooler's 50 neighbours; or its set, e.g. CheckList's 50 strings)."""
    n = recipe_of(attack).worst_case_candidates(words)
    return n if budget is None else min(n, budget)


@dataclass(frozen=True)
class ModelEstimate:
    """One model's share of a sweep."""

    model: str
    backend: str
    jobs: int
    clean_requests: int
    attack_requests: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None = None
    """None: not an API model, or no price for it in the table."""
    priced: bool = False
    """Served over an HTTP API, where the price table applies (its backend's ``http_api``)."""
    raced_attack_requests: int | None = None
    """With ``--early-stopping racing``: the attack requests times the share racing needed on the
    recorded attacks (``MEASURED_SHARE``), an estimate."""

    @property
    def raced_share(self) -> float:
        """The share of this model's requests (and so of its tokens and dollars) left with racing."""
        if self.raced_attack_requests is None or not self.requests:
            return 1.0
        return (self.clean_requests + self.raced_attack_requests) / self.requests

    @property
    def requests(self) -> int:
        return self.clean_requests + self.attack_requests


def preset_path(name: str) -> Path:
    """A sweep configuration shipped with the package (``pre sweep --preset NAME``)."""
    ref = resources.files("promptrobust.engine.runs.sweep").joinpath("presets", f"{name}.toml")
    if not ref.is_file():
        shipped = sorted(p.name[:-5] for p in resources.files("promptrobust.engine.runs.sweep").joinpath("presets").iterdir()
                         if p.name.endswith(".toml"))
        raise FileNotFoundError(f"no preset {name!r}; shipped presets: {', '.join(shipped)}")
    return Path(str(ref))


def load_prices(path: str | Path | None = None) -> dict[str, Price]:
    """The price table by model name: the shipped one, or ``path`` (``engine.serving.prices``)."""
    return dict(load_price_table(path).prices)


def tokens_per_request(dataset: str | Task, prompt_type: str, shots: int, mode: str) -> tuple[int, int]:
    """(input, output) tokens of one request of a job, measured on the task's shipped examples
    (a user's own task: on its own examples, else on its first samples)."""
    if isinstance(dataset, str):
        return _dataset_tokens(dataset, prompt_type, shots, mode)
    return _tokens(dataset, prompt_type, shots, mode)


@functools.cache
def _dataset_tokens(dataset: str, prompt_type: str, shots: int, mode: str) -> tuple[int, int]:
    from promptrobust.tasks.registry import get_task

    return _tokens(get_task(dataset), prompt_type, shots, mode)


def _tokens(task: Task, prompt_type: str, shots: int, mode: str) -> tuple[int, int]:
    from promptrobust.engine.measuring.settings import BASE_MODEL_SHOTS
    from promptrobust.tasks.errors import TaskError
    from promptrobust.tasks.fewshot import few_shot_examples
    from promptrobust.tasks.prompt_sets import load_prompts

    try:
        stand_ins = few_shot_examples(task, 0, k=BASE_MODEL_SHOTS)
    except TaskError:  # a user's task without a few-shot source: its first samples stand in
        stand_ins = task.load(limit=BASE_MODEL_SHOTS)
    examples = stand_ins[:shots]
    prompts = [p.text for p in load_prompts(task, types=[prompt_type])] or [""]
    lengths = [len(task.render(p, s, examples)) for p in prompts for s in stand_ins]
    input_tokens = max(1, round(sum(lengths) / len(lengths) / CHARS_PER_TOKEN))
    output_tokens = task.max_tokens if mode == "generate" or not task.supports_choices else 1
    return input_tokens, output_tokens


def estimate(plan: Sequence[Mapping[str, Any]], *, mode: str, backends: Mapping[str, str],
             base_models: Mapping[str, bool], prices: Mapping[str, Price]) -> list[ModelEstimate]:
    """Per-model totals over ``describe_plan`` rows (each cell's clean scoring counted once)."""
    from promptrobust.engine.measuring.settings import BASE_MODEL_SHOTS

    totals: dict[str, dict[str, int]] = {}
    cells: set[tuple] = set()
    for row in plan:
        job = row["job"]
        shots = job.shots if job.shots is not None else (BASE_MODEL_SHOTS if base_models.get(job.model) else 0)
        tin, tout = tokens_per_request(row.get("task") or job.dataset, job.prompt_type, shots, mode)
        t = totals.setdefault(job.model, {"jobs": 0, "clean": 0, "attack": 0, "raced": 0, "in": 0, "out": 0})
        t["jobs"] += 1
        clean = 0
        if job.cell not in cells:  # every attack of a cell shares its clean scoring
            cells.add(job.cell)
            clean = int(row["clean"])
        attack = int(row["attack_max"] or 0)
        t["clean"] += clean
        t["attack"] += attack
        t["raced"] += round(attack * MEASURED_SHARE[search_kind(recipe_of(job.attack))])
        t["in"] += (clean + attack) * tin
        t["out"] += (clean + attack) * tout
    out = []
    for model, t in totals.items():
        backend = backends.get(model, "")
        priced = bool(backend) and backend_registration(backend).http_api
        price = prices.get(model) or prices.get(model.partition(":")[2]) if priced else None
        cost = None if price is None else (t["in"] * price.input + t["out"] * price.output) / 1e6
        out.append(ModelEstimate(model, backend, t["jobs"], t["clean"], t["attack"], t["in"], t["out"], cost, priced,
                                 t["raced"]))
    return out


def format_estimates(rows: Sequence[ModelEstimate]) -> list[str]:
    """The per-model table of ``pre sweep --dry-run``."""
    width = max([len(r.model) for r in rows] + [5])
    lines = [f"{'model':<{width}}  backend  {'jobs':>5}  {'requests <=':>14}  {'input tokens':>15}  {'output tokens':>14}  est. cost <= (USD)"]
    for r in rows:
        cost = "-" if r.cost_usd is None else f"{r.cost_usd:,.0f}"
        if r.cost_usd is None and r.priced:
            cost = "no price (add it to --prices)"
        lines.append(f"{r.model:<{width}}  {r.backend:<7}  {r.jobs:>5}  {r.requests:>14,}  {r.input_tokens:>15,}  "
                     f"{r.output_tokens:>14,}  {cost}")
    costs = [r.cost_usd for r in rows if r.cost_usd is not None]
    total_cost = f"{sum(costs):,.0f}" if costs else "-"  # no priced model: no total (a 0 read as free)
    lines.append(f"{'total':<{width}}  {'':<7}  {sum(r.jobs for r in rows):>5}  {sum(r.requests for r in rows):>14,}  "
                 f"{sum(r.input_tokens for r in rows):>15,}  {sum(r.output_tokens for r in rows):>14,}  {total_cost}")
    if any(r.raced_attack_requests is not None for r in rows):
        raced = sum(round(r.requests * r.raced_share) for r in rows)
        raced_costs = [r.cost_usd * r.raced_share for r in rows if r.cost_usd is not None]
        usd = f", USD {sum(raced_costs):,.0f}" if raced_costs else ""
        lines.append(f"with --early-stopping racing, about: {raced:,} requests{usd} (the attacks' requests times the share "
                     "racing needed on recorded attacks, bench/results/racing.md; tokens in proportion)")
    return lines


@dataclass(frozen=True)
class PlanTotals:
    """Model requests of a dry-run plan before cache and early stopping (upper bounds)."""

    clean: int  # each cell's clean scoring once: every attack of a cell shares it
    attack_max: int
    cells: int


def plan_totals(plan: Sequence[Mapping[str, Any]]) -> PlanTotals:
    """Totals over ``describe_plan`` rows, each cell's clean scoring counted once."""
    clean = attack = 0
    cells: set[tuple] = set()
    for row in plan:
        cell = row["job"].cell
        if cell not in cells:
            cells.add(cell)
            clean += row["clean"]
        attack += row["attack_max"]
    return PlanTotals(clean=clean, attack_max=attack, cells=len(cells))


def model_estimates(cfg: SweepConfig, plan: Sequence[Mapping[str, Any]], prices: Mapping[str, Price]) -> list[ModelEstimate]:
    """``estimate`` for a sweep config: each model resolved with its ``[models."NAME"]`` model_args."""
    specs = {m: resolve_model(m, parse_model_args(str(cfg.model_options.get(m, {}).get("model_args", "")))) for m in cfg.models}
    return estimate(plan, mode=cfg.evaluation.mode, backends={m: s.backend for m, s in specs.items()},
                    base_models={m: s.base_model for m, s in specs.items()}, prices=prices)


# -- requests of a grid's jobs (pre sweep --dry-run, the progress total) ----------------


def estimate_requests(cfg: SweepConfig, samples: int, prompts: int, words: float = 30,
                      attack_name: str | None = None) -> dict[str, int | None]:
    """Upper bounds on model requests for a job, before cache and early stopping.
    With an unlimited budget a word attack tries about ``words`` candidates per
    word of the prompt (an estimate; None means unbounded); given ``attack_name``
    and the prompts' mean word count, the recipe's own worst case (sweep_estimate)."""
    clean = prompts * samples
    if attack_name is not None:
        budget = attack_candidates(attack_name, words, cfg.attack.budget)
    else:
        budget = cfg.attack.budget if cfg.attack.budget is not None else round(words * 20)
    attack = cfg.attack.top_k * (budget + 1) * samples
    return {"clean": clean, "attack_max": attack}


def clean_requests(cfg: SweepConfig, jobs: Sequence[Job]) -> int:
    """Requests that ranking every cell of ``jobs`` takes (prompts x samples, once per cell; a
    dataset whose size is not known ahead counts 0 until it is loaded)."""
    from promptrobust.tasks.prompt_sets import load_prompts

    total = 0
    for model, dataset, shots, prompt_type in dict.fromkeys(j.cell for j in jobs):
        task = cfg.task_of(dataset)
        total += _samples(cfg, task) * len(load_prompts(task, types=[prompt_type]))
    return total


def describe_plan(cfg: SweepConfig) -> list[dict[str, Any]]:
    """The job list with request estimates (``pre sweep --dry-run``)."""
    from promptrobust.tasks.prompt_sets import load_prompts

    out = []
    done = completed_keys(cfg.folder / "results.jsonl")
    for job in cfg.jobs():
        task = cfg.task_of(job.dataset)
        samples = _samples(cfg, task)
        texts = [p.text for p in load_prompts(task, types=[job.prompt_type])]
        prompts = len(texts)
        words = sum(len(t.split()) for t in texts) / max(1, prompts)
        est = estimate_requests(cfg, int(samples), prompts, words=words, attack_name=job.attack)
        finished = sum(1 for k in done if k[0] == job.id)
        own = {"task": task} if task.definition_hash is not None else {}  # a user's task: its tokens are its own
        out.append({"job": job, "samples": samples, "prompts": prompts, "finished_prompts": finished, **est, **own})
    return out


def _samples(cfg: SweepConfig, task: Any) -> int:
    """Samples a job of ``task`` evaluates: the limit of the paper's size (a dataset task's
    ``sample_size``); a task whose size is not known ahead counts a whole limit, a fraction 0."""
    size = getattr(task, "sample_size", None)
    if size:
        return cfg.evaluation.limit_for(size)
    if task.definition_hash is not None:  # a user's own task: all its rows, counted from its data
        return cfg.evaluation.limit_for(len(task.load()))
    return cfg.evaluation.limit if isinstance(cfg.evaluation.limit, int) else 0
