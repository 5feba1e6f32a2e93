"""Warnings of third-party libraries while pre works: caught, and said in our words where they matter.

A library's warning printed by Python lands in the middle of the progress line (two lines:
the message and the source line that raised it), in every run, in the terminal and in a
notebook, and is usually about how promptrobust calls the library, not about the user's run.
While ``capture()`` is active (``engine.progress.reporting`` holds it: every ``pre`` command
and every Python API call), Python's ``warnings.showwarning`` is replaced by a router that
sorts each warning that Python's filters decided to show:

- from the user's own code or from promptrobust itself: shown as Python would (untouched);
- a third-party progress-bar warning (tqdm's ``IProgress not found`` in Jupyter without
  ipywidgets, its experimental-notebook notice): silent, pre draws its own progress;
- a third-party deprecation (``FutureWarning``, ``DeprecationWarning``): about the code calling
  the library, not the run's numbers: not printed, noted once in this process's list
  (``noted()``), which every ``results.json`` records as ``library_warnings``;
- any other third-party warning: might matter, so it is said once, in one line
  (``pre: warning: LIBRARY: ...``) through the current progress reporter (above the status line,
  never into it), and noted as well.

The user's own choice wins: with ``-W`` or ``PYTHONWARNINGS`` (``sys.warnoptions``) or with
``PRE_DEBUG`` set nothing is routed, and a filter that ignores or raises a warning acts before
the router is asked. The router is installed once however many captures are open (sweep jobs,
nested API calls, threads) and removed when the last one closes.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any, TextIO

__all__ = ["Noted", "capture", "classify", "noted"]

#: What ``classify`` decides for a warning.
PASS, SILENT, RECORD, SAY = "pass", "silent", "record", "say"

#: Folders third-party packages are installed into.
_INSTALL_DIRS = frozenset({"site-packages", "dist-packages"})

#: transformers' ``deprecate_kwarg`` message (transformers/utils/deprecation.py).
_DEPRECATED_KEYWORD = re.compile(
    r"^`(?P<name>\w+)` is deprecated and will be removed in version (?P<version>[\w.]+) for `(?P<where>[\w.]+)`\."
    r"(?: Use `(?P<new>\w+)` instead\.)?"
)


@dataclass(frozen=True)
class Noted:
    """A third-party warning seen in this process, as ``results.json`` records it."""

    library: str
    """The installed package the warning came from (the one named in the text, else the file's)."""
    category: str
    """The warning's class name (FutureWarning, UserWarning, ...)."""
    text: str
    """What it means for a pre run, in our words (one line)."""
    warning: str
    """The library's own first line."""
    said: bool
    """Whether it was said on the terminal (False: a deprecation, only recorded here)."""

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


_lock = threading.Lock()
_depth = 0
_previous: Any = None
_noted: dict[tuple[str, str], Noted] = {}


def noted() -> list[dict[str, object]]:
    """Every third-party warning noted in this process so far, once each, in the order seen."""
    with _lock:
        return [n.to_dict() for n in _noted.values()]


def user_decides() -> bool:
    """The user chose how warnings are shown (``-W``, ``PYTHONWARNINGS``) or asked to see everything (``PRE_DEBUG``)."""
    return bool(sys.warnoptions) or bool(os.environ.get("PRE_DEBUG"))


@contextlib.contextmanager
def capture() -> Iterator[None]:
    """Route third-party warnings (see the module docstring) inside the block."""
    global _depth, _previous
    if user_decides():
        yield
        return
    with _lock:
        if _depth == 0:
            _previous = warnings.showwarning
            warnings.showwarning = _route
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                if warnings.showwarning is _route:  # someone else's hook installed meanwhile stays
                    warnings.showwarning = _previous
                _previous = None


def library_of(filename: str) -> str | None:
    """The installed package a file belongs to; None for the user's code, the standard library
    and promptrobust itself (installed or in a checkout)."""
    parts = Path(filename).parts
    for i, part in enumerate(parts[:-1]):
        if part in _INSTALL_DIRS:
            name = parts[i + 1]
            name = name[:-3] if name.endswith(".py") else name
            return None if name == "promptrobust" else name
    return None


def classify(message: str, category: type[Warning], filename: str) -> tuple[str, Noted | None]:
    """What to do with a warning Python is about to show: ``PASS`` it on, keep it ``SILENT``,
    ``RECORD`` it (noted, not printed) or ``SAY`` it once (and note it); with the note."""
    library = library_of(filename)
    if library is None:
        return PASS, None
    first = " ".join((message.strip().splitlines() or [""])[0].split())
    name = category.__name__
    if name.startswith("Tqdm"):  # tqdm's notebook notices: pre draws its own progress
        return SILENT, None
    keyword = _DEPRECATED_KEYWORD.match(first)
    if keyword is not None and issubclass(category, (FutureWarning, DeprecationWarning)):
        found = keyword.groupdict()
        new = f" (its new name: {found['new']})" if found.get("new") else ""
        method = found["where"].rsplit(".", 1)[-1]  # LlamaModel.forward and Gemma3ForCausalLM.forward: one note
        text = (f"transformers {_version('transformers') or ''} deprecates the keyword {found['name']}{new} of "
                f"{method}(), which promptrobust passes; it stops working in transformers {found['version']}. "
                "Answers are not affected now; update promptrobust before installing that version")
        return RECORD, Noted("transformers", name, " ".join(text.split()), first, False)
    if issubclass(category, (FutureWarning, DeprecationWarning, PendingDeprecationWarning)):
        text = f"{library} {_version(library) or ''} deprecates something promptrobust or a library it uses calls: {first}"
        return RECORD, Noted(library, name, " ".join(text.split()), first, False)
    return SAY, Noted(library, name, f"{library}: {first}", first, True)


def _route(message: Warning | str, category: type[Warning], filename: str, lineno: int,
           file: TextIO | None = None, line: str | None = None) -> None:
    """``warnings.showwarning`` while a capture is open."""
    try:
        action, note = classify(str(message), category, filename)
    except Exception:  # noqa: BLE001 - a router bug must never hide a warning or break the run
        action, note = PASS, None
    if action == PASS:
        previous = _previous or warnings._showwarning_orig  # type: ignore[attr-defined]
        previous(message, category, filename, lineno, file, line)
        return
    if note is None:
        return
    with _lock:  # once each: the same deprecation warned by two classes is one note
        first = (note.library, note.text) not in _noted
        _noted.setdefault((note.library, note.text), note)
    if action == SAY and first:
        from promptrobust.engine.progress.events import library_warning

        library_warning(f"{note.library}:{note.warning}", note.text)


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except (metadata.PackageNotFoundError, ValueError):
        module = sys.modules.get(package)
        return getattr(module, "__version__", None) if isinstance(module, ModuleType) else None
