"""Label scoring against a real vLLM server: HTTP requests per sample, wall time and prefix-cache hits.

``pre run --mode choices`` of one prompt on N samples (``promptrobust.evaluate``) through ``openai:MODEL``
against a running vLLM server, twice per round, interleaved: the exact route (``logprob_token_ids``,
found on its own from the server's ``/version``) and the top-20 approximation (``scoring=top_logprobs``).
What each run sent is counted from the server's access log (``POST /tokenize``, ``/v1/completions``,
``/v1/chat/completions``, between the run's first and last byte of the log), and vLLM's prefix cache
from its ``/metrics`` counters (tokens looked up and tokens found, before and after the run). Nothing
is cached on the client (``use_cache=False``): every run asks the server.

    VLLM_CPU_KVCACHE_SPACE=1 vllm serve DIR --served-model-name gemma3-270m --port 8123 > serve.log 2>&1 &
    PYTHONPATH=. python bench/vllm_server.py --url http://127.0.0.1:8123/v1 --model gemma3-270m \\
        --server-log serve.log --samples 100 --shots 3 --concurrency 64 --rounds 2

(``pre list serve --model gemma3-270m`` prints the serve command.) The prefix-cache line says how many
prompt tokens the server found cached: hits land on whole KV blocks (vLLM's block size: 16 on GPUs,
128 on CPU unless ``--block-size``), so a shared instruction and few-shot block shorter than one block
is never a hit (docs/scale.md section 7). A sample the server saw whole in an earlier run is a hit of
its own: give each measurement its own ``--seed`` (other samples) to count what the samples share.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout

from bench.environment import describe_line
from promptrobust.engine.measuring.settings import EvaluationSettings
from promptrobust.engine.runs.api import evaluate
from promptrobust.engine.runs.prompt_choice import choose_prompts
from promptrobust.engine.serving.scheduler_settings import SchedulerSettings

ROUTES = {"logprob_token_ids": "", "top_logprobs": ",scoring=top_logprobs"}
_ACCESS = re.compile(r'"(GET|POST) (/[^ ?"]*)')
_METRIC = re.compile(r"^(vllm:prefix_cache_(?:queries|hits)_total)(?:\{[^}]*\})? ([0-9.eE+-]+)$", re.M)


def _log_size(path: Path) -> int:
    return path.stat().st_size


def _requests_between(path: Path, start: int, end: int) -> dict[str, int]:
    """Requests the server's access log shows between two byte offsets, by method and path."""
    with path.open("rb") as f:
        f.seek(start)
        text = f.read(end - start).decode("utf-8", "replace")
    counts: dict[str, int] = {}
    for method, route in _ACCESS.findall(text):
        if route.startswith(("/metrics", "/health")):
            continue  # this script's own reads
        counts[f"{method} {route}"] = counts.get(f"{method} {route}", 0) + 1
    return counts


def _prefix_cache(root: str) -> dict[str, float]:
    """vLLM's prefix-cache counters (prompt tokens looked up, tokens found) from its /metrics."""
    with urllib.request.urlopen(f"{root}/metrics", timeout=30) as answer:
        text = answer.read().decode("utf-8", "replace")
    out: dict[str, float] = {}
    for name, value in _METRIC.findall(text):
        key = "queries" if "queries" in name else "hits"
        out[key] = out.get(key, 0.0) + float(value)
    return out


def _version(root: str) -> str:
    with urllib.request.urlopen(f"{root}/version", timeout=30) as answer:
        return str(json.loads(answer.read()).get("version"))


