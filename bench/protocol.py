"""The paper's whole protocol, four ways, in one run: how much faster is the engine?

On one dataset: score every task prompt, then run every offline attack on
the best ``--top-k`` prompts with an unlimited query budget, as promptbench
does. Contenders, on one loaded model, interleaved attack by attack (the
order rotates) so a shared machine's load falls on all of them alike:

* ``promptbench``  stock promptbench per call (engine.reference.PromptbenchScorer):
                   raw text, ``model.generate`` with 20 new tokens until EOS,
                   whole output decoded, last-word parse; torch's default kernels;
* ``reference``    our formatting (chat template), one call per (candidate,
                   sample), generation of up to 20 tokens, last-word parse,
                   no cache, torch's default kernels (engine.reference.ReferenceScorer);
* ``reference-choices``  the same loop scoring labels by log-probability, one
                   call per (candidate, sample): the baseline of ``engine``,
                   which must find the same adversarial prompts as it;
* ``engine-gen``   the engine in generation mode (same requests as ``reference``:
                   it must find the same adversarial prompts), every exact lever on;
* ``engine``       the engine scoring labels by log-probability, every exact lever on.

Then, on requests the engines sent, in the same process: the hf backend's
share of the measured fp32 peak, the positions it computed against the lower
bound (each candidate's prefix once, no padding), each lever's speed on its
own (interleaved rounds), and how often bfloat16 agrees with fp32.

    python bench/protocol.py --limit 4 --top-k 3 --out bench/results/protocol.md
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.certify import Certificate, certificate_lines, certify  # noqa: E402
from bench.extrapolate import ENGINE_OF, CallSampler, baseline_calls  # noqa: E402
from bench.breakdown import PassProfile, achieved_rates, breakdown_lines, breakdown_payload  # noqa: E402
from bench.levers import (  # noqa: E402
    ABLATION,
    BASELINE,
    LADDER,
    ENGINE,
    Recorder,
    bf16_agreement,
    configure,
    lever_table,
    lower_bound_positions,
    peak_breakdown,
    peak_fraction,
)
from bench.report import command_line, header, write_results  # noqa: E402
from bench.summary import update_section, update_summary  # noqa: E402
from promptrobust.attacks.errors import AttackResourceError  # noqa: E402
from promptrobust.attacks.registry import get_attack, list_attacks  # noqa: E402
from promptrobust.engine.serving.backends.hf import GreedyMargins, HFOptions, embedded_backend  # noqa: E402
from promptrobust.engine.serving.backends.hf.prefix import PrefixCache  # noqa: E402
from promptrobust.engine.serving.cache import ScoreCache  # noqa: E402
from promptrobust.engine.measuring.evaluator import Evaluator  # noqa: E402
from bench.reference import PromptbenchScorer, ReferenceScorer  # noqa: E402
from promptrobust.engine.serving.registry import resolve_model  # noqa: E402
from promptrobust.engine.measuring.settings import AttackSettings, EvaluationSettings  # noqa: E402
from promptrobust.engine.serving.scheduler import Scheduler  # noqa: E402
from promptrobust.engine.serving.scheduler_settings import SchedulerSettings
from promptrobust.tasks import get_task, load_prompts  # noqa: E402

from promptrobust.engine.measuring.workbench import few_shot, protected_words, semantic_prompts_for  # noqa: E402

CONTENDERS = ("promptbench", "reference", "reference-choices", "engine-gen", "engine")
#: The sequential loop each contender is held against (same mode: same scores, same search).
REFERENCE_OF = {"engine": "reference-choices", "reference-choices": "reference-choices"}
#: Attacks that need nothing from the network (BertAttack needs a masked LM).
OFFLINE_ATTACKS = ("textbugger", "deepwordbug", "textfooler", "checklist", "stresstest", "semantic")


@dataclass
class Contender:
    name: str
    seconds: float = 0.0
    model_calls: int = 0
    cache_hits: int = 0
    saved_by_early_stopping: int = 0
    ranking: list[tuple[str, float]] = field(default_factory=list)
    #: (attack, prompt id) -> (clean, attacked, adversarial prompt)
    results: dict[tuple[str, str], tuple[float, float, str]] = field(default_factory=dict)
    positions: int = 0
    #: seconds per phase ("rank", then each attack)
    phases: dict[str, float] = field(default_factory=dict)
    # engine only
    scheduler: Any = None
    cache: Any = None
    evaluators: list[Any] = field(default_factory=list)
    prefixes: Any = None
    recorder: Any = None
    #: bench.breakdown.PassProfile when --breakdown (label-scoring engine only)
    profile: Any = None

    @property
    def is_engine(self) -> bool:
        return self.name.startswith("engine")

    @property
    def generates(self) -> bool:
        return self.name in ("promptbench", "reference", "engine-gen")

    def scorer(self, backend: Any, task: Any, samples: list, max_tokens: int, chunk_size: int,
               examples: list | tuple = ()) -> Any:
        if self.name == "promptbench":
            return PromptbenchScorer(backend.model, backend.tokenizer, task, samples, examples=examples,
                                     max_new_tokens=max_tokens)
        if self.name in ("reference", "reference-choices"):
            mode = "choices" if self.name == "reference-choices" else "generate"
            return ReferenceScorer(backend, task, samples, examples=examples, chat=backend.is_chat,
                                   max_tokens=max_tokens, mode=mode)
        ev = Evaluator(self.scheduler, task, samples, mode="generate" if self.name == "engine-gen" else "choices",
                       examples=examples, max_tokens=max_tokens, chunk_size=chunk_size)
        self.evaluators.append(ev)
        return ev


def shots_and_examples(task: Any, model: str, shots: int | None, seed: int) -> tuple[int, list]:
    """The worked examples ``pre run`` puts before each sample: the engine's one rule
    (``EvaluationSettings.shots_for``: 3 for a base model unless ``shots`` says otherwise)."""
    n = EvaluationSettings(dataset=task.name, shots=shots, seed=seed).shots_for(bool(resolve_model(model).base_model))
    return n, few_shot(task, n, seed=seed)


async def turn(c: Contender, backend: Any, work, phase: str) -> Any:
    """Run ``work()`` as contender ``c``: its levers on the backend, its time and positions counted."""
    configure(backend, ENGINE if c.is_engine else BASELINE, prefixes=c.prefixes)
    if c.recorder is not None:
        c.recorder.phase = phase
    before = backend.positions
    t0 = time.perf_counter()
    with c.profile if c.profile is not None else nullcontext():
        out = await work()
    c.phases[phase] = time.perf_counter() - t0
    c.seconds += c.phases[phase]
    c.positions += backend.positions - before
    return out


async def run_all(args: argparse.Namespace, backend: Any, task: Any, samples: list, prompts: list, attacks: list[str],
                  tmp: Path, examples: list | tuple = (), between: Any = None) -> tuple[list[Contender], dict[str, str]]:
    """Every contender through the protocol, interleaved; ``between(contenders)`` runs after each phase."""
    contenders = [Contender(n) for n in args.contenders]
    for c in contenders:
        if c.is_engine:
            c.prefixes = PrefixCache(int(args.prefix_cache_mb * 2**20))
            c.recorder = Recorder(backend)
            c.cache = ScoreCache(tmp / f"{c.name}.sqlite")
            c.scheduler = Scheduler(c.recorder, cache=c.cache, settings=SchedulerSettings(batch_size=args.batch_size, max_wait_ms=5), owns_backend=False)
            if args.breakdown and c.name == "engine":
                c.profile = PassProfile(backend)
            await c.scheduler.start()
    protected = protected_words(task)
    # 1. rank the prompt set
    for c in contenders:
        scorer = c.scorer(backend, task, samples, args.max_tokens, args.chunk_size, examples)

        async def rank(scorer=scorer, c=c) -> list[tuple[str, float]]:
            if c.is_engine:
                scores = [r.score for r in await asyncio.gather(*(scorer.evaluate(p.text) for p in prompts))]
            else:
                scores = [await scorer.score(p.text) for p in prompts]
            if not c.is_engine:
                c.model_calls += scorer.cost.model_calls
            return sorted(((p.id, s) for p, s in zip(prompts, scores)), key=lambda x: -x[1])

        c.ranking = await turn(c, backend, rank, "rank")
        print(f"# rank        {c.name:<12} {c.seconds:8.1f}s", file=sys.stderr, flush=True)
    if between is not None:
        await between(contenders)
    by_id = {p.id: p for p in prompts}
    unavailable: dict[str, str] = {}
    # 2. every attack on each contender's top k, contenders interleaved, order rotating
    for k, name in enumerate(attacks):
        order = contenders[k % len(contenders):] + contenders[: k % len(contenders)]
        for c in order:
            if c.generates and args.gen_attacks is not None and name not in args.gen_attacks:
                continue
            top = [by_id[pid] for pid, score in c.ranking[: args.top_k] if score > 0]  # clean score 0: skipped

            async def attack_top(c=c, top=top) -> None:
                async def one(prompt: Any) -> None:
                    scorer = c.scorer(backend, task, samples, args.max_tokens, args.chunk_size, examples)
                    out = await get_attack(name).run(prompt.text, scorer, protected=protected, seed=args.seed,
                                                     budget=args.budget, semantic_prompts=semantic_prompts_for(task, name))
                    c.results[(name, prompt.id)] = (out.clean_score, out.adversarial_score, out.adversarial_prompt)
                    if not c.is_engine:
                        c.model_calls += scorer.cost.model_calls

                if c.is_engine:  # as `pre run --attack all`: the prompts' attacks at once, one scheduler and cache
                    await asyncio.gather(*(one(p) for p in top))
                else:  # promptbench: one after another, every pass from scratch
                    for p in top:
                        await one(p)

            try:
                await turn(c, backend, attack_top, name)
            except AttackResourceError as e:
                unavailable[name] = str(e).splitlines()[0]
                break
            print(f"# {name:<11} {c.name:<12} {c.seconds:8.1f}s", file=sys.stderr, flush=True)
        if between is not None:
            await between(contenders)
    for c in contenders:
        if c.is_engine:
            c.model_calls = sum(e.requests.sent for e in c.evaluators)
            c.cache_hits = sum(e.requests.cache_hits for e in c.evaluators)
            c.saved_by_early_stopping = sum(e.cost.saved_by_early_stopping for e in c.evaluators)
            await c.scheduler.close()
            c.cache.close()
    return contenders, unavailable


def ratio(contenders: dict[str, Contender], slow: str, fast: str) -> float | None:
    if slow in contenders and fast in contenders and contenders[fast].seconds:
        return contenders[slow].seconds / contenders[fast].seconds
    return None


def reference_of(name: str) -> str:
    return REFERENCE_OF.get(name, "reference")


def same_prompts(a: Contender, b: Contender) -> tuple[int, int]:
    keys = set(a.results) | set(b.results)
    same = sum(1 for k in keys if k in a.results and k in b.results and a.results[k][2] == b.results[k][2])
    return same, len(keys)


def phase_lines(contenders: list[Contender]) -> list[str]:
    """Seconds per phase and contender, and each engine's speed over its reference loop in that phase."""
    by = {c.name: c for c in contenders}
    phases = list(contenders[0].phases)
    engines = [c for c in contenders if c.is_engine and reference_of(c.name) in by]
    out = ["| phase | " + " | ".join(c.name for c in contenders) + " | "
           + " | ".join(f"{c.name} vs {reference_of(c.name)}" for c in engines) + " |",
           "|---|" + "---:|" * (len(contenders) + len(engines))]
    for ph in phases:
        cells = [f"{c.phases.get(ph, 0.0):.1f}" for c in contenders]
        for c in engines:
            ref = by[reference_of(c.name)].phases.get(ph, 0.0)
            cells.append(f"{ref / c.phases[ph]:.2f}x" if c.phases.get(ph) else "-")
        out.append(f"| {ph} | " + " | ".join(cells) + " |")
    return out


