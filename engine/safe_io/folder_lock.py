"""One writer per results folder (a sweep, a merge): wait with a message, then name the holder.

``flock`` on a small ``.NAME.lock`` file beside the folder (it survives the
folder being replaced by a merge); the kernel releases it when its process
ends, so a killed run leaves no stale lock. The holder writes its pid into
the file so that a process waiting for it can say who it is.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from promptrobust.engine.safe_io.atomic_io import NO_FOLLOW, OutputWriteError, output_error

__all__ = ["FolderLock", "LockHeld", "describe_process", "folder_lock"]


class LockHeld(OutputWriteError):
    """Another process holds the lock (one line naming it; exit code 1)."""


def describe_process(pid: int) -> str:
    """``process PID (its command line)``, as far as this machine lets us read it."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        command = " ".join(part for part in raw.decode("utf-8", "replace").split("\0") if part)
    except OSError:
        command = ""
    if len(command) > 120:
        command = command[:117] + "..."
    return f"process {pid} ({command})" if command else f"process {pid}"


class FolderLock:
    """An exclusive lock on ``path`` (a small file, kept), held by one process at a time.

    ``flock`` is released by the kernel when its holder exits, so a killed
    run never leaves a stale lock. The holder writes its pid into the file so
    that a waiting process can name it.
    """

    def __init__(self, path: str | os.PathLike[str], what: str) -> None:
        self.path = Path(path)
        self.what = what
        self._fd: int | None = None

    def try_acquire(self) -> str | None:
        """None when acquired, else a description of the holder."""
        import fcntl

        if self._fd is None:
            try:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | NO_FOLLOW, 0o644)
            except OSError as exc:
                raise output_error(exc, self.path) from None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return self.holder()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"{os.getpid()}\n".encode(), 0)
        return None

    def holder(self) -> str:
        try:
            pid = int(self.path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return "another process"
        return describe_process(pid)

    def refused(self, holder: str, waited: float) -> LockHeld:
        return LockHeld(f"{self.what} is in use by {holder} (waited {waited:g}s); "
                        "wait for it to finish or stop it, then rerun")

    def waiting(self, holder: str, wait: float) -> str:
        return f"{self.what} is in use by {holder}; waiting up to {wait:g}s for it"

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing releases the flock
            self._fd = None

    def hold(self, *, wait: float = 10.0, say: Callable[[str], None] = lambda m: None,
             poll: float = 0.1) -> FolderLock:
        """Acquire, waiting up to ``wait`` seconds (saying so once), else raise LockHeld."""
        import time

        deadline = time.monotonic() + wait
        holder = self.try_acquire()
        if holder is not None:
            say(self.waiting(holder, wait))
        while holder is not None:
            if time.monotonic() >= deadline:
                self.release()
                raise self.refused(holder, wait)
            time.sleep(poll)
            holder = self.try_acquire()
        return self

    async def ahold(self, *, wait: float = 10.0, say: Callable[[str], None] = lambda m: None,
                    poll: float = 0.1) -> FolderLock:
        """``hold`` for a running event loop (the wait does not block it)."""
        import asyncio
        import time

        deadline = time.monotonic() + wait
        holder = self.try_acquire()
        if holder is not None:
            say(self.waiting(holder, wait))
        while holder is not None:
            if time.monotonic() >= deadline:
                self.release()
                raise self.refused(holder, wait)
            await asyncio.sleep(poll)
            holder = self.try_acquire()
        return self

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def folder_lock(folder: str | os.PathLike[str], what: str) -> FolderLock:
    """The lock of a results folder: ``.NAME.lock`` beside it (it survives the folder's replacement)."""
    f = Path(folder)
    return FolderLock(f.parent / f".{f.name}.lock", what)
