"""The persistent score cache: one SQLite file in WAL mode.

Keys come from ``engine.types.request_key`` (model identity, decoding
settings, request kind and rendered input), values are serialised
Completions. Every write is committed at once, so a crash loses at most the
requests that were still in flight, and a rerun recomputes nothing it already
has. WAL lets several processes (a sweep and a report, two runs) read while
one writes.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from promptrobust.engine.errors import PromptRobustError
from promptrobust.engine.serving.types import Completion

log = logging.getLogger(__name__)

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
#: Seconds SQLite waits for another process's write lock per attempt, and attempts before
#: a write gives up naming that process (e.g. a long ``pre cache merge``): 2 minutes in all.
BUSY_SECONDS = 30.0
LOCK_ATTEMPTS = 4


class CacheError(PromptRobustError):
    """The cache file cannot be used (corrupt, unwritable). One line, names the fix."""


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    writes: int = 0
    #: rows that could not be decoded or validated: counted as misses, recomputed and overwritten
    damaged: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "writes": self.writes, "damaged": self.damaged}


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
        self._first_damage = ""
        self._reported = False
        self._conn = self._open(self.path)

    @staticmethod
    def _open(path: Path) -> sqlite3.Connection:
        """Open (or create) the cache; refuse someone else's database and say so when read-only."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CacheError(
                f"cannot create the cache folder {path.parent}: {exc.strerror}; pass --cache PATH to a writable place"
            ) from None
        if path.exists() and not os.access(path, os.W_OK):
            raise CacheError(f"cache file {path} is read-only; make it writable or pass --cache PATH (or --no-cache)")
        if not path.exists() and not os.access(path.parent, os.W_OK):
            raise CacheError(f"cache folder {path.parent} is read-only; pass --cache PATH to a writable place (or --no-cache)")
        if path.exists() and path.stat().st_size > 0:
            _refuse_foreign(path)
        try:
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=BUSY_SECONDS)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(_SCHEMA)
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.OperationalError as exc:
            if "readonly" in str(exc).lower() or "read-only" in str(exc).lower():
                raise CacheError(f"cache file {path} is read-only ({exc}); pass --cache PATH to a writable place") from None
            raise CacheError(f"cache file {path} cannot be opened ({exc}); pass --cache PATH") from None
        except sqlite3.DatabaseError as exc:
            raise CacheError(
                f"cache file {path} is not a usable SQLite database ({exc}); delete it or pass --cache PATH"
            ) from None
        return conn

    # -- reads -------------------------------------------------------------
    def get(self, key: str) -> Completion | None:
        return self.get_many([key]).get(key)

    def look_again(self, key: str, usable: Callable[[Completion], bool], *, first_missed: bool) -> Completion | None:
        """``get`` for a key this process already looked up and counted: a ``usable`` row now is a hit,
        and its first lookup's miss is taken back when that miss sent nothing (``first_missed``: the
        caller did not send the key itself); a miss again, or a row the caller already found
        damaged, is not counted twice."""
        found = self._fetch([key], count_damage=False).get(key)
        if found is None or not usable(found):
            return None
        self.stats.hits += 1
        if first_missed:
            self.stats.misses -= 1
        return found

    def get_many(self, keys: Sequence[str]) -> dict[str, Completion]:
        """Completions found for ``keys`` (missing keys are absent). Counts hits and misses."""
        unique = list(dict.fromkeys(keys))
        found = self._fetch(unique)
        self.stats.hits += len(found)
        self.stats.misses += len(unique) - len(found)
        return found

    def _fetch(self, unique: Sequence[str], *, count_damage: bool = True) -> dict[str, Completion]:
        found: dict[str, Completion] = {}
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
                completion, problem = decode_completion(value)
                if completion is None:
                    if count_damage:
                        self._damaged(key, problem)
                else:
                    found[key] = completion
        return found

    def note_damaged(self, key: str, problem: str) -> None:
        """A row a caller found unusable (e.g. a log-probability above 0): a miss after all."""
        self.stats.hits -= 1
        self.stats.misses += 1
        self._damaged(key, problem)

    def _damaged(self, key: str, problem: str) -> None:
        self.stats.damaged += 1
        if self.stats.damaged == 1:
            self._first_damage = f"key {key[:12]}...: {problem}"

    def damage_report(self) -> str | None:
        """One line about this run's damaged rows (None when there were none)."""
        n = self.stats.damaged
        if not n:
            return None
        rows = "row" if n == 1 else "rows"
        return (f"cache {self.path}: {n} damaged {rows} could not be used ({self._first_damage}"
                f"{'' if n == 1 else '; ...'}); recomputed and overwritten")

    # -- writes ------------------------------------------------------------
    def put(self, key: str, model: str, completion: Completion) -> None:
        self.put_many([(key, model, completion)])

    def put_many(self, items: Iterable[tuple[str, str, Completion]]) -> None:
        """Store completions in one committed transaction."""
        now = time.time()
        rows = [(key, model, completion.to_json(), now) for key, model, completion in items]
        if not rows:
            return
        for attempt in range(1, LOCK_ATTEMPTS + 1):
            try:
                with self._conn:
                    self._conn.execute("BEGIN")
                    self._conn.executemany(
                        "INSERT OR REPLACE INTO completions (key, model, value, created) VALUES (?, ?, ?, ?)", rows
                    )
                break
            except sqlite3.OperationalError as exc:
                if not _is_locked(exc):
                    raise self._write_error(exc) from None
                holders = lock_holders(self.path)
                if attempt == LOCK_ATTEMPTS:
                    waited = BUSY_SECONDS * LOCK_ATTEMPTS
                    raise CacheError(
                        f"cache file {self.path} stayed locked by {holders} for {waited:g}s; "
                        "wait for it to finish (or stop it), then rerun"
                    ) from None
                if attempt == 1:
                    log.warning("cache file %s is locked by %s; waiting up to %gs for it", self.path, holders,
                                BUSY_SECONDS * (LOCK_ATTEMPTS - 1))
            except sqlite3.DatabaseError as exc:
                raise self._write_error(exc) from None
        self.stats.writes += len(rows)

    def _write_error(self, exc: BaseException) -> CacheError:
        from promptrobust.engine.safe_io.atomic_io import describe_os_error, is_no_space

        if is_no_space(exc) or "full" in str(exc).lower():
            return CacheError(describe_os_error(OSError(28, "No space left on device", str(self.path)), self.path))
        return CacheError(f"cannot write the cache file {self.path} ({exc}); pass --cache PATH to a writable place")

    # -- housekeeping --------------------------------------------------------
    def count(self, model: str | None = None) -> int:
        if model is None:
            return self._conn.execute("SELECT count(*) FROM completions").fetchone()[0]
        return self._conn.execute("SELECT count(*) FROM completions WHERE model = ?", (model,)).fetchone()[0]

    def summary(self) -> Mapping[str, int]:
        return self.stats.as_dict()

    def close(self) -> None:
        """Close the file; say once (per run) how many damaged rows were replaced."""
        report = self.damage_report()
        if report is not None and not self._reported:
            log.warning("%s", report)
            self._reported = True
        self._conn.close()

    def __enter__(self) -> "ScoreCache":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_locked(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def lock_holders(path: Path) -> str:
    """The other processes that have the cache file open (Linux /proc), named for a message."""
    from promptrobust.engine.safe_io.folder_lock import describe_process

    wanted = {str(path.resolve()), f"{path.resolve()}-wal", f"{path.resolve()}-shm"}
    found: list[int] = []
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]
    except OSError:
        return "another process"
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                    found.append(pid)
                    break
            except OSError:
                continue
    if not found:
        return "another process"
    return ", ".join(describe_process(pid) for pid in found[:3]) + (" and others" if len(found) > 3 else "")


