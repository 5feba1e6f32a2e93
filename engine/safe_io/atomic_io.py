"""Every output file is written whole or not at all; every write failure is one line.

One owner for writing results to disk:

* ``write_bytes`` / ``write_text`` / ``write_json`` / ``write_jsonl``: a
  temporary file beside the target (``.NAME.tmp-PID-RANDOM``), fsync, rename,
  fsync of the folder. A reader sees the old file or the new one, never half
  of one; a failure (a full disk, a kill) leaves the previous file and no
  temporary. Parquet and PNG are rendered to bytes first and written the same
  way (``write_parquet``), so there is one place where bytes reach the disk.
* ``Staged``: several files that change together (a report: Markdown, CSVs,
  PNGs, HTML) are all written to temporaries first and renamed only when every
  one is complete.
* ``append_bytes``: appends to a log (``results.jsonl``) that either land whole
  or are cut back to the previous end, so a full disk never leaves a torn line;
  never through a symbolic link (``NO_FOLLOW``; renames replace a link, never
  its target).
* ``reserve_folder`` / ``commit_folder``: unique run-folder names even for runs
  started in the same second by several processes (the name is claimed with
  an exclusive ``mkdir``; a clash at the final rename takes the next suffix).
* ``folder_lock`` (in ``engine.folder_lock``): one writer per results folder.
* ``OutputWriteError``: the one-line message (``no space left on DEVICE``,
  permission, read-only) and exit code 1 of a write the environment refused;
  ``describe_os_error`` gives the right advice for EEXIST vs ENOSPC.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import io
import os
import secrets
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars

import orjson

#: Exit code of a run stopped by its environment (a full disk, a refused write).
EXIT_ENVIRONMENT = 1
#: Files written in place (appends, locks) are opened without following a symbolic link.
NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CHUNK = 1 << 20
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
#: Polars and other native writers raise their own exception types; their text
#: still carries the OS message, which is all we need to give the right advice.
_MESSAGES = {
    "no space left on device": errno.ENOSPC,
    "disk quota exceeded": errno.EDQUOT,
    "read-only file system": errno.EROFS,
    "permission denied": errno.EACCES,
}


class OutputWriteError(Exception):
    """A write the environment refused (full disk, permissions). One line; exit code 1.

    ``errno`` is the cause's error number (``errno.ENOSPC`` for a full disk)."""

    exit_code = EXIT_ENVIRONMENT

    def __init__(self, message: str, *, errno_: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno_


def device_of(path: str | os.PathLike[str]) -> str:
    """The device (or file system) holding ``path``, as ``df`` names it, else its mount point."""
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    mount = p
    while not os.path.ismount(mount) and mount != mount.parent:
        mount = mount.parent
    try:
        with open("/proc/self/mounts", encoding="utf-8") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) >= 2 and fields[1].replace("\\040", " ") == str(mount):
                    source = fields[0]
                    return f"{source} ({mount})" if source not in (str(mount), "none") else str(mount)
    except OSError:
        pass
    return str(mount)


def errno_of(exc: BaseException) -> int | None:
    """The OS error number behind ``exc`` (an OSError, or a native writer's error quoting one)."""
    if isinstance(exc, OutputWriteError):
        return exc.errno
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.errno
    text = str(exc).lower()
    for phrase, number in _MESSAGES.items():
        if phrase in text:
            return number
    return None


def describe_os_error(exc: BaseException, path: str | os.PathLike[str] | None = None) -> str:
    """One line with the cause and the fix (no traceback), for a failed write of ``path``."""
    number = errno_of(exc)
    where = str(path) if path is not None else str(getattr(exc, "filename", None) or "a file")
    if number in _NO_SPACE:
        device = device_of(where) if path is not None or getattr(exc, "filename", None) else "the disk"
        kind = "no space left on" if number == errno.ENOSPC else "disk quota exceeded on"
        return f"{kind} {device} while writing {where}; free space there (or write elsewhere), then rerun"
    if number == errno.EEXIST:
        return f"{where} already exists (another run wrote it at the same moment?); rerun, or remove it first"
    if number == errno.EROFS:
        return f"cannot write {where}: read-only file system; write to another folder"
    if number in (errno.EACCES, errno.EPERM):
        return f"cannot write {where}: permission denied; fix its permissions or write to another folder"
    if number == errno.ELOOP:  # opened with O_NOFOLLOW: results are never written through a link
        return (f"{where} is a symbolic link, and pre never writes through one (it may point outside the folder); "
                "replace it with the file itself, or write to another folder")
    reason = getattr(exc, "strerror", None) or " ".join(str(exc).split()) or type(exc).__name__
    return f"cannot write {where}: {reason}"


