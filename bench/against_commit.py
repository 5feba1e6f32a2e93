"""The engine's per-call speed against an earlier commit, interleaved on one machine.

Runs ``bench/protocol.py`` (the engine contender only, by default the issue-39 settings) from this
checkout and from a git worktree of COMMIT, alternating A B A B ... so a shared machine's load falls
on both alike, and prints each round's engine seconds, model calls and positions, the medians and
their ratio. The two must make the same model calls over the same positions for the comparison to
mean speed per call (it says when they do not). A commit from before the links
promptrobust/{engine,attacks,tasks,cli} (e9519a0 and later have them) is imported through a
folder of such links made beside its worktree, which is what its installed package mapped.

    python bench/against_commit.py 3536474 --rounds 2
    python bench/against_commit.py 3536474 --rounds 2 -- --limit 30 --prompts 3 --top-k 1 \\
        --attacks stresstest,deepwordbug --contenders engine --lever-requests 0 --bf16-requests 0
"""

from __future__ import annotations

import argparse
import os
import resource
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


#: the top folders installed as ``promptrobust.<name>`` (pyproject's package-dir)
MAPPED = ("engine", "attacks", "tasks", "cli")


def import_root(checkout: Path, scratch: Path) -> Path:
    """The folder to put on PYTHONPATH so ``import promptrobust`` finds ``checkout``'s code.

    Since e9519a0 the checkout itself (``promptrobust/engine`` and the others are links); before,
    only the installed package mapped the top folders into ``promptrobust``, so a folder of links
    does it here."""
    if (checkout / "promptrobust" / "engine").exists():
        return checkout
    shim = scratch / f"import-{checkout.name}"
    package = shim / "promptrobust"
    package.mkdir(parents=True, exist_ok=True)
    for entry in (checkout / "promptrobust").iterdir():
        if not (package / entry.name).exists():
            (package / entry.name).symlink_to(entry.resolve())
    for name in MAPPED:
        if (checkout / name).is_dir() and not (package / name).exists():
            (package / name).symlink_to((checkout / name).resolve())
    return shim


#: Runs a script as ``python SCRIPT ARGS`` would, with ``promptrobust`` imported from the given
#: folder first: a script that puts its checkout first on sys.path would otherwise import an old
#: checkout's bare ``promptrobust/`` and the installed (editable) package's subpackages.
_BOOT = """
import importlib, runpy, sys
root, script = sys.argv[1], sys.argv[2]
sys.path[:0] = [str(__import__("pathlib").Path(script).parent), root]
importlib.import_module("promptrobust")
sys.argv = sys.argv[2:]
runpy.run_path(script, run_name="__main__")
"""


def run_once(checkout: Path, args: list[str], scratch: Path, tag: str) -> dict[str, float]:
    """One protocol run from ``checkout`` (its own code imported, whatever is installed); the engine's figures."""
    out = scratch / f"{tag}.md"
    script = checkout / "bench" / "protocol.py"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-c", _BOOT, str(import_root(checkout, scratch)), str(script), *args,
                           "--out", str(out)], cwd=checkout, env=dict(os.environ), capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"bench/protocol.py failed in {checkout}:\n{done.stderr[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    data = orjson.loads(out.with_suffix(".json").read_bytes())
    payload = data.get("results", data)
    engine = next(c for c in payload["contenders"] if c["name"] == "engine")
    return {"seconds": float(engine["seconds"]), "model_calls": int(engine["model_calls"]),
            "positions": int(engine["positions"]),
            "cpu_seconds": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)}


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
                          f"positions {got['positions']:,}  process CPU {got['cpu_seconds']:.1f} s", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, capture_output=True)
    new, before = (statistics.median(r["seconds"] for r in rows[n]) for n in ("this checkout", args.commit))
    same = {(r["model_calls"], r["positions"]) for rs in rows.values() for r in rs}
    print(f"median: this checkout {new:.1f} s, {args.commit} {before:.1f} s: this / earlier = {new / before:.3f}")
    cpu_new, cpu_before = (statistics.median(r["cpu_seconds"] for r in rows[n]) for n in ("this checkout", args.commit))
    print(f"process CPU (the whole run: loading, both threads, all cores): this checkout {cpu_new:.1f} s, "
          f"{args.commit} {cpu_before:.1f} s: {cpu_new / cpu_before:.3f}")
    print("same model calls and positions in every run" if len(same) == 1 else
          f"the runs differ in model calls or positions ({sorted(same)}): the ratio is not per call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