def protocol_lines(contenders: list[Contender]) -> list[str]:
    by = {c.name: c for c in contenders}
    base = [b for b in ("reference", "reference-choices", "promptbench") if b in by]
    out = ["| contender | seconds | model calls | cache hits | saved by early stopping | positions computed | "
           + " | ".join(f"speed vs {b}" for b in base) + " | same adversarial prompts as its reference loop |",
           "|---|---:|---:|---:|---:|---:|" + "---:|" * len(base) + "---|"]
    for c in contenders:
        cells = [f"{by[b].seconds / c.seconds:.2f}x" if c.seconds else "-" for b in base]
        same = "-"
        if reference_of(c.name) in by and c.name not in ("promptbench", reference_of(c.name)):
            s, n = same_prompts(by[reference_of(c.name)], c)
            same = f"{s} of {n} ({reference_of(c.name)})"
        positions = str(c.positions) if c.name != "promptbench" else "- (transformers' generate)"
        out.append(f"| {c.name} | {c.seconds:.1f} | {c.model_calls} | {c.cache_hits} | {c.saved_by_early_stopping} | "
                   f"{positions} | " + " | ".join(cells) + f" | {same} |")
    return out


def extrapolation(sampler: CallSampler, by: dict[str, Contender], samples: int) -> dict[str, Any]:
    """Per baseline: its per-call times, the calls it would make, its extrapolated time and the engine's speed over it."""
    rows = []
    for b, times in sampler.times.items():
        if not times.seconds:
            continue
        engine = by[ENGINE_OF[b]]
        calls = baseline_calls(engine.evaluators, samples)
        summ = times.summary()
        rows.append({"baseline": b, **summ, "engine": engine.name, "calls": calls,
                     "extrapolated_seconds": summ["mean_s"] * calls, "engine_seconds": engine.seconds,
                     "speedup": summ["mean_s"] * calls / engine.seconds if engine.seconds else None,
                     "per_call_seconds": times.seconds})
    # promptbench against label scoring too: its per-call cost times the calls of the label-scoring searches (the
    # same workload as the engine's; promptbench itself only generates, so its own search may differ)
    pb = next((r for r in rows if r["baseline"] == "promptbench"), None)
    if pb is not None and "engine" in by and by["engine"].seconds:
        calls = baseline_calls(by["engine"].evaluators, samples)
        pb["calls_choices"] = calls
        pb["speedup_choices"] = pb["mean_s"] * calls / by["engine"].seconds
    return {"rows": rows}


