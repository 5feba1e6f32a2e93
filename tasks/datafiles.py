"""Reading local dataset files: Parquet, JSON Lines, JSON, CSV and GLUE's TSV.

Every reader returns plain row dicts. CSV and TSV values stay strings (no type
guessing), so a label column reads the same from every format once the task
maps it. GLUE's TSV files are read without quote handling, as GLUE wrote them.
A ``.csv`` whose header holds no comma but semicolons (as a spreadsheet in many
European locales saves it), tabs or bars is read with that separator.

What is read is bounded by what it becomes in memory, not by the file's bytes
(a Parquet file of kilobytes can decode to gigabytes; a CSV's rows take several
times their bytes as Python objects). ``DataFile`` learns a file's columns and
number of rows without holding its rows (a Parquet footer, a streamed count), and
``read`` takes only the columns and the rows (by position) a task uses. Before
rows are held, their cost is estimated (``rows_memory``: their text, and a
measured cost per row and value) and anything over ``PRE_MAX_DATA_FILE_MB``
(default ``MAX_ROWS_MEMORY_BYTES``) is one line naming the file, the rows and
the fixes. Running out of memory all the same is one line too, never a traceback.
"""

from __future__ import annotations

import codecs
import csv
import os
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, TypeVar

import orjson

from promptrobust.tasks.errors import TaskDataError
from promptrobust.tasks.parquet_footer import Footer, ParquetFooterError, read_footer

#: One row of a data file as read: column name -> value (text, a number, a list or object from
#: JSON, None). Typed ``object``: a task checks a value's kind before it uses it (``text_value``).
DataRow = dict[str, object]

SUPPORTED_EXTENSIONS: tuple[str, ...] = (".parquet", ".jsonl", ".json", ".csv", ".tsv")
#: Formats read as text, checked to be UTF-8 before parsing (so the error names the byte).
TEXT_EXTENSIONS: tuple[str, ...] = (".jsonl", ".json", ".csv", ".tsv")
#: The most memory the rows read from one data file may take, as ``rows_memory`` estimates it;
#: ``PRE_MAX_DATA_FILE_MB`` changes it (megabytes) on a machine with the memory for more.
MAX_ROWS_MEMORY_BYTES = 2 * 1024**3
#: What one row costs as Python objects beyond its text: its dict and place in the task's rows
#: while its chunk is read, the sample it becomes (an id, a fields dict). A CSV row of about
#: 100 bytes, two columns read, measured about 760 bytes in all (``bench/data_file_memory.py``;
#: ``docs/your-task.md``, "Big data files"); with ``VALUE_BYTES`` and twice its text the estimate
#: is about a fifth above that.
ROW_BYTES = 640
#: And each value read (a str object's own overhead).
VALUE_BYTES = 48
#: A JSON array is parsed whole; parsing peaks at about 16 times the file's bytes (measured
#: with orjson on rows of short values), so its bytes times this are checked first.
JSON_PARSE_FACTOR = 16
#: A data file this large read whole although a limit was given is said (``reading_all``).
LARGE_FILE_BYTES = 64 * 1024**2
#: Separators a ``.csv`` may use, tried in this order when its header holds no comma.
CSV_SEPARATORS = (",", ";", "\t", "|")
#: A column name pre adds to find rows by position; never one of a file's own.
_POSITION = "__pre_row_position__"
_CHUNK = 1 << 20
_T = TypeVar("_T")
#: How a reader's failed allocation reads (polars: a Rust error or panic, not a MemoryError).
_OUT_OF_MEMORY = ("Cannot allocate memory", "OutOfMemory", "memory allocation of", "capacity overflow")


def is_large(size: int) -> bool:
    """Whether a file of ``size`` bytes is large enough to say that a limit could not shorten its read."""
    return size >= LARGE_FILE_BYTES


