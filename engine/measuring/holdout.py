"""Held-out samples: numbers that hold beyond the search's own samples.

An attack picks, among many candidates, the prompt that scores lowest on its
samples, and the protocol attacks the prompts that scored highest on them: both
choices fit the noise of those very samples, so the in-sample PDR is biased
upward (and the top prompt's clean score too). ``AttackSettings.holdout``
(``pre run --holdout FRACTION``) splits the evaluated samples once: the last
``round(n * FRACTION)`` samples of the seeded order are held out, the rest is
what the ranking and the attacks see. Afterwards the clean and the adversarial
prompt of every record are scored on the held-out part, with the same interval
and McNemar test as in-sample (``AttackRecord.held_out``), and the top-k
prompts' held-out clean scores are listed beside their in-sample ones.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from promptrobust.engine.errors import SettingsError
from promptrobust.tasks.base import Sample

if TYPE_CHECKING:  # workbench imports this module's users; the names are for annotations
    from promptrobust.engine.measuring.workbench import CleanScore, Workbench

SPLIT_RULE = "last round(n * fraction) samples of the seeded sample order held out; the rest searched"


class HoldoutError(SettingsError):
    """A split that leaves one side empty; the message names the fix."""


def split_samples(samples: Sequence[Sample], fraction: float) -> tuple[list[Sample], list[Sample]]:
    """(search part, held-out part) of ``samples``, both non-empty."""
    if not 0.0 < fraction < 1.0:
        raise HoldoutError(f"--holdout must be a fraction between 0 and 1 (got {fraction!r}), e.g. 0.5")
    held = round(len(samples) * fraction)
    if held < 1 or held >= len(samples):
        raise HoldoutError(
            f"--holdout {fraction} of {len(samples)} samples leaves a side empty; raise --limit or change the fraction"
        )
    return list(samples[: len(samples) - held]), list(samples[len(samples) - held :])


def split_workbench(bench: Workbench, fraction: float) -> tuple[Workbench, Workbench]:
    """(search workbench, held-out workbench): the same model, task, examples
    and settings on the two parts of the samples."""
    from promptrobust.engine.measuring.workbench import _chance_rate

    search, held = split_samples(bench.samples, fraction)
    return (
        dataclasses.replace(bench, samples=search, chance_rate=_chance_rate(bench.task, search)),
        dataclasses.replace(bench, samples=held, chance_rate=_chance_rate(bench.task, held)),
    )


async def held_out_pair(held: Workbench, clean_prompt: str, adversarial_prompt: str, fraction: float) -> dict[str, object]:
    """The clean and adversarial prompt on the held-out samples: scores, PDR,
    intervals and McNemar p (the same statistics as the in-sample record)."""
    from promptrobust.attacks.result import performance_drop_rate
    from promptrobust.engine.measuring.workbench import pair_statistics

    evaluator = held.evaluator()
    clean = await evaluator.evaluate(clean_prompt)
    adversarial = await evaluator.evaluate(adversarial_prompt)
    stats = pair_statistics(clean.sample_scores, adversarial.sample_scores, binary=held.binary, chance=held.chance_rate)
    return {
        "fraction": fraction,
        "samples": len(held.samples),
        "split": SPLIT_RULE,
        "clean_score": clean.score,
        "adversarial_score": adversarial.score,
        "pdr": performance_drop_rate(clean.score, adversarial.score),
        **stats,
    }


async def held_out_ranking(held: Workbench, ranked: Sequence[CleanScore], top_k: int) -> list[dict[str, object]]:
    """In-sample and held-out clean score of the top-k prompts of a ranking
    (the in-sample ranking chose them; the held-out score is not selected on)."""
    from promptrobust.engine.measuring.statistics import score_interval

    evaluator = held.evaluator()
    out = []
    for rank, clean in enumerate(ranked[:top_k], start=1):
        ev = await evaluator.evaluate(clean.prompt.text)
        ci = score_interval(ev.sample_scores, binary=held.binary)
        out.append({
            "rank": rank,
            "prompt_id": clean.prompt.id,
            "in_sample_score": clean.score,
            "held_out_score": ev.score,
            "held_out_ci95": [float(ci[0]), float(ci[1])],
            "held_out_samples": len(held.samples),
        })
    return out


def in_sample_mean(ranked: Sequence[CleanScore]) -> float | None:
    """Mean in-sample clean score of the whole prompt set (what the top score is the best of)."""
    return sum(c.score for c in ranked) / len(ranked) if ranked else None
