"""Public test doubles for code built on promptrobust (httpx's MockTransport is the model).

- ``CountingBackend``: a deterministic in-process backend that records every batch;
  ``TableTask`` / ``table_answer``: a tiny task whose answers come from a table.
- ``SyntheticScorer``: a real PromptScorer over made-up data, for attack tests.
- ``FakeOpenAIServer``: a real OpenAI-compatible HTTP server on 127.0.0.1 with
  scriptable faults (429, 5xx, slow, dropped, malformed answers).
- ``run_in_terminal`` / ``render``: a command in a pseudo-terminal, and the screen it leaves.

Nothing here is imported by the product's own modules.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CountingBackend": "promptrobust.testing.backends",
    "FractionMetric": "promptrobust.testing.backends",
    "TableTask": "promptrobust.testing.backends",
    "table_answer": "promptrobust.testing.backends",
    "SyntheticScorer": "promptrobust.testing.synthetic",
    "contract_violations": "promptrobust.testing.synthetic",
    "build_tiny_masked_lm": "promptrobust.testing.synthetic",
    "FakeOpenAIServer": "promptrobust.testing.fake_openai",
    "sentiment_answer": "promptrobust.testing.fake_openai",
    "TerminalRecording": "promptrobust.testing.terminal",
    "render": "promptrobust.testing.terminal",
    "run_in_terminal": "promptrobust.testing.terminal",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'promptrobust.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
