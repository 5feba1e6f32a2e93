"""Run folders that are either complete or absent.

A run writes into ``<output-dir>/.<name>.partial`` and renames it to
``<output-dir>/<name>`` only when every file is written, so a crash or an
error never leaves a folder that looks like a finished run::

    with RunFolder(output_dir, [model, dataset]) as folder:
        folder.write_json("results.json", ...)
    print(folder.final)
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from promptrobust.cli.errors import UserError
from promptrobust.engine import atomic_io


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:60] or "run"


#: Inside a ``.partial`` folder: the pid of the run writing it (stale when that process is gone).
OWNER_FILE = ".owner-pid"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_partials(root: Path) -> list[Path]:
    """Delete ``.NAME.partial`` folders whose run was killed (kill -9, power loss).

    A folder counts as stale when the process named in its owner file is gone,
    or when it has no owner file and is older than a day (written by an older
    release). Returns what was removed."""
    removed = []
    for partial in root.glob(".*.partial"):
        if not partial.is_dir():
            continue
        owner = partial / OWNER_FILE
        try:
            stale = not _alive(int(owner.read_text().strip())) if owner.exists() else (time.time() - partial.stat().st_mtime > 86400)
        except (OSError, ValueError):
            stale = True
        if stale:
            shutil.rmtree(partial, ignore_errors=True)
            removed.append(partial)
    return removed


class RunFolder:
    def __init__(self, output_dir: str | os.PathLike[str], name_parts: list[str]) -> None:
        root = Path(output_dir)
        try:
            root.mkdir(parents=True, exist_ok=True)
            probe = tempfile.NamedTemporaryFile(dir=root, prefix=".pre-probe-", delete=True)
            probe.close()
        except OSError as exc:
            raise UserError(
                f"output folder {root} is not writable ({exc.strerror}); pass --output-dir to a writable folder"
            ) from None
        stamp = time.strftime("%Y%m%d-%H%M%S")
        name = "_".join([stamp, *(_slug(p) for p in name_parts)])
        for stale in remove_stale_partials(root):
            print(f"pre: removed {stale}, the unfinished folder of a killed run", file=sys.stderr)
        # Unique even for runs started in the same second (an exclusive claim; see atomic_io).
        self.partial, self.final = atomic_io.reserve_folder(root, name)
        try:
            atomic_io.write_bytes(self.partial / OWNER_FILE, str(os.getpid()).encode())
        except BaseException:
            self.discard()  # a full disk at the very start leaves no claim behind
            raise

    def path(self, name: str) -> Path:
        return self.partial / name

    def write_json(self, name: str, data: Any) -> Path:
        path = self.path(name)
        atomic_io.write_bytes(path, orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS, default=_default))
        return path

    def __enter__(self) -> "RunFolder":
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        """Commit when the block finished, discard on any exception (Ctrl-C included)."""
        if exc_type is None:
            self.commit()
        else:
            self.discard()

    def commit(self) -> Path:
        (self.partial / OWNER_FILE).unlink(missing_ok=True)
        self.final = atomic_io.commit_folder(self.partial, self.final)  # the next suffix if taken meanwhile
        return self.final

    def discard(self) -> None:
        shutil.rmtree(self.partial, ignore_errors=True)


def _default(obj: Any) -> Any:
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if isinstance(obj, Path):
        return str(obj)
    return str(obj)
