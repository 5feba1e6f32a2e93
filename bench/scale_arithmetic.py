"""The request, GPU-hour and API-cost arithmetic of docs/scale.md, in one place.

    python bench/scale_arithmetic.py            # prints the Markdown tables

Every input is a named constant below (the paper's grid and sample sizes,
token-length assumptions, hardware and prices); change one and rerun.
"""

from __future__ import annotations

import math

#: The paper's sample sizes (docs/DESIGN.md): dataset -> samples.
SAMPLES = {
    "SST-2": 872, "CoLA": 1000, "QQP": 1000, "MRPC": 408, "MNLI": 1000, "QNLI": 1000, "RTE": 277, "WNLI": 71,
    "MMLU": 564, "SQuAD v2": 200, "IWSLT 2017": 100, "UN Multi": 99, "Math": 160,
}
#: Assumed mean tokens per sample (Llama-2 tokenizer, the input text without the instruction) and
#: mean output tokens in generate mode (labels stop at EOS; translation is capped at 20 new tokens).
SAMPLE_TOKENS = {
    "SST-2": 25, "CoLA": 12, "QQP": 30, "MRPC": 50, "MNLI": 40, "QNLI": 50, "RTE": 70, "WNLI": 35,
    "MMLU": 100, "SQuAD v2": 180, "IWSLT 2017": 35, "UN Multi": 45, "Math": 40,
}
OUTPUT_TOKENS = {d: 2 for d in SAMPLES} | {"SQuAD v2": 6, "IWSLT 2017": 20, "UN Multi": 20, "Math": 4}
INSTRUCTION_TOKENS = 30  # one prompt of the prompt set
TEMPLATE_TOKENS = 10  # chat template / answer cue around the sample
SHOTS = 3

PROMPT_TYPES = 4  # zero-shot task, zero-shot role, few-shot task, few-shot role
PROMPTS_PER_SET = 10  # prompts ranked per (dataset, prompt type)
TOP_K = 3
ATTACKS = ("textbugger", "deepwordbug", "textfooler", "bertattack", "checklist", "stresstest", "semantic")
CANDIDATES = 100  # the uniform ~100 candidate prompts per attacked prompt
#: Per-recipe candidates per attacked prompt, worst case (every word of a 15-word prompt tried).
WORDS = 15
RECIPE_CANDIDATES = {
    "textbugger": WORDS + WORDS * 10, "deepwordbug": WORDS + WORDS * 4, "textfooler": WORDS + WORDS * 50,
    "bertattack": WORDS + WORDS * 48, "checklist": 50, "stresstest": 3, "semantic": 60,
}

#: Open models of the paper and their parameters (billions).
OPEN_MODELS = {
    "Flan-T5-large": 0.78, "Dolly-v1-6B": 6.0, "Vicuna-13B": 13.0, "Llama2-13B-chat": 13.0, "Cerebras-GPT-13B": 13.0,
    "GPT-NeoX-20B": 20.0, "Flan-UL2": 20.0,
}
H100_BF16_DENSE_TFLOPS = 989.0
MFU = 0.40
#: USD per 1M tokens (input, output), OpenAI's pricing page as of 2025-2026; GPT-4 is the legacy 8k model.
PRICES = {"gpt-3.5-turbo": (0.50, 1.50), "gpt-4": (30.0, 60.0), "gpt-4o-mini": (0.15, 0.60), "gpt-4o": (2.50, 10.0)}


def requests_per_sample(candidates: float = CANDIDATES) -> float:
    """Clean ranking of every prompt set + top-k attacked prompts x (candidates + the clean prompt)."""
    clean = PROMPT_TYPES * PROMPTS_PER_SET
    return clean + len(ATTACKS) * PROMPT_TYPES * TOP_K * (candidates + 1)