def section_figures(args: argparse.Namespace, payload: dict[str, Any], extra: dict[str, Any] | None,
                    breakdown: dict[str, Any] | None, by: dict[str, Contender], bounds: dict[str, int],
                    attacks: list[str], samples: int, shots: int,
                    certificates: dict[str, Certificate] | None = None) -> dict[str, Any]:
    """The figures of one named summary section (issue 24's default_model_100), ratios from this run only."""
    rows = {r["baseline"]: r for r in (extra or {}).get("rows", [])}

    def cert_fraction(name: str) -> float | None:
        return certificates[name].fraction() if certificates and name in certificates else None

    def speed(b: str, key: str = "speedup") -> float | None:
        if b in rows:
            return rows[b].get(key)
        return payload.get({"reference-choices": "speedup_vs_reference_choices", "reference": "speedup_vs_reference_generate"}
                           .get(b, ""))

    return {
        "model": args.model, "shots": shots, "samples": samples, "top_k": args.top_k, "attacks": attacks,
        "attacks_generate": [a for a in attacks if args.gen_attacks is None or a in args.gen_attacks],
        "budget": args.budget, "batch_size": args.batch_size, "chunk_size": args.chunk_size,
        "speedup_vs_reference_choices": speed("reference-choices"),
        "speedup_vs_reference_generate": speed("reference"),
        "speedup_vs_promptbench_choices": rows["promptbench"].get("speedup_choices") if "promptbench" in rows
        else payload.get("speedup_vs_promptbench_choices"),
        "speedup_vs_promptbench_generate": speed("promptbench") if "promptbench" in rows
        else payload.get("speedup_vs_promptbench_generate"),
        # extrapolated baselines did not run their searches: the certificate (bench/certify.py) stands for them
        "same_adversarial_prompts_choices": cert_fraction("engine") if rows else payload.get("same_adversarial_prompts_choices"),
        "same_adversarial_prompts_generate": cert_fraction("engine-gen") if rows
        else payload.get("same_adversarial_prompts_generate"),
        "same_adversarial_prompts_how": "certified (bench/certify.py)" if rows else "the loops' own searches compared",
        "certificates": {n: c.payload() for n, c in (certificates or {}).items()},
        "answers_as_the_engine_on_measured_calls": {b: f"{r['answers_as_the_engine']} of {r['calls_measured']}"
                                                    for b, r in rows.items()},
        "positions_over_lower_bound": payload.get("positions_over_lower_bound"),
        "positions_over_lower_bound_generate": payload.get("positions_over_lower_bound_generate"),
        "hf_fp32_peak_fraction": breakdown.get("peak_fraction_backend") if breakdown else payload.get("hf_fp32_peak_fraction"),
        "hf_fp32_peak_fraction_wall": breakdown.get("peak_fraction_wall") if breakdown else None,
        "fp32_peak_gflops": payload.get("fp32_peak_gflops"),
        "engine_seconds": {n: c.seconds for n, c in by.items()},
        "engine_phases": {n: c.phases for n, c in by.items()},
        "engine_model_calls": {n: c.model_calls for n, c in by.items()},
        "baselines": {b: {k: v for k, v in r.items() if k != "baseline"} for b, r in rows.items()},
        "breakdown": breakdown,
        "load_average": args.load_average,
        "note": ("absolute seconds carry the machine's load (load_average: 1-minute load at the start and the end "
                 "of the run); ratios come from one run with the baselines' calls interleaved with the engines' phases"),
    }


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct", help="an embedded model name")
    ap.add_argument("--dataset", default="rotten_tomatoes")
    ap.add_argument("--shots", type=int, default=None,
                    help="worked examples before each sample (default: as `pre run`, 3 for a base model such as "
                         "gemma3-270m, else 0; --shots 0 forces 0-shot)")
    ap.add_argument("--limit", type=int, default=4, help="samples per pass")
    ap.add_argument("--top-k", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=None, help="rank only the first N task prompts (default: all)")
    ap.add_argument("--breakdown", action="store_true",
                    help="time each part of the label-scoring engine's passes (bench/breakdown.py) and report FLOP/s")
    ap.add_argument("--attacks", default="offline", help="'offline' (all but BertAttack), 'all', or a comma list")
    ap.add_argument("--contenders", default=",".join(CONTENDERS))
    ap.add_argument("--gen-attacks", default=None,
                    help="comma list: the attacks the generating contenders run after ranking (default: all of "
                         "--attacks); generation costs several times label scoring per request")
    ap.add_argument("--budget", type=int, default=None, help="candidate evaluations per attack (default: unlimited, as the paper)")
    ap.add_argument("--max-tokens", type=int, default=20, help="new tokens per generation (promptbench: 20)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--chunk-size", type=int, default=AttackSettings().chunk_size,
                    help="samples per early-stopping round (default: as `pre run`)")
    ap.add_argument("--prefix-cache-mb", type=float, default=256.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lever-requests", type=int, default=128, help="recorded requests replayed per lever configuration")
    ap.add_argument("--lever-table", choices=("ladder", "ablation"), default="ladder",
                    help="ladder: levers added one at a time; ablation: every lever against every lever but one")
    ap.add_argument("--lever-rounds", type=int, default=2, help="interleaved rounds of the lever replays (best of)")
    ap.add_argument("--bf16-requests", type=int, default=96, help="recorded requests compared in bfloat16 (0: skip)")
    ap.add_argument("--baseline-calls", type=int, default=0,
                    help="measure the sequential baselines on this many single calls each (recorded engine requests, "
                         "spread over the run, a slice after each phase) and extrapolate their whole-protocol time "
                         "(their cost is linear in calls); 0: run them through the whole protocol")
    ap.add_argument("--verify-max", type=int, default=300,
                    help="with --baseline-calls: engine answers within the certificate's margin that are computed "
                         "again at batch 1, per mode (bench/certify.py); the rest are left unverified")
    ap.add_argument("--linear-kernel", choices=("auto", "onednn", "default"), default="auto",
                    help="the engines' fp32 Linear kernel (auto: timed at load, as pre run; pin it for a repeatable run)")
    ap.add_argument("--section", default=None,
                    help="with --summary: write the figures into this named section of summary.json (e.g. default_model_100)")
    ap.add_argument("--out", default=None, help="write the Markdown here (and .json beside it)")
    ap.add_argument("--summary", default=None, help="update this summary.json with the headline figures")
    args = ap.parse_args()
    args.contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    for c in args.contenders:
        if c not in CONTENDERS:
            ap.error(f"unknown contender {c!r}: choose from {', '.join(CONTENDERS)}")
    extrapolated: list[str] = []
    if args.baseline_calls > 0:
        extrapolated = [c for c in args.contenders if c in ENGINE_OF]
        for b in extrapolated:
            if ENGINE_OF[b] not in args.contenders:
                ap.error(f"--baseline-calls measures {b} on {ENGINE_OF[b]}'s requests: add {ENGINE_OF[b]} to --contenders")
        args.contenders = [c for c in args.contenders if c not in extrapolated]
    args.gen_attacks = None if args.gen_attacks is None else [a.strip() for a in args.gen_attacks.split(",") if a.strip()]
    if args.attacks == "offline":
        attacks = list(OFFLINE_ATTACKS)
    elif args.attacks == "all":
        attacks = [a for a, _ in list_attacks()]
    else:
        attacks = [a.strip() for a in args.attacks.split(",") if a.strip()]

    args.load_average = [os.getloadavg()[0]]
    task = get_task(args.dataset)
    samples = task.load(limit=args.limit, seed=args.seed)
    prompts = load_prompts(task.name, types=["task"])[: args.prompts]
    shots, examples = shots_and_examples(task, args.model, args.shots, args.seed)
    backend = embedded_backend(args.model, HFOptions(batch_size=args.batch_size, linear_kernel=args.linear_kernel))
    await backend.start()
    kernel = backend.kernel
    started = time.perf_counter()
    sampler = None
    between = None
    if extrapolated:
        sampler = CallSampler(backend, task, examples, extrapolated, args.baseline_calls, 1 + len(attacks), args.max_tokens)

        async def sample_between(cs: list[Contender]) -> None:
            await sampler.slice({c.name: c.recorder for c in cs if c.recorder is not None})

        between = sample_between

    margins = GreedyMargins()
    greedy_margins = margins.margins
    backend.observer = margins if extrapolated else None  # the certificate's generation margins
    with tempfile.TemporaryDirectory() as tmp:
        contenders, unavailable = await run_all(args, backend, task, samples, prompts, attacks, Path(tmp), examples,
                                                between)
    backend.observer = None
    protocol_seconds = time.perf_counter() - started
    args.load_average.append(os.getloadavg()[0])
    by = {c.name: c for c in contenders}
    certificates: dict[str, Certificate] = {}
    if extrapolated:  # the loops did not run their searches: certify that they would end where the engines did
        phases = ["rank", *[a for a in attacks if a not in unavailable]]
        for c in contenders:
            if c.recorder is not None:
                certificates[c.name] = await certify(backend, c.name, c.recorder, greedy_margins, phases,
                                                     [a for a, _ in c.results], args.verify_max)

    # 3. the backend on the engines' own requests
    recorded = {n: by[n].recorder for n in ("engine", "engine-gen") if n in by}
    bounds = {n: lower_bound_positions(backend, r) for n, r in recorded.items()}
    levers = await lever_table(backend, recorded, args.lever_requests, args.batch_size, args.prefix_cache_mb,
                               rounds=args.lever_rounds, ladder=ABLATION if args.lever_table == "ablation" else LADDER)
    fraction = peak_fraction(backend, levers)
    depths = peak_breakdown(backend, levers, args.batch_size)
    peak = levers["peak"]
    bf16 = await bf16_agreement(args.model, backend, recorded, args.bf16_requests, args.batch_size) if args.bf16_requests else None

    runnable = [a for a in attacks if a not in unavailable]
    lines = [
        *header("The paper's protocol: engine vs reference loop vs stock promptbench", command_line("protocol.py"),
                f"model {args.model}, {shots}-shot; dataset {task.name}, {len(samples)} samples; rank {len(prompts)} task prompts, "
                f"attack the best {args.top_k} with {', '.join(runnable)}"
                + (f" (the generating contenders: {', '.join(a for a in runnable if a in args.gen_attacks)})"
                   if args.gen_attacks is not None else "")
                + f"; budget {args.budget or 'unlimited'}; "
                f"generation up to {args.max_tokens} new tokens; batch size {args.batch_size}; early-stopping chunk "
                f"{args.chunk_size}; seed {args.seed}; Linear kernel: {kernel.kernel if kernel else '?'} ({kernel.reason if kernel else ''}); "
                f"fp32 peak {peak['flops_per_s'] / 1e9:.0f} GFLOP/s ({peak['source']}, measured between the lever replays); "
                + (f"hf backend with every lever: {fraction:.2f} of it on label scoring. " if fraction is not None else "")
                + f"Whole run {protocol_seconds / 60:.1f} min."),
        *protocol_lines(contenders),
        "",
        "Seconds per phase (ranking the prompt set, then each attack on the top prompts):",
        "",
        *phase_lines(contenders),
        "",
    ]
    for name, why in unavailable.items():
        lines += [f"{name}: not measured, {why}", ""]
    lines += ["## Positions computed against the lower bound", "",
              "Lower bound: every distinct token prefix of the inputs once (the nodes of their token trie: a start "
              "that candidates share counts once), no padding; generation adds one decode step per generated token "
              "after the first, and the step that predicts EOS where an answer ends there.", "",
              "| contender | positions computed | lower bound | ratio |", "|---|---:|---:|---:|"]
    for n, lb in bounds.items():
        lines.append(f"| {n} | {by[n].positions} | {lb} | {by[n].positions / lb:.2f} |" if lb else f"| {n} | {by[n].positions} | - | - |")
    breakdown = None
    if "engine" in by and by["engine"].profile is not None:
        eng = by["engine"]
        requests = eng.model_calls
        rates = achieved_rates(backend.model, positions=eng.positions, lower_bound=bounds.get("engine") or 0,
                               requests=requests, wall_seconds=eng.seconds,
                               backend_seconds=eng.profile.backend_seconds, peak_flops=peak["flops_per_s"])
        breakdown = {**breakdown_payload(eng.profile, eng.seconds, requests), **rates}
        lines += ["", "## Where the label-scoring engine's time goes", "",
                  f"Self time of each part over the whole protocol ({requests} requests sent, {eng.positions} positions "
                  f"computed, {(eng.positions / bounds['engine']) if bounds.get('engine') else float('nan'):.2f}x the lower "
                  f"bound). Model FLOPs (Linear layers, the head once per request; {rates['head_share_of_flops']:.1%} of them "
                  f"in the head): {rates['gflops_per_s_wall']:.0f} GFLOP/s over the wall time, "
                  f"{rates['gflops_per_s_backend']:.0f} over the backend's time, against a measured fp32 peak of "
                  f"{rates['peak_gflops']:.0f} GFLOP/s: {rates['peak_fraction_wall']:.2f} / "
                  f"{rates['peak_fraction_backend']:.2f} of it.", "",
                  *breakdown_lines(eng.profile, eng.seconds, requests)]
    if certificates:
        lines += ["", "## Same adversarial prompts as the sequential loops: a certificate", "",
                  "The loops did not run their searches here, so this shows they would end on the engines' adversarial "
                  "prompts (bench/certify.py): an answer whose top two labels, or top two logits at every decode step, "
                  "are more than the threshold apart is the batch-1 answer too; every closer answer was computed again "
                  "at batch 1 as the loop computes it and compared (same label, same text); exact early stopping covers "
                  "the samples the engine never computed.", "", *certificate_lines(list(certificates.values()))]
    extra = None
    if sampler is not None:
        extra = extrapolation(sampler, by, len(samples))
        lines += ["", "## The sequential baselines, measured on single calls and extrapolated", "",
                  "A sequential loop's cost is linear in its calls (one (candidate, sample) per call, nothing shared or "
                  "cached), so each baseline ran single calls on requests its engine sent, spread over the run and "
                  "interleaved with it (a slice after each phase), and its whole-protocol time is the mean per call times "
                  "the calls it makes for the same searches (every candidate the engine's search scored, repeats "
                  "included, times the samples). Its answers are compared with the engine's on the same requests.", "",
                  "| baseline | calls measured | per call: mean / median / min / max (s) | spread (stdev / mean) | answers as the "
                  "engine | calls for the whole protocol | extrapolated seconds | engine | engine seconds | speed |",
                  "|---|---:|---|---:|---:|---:|---:|---|---:|---:|"]
        for row in extra["rows"]:
            lines.append(f"| {row['baseline']} | {row['calls_measured']} | {row['mean_s']:.3f} / {row['median_s']:.3f} / "
                         f"{row['min_s']:.3f} / {row['max_s']:.3f} | {row['stdev_over_mean']:.2f} | "
                         f"{row['answers_as_the_engine']} of {row['calls_measured']} | {row['calls']} | "
                         f"{row['extrapolated_seconds']:.0f} | {row['engine']} | {row['engine_seconds']:.0f} | "
                         f"{row['speedup']:.2f}x |")
        if any(r["baseline"] == "promptbench" for r in extra["rows"]):
            pb = next(r for r in extra["rows"] if r["baseline"] == "promptbench")
            lines += ["", "promptbench's calls are counted with engine-gen's searches (its own last-word parse of the whole "
                      "output may steer its search elsewhere); its answers are compared as parsed labels."
                      + (f" Against label scoring, its per-call cost times the {pb['calls_choices']} calls of the "
                         f"label-scoring searches: {pb['speedup_choices']:.2f}x." if "speedup_choices" in pb else "")]
    lines += [""] + ([*levers["lines"], ""] if levers["rows"] else [])
    if depths:
        lines += ["## Where the fp32 peak goes", "",
                  f"Share of the measured fp32 peak ({peak['flops_per_s'] / 1e9:.0f} GFLOP/s) at three depths, on a batch of "
                  f"{depths['rows']} rows x {depths['width']} positions (the positions per request the engine computed):", "",
                  "| depth | share of the fp32 peak |", "|---|---:|",
                  f"| the model's Linear layers alone (the kernel) | {depths['linear']:.2f} |",
                  f"| the model's whole forward pass | {depths['forward']:.2f} |",
                  f"| the hf backend end to end (label scoring, every lever) | {fraction or 0:.2f} |", ""]
    if bf16:
        lines += ["## bfloat16 against fp32 (opt-in: `dtype=bfloat16`)", "", *bf16["lines"], ""]
    text = "\n".join(lines)
    print(text)
    ratios = {
        "speedup_vs_reference_choices": ratio(by, "reference-choices" if "reference-choices" in by else "reference", "engine"),
        "speedup_choices_vs_generation_reference": ratio(by, "reference", "engine"),
        "speedup_vs_reference_generate": ratio(by, "reference", "engine-gen"),
        "speedup_vs_promptbench_choices": ratio(by, "promptbench", "engine"),
        "speedup_vs_promptbench_generate": ratio(by, "promptbench", "engine-gen"),
    }
    same = same_prompts(by["reference"], by["engine-gen"]) if "reference" in by and "engine-gen" in by else None
    same_choices = (same_prompts(by["reference-choices"], by["engine"])
                    if "reference-choices" in by and "engine" in by else None)
    payload = {
        **ratios,
        "same_adversarial_prompts_generate": same[0] / same[1] if same and same[1] else None,
        "same_adversarial_prompts_choices": same_choices[0] / same_choices[1] if same_choices and same_choices[1] else None,
        "model_calls": {c.name: c.model_calls for c in contenders},
        "hf_fp32_peak_fraction": fraction,
        "hf_fp32_peak_fraction_forward": depths["forward"] if depths else None,
        "hf_fp32_peak_fraction_linear": depths["linear"] if depths else None,
        "positions_over_lower_bound": by["engine"].positions / bounds["engine"] if bounds.get("engine") else None,
        "positions_over_lower_bound_generate": (by["engine-gen"].positions / bounds["engine-gen"]
                                                if bounds.get("engine-gen") else None),
        "linear_kernel": kernel.kernel if kernel else None,
        "linear_kernel_reason": kernel.reason if kernel else None,
        "fp32_peak_gflops": peak["flops_per_s"] / 1e9,
        "bf16": {k: v for k, v in (bf16 or {}).items() if k != "lines"},
        "breakdown": breakdown,
        "model": args.model,
        "shots": shots,
        "sizes": {"samples": len(samples), "top_k": args.top_k, "attacks": runnable, "budget": args.budget,
                  "max_tokens": args.max_tokens, "batch_size": args.batch_size},
    }
    contender_rows = [{"name": c.name, "seconds": c.seconds, "model_calls": c.model_calls, "cache_hits": c.cache_hits,
                       "saved_by_early_stopping": c.saved_by_early_stopping, "positions": c.positions,
                       "phases": c.phases,
                       "ranking": c.ranking,
                       "results": [{"attack": a, "prompt_id": p, "clean": r[0], "attacked": r[1], "adversarial_prompt": r[2]}
                                   for (a, p), r in c.results.items()]} for c in contenders]
    if args.out:
        write_results(args.out, text, command_line("protocol.py"),
                      {**payload, "levers": levers["rows"], "contenders": contender_rows, "unavailable": unavailable,
                       "backend": backend.runtime()})
    if args.summary and args.section:
        update_section(args.summary, args.section, command_line("protocol.py"),
                       section_figures(args, payload, extra, breakdown, by, bounds, runnable, len(samples), shots,
                                       certificates))
    elif args.summary:
        update_summary(args.summary, command_line("protocol.py"), payload)
    await backend.close()


if __name__ == "__main__":
    asyncio.run(main())
