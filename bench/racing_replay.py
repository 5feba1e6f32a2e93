"""Replaying a recorded exhaustive attack (``bench/racing_records.py``) under another way of scoring
its candidates, without a model: exhaustive, exact early stopping (optionally informative samples
first), and racing at a given error rate.

A search is a path: each step's choice decides what the next step scores. The replay follows the
recorded calls while the replayed choice agrees with the recorded (exhaustive) one; at the first
step where it does not, the path leaves what was recorded and the replay stops there, saying so
(``Replay.diverged_at``); ``bench/racing.py finish`` completes such attacks live.

Counting: a call is one (prompt, sample) pair scored. The clean prompt's pairs are the protocol's
ranking's (scored before the attack), so an attack's count starts after them; a pair scored twice
counts once (the score cache answers the second).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.racing_records import AttackRecordFile
from promptrobust.engine.measuring.early_stop import CandidateProgress, prune
from promptrobust.engine.measuring.racing import Race, RacingSettings, sample_order

__all__ = ["ScoringWay", "Replay", "StepReplay", "exhaustive_choice", "race_step", "RecordedPath", "recorded_path", "replay"]


@dataclass(frozen=True)
class ScoringWay:
    """How the replay scores each step's candidates."""

    name: str
    kind: str
    """exhaustive, exact (early stopping), or racing."""
    racing: RacingSettings | None = None
    chunk: int = 32
    """exact early stopping: samples per round (the engine's ``--chunk-size``)."""
    informative_first: bool = False
    """exact early stopping: samples in order of the prompt to beat's least sure answers."""


@dataclass
class StepReplay:
    kind: str
    """ranking, step (a greedy word), brute, set (Semantic's prompts), topk (the protocol's prompt ranking)."""
    candidates: int
    exhaustive_calls: int
    calls: int
    same_choice: bool


@dataclass
class Replay:
    record: AttackRecordFile
    way: ScoringWay
    steps: list[StepReplay] = field(default_factory=list)
    diverged_at: int | None = None
    """The step whose choice differed from the recorded one (the rest of the path was never recorded)."""
    chosen: str | None = None
    """The prompt the search ends on (None when diverged)."""

    @property
    def calls(self) -> int:
        return sum(s.calls for s in self.steps)

    @property
    def exhaustive_calls(self) -> int:
        return sum(s.exhaustive_calls for s in self.steps)


def exhaustive_choice(scores: Sequence[float], to_beat: float) -> int | None:
    """Exhaustive's choice: the first candidate with the lowest score strictly below ``to_beat``."""
    best = None
    for i, s in enumerate(scores):
        if s < to_beat and (best is None or s < scores[best]):
            best = i
    return best


@dataclass(frozen=True)
class RecordedPath:
    """Exhaustive search's path through a record."""

    #: Per recorded call, the prompt it must beat (greedy search: the current prompt, moved on by each
    #: step's exhaustive choice; None where no prompt is beaten: exact scores, a brute-force list, a set).
    incumbents: tuple[str | None, ...]
    #: Per recorded call, exhaustive search's choice among its distinct prompts (``exhaustive_choice``; None
    #: where none beats the score to beat, or where there is none: exact scores).
    choices: tuple[int | None, ...]
    #: The prompt the search ends on (greedy search; the clean prompt otherwise).
    final: str


def recorded_path(rec: AttackRecordFile) -> RecordedPath:
    """The path exhaustive search took through ``rec`` (the one owner of that walk)."""
    current, incumbents, choices = rec.clean_prompt, [], []
    for call in rec.calls:
        prompts = list(dict.fromkeys(call.prompts))
        chosen = None if call.to_beat is None else exhaustive_choice([rec.score(p) for p in prompts], call.to_beat)
        choices.append(chosen)
        if call.to_beat is None or rec.search != "greedy":
            incumbents.append(None)
            continue
        incumbents.append(current)
        if chosen is not None:
            current = prompts[chosen]
    return RecordedPath(tuple(incumbents), tuple(choices), current)


def _exact_early_stopping(rec: AttackRecordFile, prompts: list[str], to_beat: float, way: ScoringWay,
                          order: list[int]) -> int:
    """Calls of the engine's exact early stopping on one step (``Evaluator._candidates``' rounds)."""
    n = rec.samples
    progress = [CandidateProgress(total=n) for _ in prompts]
    calls = 0
    while True:
        active = [i for i, c in enumerate(progress) if not c.stopped and not c.complete]
        if not active:
            break
        plan = {i: range(progress[i].seen, min(n, progress[i].seen + way.chunk)) for i in active}
        if len(active) > 1 and all(progress[i].seen > 0 for i in active):  # the leader is finished in the same batch
            leader = min(active, key=lambda i: (math.fsum(progress[i].scores) / progress[i].seen, i))
            plan[leader] = range(progress[leader].seen, n)
        for i, positions in plan.items():
            progress[i].scores.extend(rec.scores[prompts[i]][order[p]] for p in positions)
            calls += len(positions)
        prune(progress, to_beat)
    return calls


