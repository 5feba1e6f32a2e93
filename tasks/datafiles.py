"""Reading local dataset files: Parquet, JSON Lines, JSON, CSV and GLUE's TSV.

Every reader returns plain row dicts. CSV and TSV values stay strings (no type
guessing), so a label column reads the same from every format once the task
maps it. GLUE's TSV files are read without quote handling, as GLUE wrote them.
"""

from __future__ import annotations

import codecs
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from promptrobust.tasks.errors import TaskDataError

SUPPORTED_EXTENSIONS: tuple[str, ...] = (".parquet", ".jsonl", ".json", ".csv", ".tsv")
#: Formats read as text, checked to be UTF-8 before parsing (so the error names the byte).
TEXT_EXTENSIONS: tuple[str, ...] = (".jsonl", ".json", ".csv", ".tsv")
#: The largest data file read into memory (rows become Python objects, several times the
#: file's size); ``PRE_MAX_DATA_FILE_MB`` raises it on a machine with the memory for more.
MAX_DATA_FILE_BYTES = 1024 * 1024 * 1024
_CHUNK = 1 << 20


def max_data_file_bytes() -> int:
    """``MAX_DATA_FILE_BYTES``, or ``PRE_MAX_DATA_FILE_MB`` megabytes when that is set."""
    raw = os.environ.get("PRE_MAX_DATA_FILE_MB", "").strip()
    if not raw:
        return MAX_DATA_FILE_BYTES
    try:
        megabytes = float(raw)
    except ValueError:
        raise TaskDataError(f"PRE_MAX_DATA_FILE_MB={raw!r} is not a number; set it to megabytes, e.g. 4096") from None
    if not megabytes > 0:
        raise TaskDataError(f"PRE_MAX_DATA_FILE_MB={raw!r} must be above 0; set it to megabytes, e.g. 4096")
    return int(megabytes * 1024 * 1024)


def _size_text(n: int) -> str:
    return f"{n / 1024**3:.1f} GB" if n >= 1024**3 else f"{n / 1024**2:.1f} MB"


def check_size(p: Path) -> int:
    """The file's size; a file too large to read into memory is refused with its size."""
    size = p.stat().st_size
    limit = max_data_file_bytes()
    if size > limit:
        raise TaskDataError(
            f"{p}: {_size_text(size)}, more than pre reads into memory at once ({_size_text(limit)}); "
            "keep a sample of its rows in a smaller file, or raise the limit with PRE_MAX_DATA_FILE_MB",
            setting="data_file",
        )
    return size


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


def read_rows(path: str | Path, *, headerless_tsv_columns: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Rows of a local data file as dicts (column name -> value).

    ``headerless_tsv_columns`` names the columns of a TSV file that has no
    header row (CoLA's GLUE files); used only when the first row is not a header.
    """
    p = Path(path)
    if not p.is_file():
        raise TaskDataError(f"{p}: data file not found; check the path", setting="data_file")
    ext = p.suffix.lower()
    if ext not in SUPPORTED_EXTENSIONS:
        raise TaskDataError(
            f"{p}: unsupported data file type {ext or '(none)'}; use one of {', '.join(SUPPORTED_EXTENSIONS)}"
        )
    if check_size(p) == 0:
        raise TaskDataError(f"{p}: the file is empty; add a header and rows, or name another file", setting="data_file")
    if ext in TEXT_EXTENSIONS:
        check_utf8(p)
    try:
        if ext == ".parquet":
            return _read_parquet(p)
        if ext == ".jsonl":
            return _read_jsonl(p)
        if ext == ".json":
            return _read_json(p)
        if ext == ".csv":
            return _read_delimited(p, ",", quoted=True)
        return _read_tsv(p, headerless_tsv_columns)
    except TaskDataError:
        raise
    except Exception as exc:  # polars/orjson errors: one line, naming the file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TaskDataError(f"{p}: cannot read as {ext[1:]} ({first}); fix or re-export the file") from exc


def _read_parquet(p: Path) -> list[dict[str, Any]]:
    import polars as pl

    return pl.read_parquet(p).to_dicts()


def _read_jsonl(p: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with p.open("rb") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise TaskDataError(f"{p}: line {n} is not valid JSON ({exc}); fix the line") from exc
            if not isinstance(row, dict):
                raise TaskDataError(f"{p}: line {n} is not a JSON object; each line must be one record")
            rows.append(row)
    return rows


def _read_json(p: Path) -> list[dict[str, Any]]:
    """A JSON array of records, or a document some task understands (kept as one row
    under the key ``__document__``, e.g. SQuAD's official nested layout)."""
    try:
        data = orjson.loads(p.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise TaskDataError(f"{p}: not valid JSON ({exc}); fix the file or use .jsonl") from exc
    if isinstance(data, list):
        bad = next((i for i, r in enumerate(data) if not isinstance(r, dict)), None)
        if bad is not None:
            raise TaskDataError(f"{p}: item {bad} is not a JSON object; the array must hold records")
        return data
    if isinstance(data, dict):
        return [{"__document__": data}]
    raise TaskDataError(f"{p}: expected a JSON array of records; got {type(data).__name__}")


def _read_delimited(p: Path, sep: str, *, quoted: bool, has_header: bool = True,
                    new_columns: Sequence[str] | None = None) -> list[dict[str, Any]]:
    import polars as pl

    df = pl.read_csv(
        p,
        separator=sep,
        quote_char='"' if quoted else None,
        infer_schema=False,
        has_header=has_header,
        new_columns=list(new_columns) if new_columns else None,
        truncate_ragged_lines=not quoted,
    )
    return df.to_dicts()


def _read_tsv(p: Path, headerless_columns: Sequence[str]) -> list[dict[str, Any]]:
    if headerless_columns:
        with p.open("r", encoding="utf-8") as f:
            first = f.readline().rstrip("\n").split("\t")
        if not set(first) & set(headerless_columns):
            return _read_delimited(p, "\t", quoted=False, has_header=False, new_columns=headerless_columns)
    return _read_delimited(p, "\t", quoted=False)


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
