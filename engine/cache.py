"""The persistent score cache: one SQLite file in WAL mode.

Keys come from ``engine.types.request_key`` (model identity, decoding
settings, request kind and rendered input), values are serialised
Completions. Every write is committed at once, so a crash loses at most the
requests that were still in flight, and a rerun recomputes nothing it already
has. WAL lets several processes (a sweep and a report, two runs) read while
one writes.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from promptrobust.engine.types import Completion

_SCHEMA = """
CREATE TABLE IF NOT EXISTS completions (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    value BLOB NOT NULL,
    created REAL NOT NULL
) WITHOUT ROWID;
"""

#: SQLite limits the number of host parameters per statement; stay well below.
_LOOKUP_CHUNK = 500


class CacheError(Exception):
    """The cache file cannot be used (corrupt, unwritable). One line, names the fix."""


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    writes: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "writes": self.writes}


def default_cache_path() -> Path:
    root = os.environ.get("PRE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "promptrobust"
    )
    return Path(root) / "scores.sqlite"


class ScoreCache:
    """Completions by request key, persisted in one SQLite file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.stats = CacheStats()
        self._conn = self._open(self.path)

    @staticmethod
    def _open(path: Path) -> sqlite3.Connection:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CacheError(
                f"cannot create the cache folder {path.parent}: {exc.strerror}; pass --cache PATH to a writable place"
            ) from None
        try:
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(_SCHEMA)
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.DatabaseError as exc:
            raise CacheError(
                f"cache file {path} is not a usable SQLite database ({exc}); delete it or pass --cache PATH"
            ) from None
        return conn

    # -- reads -------------------------------------------------------------
    def get(self, key: str) -> Completion | None:
        return self.get_many([key]).get(key)

    def get_many(self, keys: Sequence[str]) -> dict[str, Completion]:
        """Completions found for ``keys`` (missing keys are absent). Counts hits and misses."""
        found: dict[str, Completion] = {}
        unique = list(dict.fromkeys(keys))
        for start in range(0, len(unique), _LOOKUP_CHUNK):
            chunk = unique[start : start + _LOOKUP_CHUNK]
            marks = ",".join("?" * len(chunk))
            try:
                rows = self._conn.execute(
                    f"SELECT key, value FROM completions WHERE key IN ({marks})", chunk
                ).fetchall()
            except sqlite3.DatabaseError as exc:
                raise CacheError(f"cache file {self.path} cannot be read ({exc}); delete it or pass --cache PATH") from None
            for key, value in rows:
                found[key] = Completion.from_json(value)
        self.stats.hits += len(found)
        self.stats.misses += len(unique) - len(found)
        return found

    # -- writes ------------------------------------------------------------
    def put(self, key: str, model: str, completion: Completion) -> None:
        self.put_many([(key, model, completion)])

    def put_many(self, items: Iterable[tuple[str, str, Completion]]) -> None:
        """Store completions in one committed transaction."""
        now = time.time()
        rows = [(key, model, completion.to_json(), now) for key, model, completion in items]
        if not rows:
            return
        try:
            with self._conn:
                self._conn.execute("BEGIN")
                self._conn.executemany(
                    "INSERT OR REPLACE INTO completions (key, model, value, created) VALUES (?, ?, ?, ?)", rows
                )
        except sqlite3.DatabaseError as exc:
            raise CacheError(f"cannot write the cache file {self.path} ({exc}); pass --cache PATH to a writable place") from None
        self.stats.writes += len(rows)

    # -- housekeeping --------------------------------------------------------
    def count(self, model: str | None = None) -> int:
        if model is None:
            return self._conn.execute("SELECT count(*) FROM completions").fetchone()[0]
        return self._conn.execute("SELECT count(*) FROM completions WHERE model = ?", (model,)).fetchone()[0]

    def summary(self) -> Mapping[str, int]:
        return self.stats.as_dict()

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "ScoreCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