def output_error(exc: BaseException, path: str | os.PathLike[str] | None) -> OutputWriteError:
    err = OutputWriteError(describe_os_error(exc, path), errno_=errno_of(exc))
    err.__cause__ = None
    err.__suppress_context__ = True
    return err


# -- whole files -------------------------------------------------------------------------------

def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view[:_CHUNK])
        view = view[written:]


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every file system lets a folder be opened
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _temp_beside(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


def _write_temp(path: Path, data: bytes) -> Path:
    """``data`` in a fsynced temporary file beside ``path``; the temporary is removed on failure."""
    tmp = _temp_beside(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError as exc:
        raise output_error(exc, path) from None
    try:
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError):
            raise output_error(exc, path) from None
        raise
    return tmp


def _rename(tmp: Path, path: Path) -> None:
    try:
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise output_error(exc, path) from None


def write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Replace ``path`` with ``data`` atomically (temporary, fsync, rename)."""
    target = Path(path)
    _rename(_write_temp(target, data), target)
    _fsync_dir(target.parent)
    return target


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    return write_bytes(path, text.encode("utf-8"))


def json_bytes(data: object, *, indent: bool = True) -> bytes:
    option = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS | (orjson.OPT_INDENT_2 if indent else 0)
    return orjson.dumps(data, option=option, default=_default)


def write_json(path: str | os.PathLike[str], data: object, *, indent: bool = True) -> Path:
    return write_bytes(path, json_bytes(data, indent=indent))


def jsonl_bytes(rows: Iterable[Mapping[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(dict(r), default=_default, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n" for r in rows)


def write_jsonl(path: str | os.PathLike[str], rows: Iterable[Mapping[str, Any]]) -> Path:
    return write_bytes(path, jsonl_bytes(rows))


def parquet_bytes(frame: polars.DataFrame) -> bytes:
    """A polars DataFrame as Parquet bytes (rendered in memory: the disk write stays ours)."""
    buf = io.BytesIO()
    frame.write_parquet(buf)
    return buf.getvalue()


def write_parquet(path: str | os.PathLike[str], frame: polars.DataFrame) -> Path:
    return write_bytes(path, parquet_bytes(frame))


def _default(obj: Any) -> Any:
    """What orjson cannot write itself: sets and tuples as lists, results (``to_dict``) and
    dataclasses as objects, anything else as its text."""
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    return str(obj)


class Staged:
    """Files that change together: each written to a temporary, all renamed at ``commit``.

    A failure before the commit removes every temporary and leaves the
    previous files as they were::

        with Staged() as out:
            out.write_text(folder / "report.md", md)
            out.write_bytes(folder / "plot.png", png)
        # every file renamed into place here
    """

    def __init__(self) -> None:
        self._pending: list[tuple[Path, Path]] = []

    def write_bytes(self, path: str | os.PathLike[str], data: bytes) -> Path:
        target = Path(path)
        self._pending.append((_write_temp(target, data), target))
        return target

    def write_text(self, path: str | os.PathLike[str], text: str) -> Path:
        return self.write_bytes(path, text.encode("utf-8"))

    @property
    def targets(self) -> list[Path]:
        """The files staged so far (renamed into place at ``commit``)."""
        return [target for _, target in self._pending]

    def commit(self) -> list[Path]:
        done = []
        pending, self._pending = self._pending, []
        try:
            for tmp, target in pending:
                _rename(tmp, target)
                done.append(target)
        finally:
            for tmp, _ in pending[len(done) :]:
                with contextlib.suppress(OSError):
                    tmp.unlink()
        for folder in {t.parent for t in done}:
            _fsync_dir(folder)
        return done

    def discard(self) -> None:
        for tmp, _ in self._pending:
            with contextlib.suppress(OSError):
                tmp.unlink()
        self._pending = []

    def __enter__(self) -> Staged:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()


# -- appends -------------------------------------------------------------------------------------

def append_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Append ``data`` whole, fsynced; on failure cut the file back to its previous end
    (and remove it when this call created it), so a full disk never leaves a torn line."""
    target = Path(path)
    if not data:
        return
    existed = target.exists()
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND | NO_FOLLOW, 0o644)
    except OSError as exc:
        raise output_error(exc, target) from None
    try:
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            if not existed and start == 0:
                with contextlib.suppress(OSError):
                    target.unlink()
            if isinstance(exc, OSError):
                raise output_error(exc, target) from None
            raise
    finally:
        os.close(fd)