def _one_run(args: argparse.Namespace, route: str, seed: int) -> dict[str, object]:
    root = args.url.rstrip("/").removesuffix("/v1")
    prompt = choose_prompts(args.dataset, prompt_ids=args.prompt)
    before_log, before_cache = _log_size(args.server_log), _prefix_cache(root)
    began = time.perf_counter()
    result = evaluate(
        EvaluationSettings(dataset=args.dataset, limit=args.samples, shots=args.shots, mode="choices",
                           system_instruction=args.system_instruction, seed=seed),
        model=f"openai:{args.model}",
        model_args=f"base_url={args.url},api=completions,base_model=true,timeout={args.timeout}{ROUTES[route]}",
        prompts=prompt, use_cache=False, scheduler=SchedulerSettings(concurrency=args.concurrency), progress=False,
    )
    seconds = time.perf_counter() - began
    time.sleep(1.0)  # the access log is written as answers go out
    counts = _requests_between(args.server_log, before_log, _log_size(args.server_log))
    after_cache = _prefix_cache(root)
    clean = result.clean[0]
    return {
        "route": route, "seconds": seconds, "requests": counts, "label_scoring": result.settings.get("label_scoring"),
        "posts": sum(n for k, n in counts.items() if k.startswith("POST")),
        "accuracy": clean.score, "sample_scores": list(clean.sample_scores),
        "cache_queries": after_cache.get("queries", 0.0) - before_cache.get("queries", 0.0),
        "cache_hits": after_cache.get("hits", 0.0) - before_cache.get("hits", 0.0),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True, help="the server's base URL, e.g. http://127.0.0.1:8123/v1")
    ap.add_argument("--model", required=True, help="the served model name (--served-model-name)")
    ap.add_argument("--server-log", type=Path, required=True, help="the server's output, with its access log")
    ap.add_argument("--dataset", default="rotten_tomatoes")
    ap.add_argument("--prompt", default="sst2-task-01")
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--shots", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="seconds a request may take (a loaded CPU server with 64 in flight needs minutes)")
    ap.add_argument("--seed", type=int, default=0,
                    help="which samples (another seed: samples the server has not cached whole from an earlier run)")
    ap.add_argument("--fresh", action="store_true",
                    help="each run its own samples (seed, seed+1, ...): no run finds another's prompts cached whole")
    ap.add_argument("--system-instruction", default=None,
                    help="a paragraph before every input (lengthens the prefix the samples share)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--routes", default=",".join(ROUTES), help="comma-separated: " + ", ".join(ROUTES))
    ap.add_argument("--json", type=Path, help="write the numbers here too")
    args = ap.parse_args(argv)
    routes = [r.strip() for r in args.routes.split(",") if r.strip()]
    runs: list[dict[str, object]] = []
    for n in range(args.rounds):
        for k, route in enumerate(routes):  # interleaved: both see the same machine load
            seed = args.seed + n * len(routes) + k if args.fresh else args.seed
            runs.append(_one_run(args, route, seed))
    root = args.url.rstrip("/").removesuffix("/v1")
    print(describe_line())
    extra = f", a system instruction of {len(args.system_instruction.split())} words" if args.system_instruction else ""
    extra += ", fresh samples per run" if args.fresh else ""
    print(f"vLLM {_version(root)} at {args.url}, model {args.model}: {args.samples} samples of {args.dataset}, "
          f"{args.shots} shots{extra}, prompt {args.prompt}, concurrency {args.concurrency}, {args.rounds} rounds")
    median: dict[str, float] = {}
    for route in routes:
        mine = [r for r in runs if r["route"] == route]
        seconds = [float(str(r["seconds"])) for r in mine]
        median[route] = statistics.median(seconds)
        last = mine[-1]
        queries, hits = float(str(last["cache_queries"])), float(str(last["cache_hits"]))
        per_sample = int(str(last["posts"])) / args.samples
        shown = ", ".join(f"{s:.2f}" for s in seconds)
        print(f"  {route:<18} {median[route]:7.2f} s (runs: {shown})  {per_sample:5.2f} HTTP requests per sample "
              f"{last['requests']}  accuracy {float(str(last['accuracy'])):.3f}  prefix cache: {hits:.0f} of "
              f"{queries:.0f} prompt tokens found ({hits / queries if queries else 0.0:.1%})")
    if len(routes) == 2:
        a, b = routes
        print(f"  {a} / {b}: {median[a] / median[b]:.2f}x the wall time")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
