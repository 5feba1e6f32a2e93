"""How racing's saving grows with the number of samples, projected from the recorded attacks.

The records were made at 200 and 500 samples; the paper's datasets have up to about a thousand and
users' own sets more. A race stops early only where a candidate's paired differences from the others
add up faster than the test's bound widens, so the saving depends on N. Without a model, each record
is drawn again with replacement at N samples: one draw of sample indices for all its prompts, so
every pair of prompts keeps its paired differences (how often they answer differently, and which way).
Each step of the recorded exhaustive path is then replayed on the drawn samples: the exhaustive
choice and calls (every fresh prompt on every sample) against the race's (``racing_replay._race``).

A projection, not a measurement: a drawn sample repeats a recorded one, and the path is the recorded
one (a step's candidates are those exhaustive search met on the recorded samples), so it says how a
step's race scales, not what a real attack on a larger dataset would choose. At the recorded size it
should come close to the measured ratio: that is its check (the table prints both).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bench.racing_records import AttackRecordFile
from bench.racing_replay import exhaustive_choice, race_step, recorded_path
from promptrobust.engine.measuring.racing import RacingSettings

__all__ = ["SIZES", "DRAWS", "Projection", "drawn", "project", "project_record"]

#: Sample counts projected to (the records' own sizes first, then the paper's and beyond).
SIZES = (200, 500, 1000, 2000)
#: Independent draws per size (the table gives their mean, and their range).
DRAWS = 2


@dataclass(frozen=True)
class Projection:
    """One record (or a sum of them) at one size, on one draw."""

    exhaustive_calls: int
    racing_calls: int
    steps: int
    steps_as_exhaustive: int

    def __add__(self, other: "Projection") -> "Projection":
        return Projection(self.exhaustive_calls + other.exhaustive_calls, self.racing_calls + other.racing_calls,
                          self.steps + other.steps, self.steps_as_exhaustive + other.steps_as_exhaustive)

    @property
    def ratio(self) -> float:
        return self.exhaustive_calls / max(1, self.racing_calls)


def drawn(rec: AttackRecordFile, size: int, rng: np.random.Generator) -> AttackRecordFile:
    """``rec`` with ``size`` samples drawn with replacement from its own (one draw for every prompt)."""
    idx = rng.integers(0, rec.samples, size)
    return AttackRecordFile(**{**rec.__dict__, "samples": size,
                               "scores": {p: [v[i] for i in idx] for p, v in rec.scores.items()},
                               "margins": {p: [v[i] for i in idx] for p, v in rec.margins.items()}})


def project_record(rec: AttackRecordFile, size: int, settings: RacingSettings, seed: int) -> Projection:
    """``rec``'s recorded path replayed on ``size`` samples drawn with ``seed``: exhaustive and racing."""
    sample = drawn(rec, size, np.random.default_rng(seed))
    scored = {rec.clean_prompt}
    total = Projection(0, 0, 0, 0)
    for k, (call, incumbent) in enumerate(zip(rec.calls, recorded_path(rec).incumbents)):
        prompts = list(dict.fromkeys(call.prompts))
        fresh = [p for p in prompts if p not in scored]
        scored.update(prompts)
        exhaustive = len(fresh) * size
        if call.to_beat is None:  # exact scores wanted: the same calls either way
            total += Projection(exhaustive, exhaustive, 0, 0)
            continue
        to_beat = sample.score(incumbent) if incumbent is not None else call.to_beat
        scores = [sample.score(p) for p in prompts]
        expected = exhaustive_choice(scores, to_beat)
        kept, calls = race_step(sample, prompts, incumbent, incumbent or rec.clean_prompt, settings, seed + k)
        winner = kept[0] if kept and kept[0] >= 0 else None
        chosen = winner if winner is not None and scores[winner] < to_beat else None
        total += Projection(exhaustive, calls, 1, int(chosen == expected))
    return total


def project(records: Sequence[AttackRecordFile], settings: RacingSettings, sizes: Sequence[int] = SIZES,
            draws: int = DRAWS) -> dict[int, list[Projection]]:
    """Per size, one summed projection per draw over ``records`` (the prompt-set rankings left out)."""
    attacks = [r for r in records if r.search != "topk"]
    out: dict[int, list[Projection]] = {}
    for size in sizes:
        out[size] = []
        for draw in range(draws):
            total = Projection(0, 0, 0, 0)
            for i, rec in enumerate(attacks):
                total += project_record(rec, size, settings, seed=1_000 * draw + 7 * i + rec.seed)
            out[size].append(total)
    return out


def summary(projected: dict[int, list[Projection]]) -> dict[str, dict[str, float]]:
    """racing.json's ``projected_by_samples``: per size, the mean ratio, its range over draws and the
    share of steps that keep exhaustive search's choice."""
    out = {}
    for size, runs in projected.items():
        ratios = [p.ratio for p in runs]
        steps = sum(p.steps for p in runs)
        out[str(size)] = {"calls_ratio": round(math.fsum(ratios) / len(ratios), 3),
                          "calls_ratio_min": round(min(ratios), 3), "calls_ratio_max": round(max(ratios), 3),
                          "steps_as_exhaustive": round(sum(p.steps_as_exhaustive for p in runs) / max(1, steps), 3),
                          "draws": len(runs)}
    return out