def per_dataset() -> list[tuple[str, int, float, float, float]]:
    """(dataset, samples, requests per model, computed tokens per request, API input tokens per request)."""
    rows = []
    for d, n in SAMPLES.items():
        s, out = SAMPLE_TOKENS[d], OUTPUT_TOKENS[d]
        computed = s + TEMPLATE_TOKENS + out  # the prompt (+ shots) prefix is cached by vLLM
        zero = INSTRUCTION_TOKENS + TEMPLATE_TOKENS + s
        few = zero + SHOTS * (s + out + TEMPLATE_TOKENS)
        rows.append((d, n, n * requests_per_sample(), computed, (zero + few) / 2))
    return rows


def main() -> None:
    rows = per_dataset()
    per_model = sum(r[2] for r in rows)
    models = len(OPEN_MODELS) + 2
    print(f"requests per sample and model: {requests_per_sample():,.0f}; per model: {per_model / 1e6:.1f} M; "
          f"{models} models: {models * per_model / 1e6:.0f} M\n")

    print("| dataset | samples | requests per model (M) | computed tokens/request | API input tokens/request |")
    print("|---|---:|---:|---:|---:|")
    for d, n, req, comp, api in rows:
        print(f"| {d} | {n} | {req / 1e6:.2f} | {comp:.0f} | {api:.0f} |")
    print(f"| **all 13** | {sum(SAMPLES.values())} | {per_model / 1e6:.1f} | | |\n")

    samples = sum(SAMPLES.values())
    print("| attack | candidates (uniform) | requests per model (M) | candidates (recipe, worst case) | requests per model (M) |")
    print("|---|---:|---:|---:|---:|")
    for a in ATTACKS:
        uniform = PROMPT_TYPES * TOP_K * (CANDIDATES + 1) * samples
        recipe = PROMPT_TYPES * TOP_K * (RECIPE_CANDIDATES[a] + 1) * samples
        print(f"| {a} | {CANDIDATES} | {uniform / 1e6:.2f} | {RECIPE_CANDIDATES[a]} | {recipe / 1e6:.2f} |")
    clean = PROMPT_TYPES * PROMPTS_PER_SET * samples
    print(f"| clean ranking | {PROMPTS_PER_SET} prompts x {PROMPT_TYPES} types | {clean / 1e6:.2f} | | |\n")

    tokens_per_model = sum(req * comp for _, _, req, comp, _ in rows)
    rate = H100_BF16_DENSE_TFLOPS * 1e12 * MFU
    print(f"computed tokens per model: {tokens_per_model / 1e9:.2f} B "
          f"(H100 {H100_BF16_DENSE_TFLOPS:g} TFLOPS dense BF16 at {MFU:.0%} MFU)\n")
    print("| model | params (B) | H100-hours | H100s for 24 h | prefill tokens/s per GPU | requests/s per GPU |")
    print("|---|---:|---:|---:|---:|---:|")
    total, gpus = 0.0, 0
    for m, p in OPEN_MODELS.items():
        flops = 2 * p * 1e9 * tokens_per_model
        hours = flops / rate / 3600
        total += hours
        gpus += math.ceil(hours / 24)
        print(f"| {m} | {p:g} | {hours:,.0f} | {math.ceil(hours / 24)} | {rate / (2 * p * 1e9):,.0f} | "
              f"{per_model / (hours * 3600):,.0f} |")
    print(f"| **7 open models** | | **{total:,.0f}** | **{gpus}** | | |\n")
    print(f"GPU-hours / 24 = {total / 24:.1f} H100s with perfect packing; {gpus} with whole GPUs per model "
          "(each model fits one 80 GB GPU in BF16)\n")

    api_in = sum(req * api for _, _, req, _, api in rows)
    api_out = sum(req * OUTPUT_TOKENS[d] for d, _, req, _, _ in rows)
    print(f"API tokens per model: input {api_in / 1e9:.2f} B, output {api_out / 1e9:.2f} B (generate mode)\n")
    print("| API model | USD per 1M in / out | full grid, USD |")
    print("|---|---|---:|")
    for m, (pin, pout) in PRICES.items():
        cost = api_in / 1e6 * pin + api_out / 1e6 * pout
        print(f"| {m} | {pin:g} / {pout:g} | {cost:,.0f} |")


if __name__ == "__main__":
    main()
