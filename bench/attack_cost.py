"""What each attack costs: our engine versus exhaustive and reference scoring.

For every attack, on the same model, data, seed and search, in one process:

* ``reference``   promptbench's loop (engine.reference): one generate call per
                  (candidate, sample), sequential, no cache, no early stopping,
                  last-word parsing;
* ``exhaustive``  our batched evaluator, every candidate on every sample, no
                  cache (what an engine without our two levers would do);
* ``engine-gen``  our engine in generation mode: batching, cache, exact early stopping;
* ``engine``      our engine in label-scoring mode (one forward pass per request).

Variants run in the order given, each with a fresh cache file, so none
profits from another's answers; ratios are computed within the run.

``--protocol-top-k K`` adds the paper's protocol on the dataset, per variant:
score every prompt of the set, then run every attack on the best K. The
reference does this as promptbench does (one attack after another, every
pass from scratch); the engine as ``pre run --attack all`` does (one cache
and one scheduler for the whole protocol, attacks concurrent), so the clean
scores and the word rankings that several attacks share are paid for once.

    python bench/attack_cost.py --variants exhaustive,engine --limit 24 --budget 12
    python bench/attack_cost.py --variants reference,engine-gen,engine --attacks stresstest,deepwordbug
    python bench/attack_cost.py --variants reference,engine-gen,engine --limit 16 --budget 12 --protocol-top-k 3
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from promptrobust.attacks.errors import AttackResourceError
from promptrobust.attacks.registry import get_attack, list_attacks
from bench.report import command_line, header, write_results
from promptrobust.engine.measuring.workbench import protected_words, semantic_prompts_for
from promptrobust.engine.serving.cache import ScoreCache
from promptrobust.engine.measuring.evaluator import Evaluator
from bench.reference import ReferenceScorer
from promptrobust.engine.serving.registry import build_backend, resolve_model
from promptrobust.engine.serving.scheduler import Scheduler
from promptrobust.engine.serving.scheduler_settings import SchedulerSettings
from promptrobust.tasks import get_task, load_prompts

VARIANTS = ("reference", "exhaustive", "engine-gen", "engine")


@dataclass
class Measurement:
    attack: str
    variant: str
    seconds: float
    requests_sent: int
    cache_hits: int
    saved_by_early_stopping: int
    candidates: int
    clean_score: float
    adversarial_score: float
    adversarial_prompt: str

    @property
    def samples_per_second(self) -> float:
        return self.requests_sent / self.seconds if self.seconds else 0.0


def evaluator_for(variant: str, sched: Scheduler, task: Any, samples: list, chunk_size: int) -> Evaluator:
    """The engine's scorer for a variant: generation or label scoring, with or without early stopping."""
    return Evaluator(
        sched, task, samples,
        mode="generate" if variant == "engine-gen" else ("choices" if task.supports_choices else "generate"),
        early_stopping=variant != "exhaustive",
        chunk_size=chunk_size,
    )


async def measure(variant: str, attack_name: str, backend: Any, task: Any, samples: list, prompt: str,
                  *, budget: int, seed: int, cache_dir: Path, batch_size: int, chunk_size: int = 8) -> Measurement:
    attack = get_attack(attack_name)
    semantic = semantic_prompts_for(task, attack_name)
    cache = None
    if variant == "reference":
        scorer: Any = ReferenceScorer(backend, task, samples)
        sched = None
    else:
        cache = ScoreCache(cache_dir / f"{attack_name}-{variant}.sqlite") if variant != "exhaustive" else None
        sched = Scheduler(backend, cache=cache, settings=SchedulerSettings(batch_size=batch_size, max_wait_ms=5), owns_backend=False)
        await sched.start()
        scorer = evaluator_for(variant, sched, task, samples, chunk_size)
    t0 = time.perf_counter()
    outcome = await attack.run(prompt, scorer, protected=protected_words(task), seed=seed, budget=budget,
                               semantic_prompts=semantic)
    seconds = time.perf_counter() - t0
    if variant == "reference":
        sent, hits, saved = scorer.cost.model_calls, 0, 0
    else:
        sent, hits, saved = scorer.requests.sent, scorer.requests.cache_hits, scorer.cost.saved_by_early_stopping
        await sched.close()
    if cache is not None:
        cache.close()
    return Measurement(attack_name, variant, seconds, sent, hits, saved, outcome.queries, outcome.clean_score,
                       outcome.adversarial_score, outcome.adversarial_prompt)


@dataclass
class ProtocolOutcome:
    """One variant's whole protocol run: ranking the prompt set, then every attack on the top K."""

    variant: str
    seconds: float
    requests_sent: int
    cache_hits: int
    saved_by_early_stopping: int
    ranking: list[tuple[str, float]]
    #: identical requests of concurrent attacks answered by one model call
    joined_in_flight: int
    #: (attack, prompt id) -> (clean score, attacked score, adversarial prompt)
    results: dict[tuple[str, str], tuple[float, float, str]]


