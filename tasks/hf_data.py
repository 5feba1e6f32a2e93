"""Loading from the Hugging Face hub with the ``datasets`` package.

``datasets`` is optional and imported only here, when a task is loaded without
local files. Offline, or without the package, the error says how to pass
local files instead.

The hub is looked at once before loading (``hub_reachable``: ``HF_HUB_OFFLINE`` /
``HF_DATASETS_OFFLINE``, else a connection to its host within a few seconds). When it is
switched off or cannot be reached, ``datasets`` loads in its offline mode: from its local
cache, or failing at once in one line, instead of huggingface_hub's retries (six raw
``Retrying in 1s [Retry 1/5]`` lines over about 50 s, then a 529-character error). While
loading, what huggingface_hub and ``datasets`` log is said as one ``pre: warning:`` line per
kind (retries counted in one), never as their raw lines.

A local folder given as a hub dataset (``hf:PATH``) is streamed from its files:
``load_dataset`` would first write an Arrow copy of all of it into the Hugging
Face cache (``~/.cache/huggingface``), whatever its size. Every split's rows are
held under the same bound as a data file's (``tasks.datafiles.max_rows_memory``),
counted as they arrive, so a split too large is one line, not an exhausted machine.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import socket
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from promptrobust.engine import progress
from promptrobust.tasks.datafiles import VALUE_BYTES, max_rows_memory, rows_memory, size_text, DataRow
from promptrobust.tasks.errors import TaskDataError


#: The paper's datasets that the hub still serves as loading scripts: their code runs only
#: with ``trust_remote_code`` (datasets 2.20-3.x), and datasets 4 cannot load them at all,
#: hence the [hub] extra's range (datasets>=2.19,<4). Trust is given to these names only.
SCRIPT_DATASETS = frozenset({"IWSLT/iwslt2017", "Helsinki-NLP/un_multi", "deepmind/math_dataset"})


#: Seconds a connection to the hub's host may take before the hub counts as unreachable.
HUB_CONNECT_SECONDS = 3.0
_OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
_TRUE = ("1", "true", "yes", "on")
#: The libraries whose log lines a hub load says in our words.
_HUB_LOGGERS = ("huggingface_hub", "datasets", "fsspec")


def hub_reachable(timeout: float = HUB_CONNECT_SECONDS) -> tuple[bool, str]:
    """(whether the Hugging Face hub can be used now, and if not why, as the end of a sentence):
    switched off by ``HF_HUB_OFFLINE``/``HF_DATASETS_OFFLINE``, or its host (``HF_ENDPOINT``, default
    huggingface.co) refusing or not answering a connection within ``timeout`` seconds."""
    for name in _OFFLINE_VARIABLES:
        if os.environ.get(name, "").strip().lower() in _TRUE:
            return False, f"is switched off here ({name} is set)"
    endpoint = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host = endpoint.hostname or "huggingface.co"
    port = endpoint.port or (80 if endpoint.scheme == "http" else 443)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True, ""
    except OSError as exc:
        cause = exc.strerror or str(exc) or type(exc).__name__
        return False, f"cannot be reached from here ({host}: {cause})"


class _SaidOnce(logging.Handler):
    """The hub libraries' log records of one load, said as one ``pre: warning:`` line per kind
    (numbers aside: six retry lines are one kind)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.kinds: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = " ".join(record.getMessage().split())
        except Exception:  # noqa: BLE001 - a malformed record is not worth a traceback
            return
        if re.search(r"Retrying in|thrown while requesting", text):
            text = "requests to the Hugging Face hub failed and were retried"
        kind = re.sub(r"\d+", "#", text)
        if kind in self.kinds:
            return
        self.kinds.add(kind)
        library = record.name.split(".")[0]
        progress.library_warning(f"{library}: {kind}", f"{library}: {text[:240]}")


@contextlib.contextmanager
def _hub_load(offline: bool) -> Iterator[None]:
    """While a hub load runs: the hub libraries' log lines said in ours (``_SaidOnce``), and with
    ``offline`` their offline mode on (the local cache only, no request, no retry)."""
    handler = _SaidOnce()
    saved = []
    for name in _HUB_LOGGERS:
        log = logging.getLogger(name)
        saved.append((log, list(log.handlers), log.propagate))
        log.handlers = [handler]
        log.propagate = False
    switched = []
    if offline:  # both read their flag at call time: datasets' loader and huggingface_hub's requests
        import importlib

        for name in ("datasets.config", "huggingface_hub.constants"):
            try:
                module = importlib.import_module(name)
            except ImportError:  # a datasets stand-in without the hub's flag (a test's): nothing to switch
                continue
            switched.append((module, getattr(module, "HF_HUB_OFFLINE", False)))
            setattr(module, "HF_HUB_OFFLINE", True)
    try:
        yield
    finally:
        for module, value in switched:
            setattr(module, "HF_HUB_OFFLINE", value)
        for log, handlers, propagate in saved:
            log.handlers, log.propagate = handlers, propagate


def _first_line(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    first = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0]
    return first if len(first) <= limit else first[: limit - 3] + "..."


def load_hf_rows(path: str, config: str | None, split: str, *, take: int | None = None) -> list[DataRow]:
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
    kwargs: dict[str, object] = {}
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
    if Path(path).is_dir():  # a local dataset folder: no hub involved
        reachable, why = True, ""
    else:
        reachable, why = hub_reachable()
    try:
        with _hub_load(offline=not reachable):
            if take is not None and reachable:  # streaming needs the hub; from the local cache, the whole split
                ds = load_dataset(path, config, split=split, streaming=True, **kwargs)
                return bounded_rows(itertools.islice(ds, take), where)
            # a local folder is streamed from its files: no Arrow copy of it in the Hugging Face cache
            ds = load_dataset(path, config, split=split, streaming=Path(path).is_dir(), **kwargs)
            rows = bounded_rows(ds, where)
            return rows[:take] if take is not None else rows
    except TaskDataError:
        raise
    except Exception as exc:  # network, missing config, ...: one line
        if not reachable:
            raise TaskDataError(
                f"cannot load {where}: the Hugging Face hub {why}, and the datasets package has no copy of it in its "
                "local cache; load it once online (it is cached then), or use local data files (a data folder or a data file)",
                setting="data_dir",
            ) from exc
        raise TaskDataError(
            f"cannot load {where} from the Hugging Face hub ({_first_line(exc)}); check the network or use local data "
            "files (a data folder or a data file)",
            setting="data_dir",
        ) from exc


def is_saved_to_disk(path: str) -> bool:
    """Whether ``path`` is a folder written by ``datasets``' ``save_to_disk`` (which
    ``load_dataset`` cannot read: it takes ``load_from_disk``)."""
    folder = Path(path)
    return folder.is_dir() and ((folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file())


def _rows_saved_to_disk(path: str, split: str, where: str) -> list[DataRow]:
    from datasets import DatasetDict, load_from_disk

    try:
        saved = load_from_disk(path)
    except Exception as exc:  # a damaged or partial folder: one line
        raise TaskDataError(f"cannot read {where} saved by datasets ({_first_line(exc)}); save it again with save_to_disk") from exc
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


def bounded_rows(rows: Iterable[Any], where: str) -> list[DataRow]:
    """``rows`` as dicts, refused in one line once what they take (``rows_memory``, counted as
    they arrive) passes the limit a data file's rows have."""
    limit = max_rows_memory()
    out: list[DataRow] = []
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
