"""What a Parquet file's footer says about its size once decoded, read without decoding it.

A Parquet file compresses (and dictionary-encodes) its columns: 2 KB on disk can hold 8 GB of
text. The footer (Thrift compact protocol, at the file's end) records, per row group and column
chunk, the number of rows and the chunk's uncompressed size. That is enough to know, before any
page is decoded, what decoding a row group's columns would hold in memory (``RowGroup``), so a
reader can refuse a file that expands beyond a limit instead of being killed by it.

Only the few fields needed are kept; the rest of the footer is skipped. The reader is bounded
(nesting depth, element counts against the bytes left), so a damaged or hostile footer is a
``ParquetFooterError``, never a hang or a recursion error.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from promptrobust.tasks.errors import TaskDataError

#: The largest footer read (a real one is kilobytes: one entry per row group and column).
MAX_FOOTER_BYTES = 64 * 1024 * 1024
#: Thrift structures in a footer nest about 5 deep; deeper is damage.
_MAX_DEPTH = 24
_MAGIC = b"PAR1"

# Thrift compact protocol type ids.
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)


class ParquetFooterError(TaskDataError):
    """The footer cannot be read (not Parquet, cut off, damaged, encrypted); the reader names the file."""


@dataclass(frozen=True)
class RowGroup:
    """One row group: its rows and each top-level column's uncompressed bytes (all its leaves)."""

    rows: int
    column_bytes: dict[str, int]


@dataclass(frozen=True)
class Footer:
    """The row groups of a Parquet file, in file order."""

    row_groups: tuple[RowGroup, ...]

    @property
    def rows(self) -> int:
        return sum(g.rows for g in self.row_groups)


def read_footer(path: str | Path) -> Footer:
    """The row groups of the Parquet file at ``path`` (``ParquetFooterError`` when unreadable)."""
    with Path(path).open("rb") as f:
        f.seek(0, 2)
        size = f.tell()
        if size < 12:
            raise ParquetFooterError("too short to be a Parquet file")
        f.seek(size - 8)
        tail = f.read(8)
        if tail[4:] != _MAGIC:
            what = "an encrypted footer" if tail[4:] == b"PARE" else "no Parquet footer"
            raise ParquetFooterError(f"{what} at the end of the file")
        length = struct.unpack("<I", tail[:4])[0]
        if length > size - 12 or length > MAX_FOOTER_BYTES:
            raise ParquetFooterError(f"a footer of {length} bytes, which the file cannot hold")
        f.seek(size - 8 - length)
        data = f.read(length)
    return _footer(_Reader(data).struct(0))


def _footer(meta: dict[int, object]) -> Footer:
    groups = []
    for group in _as_list(meta.get(4)):  # FileMetaData.row_groups
        g = _as_struct(group)
        columns: dict[str, int] = {}
        for chunk in _as_list(g.get(1)):  # RowGroup.columns
            info = _as_struct(_as_struct(chunk).get(3))  # ColumnChunk.meta_data
            path = _as_list(info.get(3))  # ColumnMetaData.path_in_schema
            top = path[0].decode("utf-8", "replace") if path and isinstance(path[0], bytes) else "?"
            columns[top] = columns.get(top, 0) + max(0, _as_int(info.get(6)))  # total_uncompressed_size
        groups.append(RowGroup(rows=max(0, _as_int(g.get(3))), column_bytes=columns))  # RowGroup.num_rows
    return Footer(tuple(groups))


def _as_list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _as_struct(value: object) -> dict[int, object]:
    return value if isinstance(value, dict) else {}


def _as_int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class _Reader:
    """The Thrift compact protocol, read into dicts (field id -> value), lists, ints and bytes."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _byte(self) -> int:
        if self.pos >= len(self.data):
            raise ParquetFooterError("the footer is cut off")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def _varint(self) -> int:
        shift = result = 0
        while True:
            b = self._byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 70:
                raise ParquetFooterError("a damaged number in the footer")

    def _zigzag(self) -> int:
        n = self._varint()
        return (n >> 1) ^ -(n & 1)

    def _count(self, n: int) -> int:
        if n < 0 or n > len(self.data) - self.pos:  # every element takes at least one byte
            raise ParquetFooterError("a damaged list length in the footer")
        return n

    def value(self, kind: int, depth: int) -> object:
        if depth > _MAX_DEPTH:
            raise ParquetFooterError("the footer nests too deep")
        if kind in (_TRUE, _FALSE):
            return kind == _TRUE
        if kind == _BYTE:
            return self._byte()
        if kind in (_I16, _I32, _I64):
            return self._zigzag()
        if kind == _DOUBLE:
            self.pos += 8
            if self.pos > len(self.data):
                raise ParquetFooterError("the footer is cut off")
            return None
        if kind == _BINARY:
            n = self._count(self._varint())
            out = self.data[self.pos:self.pos + n]
            self.pos += n
            return out
        if kind in (_LIST, _SET):
            head = self._byte()
            n = head >> 4
            if n == 15:
                n = self._varint()
            element = head & 0x0F
            items = []
            for _ in range(self._count(n)):
                items.append(self._byte() == 1 if element in (_TRUE, _FALSE) else self.value(element, depth + 1))
            return items
        if kind == _MAP:
            n = self._count(self._varint())
            if n:
                types = self._byte()
                for _ in range(n):
                    self.value(types >> 4, depth + 1)
                    self.value(types & 0x0F, depth + 1)
            return None
        if kind == _STRUCT:
            return self.struct(depth + 1)
        raise ParquetFooterError(f"an unknown type {kind} in the footer")

    def struct(self, depth: int) -> dict[int, object]:
        fields: dict[int, object] = {}
        last = 0
        while True:
            head = self._byte()
            if head == 0:
                return fields
            delta, kind = head >> 4, head & 0x0F
            last = last + delta if delta else self._zigzag()
            fields[last] = self.value(kind, depth)
