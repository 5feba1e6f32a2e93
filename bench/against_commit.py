"""The engine's per-call speed against an earlier commit, interleaved on one machine.

Runs ``bench/protocol.py`` (the engine contender only, by default the issue-39 settings) from this
checkout and from a git worktree of COMMIT, alternating A B A B ... so a shared machine's load falls
on both alike, and prints each round's engine seconds, model calls and positions, the medians and
their ratio. The two must make the same model calls over the same positions for the comparison to
mean speed per call (it says when they do not). COMMIT must have this package layout (the links
promptrobust/{engine,attacks,tasks,cli}: e9519a0 and later); older commits import another layout.

    python bench/against_commit.py 3536474 --rounds 2
    python bench/against_commit.py 3536474 --rounds 2 -- --limit 30 --prompts 3 --top-k 1 \\
        --attacks stresstest,deepwordbug --contenders engine --lever-requests 0 --bf16-requests 0
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
#: issue 39's comparison (``--model gemma3-270m``, 30 samples, 3 prompts, two attacks, the engine alone)
DEFAULT_ARGS = ["--model", "gemma3-270m", "--limit", "30", "--prompts", "3", "--top-k", "1",
                "--attacks", "stresstest,deepwordbug", "--contenders", "engine", "--lever-requests", "0",
                "--bf16-requests", "0"]


def run_once(checkout: Path, args: list[str], scratch: Path, tag: str) -> dict[str, float]:
    """One protocol run from ``checkout`` (its own code on PYTHONPATH); the engine's figures."""
    out = scratch / f"{tag}.md"
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run([sys.executable, str(checkout / "bench" / "protocol.py"), *args, "--out", str(out)],
                          cwd=checkout, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench/protocol.py failed in {checkout}:\n{done.stderr[-3000:]}")
    data = orjson.loads(out.with_suffix(".json").read_bytes())
    payload = data.get("results", data)
    engine = next(c for c in payload["contenders"] if c["name"] == "engine")
    return {"seconds": float(engine["seconds"]), "model_calls": int(engine["model_calls"]),
            "positions": int(engine["positions"])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("commit", help="the earlier commit (any git revision)")
    ap.add_argument("--rounds", type=int, default=2, help="runs of each, interleaved")
    ap.add_argument("protocol_args", nargs="*", help="after --: bench/protocol.py's arguments (default: issue 39's)")
    args = ap.parse_args(argv)
    protocol_args = args.protocol_args or DEFAULT_ARGS
    with tempfile.TemporaryDirectory(prefix="against-") as tmp:
        scratch = Path(tmp)
        old = scratch / "old"
        subprocess.run(["git", "worktree", "add", "--detach", str(old), args.commit], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            rows: dict[str, list[dict[str, float]]] = {"this checkout": [], args.commit: []}
            for k in range(args.rounds):
                for name, checkout in (("this checkout", ROOT), (args.commit, old)) if k % 2 == 0 else \
                        ((args.commit, old), ("this checkout", ROOT)):
                    got = run_once(checkout, protocol_args, scratch, f"{k}-{name.replace(' ', '_')}")
                    rows[name].append(got)
                    print(f"round {k + 1}  {name:<14} {got['seconds']:8.1f} s  calls {got['model_calls']:,}  "
                          f"positions {got['positions']:,}", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, capture_output=True)
    new, before = (statistics.median(r["seconds"] for r in rows[n]) for n in ("this checkout", args.commit))
    same = {(r["model_calls"], r["positions"]) for rs in rows.values() for r in rs}
    print(f"median: this checkout {new:.1f} s, {args.commit} {before:.1f} s: this / earlier = {new / before:.3f}")
    print("same model calls and positions in every run" if len(same) == 1 else
          f"the runs differ in model calls or positions ({sorted(same)}): the ratio is not per call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
