"""Loading from the Hugging Face hub with the ``datasets`` package.

``datasets`` is optional and imported only here, when a task is loaded without
local files. Offline, or without the package, the error says how to pass
local files instead.
"""

from __future__ import annotations

import itertools
from typing import Any

from promptrobust.tasks.errors import TaskDataError


#: The paper's datasets that the hub still serves as loading scripts: their code runs only
#: with ``trust_remote_code`` (datasets 2.20-3.x), and datasets 4 cannot load them at all,
#: hence the [hub] extra's range (datasets>=2.19,<4). Trust is given to these names only.
SCRIPT_DATASETS = frozenset({"IWSLT/iwslt2017", "Helsinki-NLP/un_multi", "deepmind/math_dataset"})


def load_hf_rows(path: str, config: str | None, split: str, *, take: int | None = None) -> list[dict[str, Any]]:
    """Rows of one split as dicts. ``take`` streams only the first rows of a
    huge split instead of downloading all of it."""
    try:
        import datasets
        from datasets import load_dataset
    except ImportError as exc:
        raise TaskDataError(
            f"loading {path} from the Hugging Face hub needs the [hub] extra (pip install 'promptrobust[hub]'); "
            "or use local data files (a data folder or a data file)",
            setting="data_dir",
        ) from exc
    where = f"{path}" + (f"/{config}" if config else "") + f" split {split}"
    kwargs: dict[str, Any] = {}
    if path in SCRIPT_DATASETS:
        major = int(str(datasets.__version__).split(".")[0])
        if major >= 4:
            raise TaskDataError(
                f"{path} is a dataset script, which datasets {datasets.__version__} cannot load: "
                "pip install 'promptrobust[hub]' (datasets<4), or use local data files (a data folder or a data file)",
                setting="data_dir",
            )
        kwargs["trust_remote_code"] = True
    try:
        if take is not None:
            ds = load_dataset(path, config, split=split, streaming=True, **kwargs)
            return [dict(r) for r in itertools.islice(ds, take)]
        ds = load_dataset(path, config, split=split, **kwargs)
        return [dict(r) for r in ds]
    except Exception as exc:  # network, missing config, ...: one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TaskDataError(
            f"cannot load {where} from the Hugging Face hub ({first}); check the network or use local data files "
            "(a data folder or a data file)",
            setting="data_dir",
        ) from exc
