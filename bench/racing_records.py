"""Exhaustive attack records for ``bench/racing.py``: every candidate's per-sample scores, once.

An exhaustive attack (``pre run --attack ... --early-stopping off``) scores every candidate prompt
of every step on every sample, and its score cache keeps each answer. ``record_run`` runs the same
attacks again against that cache (every answer a cache hit: no model call) through a ``Recorder``,
a scorer that notes each call of the search (what was asked, with which score to beat) and each
prompt's per-sample scores and label margins. The result is one ``AttackRecordFile`` per attack,
written as gzipped JSON: enough to replay exhaustive scoring, exact early stopping and racing
offline (``bench/racing.py replay``), in seconds, anywhere.

The record keeps the search's calls, not its code: a replay follows the recorded candidates, so a
later change to how an attack proposes candidates does not change what was recorded.
"""

from __future__ import annotations

import gzip
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

FORMAT = "promptrobust-race-record/1"


@dataclass(frozen=True)
class Call:
    """One call of an attack's search to its scorer."""

    prompts: tuple[str, ...]
    to_beat: float | None
    """None: exact scores wanted (the clean prompt, a word ranking, a prompt set); inf: the lowest
    wins whatever its score (brute force); a number: only a candidate strictly below it wins."""


@dataclass
class AttackRecordFile:
    """Everything one exhaustive attack asked of the model, per sample."""

    attack: str
    search: str
    """greedy (word attacks: a ranking, then a step per word), brute (a fixed candidate list), set (Semantic)."""
    model: str
    dataset: str
    prompt_id: str
    clean_prompt: str
    samples: int
    seed: int
    mode: str
    source: dict[str, Any]
    """Where the record came from: run folder, commit, the exhaustive record's PDR and interval."""
    calls: list[Call] = field(default_factory=list)
    scores: dict[str, list[float]] = field(default_factory=dict)
    """Per prompt text: its score on every sample, in sample order."""
    margins: dict[str, list[float]] = field(default_factory=dict)
    """Per prompt text: the best label's log-probability less the second's, per sample (label scoring)."""

    def to_json(self) -> dict[str, Any]:
        binary = all(x in (0.0, 1.0) for v in self.scores.values() for x in v)
        return {
            "format": FORMAT, "attack": self.attack, "search": self.search, "model": self.model, "dataset": self.dataset,
            "prompt_id": self.prompt_id, "clean_prompt": self.clean_prompt, "samples": self.samples, "seed": self.seed,
            "mode": self.mode, "source": self.source,
            "calls": [{"prompts": list(c.prompts), "to_beat": _number(c.to_beat)} for c in self.calls],
            "scores": {p: ("".join("1" if x else "0" for x in v) if binary else v) for p, v in self.scores.items()},
            "margins": {p: [round(x, 4) for x in v] for p, v in self.margins.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "AttackRecordFile":
        if data.get("format") != FORMAT:
            raise ValueError(f"not a race record ({data.get('format')!r})")
        scores = {p: ([float(ch) for ch in v] if isinstance(v, str) else [float(x) for x in v]) for p, v in data["scores"].items()}
        return cls(
            attack=data["attack"], search=data["search"], model=data["model"], dataset=data["dataset"],
            prompt_id=data["prompt_id"], clean_prompt=data["clean_prompt"], samples=int(data["samples"]),
            seed=int(data["seed"]), mode=data["mode"], source=dict(data["source"]),
            calls=[Call(tuple(c["prompts"]), _unnumber(c["to_beat"])) for c in data["calls"]],
            scores=scores, margins={p: [float(x) for x in v] for p, v in data["margins"].items()},
        )

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_bytes(gzip.compress(orjson.dumps(self.to_json()), mtime=0))
        tmp.replace(path)

    @classmethod
    def read(cls, path: Path) -> "AttackRecordFile":
        return cls.from_json(orjson.loads(gzip.decompress(path.read_bytes())))

    def score(self, prompt: str) -> float:
        values = self.scores[prompt]
        return math.fsum(values) / len(values)


def _number(x: float | None) -> float | str | None:
    return "inf" if x is not None and math.isinf(x) else x


def _unnumber(x: float | str | None) -> float | None:
    return math.inf if x == "inf" else (None if x is None else float(x))


class Recorder:
    """A scorer around an exhaustive evaluator that notes every call and every prompt's per-sample
    scores and label margins (read again through the scheduler: cache hits)."""

    def __init__(self, evaluator: Any) -> None:
        self.evaluator = evaluator
        self.calls: list[Call] = []
        self.scores: dict[str, list[float]] = {}
        self.margins: dict[str, list[float]] = {}

    async def __call__(self, prompts: Sequence[str], *, to_beat: float | None = None,
                       incumbent: str | None = None) -> list[Any]:
        results = await self.evaluator(prompts, to_beat=to_beat)
        if not all(r.complete for r in results):
            raise RuntimeError("the recorder needs exhaustive scoring (early stopping off)")
        self.calls.append(Call(tuple(prompts), to_beat))
        for prompt in dict.fromkeys(prompts):
            if prompt not in self.scores:
                await self._capture(prompt)
        return results

    async def _capture(self, prompt: str) -> None:
        ev = self.evaluator
        requests = [ev.build_request(prompt, s) for s in ev.samples]
        completions = await ev.scheduler.submit_many(requests)
        scores, margins = [], []
        for completion, sample in zip(completions, ev.samples):
            prediction, _ = ev.interpret(completion)
            scores.append(float(ev.task.metric.sample_score(prediction, sample)))
            logprobs = completion.choice_logprobs
            if logprobs is not None and len(logprobs) > 1:
                top = sorted(logprobs, reverse=True)
                margins.append(float(top[0] - top[1]))
        self.scores[prompt] = scores
        if len(margins) == len(scores):
            self.margins[prompt] = margins


#: How each attack searches (the replay needs the shape of its calls).
SEARCH_OF = {"textbugger": "greedy", "deepwordbug": "greedy", "textfooler": "greedy", "bertattack": "greedy",
             "checklist": "brute", "stresstest": "brute", "semantic": "set"}


async def record_run(folder: Path, cache: Path, out: Path, *, attacks: Sequence[str] = ()) -> list[Path]:
    """Every attack record of the exhaustive run ``folder`` (results.jsonl, config.json), replayed
    against ``cache`` through a ``Recorder``: one ``AttackRecordFile`` each under ``out``, and one of
    the protocol's prompt ranking once the run has written results.json. Fails if any answer was not
    in the cache (the run was not exhaustive, or its cache is another). A run still going gives the
    attack records it has so far."""
    from promptrobust.engine.runs.session import Session

    config = orjson.loads((folder / "config.json").read_bytes())
    rows = [orjson.loads(line) for line in (folder / "results.jsonl").read_bytes().splitlines() if line.strip()]
    rows = [r for r in rows if r.get("status") == "attacked" and (not attacks or r["attack"] in attacks)]
    written = []
    async with Session(cache=str(cache)) as session:
        if (folder / "results.json").exists() and rows:
            written.append(await _ranking_record(session, folder, config, rows[0], out))
        for row in rows:
            written.append(await _attack_record(session, folder, config, row, out))
    return written


def _evaluation(config: dict[str, Any], row: dict[str, Any]) -> Any:
    from promptrobust.engine.measuring.settings import EvaluationSettings

    return EvaluationSettings(dataset=row["dataset"], limit=config.get("limit"), seed=row["seed"], shots=row["shots"],
                              mode=row["mode"])


async def _ranking_record(session: Any, folder: Path, config: dict[str, Any], first: dict[str, Any], out: Path) -> Path:
    """The protocol's ranking of the prompt set: every prompt's per-sample scores."""
    results = orjson.loads((folder / "results.json").read_bytes())
    bench = await session.workbench(first["model"], _evaluation(config, first), model_args=config.get("model_args") or None)
    ranking = Recorder(bench.evaluator(early_stopping=False))
    await ranking([c["prompt"] for c in results["results"]["clean"]])
    record = AttackRecordFile(
        attack="ranking", search="topk", model=first["model"], dataset=first["dataset"], prompt_id="",
        clean_prompt="", samples=len(bench.samples), seed=first["seed"], mode=first["mode"],
        source={"run": folder.name, "commit": _commit(folder), "top_k": config.get("top_k"),
                "prompt_ids": [c["prompt_id"] for c in results["results"]["clean"]]},
        calls=ranking.calls, scores=ranking.scores, margins=ranking.margins,
    )
    path = out / f"{_slug(first['model'])}_{first['samples']}_ranking.json.gz"
    record.write(path)
    return path


async def _attack_record(session: Any, folder: Path, config: dict[str, Any], row: dict[str, Any], out: Path) -> Path:
    """One attack of the run, searched again through a ``Recorder`` (every answer a cache hit)."""
    from promptrobust.attacks.registry import get_attack
    from promptrobust.engine.measuring.workbench import protected_words, semantic_prompts_for

    bench = await session.workbench(row["model"], _evaluation(config, row), model_args=config.get("model_args") or None)
    before = bench.scheduler.stats.snapshot()
    recorder = Recorder(bench.evaluator(early_stopping=False))
    attack = get_attack(row["attack"], **dict(row.get("attack_options") or {}))
    outcome = await attack.run(row["clean_prompt"], recorder, protected=protected_words(bench.task), seed=row["seed"],
                               budget=row.get("budget"), semantic_prompts=semantic_prompts_for(bench.task, row["attack"]))
    sent = bench.scheduler.stats.snapshot().get("backend_requests", 0) - before.get("backend_requests", 0)
    if sent:
        raise RuntimeError(f"{row['attack']} on {row['prompt_id']}: {sent} answers were not in the cache")
    if outcome.adversarial_prompt != row["adversarial_prompt"]:
        raise RuntimeError(f"{row['attack']} on {row['prompt_id']}: the search went elsewhere than the recorded run")
    record = AttackRecordFile(
        attack=row["attack"], search=SEARCH_OF[row["attack"]], model=row["model"], dataset=row["dataset"],
        prompt_id=row["prompt_id"], clean_prompt=row["clean_prompt"], samples=len(bench.samples), seed=row["seed"],
        mode=row["mode"],
        source={"run": folder.name, "commit": _commit(folder), "adversarial_prompt": row["adversarial_prompt"],
                "attack_options": dict(row.get("attack_options") or {}),
                # every option as the search replayed here ran it (defaults change between releases)
                "effective_options": {**attack.recipe.options(), **dict(row.get("attack_options") or {})},
                "pdr": row["pdr"], "pdr_ci95": row["pdr_ci95"], "clean_score": row["clean_score"],
                "adversarial_score": row["adversarial_score"]},
        calls=recorder.calls, scores=recorder.scores, margins=recorder.margins,
    )
    path = out / f"{_slug(row['model'])}_{row['samples']}_{row['attack']}_{row['prompt_id']}.json.gz"
    record.write(path)
    return path


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-." else "-" for ch in text)


def _commit(folder: Path) -> str | None:
    """The commit the exhaustive run ran (its results.json), else this checkout's."""
    results = folder / "results.json"
    if results.is_file():
        commit = (orjson.loads(results.read_bytes()).get("versions") or {}).get("git_commit")
        if commit:
            return str(commit)
    from promptrobust.engine.runs.run_folder import versions

    return versions().get("git_commit")
