"""Checks that fail in a second, before any data loads or model starts."""

from __future__ import annotations

from typing import Any


def check_credentials(spec: Any) -> None:
    """The model can be reached from here: its extra is installed, an API model has its key
    (``registry.check_available``); said before the dataset is loaded."""
    from promptrobust.engine.serving.registry import check_available

    check_available(spec)