def decode_completion(value: object) -> tuple[Completion | None, str]:
    """(the Completion stored in a cache value, "") or (None, why it cannot be one).

    A row written by a crashed tool, an older version or a hand edit must never
    raise: it is a miss. Types are checked here; whether the numbers fit a
    request (labels, log-probabilities) is the scheduler's ``completion_problem``.
    """
    try:
        data = orjson.loads(value)  # type: ignore[arg-type]
    except (orjson.JSONDecodeError, TypeError) as exc:
        return None, f"not JSON ({str(exc)[:60]})"
    if not isinstance(data, dict):
        return None, f"a JSON {type(data).__name__}, not an object"
    text, lp, note = data.get("text"), data.get("choice_logprobs"), data.get("note")
    if text is not None and not isinstance(text, str):
        return None, f"text is a {type(text).__name__}"
    if note is not None and not isinstance(note, str):
        return None, f"note is a {type(note).__name__}"
    if lp is not None and (not isinstance(lp, list) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in lp)):
        return None, "choice_logprobs is not a list of numbers"
    if text is None and lp is None:
        return None, "neither text nor choice_logprobs"
    counts = [data.get("prompt_tokens", 0), data.get("completion_tokens", 0)]
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
        return None, "token counts are not whole numbers >= 0"
    return Completion(text=text, choice_logprobs=tuple(lp) if lp is not None else None,
                      prompt_tokens=counts[0], completion_tokens=counts[1], note=note), ""