def race_step(rec: AttackRecordFile, prompts: list[str], incumbent: str | None, reference: str | None,
              settings: RacingSettings, seed: int, keep: int = 1) -> tuple[list[int], int]:
    """The engine's race on one step (``Evaluator.race``): the arms kept and the calls it made."""
    n = rec.samples
    arms = ([incumbent] if incumbent is not None else []) + prompts
    margins = rec.margins.get(reference) if reference is not None else None
    order, prefix = sample_order(n, margins, settings, seed)
    race = Race(arms=len(arms), total=n, exact_prefix=prefix, error_rate=settings.error_rate,
                tolerance=settings.tolerance, keep=keep)
    if incumbent is not None:
        race.observe(0, [rec.scores[incumbent][j] for j in order])
    calls = 0
    while True:
        plan = race.needed(settings.round_size)
        if not plan:
            break
        for i, positions in plan.items():
            race.observe(i, [rec.scores[arms[i]][order[p]] for p in positions])
            calls += len(positions)
        race.drop()
    kept = race.winners()
    first = 1 if incumbent is not None else 0
    for i in kept:
        if i >= first:
            calls += n - race.seen(i)  # the kept prompts are scored on every sample
    return [i - first for i in kept], calls


def replay(rec: AttackRecordFile, way: ScoringWay) -> Replay:
    """``rec``'s search replayed under ``way`` (see the module docstring)."""
    out = Replay(rec, way)
    n = rec.samples
    scored: set[str] = {rec.clean_prompt}  # pairs already paid for (the clean prompt: by the ranking)
    races = 0

    def new(prompts: Sequence[str]) -> list[str]:
        return [p for p in dict.fromkeys(prompts) if p not in scored]

    if rec.search == "topk":
        (call,) = rec.calls
        prompts = list(call.prompts)
        exhaustive = len(prompts) * n
        top_k = int(rec.source.get("top_k") or 1)
        order_exact = sorted(range(len(prompts)), key=lambda i: (-rec.score(prompts[i]), i))[:top_k]
        if way.kind == "racing" and way.racing is not None:
            # The attacker keeps the best prompts: race on 1 - score (lower wins).
            flipped = AttackRecordFile(**{**rec.__dict__, "scores": {p: [1.0 - x for x in v] for p, v in rec.scores.items()}})
            kept, calls = race_step(flipped, prompts, None, None, way.racing, rec.seed, keep=top_k)
            same = set(kept) == set(order_exact)
        else:
            calls, same = exhaustive, True
        out.steps.append(StepReplay("topk", len(prompts), exhaustive, calls, same))
        out.chosen = None
        return out

    path = recorded_path(rec)
    for k, call in enumerate(rec.calls):
        prompts = list(dict.fromkeys(call.prompts))
        fresh = new(prompts)
        exhaustive = len(fresh) * n
        if call.to_beat is None:  # exact scores: the clean prompt, a word ranking or Semantic's set
            kind = "clean" if prompts == [rec.clean_prompt] else ("set" if rec.search == "set" else "ranking")
            out.steps.append(StepReplay(kind, len(prompts), exhaustive, exhaustive, True))
            scored.update(prompts)
            continue
        recorded = path.choices[k]
        incumbent = path.incumbents[k]  # the path so far is exhaustive's: a replay stops where it would leave it
        if way.kind == "exhaustive":
            chosen, calls = recorded, exhaustive
        elif way.kind == "exact":
            reference = incumbent or rec.clean_prompt
            margins = rec.margins.get(reference) if way.informative_first else None
            order = sorted(range(n), key=lambda j: (margins[j], j)) if margins else list(range(n))
            chosen = recorded
            calls = _exact_early_stopping(rec, prompts, call.to_beat, way, order) if fresh else 0
        else:
            assert way.racing is not None
            kept, calls = race_step(rec, prompts, incumbent, incumbent or rec.clean_prompt, way.racing, rec.seed + races)
            races += 1
            winner = kept[0] if kept and kept[0] >= 0 else None
            chosen = winner if winner is not None and rec.score(prompts[winner]) < call.to_beat else None
        same = chosen == recorded
        out.steps.append(StepReplay("step" if rec.search == "greedy" else "brute", len(prompts), exhaustive, calls, same))
        scored.update(prompts)
        if not same:
            out.diverged_at = k
            return out
    out.chosen = path.final if rec.search == "greedy" else None
    return out
