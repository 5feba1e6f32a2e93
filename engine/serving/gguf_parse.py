"""One parse of a GGUF file while transformers loads it.

transformers reads a GGUF (``from_pretrained(..., gguf_file=...)``) by parsing the whole file with
the ``gguf`` package's ``GGUFReader`` for each thing it builds: the config, the tokenizer and the
weights, each time from scratch. The parse reads the metadata one field at a time (a vocabulary of
262k strings for Gemma 3) through slices of a ``numpy.memmap``, whose Python-level slicing hooks are
most of its time. Inside ``one_gguf_parse()``:

* every read-only reader of one file is the same object, parsed once (a reader opened with mode
  ``"r"`` is a view of the mapped bytes that nothing writes, so sharing it changes nothing read);
* the reader's ``data`` is a plain ndarray view of the same mapping (no copy), which slices in C.

Gemma 3 270M here: 5.4 s a parse instead of 16.5 s, and one parse instead of three: its conversion
takes 31.7 s instead of 85.1 s, byte for byte the same files (``bench/conversion.py``).

transformers imports ``GGUFReader`` from the ``gguf`` module when it loads, so the class is replaced
there for the duration of the block and put back after; a version of either package that reads
differently is simply not sped up. Blocks in different threads of one process take turns (a lock):
two loads replacing the class at once would each put back what the other put in.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["one_gguf_parse"]

# held while ``gguf.GGUFReader`` is replaced; reentrant, so a block nested in the same thread works
_REPLACING = threading.RLock()


@contextmanager
def one_gguf_parse(on_read: Callable[[], None] | None = None, *, enabled: bool = True) -> Iterator[None]:
    """Within the block, transformers' GGUF reads share one fast parse per file (see the module
    docstring). ``on_read`` is called after every read transformers asks for (parsed or shared): a
    progress count. ``enabled=False`` only counts (transformers' own behaviour, for comparison)."""
    try:
        import gguf
    except ImportError:
        yield
        return
    parsed: dict[str, object] = {}
    with _REPLACING:
        original = gguf.GGUFReader  # read under the lock: the class as no other block left it
        gguf.GGUFReader = _shared_reader_class(original, parsed, on_read, enabled)  # type: ignore[misc]
        try:
            yield
        finally:
            parsed.clear()
            gguf.GGUFReader = original  # type: ignore[misc]


def _shared_reader_class(original: type[Any], parsed: dict[str, object], on_read: Callable[[], None] | None,
                         enabled: bool) -> type[Any]:
    """A ``GGUFReader`` whose read-only instances of one file are one object, parsed once, whose
    ``data`` is a plain ndarray view of the mapping (``parsed`` holds them, by real path)."""
    import numpy as np

    class SharedReader(original):
        def __new__(cls, path: str | os.PathLike[str], mode: str = "r") -> "SharedReader":
            found = parsed.get(os.path.realpath(path)) if enabled and mode == "r" else None
            return found if isinstance(found, SharedReader) else super().__new__(cls)

        @property
        def data(self) -> Any:
            return self.__dict__["_data"]

        @data.setter
        def data(self, value: Any) -> None:
            if enabled and self.__dict__.get("_mode") == "r" and isinstance(value, np.memmap):
                value = value.view(np.ndarray)  # the same bytes; the view keeps the mapping alive
            self.__dict__["_data"] = value

        def __init__(self, path: str | os.PathLike[str], mode: str = "r") -> None:
            if not getattr(self, "_parsed", False):  # else: parsed by an earlier read in this block
                self.__dict__["_mode"] = mode
                super().__init__(path, mode)
                self._parsed = True
                if enabled and mode == "r":
                    parsed[os.path.realpath(path)] = self
            if on_read is not None:
                on_read()

    return SharedReader