async def run_protocol(variant: str, names: list[str], backend: Any, task: Any, samples: list, prompts: list,
                       *, top_k: int, budget: int, seed: int, cache_dir: Path, batch_size: int,
                       chunk_size: int) -> ProtocolOutcome:
    """Rank the prompts, attack the best ``top_k`` with every attack, the way the variant would."""
    t0 = time.perf_counter()
    results: dict[tuple[str, str], tuple[float, float, str]] = {}

    async def attack_one(name: str, prompt: Any, scorer: Any) -> None:
        outcome = await get_attack(name).run(prompt.text, scorer, protected=protected_words(task), seed=seed,
                                             budget=budget, semantic_prompts=semantic_prompts_for(task, name))
        results[(name, prompt.id)] = (outcome.clean_score, outcome.adversarial_score, outcome.adversarial_prompt)

    if variant == "reference":
        scorer = ReferenceScorer(backend, task, samples)
        ranking = sorted([(p, await scorer.score(p.text)) for p in prompts], key=lambda pc: -pc[1])
        for name in names:  # promptbench: one attack after another, every pass from scratch
            for prompt, _ in ranking[:top_k]:
                await attack_one(name, prompt, scorer)
        sent, hits, saved, joined = scorer.cost.model_calls, 0, 0, 0
    else:
        cache = ScoreCache(cache_dir / f"protocol-{variant}.sqlite")
        sched = Scheduler(backend, cache=cache, settings=SchedulerSettings(batch_size=batch_size, max_wait_ms=5), owns_backend=False)
        await sched.start()
        evaluators = [evaluator_for(variant, sched, task, samples, chunk_size)]
        ranked = await asyncio.gather(*(evaluators[0].evaluate(p.text) for p in prompts))
        ranking = sorted(zip(prompts, (r.score for r in ranked)), key=lambda pc: -pc[1])
        jobs = []
        for name in names:  # as `pre run --attack all`: all attacks at once on one scheduler and cache
            for prompt, _ in ranking[:top_k]:
                evaluators.append(evaluator_for(variant, sched, task, samples, chunk_size))
                jobs.append(attack_one(name, prompt, evaluators[-1]))
        await asyncio.gather(*jobs)
        sent = sum(e.requests.sent for e in evaluators)
        hits = sum(e.requests.cache_hits for e in evaluators)
        saved = sum(e.cost.saved_by_early_stopping for e in evaluators)
        joined = sum(e.requests.deduplicated for e in evaluators)
        await sched.close()
        cache.close()
    return ProtocolOutcome(variant, time.perf_counter() - t0, sent, hits, saved,
                           [(p.id, score) for p, score in ranking], joined, results)