def append_jsonl(path: str | os.PathLike[str], rows: Iterable[Mapping[str, Any]]) -> None:
    append_bytes(path, jsonl_bytes(rows))


# -- folders ---------------------------------------------------------------------------------------

def reserve_folder(root: str | os.PathLike[str], name: str) -> tuple[Path, Path]:
    """(a new hidden work folder ``.NAME.partial``, the final path it will be renamed to).

    The name is claimed with an exclusive ``mkdir`` of the work folder, so
    runs started in the same second by several processes each get their own
    (``NAME``, ``NAME-2``, ...): a claim that exists, or a finished folder of
    that name, moves on to the next suffix.
    """
    base = Path(root)
    for n in range(1, 10_000):
        final = base / (name if n == 1 else f"{name}-{n}")
        if final.exists():
            continue
        partial = base / f".{final.name}.partial"
        try:
            partial.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise output_error(exc, partial) from None
        return partial, final
    raise OutputWriteError(f"no free folder name for {name} in {base}; clean up old runs there")


def commit_folder(partial: Path, final: Path) -> Path:
    """Rename ``partial`` to ``final``, or to the next free ``final-N`` when another
    run took that name meanwhile; never over a finished folder. Returns the name used."""
    stem = final.name
    for n in range(1, 10_000):
        target = final if n == 1 else final.with_name(f"{stem}-{n}")
        if target.exists():
            continue
        try:
            os.rename(partial, target)  # fails on a non-empty folder of that name (a finished run)
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                continue
            raise output_error(exc, target) from None
        _fsync_dir(target.parent)
        return target
    raise OutputWriteError(f"no free folder name for {stem} in {final.parent}; clean up old runs there")


def replace_folder(work: Path, final: Path) -> None:
    """Put the finished folder ``work`` in the place of ``final`` (which may exist).

    The old folder is moved aside first and removed after, so a kill leaves
    either the old folder or the new one under ``final`` (at worst the new one
    beside ``.NAME.old-*``, which the next merge removes)."""
    import shutil

    old = final.with_name(f".{final.name}.old-{os.getpid()}-{secrets.token_hex(4)}")
    moved = False
    try:
        if final.exists():
            os.rename(final, old)
            moved = True
        os.rename(work, final)
    except OSError as exc:
        if moved and not final.exists():
            with contextlib.suppress(OSError):
                os.rename(old, final)
        raise output_error(exc, final) from None
    _fsync_dir(final.parent)
    if moved:
        shutil.rmtree(old, ignore_errors=True)


def remove_leftovers(folder: Path, name: str) -> None:
    """Temporaries of killed writers of ``folder/name`` (``.name.tmp-*``, ``.name.old-*``, ``.name.work-*``)."""
    import shutil

    for pattern in (f".{name}.tmp-*", f".{name}.old-*", f".{name}.work-*"):
        for p in folder.glob(pattern):
            pid = p.name.rsplit("-", 2)[-2] if p.name.count("-") >= 2 else ""
            if pid.isdigit() and int(pid) != os.getpid() and process_alive(int(pid)):
                continue
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    p.unlink()


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def walk_errors(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and its causes/contexts (to find the OS error under a library's wrapper)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        yield cur
        cur = cur.__cause__ or cur.__context__


def is_no_space(exc: BaseException) -> bool:
    return any(errno_of(e) in _NO_SPACE for e in walk_errors(exc))


def as_output_error(exc: BaseException, path: str | os.PathLike[str] | None) -> OutputWriteError | None:
    """An OutputWriteError for an exception (or its cause) that is the environment's refusal, else None."""
    for e in walk_errors(exc):
        if isinstance(e, OutputWriteError):
            return e
        if errno_of(e) in (*_NO_SPACE, errno.EROFS, errno.EACCES, errno.EPERM):
            return output_error(e, path if path is not None else getattr(e, "filename", None))
    return None


__all__ = [
    "EXIT_ENVIRONMENT", "OutputWriteError", "Staged", "append_bytes", "append_jsonl", "as_output_error",
    "commit_folder", "describe_os_error", "device_of", "errno_of", "is_no_space", "json_bytes", "jsonl_bytes",
    "output_error", "parquet_bytes", "remove_leftovers", "replace_folder", "reserve_folder", "write_bytes",
    "write_json", "write_jsonl", "write_parquet", "write_text",
]

