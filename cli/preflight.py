"""Checks that fail in a second, before any data loads or model starts: credentials first."""

from __future__ import annotations

from typing import Any


def check_credentials(spec: Any) -> None:
    """An OpenAI-compatible model without its API key fails here, before the dataset is loaded
    (building the backend reads the key and nothing else; no request is sent)."""
    if spec.backend != "openai":
        return
    from promptrobust.engine.serving.registry import build_backend

    build_backend(spec)
