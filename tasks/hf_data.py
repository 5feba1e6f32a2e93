"""Loading from the Hugging Face hub with the ``datasets`` package.

``datasets`` is optional and imported only here, when a task is loaded without
local files. Offline, or without the package, the error says how to pass
local files instead.
"""

from __future__ import annotations

import itertools
from typing import Any

from promptrobust.tasks.errors import TaskDataError


def load_hf_rows(path: str, config: str | None, split: str, *, take: int | None = None) -> list[dict[str, Any]]:
    """Rows of one split as dicts. ``take`` streams only the first rows of a
    huge split instead of downloading all of it."""
    try:
        from datasets import load_dataset
    except ImportError as exc:
        raise TaskDataError(
            f"loading {path} from the Hugging Face hub needs the [hub] extra (pip install 'promptrobust[hub]'); "
            "or pass local files with --data-dir/--data-file"
        ) from exc
    where = f"{path}" + (f"/{config}" if config else "") + f" split {split}"
    try:
        if take is not None:
            ds = load_dataset(path, config, split=split, streaming=True)
            return [dict(r) for r in itertools.islice(ds, take)]
        ds = load_dataset(path, config, split=split)
        return [dict(r) for r in ds]
    except Exception as exc:  # network, missing config, ...: one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TaskDataError(
            f"cannot load {where} from the Hugging Face hub ({first}); check the network or pass --data-dir/--data-file"
        ) from exc