def protocol_table(outcomes: list[ProtocolOutcome], names: list[str]) -> list[str]:
    """Totals per variant against the first, then the mean PDR each variant measured per attack."""
    base = outcomes[0]
    out = [
        "| variant | seconds | requests sent | samples/s | cache hits | joined in flight | saved by early stopping | time vs "
        + base.variant
        + " | requests vs " + base.variant + " | same adversarial prompts as " + base.variant + " |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for o in outcomes:
        same = sum(o.results.get(k, (0, 0, None))[2] == v[2] for k, v in base.results.items())
        out.append(
            f"| {o.variant} | {o.seconds:.1f} | {o.requests_sent} | {o.requests_sent / o.seconds:.1f} | {o.cache_hits} | "
            f"{o.joined_in_flight} | {o.saved_by_early_stopping} | {base.seconds / o.seconds:.2f}x | {o.requests_sent / max(1, base.requests_sent):.3f} | "
            f"{same} of {len(base.results)} |"
        )
    out += ["", "Mean PDR over the attacked prompts (clean -> attacked, per attack):", "",
            "| attack | " + " | ".join(o.variant for o in outcomes) + " |", "|---|" + "---:|" * len(outcomes)]
    for name in names:
        cells = []
        for o in outcomes:
            rows = [v for (a, _), v in o.results.items() if a == name]
            pdrs = [1 - adv / clean if clean else 0.0 for clean, adv, _ in rows]
            cells.append(f"{sum(pdrs) / len(pdrs):.3f}" if pdrs else "-")
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    return out


def table(rows: list[Measurement], base: str, variants: list[str]) -> list[str]:
    out = [
        "| attack | variant | seconds | requests sent | samples/s | cache hits | saved by early stopping | candidates | clean | attacked | time vs " + base + " | requests vs " + base + " | same prompt as " + base + " |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    by_attack: dict[str, dict[str, Measurement]] = {}
    for m in rows:
        by_attack.setdefault(m.attack, {})[m.variant] = m
    for attack, ms in by_attack.items():
        ref = ms.get(base)
        for v in variants:
            m = ms.get(v)
            if m is None:
                continue
            speed = f"{ref.seconds / m.seconds:.2f}x faster" if ref and m.seconds else "-"
            reqs = f"{m.requests_sent / ref.requests_sent:.3f}" if ref and ref.requests_sent else "-"
            same = ("yes" if m.adversarial_prompt == ref.adversarial_prompt else "NO") if ref else "-"
            out.append(
                f"| {attack} | {v} | {m.seconds:.1f} | {m.requests_sent} | {m.samples_per_second:.1f} | {m.cache_hits} | "
                f"{m.saved_by_early_stopping} | {m.candidates} | {m.clean_score:.3f} | {m.adversarial_score:.3f} | "
                f"{speed if v != base else '1.00x'} | {reqs if v != base else '1.000'} | {same if v != base else '-'} |"
            )
    return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--dataset", default="rotten_tomatoes")
    ap.add_argument("--prompt", default=None, help="prompt id (default: the set's first task prompt)")
    ap.add_argument("--attacks", default="all")
    ap.add_argument("--variants", default="exhaustive,engine")
    ap.add_argument("--limit", type=int, default=24)
    ap.add_argument("--budget", type=int, default=12)
    ap.add_argument("--batch-size", type=int, default=16, help="engine micro-batch size (16 is the best row of bench/results/ceiling.md)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chunk-size", type=int, default=8, help="samples per early-stopping round")
    ap.add_argument("--protocol-top-k", type=int, default=0,
                    help="also run the paper's protocol per variant: rank the task prompts, attack the best K with every attack")
    ap.add_argument("--out", default=None, help="write the Markdown table here too")
    args = ap.parse_args()

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    for v in variants:
        if v not in VARIANTS:
            ap.error(f"unknown variant {v!r}: choose from {', '.join(VARIANTS)}")
    names = [a for a, _ in list_attacks()] if args.attacks == "all" else [a.strip() for a in args.attacks.split(",")]
    task = get_task(args.dataset)
    samples = task.load(limit=args.limit, seed=args.seed)
    prompts = load_prompts(task.name, types=["task"])
    prompt = next(p for p in prompts if p.id == args.prompt) if args.prompt else prompts[0]
    backend = build_backend(resolve_model(args.model))
    await backend.start()
    rows: list[Measurement] = []
    unavailable: dict[str, str] = {}
    protocol: list[ProtocolOutcome] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            for v in variants:
                try:
                    m = await measure(v, name, backend, task, samples, prompt.text, budget=args.budget, seed=args.seed,
                                      cache_dir=Path(tmp), batch_size=args.batch_size, chunk_size=args.chunk_size)
                except AttackResourceError as e:  # e.g. BertAttack without a masked LM
                    unavailable[name] = str(e).splitlines()[0]
                    print(f"# {name:<12} unavailable: {unavailable[name]}", file=sys.stderr, flush=True)
                    break
                rows.append(m)
                print(f"# {name:<12} {v:<11} {m.seconds:7.1f}s sent {m.requests_sent:6d} saved {m.saved_by_early_stopping:6d} "
                      f"clean {m.clean_score:.3f} -> {m.adversarial_score:.3f}", file=sys.stderr, flush=True)
        if args.protocol_top_k > 0:
            runnable = [n for n in names if n not in unavailable]
            for v in variants:
                o = await run_protocol(v, runnable, backend, task, samples, prompts, top_k=args.protocol_top_k,
                                       budget=args.budget, seed=args.seed, cache_dir=Path(tmp),
                                       batch_size=args.batch_size, chunk_size=args.chunk_size)
                protocol.append(o)
                print(f"# protocol     {v:<11} {o.seconds:7.1f}s sent {o.requests_sent:6d} hits {o.cache_hits:6d}",
                      file=sys.stderr, flush=True)
    await backend.close()
    cmd = command_line("attack_cost.py")
    lines = [
        *header("Attack cost", cmd,
                f"model {args.model}; dataset {task.name}, {len(samples)} samples; prompt {prompt.id}; budget {args.budget}; "
                f"batch size {args.batch_size}; early-stopping chunk {args.chunk_size} samples; seed {args.seed}."),
        *table(rows, variants[0], variants),
        "",
    ]
    for name, why in unavailable.items():
        lines += [f"{name}: not measured, {why}", ""]
    if protocol:
        runnable = [n for n in names if n not in unavailable]
        lines += [
            (f"## Paper protocol on {task.name}: rank the {len(prompts)} task prompts, attack the best "
            f"{args.protocol_top_k} with {', '.join(runnable)}"),
            "",
            *protocol_table(protocol, runnable),
            "",
        ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        write_results(args.out, text, cmd, {
            "rows": measurement_rows(rows),
            "unavailable": unavailable,
            "protocol": [
                {**{k: v for k, v in asdict(o).items() if k != "results"},
                 "results": [{"attack": a, "prompt_id": pid, "clean": c, "attacked": adv, "adversarial_prompt": ap}
                             for (a, pid), (c, adv, ap) in o.results.items()]}
                for o in protocol
            ],
        })


def measurement_rows(rows: list[Measurement]) -> list[dict[str, Any]]:
    """Measurements as JSON rows, samples/s included."""
    return [{**asdict(m), "samples_per_second": m.samples_per_second} for m in rows]


if __name__ == "__main__":
    asyncio.run(main())