def max_rows_memory() -> int:
    """``MAX_ROWS_MEMORY_BYTES``, or ``PRE_MAX_DATA_FILE_MB`` megabytes when that is set."""
    raw = os.environ.get("PRE_MAX_DATA_FILE_MB", "").strip()
    if not raw:
        return MAX_ROWS_MEMORY_BYTES
    try:
        megabytes = float(raw)
    except ValueError:
        raise TaskDataError(f"PRE_MAX_DATA_FILE_MB={raw!r} is not a number; set it to megabytes, e.g. 4096") from None
    if not 0 < megabytes < 1e12:
        raise TaskDataError(f"PRE_MAX_DATA_FILE_MB={raw!r} must be a number of megabytes above 0, e.g. 4096")
    return int(megabytes * 1024 * 1024)


def size_text(n: float) -> str:
    return f"{n / 1024**3:.1f} GB" if n >= 1024**3 else f"{n / 1024**2:.1f} MB"


def rows_memory(rows: int, values: int, text_bytes: int) -> int:
    """The memory ``rows`` rows of ``values`` values each, ``text_bytes`` of text in all, take
    once read (their text is held twice at the peak: the reader's copy and the rows')."""
    return rows * (ROW_BYTES + values * VALUE_BYTES) + 2 * text_bytes