# -- merging caches ------------------------------------------------------------
#: Rows copied per statement when merging (bounded memory on large caches).
_MERGE_CHUNK = 5000


@dataclass
class CacheMergeResult:
    """What ``merge_caches`` did: rows added per source (in order) and the total after."""

    added: list[int] = field(default_factory=list)
    total: int = 0


def _columns(conn: sqlite3.Connection) -> list[tuple[str, str, int, int]]:
    """(name, type, not null, primary key) of the completions table; [] when absent."""
    rows = conn.execute("PRAGMA table_info(completions)").fetchall()
    return [(str(r[1]), str(r[2]).upper(), int(r[3]), int(r[5])) for r in rows]


def _expected_columns() -> list[tuple[str, str, int, int]]:
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute(_SCHEMA)
        return _columns(conn)
    finally:
        conn.close()


def _open_source(path: Path) -> sqlite3.Connection:
    """A read-only connection to a cache file whose schema is ours, or CacheError."""
    if not path.is_file():
        raise CacheError(f"cache file {path} does not exist")
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=30.0)
        columns = _columns(conn)
    except sqlite3.DatabaseError as exc:
        raise CacheError(f"{path} is not a promptrobust cache ({exc}); pass the scores.sqlite files of the runs to merge") from None
    if columns != _expected_columns():
        conn.close()
        found = "no completions table" if not columns else "completions(" + ", ".join(c[0] for c in columns) + ")"
        raise CacheError(
            f"{path} has a different cache schema ({found}); merge only caches written by this version of promptrobust"
        )
    return conn


def _refuse_foreign(path: Path) -> None:
    """An existing SQLite file that holds tables but not our cache is someone else's:
    never add a table to it."""
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=30.0)
        try:
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            columns = _columns(conn)
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise CacheError(f"cache file {path} is not a usable SQLite database ({exc}); delete it or pass --cache PATH") from None
    if tables and columns != _expected_columns():
        shown = ", ".join(tables[:3]) + (" ..." if len(tables) > 3 else "")
        raise CacheError(
            f"--cache {path} is another program's SQLite database (tables: {shown}); pass --cache PATH to a new file"
        )


def merge_caches(out: str | os.PathLike[str], sources: Sequence[str | os.PathLike[str]]) -> CacheMergeResult:
    """Copy every completion of ``sources`` into the cache ``out`` (created if missing).

    Keys are content addresses (model identity, decoding settings, input), so
    a key present in two caches holds the same answer: ``INSERT OR IGNORE``
    keeps the first and merging again adds nothing. Every source is checked
    (a SQLite file with exactly our schema) before anything is written; each
    source is copied in one transaction, so an interrupted merge can simply
    be run again.
    """
    out_path = Path(out)
    paths = [Path(s) for s in sources]
    for p in paths:
        if out_path.exists() and p.exists() and p.resolve() == out_path.resolve():
            raise CacheError(f"{p} is both the output and a source; merge into a new or another cache file")
    checked: list[sqlite3.Connection] = []
    try:
        for p in paths:  # refuse before writing anything
            checked.append(_open_source(p))
    except CacheError:
        for conn in checked:
            conn.close()
        raise
    result = CacheMergeResult()
    target = ScoreCache(out_path)
    if _columns(target._conn) != _expected_columns():
        target.close()
        for conn in checked:
            conn.close()
        raise CacheError(f"{out_path} has a different cache schema; merge into a new cache file")
    try:
        for path, conn in zip(paths, checked):
            before = target.count()
            try:
                cursor = conn.execute("SELECT key, model, value, created FROM completions")
                with target._conn:
                    target._conn.execute("BEGIN")
                    while rows := cursor.fetchmany(_MERGE_CHUNK):
                        target._conn.executemany(
                            "INSERT OR IGNORE INTO completions (key, model, value, created) VALUES (?, ?, ?, ?)", rows
                        )
            except sqlite3.DatabaseError as exc:
                raise CacheError(f"cannot merge {path} into {out_path} ({exc}); check both files and run the merge again") from None
            result.added.append(target.count() - before)
        result.total = target.count()
    finally:
        for conn in checked:
            conn.close()
        target.close()
    return result


def cache_keys(path: str | os.PathLike[str]) -> set[str]:
    """Every key of a cache file (for tests and checks after a merge)."""
    conn = _open_source(Path(path))
    try:
        return {row[0] for row in conn.execute("SELECT key FROM completions")}
    finally:
        conn.close()
