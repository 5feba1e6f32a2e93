"""Loading from the Hugging Face hub with the ``datasets`` package.

``datasets`` is optional and imported only here, when a task is loaded without
local files. Offline, or without the package, the error says how to pass
local files instead.

A local folder given as a hub dataset (``hf:PATH``) is streamed from its files:
``load_dataset`` would first write an Arrow copy of all of it into the Hugging
Face cache (``~/.cache/huggingface``), whatever its size. Every split's rows are
held under the same bound as a data file's (``tasks.datafiles.max_rows_memory``),
counted as they arrive, so a split too large is one line, not an exhausted machine.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from promptrobust.tasks.datafiles import VALUE_BYTES, max_rows_memory, rows_memory, size_text
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
    if is_saved_to_disk(path):
        return _rows_saved_to_disk(path, split, where)
    try:
        if take is not None:
            ds = load_dataset(path, config, split=split, streaming=True, **kwargs)
            return bounded_rows(itertools.islice(ds, take), where)
        # a local folder is streamed from its files: no Arrow copy of it in the Hugging Face cache
        ds = load_dataset(path, config, split=split, streaming=Path(path).is_dir(), **kwargs)
        return bounded_rows(ds, where)
    except TaskDataError:
        raise
    except Exception as exc:  # network, missing config, ...: one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TaskDataError(
            f"cannot load {where} from the Hugging Face hub ({first}); check the network or use local data files "
            "(a data folder or a data file)",
            setting="data_dir",
        ) from exc


def is_saved_to_disk(path: str) -> bool:
    """Whether ``path`` is a folder written by ``datasets``' ``save_to_disk`` (which
    ``load_dataset`` cannot read: it takes ``load_from_disk``)."""
    folder = Path(path)
    return folder.is_dir() and ((folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file())


def _rows_saved_to_disk(path: str, split: str, where: str) -> list[dict[str, Any]]:
    from datasets import DatasetDict, load_from_disk

    try:
        saved = load_from_disk(path)
    except Exception as exc:  # a damaged or partial folder: one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TaskDataError(f"cannot read {where} saved by datasets ({first}); save it again with save_to_disk") from exc
    if isinstance(saved, DatasetDict):
        if split not in saved:
            raise TaskDataError(
                f"{path}: no split {split!r} in the saved dataset (it has {', '.join(saved)}); name one of them as the split",
                setting="split",
            )
        saved = saved[split]
    elif saved.split is not None and str(saved.split) != split:
        raise TaskDataError(f"{path}: the saved dataset is split {saved.split!s}, not {split!r}; name {saved.split!s} as the split",
                            setting="split")
    return bounded_rows(saved, where)


def bounded_rows(rows: Iterable[Any], where: str) -> list[dict[str, Any]]:
    """``rows`` as dicts, refused in one line once what they take (``rows_memory``, counted as
    they arrive) passes the limit a data file's rows have."""
    limit = max_rows_memory()
    out: list[dict[str, Any]] = []
    values = text = 0
    for row in rows:
        item = dict(row)
        values += len(item)
        text += sum(_text_size(v) for v in item.values())
        out.append(item)
        need = rows_memory(len(out), 0, text) + values * VALUE_BYTES
        if need > limit:
            raise TaskDataError(
                f"{where}: its rows take more than pre's limit of {size_text(limit)} of memory (about "
                f"{size_text(need)} after {len(out):,} rows); keep a sample of them in a smaller dataset, name a smaller "
                "split, or raise PRE_MAX_DATA_FILE_MB", setting="data_file")
    return out


def _text_size(value: Any, depth: int = 0) -> int:
    """About how many bytes of text ``value`` holds (strings, also in lists and dicts a few levels deep)."""
    if isinstance(value, str):
        return len(value)
    if depth < 3 and isinstance(value, (list, tuple)):
        return sum(_text_size(v, depth + 1) for v in value)
    if depth < 3 and isinstance(value, dict):
        return sum(_text_size(v, depth + 1) for v in value.values())
    return 0