def check_utf8(p: Path) -> None:
    """Refuse a text file that is not UTF-8, naming the line and byte (read in bounded chunks)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    line = 1
    with p.open("rb") as f:
        while True:
            chunk = f.read(_CHUNK)
            pending = decoder.getstate()[0]  # an unfinished sequence from the chunk before
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as exc:
                data = pending + chunk  # what the decoder saw; exc.start counts in it
                bad = offset - len(pending) + exc.start
                line += data[: exc.start].count(b"\n")
                raise TaskDataError(
                    f"{p}: not UTF-8 text (line {line}, byte {bad}: 0x{data[exc.start:exc.start + 1].hex()}); "
                    "save the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)",
                    setting="data_file",
                ) from None
            if not chunk:
                return
            line += chunk.count(b"\n")
            offset += len(chunk)


def read_rows(path: str | Path, *, headerless_tsv_columns: Sequence[str] = (), columns: Sequence[str] | None = None,
              positions: Sequence[int] | None = None) -> list[DataRow]:
    """Rows of a local data file as dicts (column name -> value): ``DataFile(path).read(columns, positions)``."""
    return DataFile(path, headerless_tsv_columns=headerless_tsv_columns).read(columns, positions)


class DataFile:
    """A local data file, checked (it exists, its type, not empty, UTF-8, a header without
    duplicate names), whose columns and number of rows are known without holding its rows.

    ``headerless_tsv_columns`` names the columns of a TSV file that has no header row
    (CoLA's GLUE files); used only when the first row is not a header.
    """

    def __init__(self, path: str | Path, *, headerless_tsv_columns: Sequence[str] = ()) -> None:
        p = Path(path)
        if not p.is_file():
            raise TaskDataError(f"{p}: data file not found; check the path", setting="data_file")
        self.path = p
        self.ext = p.suffix.lower()
        if self.ext not in SUPPORTED_EXTENSIONS:
            raise TaskDataError(
                f"{p}: unsupported data file type {self.ext or '(none)'}; use one of {', '.join(SUPPORTED_EXTENSIONS)}"
            )
        self.size = p.stat().st_size
        if self.size == 0:
            raise TaskDataError(f"{p}: the file is empty; add a header and rows, or name another file", setting="data_file")
        if self.ext in TEXT_EXTENSIONS:
            _checked_utf8(str(p.resolve()), *_version(p))
        self._headerless = tuple(headerless_tsv_columns)
        #: CSV and TSV: the separator, whether the first row is a header, and the quote character.
        self.separator = "\t" if self.ext == ".tsv" else ","
        self.has_header = True
        self.quoted = self.ext == ".csv"
        self._document: list[DataRow] | None = None
        self.columns: tuple[str, ...] = self._guard(self._columns)

    # -- what the file holds ------------------------------------------------------------------

    def _columns(self) -> tuple[str, ...]:
        if self.ext == ".parquet":
            import polars as pl

            self.footer  # a file that is not Parquet fails here, naming the footer
            return tuple(pl.read_parquet_schema(self.path))
        if self.ext in (".csv", ".tsv"):
            return self._header()
        if self.ext == ".jsonl":
            first = self._jsonl_records(None, [0] if self._offsets else [])
            return tuple(first[0]) if first else ()
        rows = self._json_rows()
        return tuple(rows[0]) if rows else ()

    @cached_property
    def footer(self) -> Footer:
        try:
            return read_footer(self.path)
        except ParquetFooterError as exc:
            raise TaskDataError(f"{self.path}: cannot read as parquet ({exc}); fix or re-export the file") from None

    @cached_property
    def rows(self) -> int:
        """How many rows the file holds (not counting a header)."""
        return self._guard(self._count)

    def _count(self) -> int:
        if self.ext == ".parquet":
            return self.footer.rows
        if self.ext == ".jsonl":
            return len(self._offsets) // 2
        if self.ext == ".json":
            return len(self._json_rows())
        return _text_rows(self)

    # -- reading ----------------------------------------------------------------------------------

    def read(self, columns: Sequence[str] | None = None, positions: Sequence[int] | None = None) -> list[DataRow]:
        """The rows at ``positions`` (0-based, in that order; None: every row, in file order),
        with only ``columns`` (those the file has; None: all). Refused in one line when they
        would take more memory than ``max_rows_memory`` (see the module docstring)."""
        if positions is None:
            return [row for chunk in self.iter_rows(columns) for row in chunk]
        wanted = self._wanted(columns)
        chosen = [int(i) for i in positions]
        bad = next((i for i in chosen if not 0 <= i < self.rows), None)
        if bad is not None:
            raise IndexError(f"{self.path}: no row at position {bad} (it has {self.rows})")
        return self._guard(lambda: self._read_positions(wanted, chosen))

    def iter_rows(self, columns: Sequence[str] | None = None, chunk: int = 50_000) -> Iterator[list[DataRow]]:
        """Every row in file order, ``chunk`` rows at a time (only ``columns``, as ``read``), so a
        caller that turns rows into something smaller never holds them all; refused in one line,
        before the first chunk, when they would take more memory than ``max_rows_memory``."""
        wanted = self._wanted(columns)
        chunks = self._guard(lambda: self._chunks(wanted, max(1, chunk)))
        while True:
            rows = self._guard(lambda: next(chunks, None))
            if rows is None:
                return
            yield rows

    def _wanted(self, columns: Sequence[str] | None) -> tuple[str, ...]:
        if columns is None:
            return self.columns
        if self.ext in (".json", ".jsonl"):  # records: a key missing from the first may be in others
            return tuple(dict.fromkeys(columns))
        return tuple(c for c in dict.fromkeys(columns) if c in self.columns)

    def _chunks(self, columns: tuple[str, ...], size: int) -> Iterator[list[DataRow]]:
        """The generator behind ``iter_rows``; its checks run before the first chunk."""
        if self.ext == ".parquet":
            return self._parquet_chunks(columns, size)
        if self.ext == ".jsonl":
            self._refuse(self.rows, len(columns), sum(self._offsets[1::2]))  # a line's bytes bound its text
            return (self._jsonl_records(columns, range(i, min(i + size, self.rows))) for i in range(0, self.rows, size))
        if self.ext == ".json":
            rows = self._json_rows()
            return (self._project(columns, rows[i:i + size]) for i in range(0, len(rows), size))
        return self._text_chunks(columns, size)

    def _read_positions(self, columns: tuple[str, ...], positions: list[int]) -> list[DataRow]:
        if self.ext == ".parquet":
            return self._parquet_positions(columns, positions)
        if self.ext == ".jsonl":
            self._refuse(len(positions), len(columns), sum(self._offsets[2 * i + 1] for i in positions))
            return self._jsonl_records(columns, positions)
        if self.ext == ".json":
            rows = self._json_rows()
            return self._project(columns, [rows[i] for i in positions])
        return self._text_positions(columns, positions)

    def _project(self, columns: tuple[str, ...], rows: list[DataRow]) -> list[DataRow]:
        return rows if columns == self.columns else [{c: r[c] for c in columns if c in r} for r in rows]

    def _guard(self, action: Callable[[], _T]) -> _T:
        """``action()``, with what the readers raise turned into one line naming the file."""
        import polars as pl

        try:
            return action()
        except (TaskDataError, IndexError):
            raise
        except MemoryError:
            raise self._out_of_memory() from None
        except (Exception, pl.exceptions.PanicException) as exc:  # polars/orjson errors (a panic is a BaseException)
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            if any(sign in first for sign in _OUT_OF_MEMORY):  # the reader's own allocation failed
                raise self._out_of_memory() from None
            how = ""
            if self.ext in (".csv", ".tsv"):
                how = (f"; pre read it with {self.separator!r} as the separator"
                       + (" and '\"' quotes" if self.quoted else ", without quotes") + ": check that every row has the "
                       f"header's {len(getattr(self, 'columns', ())) or 'number of'} fields")
            raise TaskDataError(f"{self.path}: cannot read as {self.ext[1:]} ({first}){how}; fix or re-export the file") from exc

    def _out_of_memory(self) -> TaskDataError:
        return TaskDataError(
            f"{self.path}: ran out of memory while reading it ({size_text(self.size)}; the CSV and Parquet readers map the "
            "file, so free memory about its size is needed besides the rows read); read fewer rows (a limit), keep a "
            "sample of them in a smaller file, or run where more memory is free", setting="data_file")

    def _refuse(self, rows: int, values: int, text_bytes: int | None, *, counted_so_far: bool = False) -> None:
        """One line when ``rows`` rows would take more than the limit. ``text_bytes`` None: not
        measured yet; ``counted_so_far``: the text of only part of them; either way the estimate
        is a floor."""
        need, limit = rows_memory(rows, values, text_bytes or 0), max_rows_memory()
        if need <= limit:
            return
        whole = "all " if rows == self.rows else ""
        floor = text_bytes is None or counted_so_far
        about = f"at least {size_text(need)}" if floor else f"about {size_text(need)}"
        text = "" if text_bytes is None else f" ({size_text(text_bytes)} of text{' in the rows counted so far' if counted_so_far else ''})"
        raise TaskDataError(
            f"{self.path}: {whole}{rows:,} rows would take {about} of memory once read{text}, more than pre's limit "
            f"of {size_text(limit)}; use fewer rows (a limit, e.g. --limit 1000), keep a sample of them in a smaller "
            "file, or raise PRE_MAX_DATA_FILE_MB", setting="data_file")

    # -- Parquet: the footer first, then row group by row group ------------------------------------

    def _row_group_starts(self) -> list[int]:
        starts = [0]
        for g in self.footer.row_groups:
            starts.append(starts[-1] + g.rows)
        return starts

    def _check_row_groups(self, columns: tuple[str, ...], groups: Iterable[int]) -> None:
        """What decoding each row group's columns holds, known from the footer before any page is read."""
        limit = max_rows_memory()
        for n in groups:
            group = self.footer.row_groups[n]
            decoded = sum(group.column_bytes.get(c, 0) for c in columns) + 16 * group.rows * len(columns)
            if decoded > limit:
                raise TaskDataError(
                    f"{self.path}: its row group {n + 1} decodes to {size_text(decoded)} (Parquet footer: "
                    f"{', '.join(columns)}), more than pre's limit of {size_text(limit)}; rewrite the file with smaller "
                    "row groups (e.g. polars write_parquet(row_group_size=10_000)) or raise PRE_MAX_DATA_FILE_MB",
                    setting="data_file")

    def _row_group(self, columns: tuple[str, ...], starts: list[int], n: int) -> Any:
        import polars as pl

        return pl.scan_parquet(self.path).slice(starts[n], self.footer.row_groups[n].rows).select(list(columns)).collect()

    def _parquet_positions(self, columns: tuple[str, ...], positions: list[int]) -> list[DataRow]:
        import polars as pl

        starts = self._row_group_starts()
        by_group: dict[int, list[int]] = {}
        for i in positions:
            by_group.setdefault(_group_of(starts, i), []).append(i)
        self._check_row_groups(columns, by_group)
        frames = []
        text_bytes = count = 0
        for n in sorted(by_group):
            frame = self._row_group(columns, starts, n)[pl.Series([i - starts[n] for i in by_group[n]], dtype=pl.UInt64)]
            text_bytes += _text_bytes(frame)
            count += frame.height
            self._refuse(count, len(columns), text_bytes)  # a dictionary-encoded column: its text measured here
            # (the rows of the groups so far: if they alone are too many, all of them are)
            frames.append((n, frame))
        if not columns:
            return [{} for _ in positions]
        held = {i: row for n, frame in frames for i, row in zip(by_group[n], frame.to_dicts())}
        return [held[i] for i in positions]

    def _parquet_chunks(self, columns: tuple[str, ...], size: int) -> Iterator[list[DataRow]]:
        starts = self._row_group_starts()
        groups = [n for n, g in enumerate(self.footer.row_groups) if g.rows]
        self._check_row_groups(columns, groups)
        self._refuse(self.rows, len(columns), None)
        text_bytes = 0
        for k, n in enumerate(groups):  # every group's text counted before the first row is held
            text_bytes += _text_bytes(self._row_group(columns, starts, n))
            self._refuse(self.rows, len(columns), text_bytes, counted_so_far=k < len(groups) - 1)
        return self._parquet_slices(columns, starts, groups, size)

    def _parquet_slices(self, columns: tuple[str, ...], starts: list[int], groups: list[int],
                        size: int) -> Iterator[list[DataRow]]:
        for n in groups:
            frame = self._row_group(columns, starts, n)
            if not columns:
                yield [{} for _ in range(self.footer.row_groups[n].rows)]
                continue
            for part in frame.iter_slices(size):
                yield part.to_dicts()

    # -- CSV and TSV: polars, streamed --------------------------------------------------------------

    def _header(self) -> tuple[str, ...]:
        """The header's names (the sniffed separator for a .csv; none for a headerless TSV);
        a name given twice is refused (a reader would silently take one of them)."""
        with self.path.open("r", encoding="utf-8-sig", newline="") as f:
            reader = (csv.reader(f, delimiter=self.separator) if self.quoted
                      else csv.reader(f, delimiter=self.separator, quoting=csv.QUOTE_NONE))
            first = next(reader, [])
            if self.ext == ".csv" and len(first) == 1:
                for sep in CSV_SEPARATORS[1:]:
                    f.seek(0)
                    names = next(csv.reader(f, delimiter=sep), [])
                    if len(names) > 1:
                        self.separator, first = sep, names
                        break
        if self._headerless and not set(first) & set(self._headerless):
            self.has_header = False
            return self._headerless
        seen: dict[str, int] = {}
        for n, name in enumerate(first, 1):
            if name in seen:
                raise TaskDataError(f"{self.path}: column {name!r} appears twice in the header (columns {seen[name]} and {n}); "
                                    "rename one of them", setting="data_file")
            seen[name] = n
        return tuple(first)

    def _scan_text(self) -> Any:
        import polars as pl

        return pl.scan_csv(
            self.path,
            separator=self.separator,
            quote_char='"' if self.quoted else None,
            infer_schema=False,
            has_header=self.has_header,
            new_columns=None if self.has_header else list(self.columns),
            truncate_ragged_lines=not self.quoted,
        )

    def _text_positions(self, columns: tuple[str, ...], positions: list[int]) -> list[DataRow]:
        import polars as pl

        wanted = sorted(set(positions))
        scan = self._scan_text().select(list(columns)).with_row_index(_POSITION)
        scan = scan.filter(pl.col(_POSITION).is_in(pl.Series(wanted).implode())).drop(_POSITION)
        self._check_text(scan, columns, len(positions))
        frame = scan.collect(engine="streaming")
        self._refuse(len(positions), len(columns), _text_bytes(frame))
        held = dict(zip(wanted, frame.to_dicts()))
        return [held[i] for i in positions]

    def _text_chunks(self, columns: tuple[str, ...], size: int) -> Iterator[list[DataRow]]:
        scan = self._scan_text().select(list(columns))
        self._check_text(scan, columns, self.rows)
        batches = getattr(scan, "collect_batches", None)  # polars >= 1.3x streams batches; older: one frame, sliced
        frames = batches(chunk_size=size) if batches is not None else scan.collect().iter_slices(size)
        return (frame.to_dicts() for frame in frames)

    def _check_text(self, scan: Any, columns: tuple[str, ...], count: int) -> None:
        """Refuse ``count`` rows that would not fit: by their number alone, and, when the file is larger
        than the limit (its text might not fit either), by their text measured in a streamed pass."""
        self._refuse(count, len(columns), None)
        if self.size > max_rows_memory():
            text_bytes = scan.select(_text_byte_sums(columns)).collect(engine="streaming").row(0)
            self._refuse(count, len(columns), sum(int(b or 0) for b in text_bytes))

    # -- JSON Lines: an index of line offsets, then only the lines read -----------------------------

    @cached_property
    def _offsets(self) -> array:
        """(offset, length) of every non-blank line, each checked to be a JSON object."""
        index = array("q")
        with self.path.open("rb") as f:
            offset = 0
            for n, line in enumerate(f, 1):
                if line.strip():
                    try:
                        row = orjson.loads(line)
                    except orjson.JSONDecodeError as exc:
                        raise TaskDataError(f"{self.path}: line {n} is not valid JSON ({exc}); fix the line") from None
                    if not isinstance(row, dict):
                        raise TaskDataError(f"{self.path}: line {n} is not a JSON object; each line must be one record")
                    index.extend((offset, len(line)))
                offset += len(line)
        return index

    def _jsonl_records(self, columns: tuple[str, ...] | None, positions: Iterable[int]) -> list[DataRow]:
        """The records at ``positions`` (indices of non-blank lines), parsed one at a time, with only
        ``columns`` (None: every key)."""
        index = self._offsets
        keep = None if columns is None or columns == self.columns else columns
        out = []
        with self.path.open("rb") as f:
            for i in positions:
                f.seek(index[2 * i])
                row = orjson.loads(f.read(index[2 * i + 1]))
                out.append(row if keep is None else {c: row[c] for c in keep if c in row})
        return out

    # -- JSON: parsed whole ---------------------------------------------------------------------------

    def _json_rows(self) -> list[DataRow]:
        """A JSON array of records, or a document some task understands (kept as one row
        under the key ``__document__``, e.g. SQuAD's official nested layout)."""
        if self._document is not None:
            return self._document
        limit = max_rows_memory()
        if self.size * JSON_PARSE_FACTOR > limit:
            raise TaskDataError(
                f"{self.path}: a JSON file is parsed whole, which takes up to {JSON_PARSE_FACTOR} times its "
                f"{size_text(self.size)}, more than pre's limit of {size_text(limit)}; save the rows as JSON Lines "
                "(.jsonl), CSV or Parquet, which pre reads row by row, or raise PRE_MAX_DATA_FILE_MB", setting="data_file")
        try:
            data = orjson.loads(self.path.read_bytes())
        except orjson.JSONDecodeError as exc:
            raise TaskDataError(f"{self.path}: not valid JSON ({exc}); fix the file or use .jsonl") from exc
        if isinstance(data, list):
            bad = next((i for i, r in enumerate(data) if not isinstance(r, dict)), None)
            if bad is not None:
                raise TaskDataError(f"{self.path}: item {bad} is not a JSON object; the array must hold records")
            self._document = data
        elif isinstance(data, dict):
            self._document = [{"__document__": data}]
        else:
            raise TaskDataError(f"{self.path}: expected a JSON array of records; got {type(data).__name__}")
        return self._document


def _version(p: Path) -> tuple[int, int]:
    """What tells one version of a file from another (a file checked once is not checked again)."""
    st = p.stat()
    return st.st_mtime_ns, st.st_size


@lru_cache(maxsize=64)
def _checked_utf8(path: str, mtime_ns: int, size: int) -> None:
    """``check_utf8`` once per version of a file: a run opens its data file more than once."""
    check_utf8(Path(path))


_COUNTS: dict[tuple[object, ...], int] = {}


def _text_rows(data: DataFile) -> int:
    """A CSV or TSV file's rows, counted by polars (quoted newlines understood), once per version."""
    import polars as pl

    key = (str(data.path.resolve()), *_version(data.path), data.separator, data.has_header, data.quoted)
    if key not in _COUNTS:
        if len(_COUNTS) > 64:
            _COUNTS.clear()
        _COUNTS[key] = int(data._scan_text().select(pl.len()).collect(engine="streaming").item())
    return _COUNTS[key]


def _group_of(starts: list[int], position: int) -> int:
    """The row group holding ``position`` (``starts``: each group's first row, then the total)."""
    lo, hi = 0, len(starts) - 2
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts[mid] <= position:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _text_byte_sums(columns: Sequence[str]) -> list[Any]:
    import polars as pl

    return [pl.col(c).str.len_bytes().cast(pl.UInt64).sum() for c in columns]


def _text_bytes(frame: Any) -> int:
    """The bytes of text ``frame`` holds, measured on polars' own buffers (a dictionary-encoded
    column's repeated values are counted each time: Python holds each row's copy)."""
    import polars as pl

    total = 0
    for name, dtype in frame.schema.items():
        expr = _value_bytes(pl.col(name), dtype)
        if expr is not None:
            total += int(frame.select(expr.sum()).item() or 0)
    return total


def _value_bytes(expr: Any, dtype: Any) -> Any:
    """An expression of each value's text bytes (strings and binary, also inside lists and
    structs); None for a type without text (numbers: their cost is ``VALUE_BYTES``)."""
    import polars as pl

    if dtype == pl.String:
        return expr.str.len_bytes().cast(pl.UInt64)
    if dtype == pl.Binary:
        return expr.bin.size().cast(pl.UInt64)
    if isinstance(dtype, (pl.List, pl.Array)):
        inner = _value_bytes(pl.element(), dtype.inner)
        if inner is None:
            return None
        listed = expr if isinstance(dtype, pl.List) else expr.arr.to_list()
        return listed.list.eval(inner).list.sum().cast(pl.UInt64)
    if isinstance(dtype, pl.Struct):
        parts = [p for p in (_value_bytes(expr.struct.field(f.name), f.dtype) for f in dtype.fields) if p is not None]
        return pl.sum_horizontal(parts).cast(pl.UInt64) if parts else None
    return None


def find_split_file(data_dir: str | Path, names: Sequence[str]) -> Path | None:
    """The first ``<name><ext>`` that exists in ``data_dir`` (names in order of preference)."""
    d = Path(data_dir)
    for name in names:
        for ext in SUPPORTED_EXTENSIONS:
            candidate = d / f"{name}{ext}"
            if candidate.is_file():
                return candidate
    return None


def require_dir(data_dir: str | Path) -> Path:
    d = Path(data_dir)
    if not d.is_dir():
        raise TaskDataError(f"{d}: data directory not found; check the path", setting="data_dir")
    return d


def missing_split_error(data_dir: str | Path, names: Sequence[str], what: str) -> TaskDataError:
    tried = ", ".join(f"{n}.<ext>" for n in names)
    return TaskDataError(
        f"{data_dir}: no {what} file (looked for {tried}; ext one of {', '.join(SUPPORTED_EXTENSIONS)}); "
        "add one or name a data file instead",
        setting="data_file",
    )


__all__ = [
    "CSV_SEPARATORS", "DataFile", "LARGE_FILE_BYTES", "MAX_ROWS_MEMORY_BYTES", "is_large", "SUPPORTED_EXTENSIONS", "TEXT_EXTENSIONS",
    "check_utf8", "find_split_file", "max_rows_memory", "missing_split_error", "read_rows", "require_dir", "rows_memory",
    "size_text",
]
