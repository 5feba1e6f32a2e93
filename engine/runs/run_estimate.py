"""What a ``pre run`` will cost, said before it runs (``pre run --dry-run``): model requests,
input and output tokens and, for a priced API model, US dollars, with every candidate scored on
every sample (exhaustive: an upper bound, what exact early stopping saves comes off it) and with
racing (``--early-stopping racing``).

The exhaustive bound is each recipe's worst case (``Recipe.worst_case_candidates``: every word
walked, the paper's unlimited budget) times the samples; racing's is that bound times the share of
calls racing needed on the recorded attacks of ``bench/results/racing.md`` (``MEASURED_SHARE``), an
estimate from those measurements, said as such. Tokens per request are measured on the task's own
worked examples (``engine.runs.sweep.estimate.tokens_per_request``). Nothing is loaded but the
data needed to count the samples of a user's own task.
"""

from __future__ import annotations

from dataclasses import dataclass

from promptrobust.attacks.registry import recipe_of
from promptrobust.engine.measuring.racing import MEASURED_SHARE, search_kind
from promptrobust.engine.runs.execute import RunPlan, RunTarget
from promptrobust.engine.runs.sweep.estimate import attack_candidates, tokens_per_request
from promptrobust.engine.serving.prices import Price

__all__ = ["CostEstimate", "TargetEstimate", "estimate_run", "format_run_estimate"]


@dataclass(frozen=True)
class CostEstimate:
    """Requests, their tokens and, for a priced model, what they cost (US dollars)."""

    requests: int
    input_tokens: int
    output_tokens: int
    usd: float | None

    @classmethod
    def of(cls, requests: int, tokens: tuple[int, int], price: Price | None) -> "CostEstimate":
        tin, tout = requests * tokens[0], requests * tokens[1]
        return cls(requests, tin, tout, None if price is None else price.usd(tin, tout))

    def __add__(self, other: "CostEstimate") -> "CostEstimate":
        usd = None if self.usd is None or other.usd is None else self.usd + other.usd
        return CostEstimate(self.requests + other.requests, self.input_tokens + other.input_tokens,
                            self.output_tokens + other.output_tokens, usd)


@dataclass(frozen=True)
class TargetEstimate:
    """One dataset of a run: the prompt ranking, then each attack exhaustive and raced."""

    dataset: str
    samples: int
    prompts: int
    ranking: CostEstimate
    attacks: tuple[tuple[str, CostEstimate, CostEstimate], ...]
    """(attack, every candidate on every sample, racing's estimate)."""

    def total(self, racing: bool) -> CostEstimate:
        out = self.ranking
        for _, exhaustive, raced in self.attacks:
            out = out + (raced if racing else exhaustive)
        return out


def _samples(target: RunTarget) -> int:
    """Samples the target evaluates: the limit of the paper's size, or the rows of a user's own task."""
    evaluation = target.evaluation
    size = getattr(target.task, "sample_size", None)
    if not size:
        size = len(target.task.load(limit=None if isinstance(evaluation.limit, float) else evaluation.limit,
                                    seed=evaluation.seed, data_dir=evaluation.data_dir, data_file=evaluation.data_file))
    return evaluation.limit_for(size)


def estimate_run(plan: RunPlan) -> list[TargetEstimate]:
    """Each target's cost before it runs (see the module docstring)."""
    price = plan.scheduler.token_price
    out = []
    for target in plan.targets:
        samples = _samples(target)
        prompt_type = target.prompts[0].type if target.prompts else "task"
        tokens = tokens_per_request(target.task if target.task.definition_hash is not None else target.task.name,
                                    prompt_type, target.shots, target.mode)
        ranking = CostEstimate.of(len(target.prompts) * samples, tokens, price)
        attacks = []
        if plan.attacks is not None:
            attacked = min(plan.attacks.top_k, len(target.prompts))
            words = sum(len(p.text.split()) for p in target.prompts) / max(1, len(target.prompts))
            for name in plan.attacks.attacks:
                requests = attacked * attack_candidates(name, words, plan.attacks.budget) * samples
                share = MEASURED_SHARE[search_kind(recipe_of(name))]
                attacks.append((name, CostEstimate.of(requests, tokens, price),
                                CostEstimate.of(round(requests * share), tokens, price)))
        out.append(TargetEstimate(target.task.name, samples, len(target.prompts), ranking, tuple(attacks)))
    return out


def _usd(c: CostEstimate) -> str:
    return "-" if c.usd is None else f"{c.usd:,.2f}"


def format_run_estimate(plan: RunPlan, estimates: list[TargetEstimate]) -> list[str]:
    """The table ``pre run --dry-run`` prints."""
    price = plan.scheduler.token_price
    lines = [f"model {plan.model.name}: " + (f"priced at {price.input:g} / {price.output:g} USD per million input / output "
                                            f"tokens ({price.source})" if price is not None else
                                            "not priced (an in-process model, or no price known: --price-per-mtok IN,OUT)")]
    header = f"{'what':<28} {'requests':>12} {'input tokens':>14} {'output tokens':>14} {'USD':>10}"
    for e in estimates:
        lines += ["", f"{e.dataset}: {e.prompts} prompts x {e.samples} samples", header]
        rows = [("ranking the prompts", e.ranking)]
        for name, exhaustive, raced in e.attacks:
            rows += [(f"{name}: exhaustive <=", exhaustive), (f"{name}: racing, about", raced)]
        for what, c in rows:
            lines.append(f"{what:<28} {c.requests:>12,} {c.input_tokens:>14,} {c.output_tokens:>14,} {_usd(c):>10}")
        if e.attacks:
            for racing, label in ((False, "total, exhaustive <="), (True, "total, racing, about")):
                c = e.total(racing)
                lines.append(f"{label:<28} {c.requests:>12,} {c.input_tokens:>14,} {c.output_tokens:>14,} {_usd(c):>10}")
    if plan.attacks is not None:
        lines += ["", "exhaustive: every word walked and every candidate on every sample (the paper's unlimited budget); exact "
                      "early stopping (the default) asks at most this. racing: that bound times the share of calls racing "
                      "needed on recorded attacks (bench/results/racing.md), an estimate."]
    return lines
