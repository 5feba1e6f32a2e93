"""How an attack's cost grows with the number of samples and the prompt's length.

Samples: one attack with our engine (label scoring, exact early stopping, a
fresh cache file per size) on the first 50, 100, 200, 400 samples of the same
seeded draw: requests, wall time and requests/s per size.

Prompt length: the same prompt lengthened by 0, 2, 4, 8 extra instruction
sentences (ours, placed before it), each scored once over the same samples by
the reference loop (one generate call per sample) and by our engine (label
scoring, batches with a shared prefix), fresh cache each: what one candidate
costs, and how many candidates a word-level attack must score just to rank
the prompt's words (one per attackable word).

    python bench/scaling.py --attack stresstest --sizes 50,100,200,400 --prompt-lengths 0,2,4,8
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from promptrobust.attacks.words import is_protected, normalize_protected, tokenize, word_indices
from bench.attack_cost import evaluator_for, measure, measurement_rows
from bench.report import command_line, header, write_results
from promptrobust.engine.measuring.workbench import protected_words
from promptrobust.engine.serving.cache import ScoreCache
from bench.reference import ReferenceScorer
from promptrobust.engine.serving.registry import build_backend, resolve_model
from promptrobust.engine.serving.scheduler import Scheduler
from promptrobust.engine.serving.scheduler_settings import SchedulerSettings
from promptrobust.tasks import get_task, load_prompts

#: Extra instruction sentences (ours) that lengthen a sentiment prompt without changing its task.
EXTRA_SENTENCES = (
    "Read the whole review before you decide.",
    "Judge the opinion of the writer, not the events of the plot.",
    "A review that praises the acting but dislikes the film as a whole is negative.",
    "Irony and sarcasm count for what the writer really means.",
    "Mixed reviews are decided by their overall verdict.",
    "Ignore spelling mistakes and unusual punctuation.",
    "Short fragments still carry an opinion, so answer them too.",
    "Give one label only, with no explanation.",
)


def lengthened(prompt: str, extra: int) -> str:
    return " ".join(list(EXTRA_SENTENCES[:extra]) + [prompt])


async def pass_cost(backend, task, samples, prompt: str, *, cache_dir: Path, batch_size: int) -> dict:
    """One candidate's pass over the samples: reference loop versus our engine (label scoring)."""
    reference = ReferenceScorer(backend, task, samples)
    t0 = time.perf_counter()
    await reference.score(prompt)
    ref_seconds = time.perf_counter() - t0
    cache = ScoreCache(cache_dir / f"len{len(prompt)}.sqlite")
    sched = Scheduler(backend, cache=cache, settings=SchedulerSettings(batch_size=batch_size, max_wait_ms=5), owns_backend=False)
    await sched.start()
    evaluator = evaluator_for("engine", sched, task, samples, chunk_size=len(samples))
    t0 = time.perf_counter()
    await evaluator.evaluate(prompt)
    engine_seconds = time.perf_counter() - t0
    await sched.close()
    cache.close()
    tokens = None
    if hasattr(backend, "encode_input"):  # the hf backend's tokenisation, for the table
        tokens = sum(len(backend.encode_input(evaluator.builder.build(prompt, s))) for s in samples) / len(samples)
    return {"words": len(prompt.split()), "input_tokens": tokens, "reference_seconds": ref_seconds,
            "reference_calls": reference.cost.model_calls, "engine_seconds": engine_seconds,
            "engine_requests": evaluator.requests.sent,
            "words_to_rank": words_to_rank(prompt, protected_words(task))}


def words_to_rank(prompt: str, protected: frozenset[str]) -> int:
    """Words a greedy word-level attack scores one candidate each for, before changing any."""
    tokens = tokenize(prompt)
    keep = normalize_protected(protected)
    return sum(1 for i in word_indices(tokens) if not is_protected(tokens[i], keep))


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--dataset", default="rotten_tomatoes")
    ap.add_argument("--attack", default="stresstest")
    ap.add_argument("--sizes", default="50,100,200,400")
    ap.add_argument("--budget", type=int, default=12)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--prompt-lengths", default="0,2,4,8", help="extra instruction sentences per row ('' to skip)")
    ap.add_argument("--length-samples", type=int, default=48, help="samples per pass in the prompt-length table")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    extras = [int(x) for x in args.prompt_lengths.split(",") if x.strip()]
    if any(not 0 <= e <= len(EXTRA_SENTENCES) for e in extras):
        ap.error(f"--prompt-lengths: each value must be between 0 and {len(EXTRA_SENTENCES)}")
    task = get_task(args.dataset)
    prompt = load_prompts(task.name, types=["task"])[0]
    backend = build_backend(resolve_model(args.model))
    await backend.start()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            samples = task.load(limit=n, seed=0)
            sub = Path(tmp) / f"n{n}"
            sub.mkdir()
            m = await measure("engine", args.attack, backend, task, samples, prompt.text, budget=args.budget, seed=0,
                              cache_dir=sub, batch_size=args.batch_size)
            rows.append((n, m))
            print(f"# {n:5d} samples {m.seconds:7.1f}s sent {m.requests_sent}", file=sys.stderr, flush=True)
        length_rows = []
        samples = task.load(limit=args.length_samples, seed=0)
        for extra in extras:
            row = await pass_cost(backend, task, samples, lengthened(prompt.text, extra), cache_dir=Path(tmp),
                                  batch_size=args.batch_size)
            length_rows.append(row)
            print(f"# +{extra} sentences: {row['words']} words, reference {row['reference_seconds']:.1f}s, "
                  f"engine {row['engine_seconds']:.1f}s", file=sys.stderr, flush=True)
    await backend.close()
    cmd = command_line("scaling.py")
    lines = [
        *header("Attack cost versus dataset size", cmd,
                f"model {args.model}; {task.name}; prompt {prompt.id}; attack {args.attack}; budget {args.budget}; "
                "our engine, label scoring, fresh cache per size."),
        "| samples | candidates | requests sent | seconds | requests/s | seconds per 100 samples | clean | attacked |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, m in rows:
        lines.append(
            f"| {n} | {m.candidates} | {m.requests_sent} | {m.seconds:.1f} | {m.samples_per_second:.2f} | "
            f"{100 * m.seconds / n:.1f} | {m.clean_score:.3f} | {m.adversarial_score:.3f} |"
        )
    if length_rows:
        lines += [
            "",
            f"## Cost of one candidate versus prompt length ({args.length_samples} samples, fresh cache)",
            "",
            ("| prompt words | mean input tokens | reference loop s (calls) | our engine s (requests) | engine vs reference "
            "| words a word-level attack ranks (candidates) |"),
            "|---:|---:|---:|---:|---:|---:|",
        ]
        for r in length_rows:
            tokens = f"{r['input_tokens']:.0f}" if r["input_tokens"] is not None else "-"
            lines.append(
                f"| {r['words']} | {tokens} | {r['reference_seconds']:.1f} ({r['reference_calls']}) | "
                f"{r['engine_seconds']:.1f} ({r['engine_requests']}) | "
                f"{r['reference_seconds'] / r['engine_seconds']:.2f}x | {r['words_to_rank']} |"
            )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        write_results(args.out, text, cmd, {"rows": measurement_rows([m for _, m in rows]), "prompt_length": length_rows})


if __name__ == "__main__":
    asyncio.run(main())
