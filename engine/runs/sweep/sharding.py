"""Sharded sweeps: split a sweep's cells over N independent processes or
machines, then merge their run folders.

``pre sweep CONFIG --shard I/N`` runs the jobs whose *cell* (model, dataset,
shots, prompt type) hashes to shard I of N (1 <= I <= N). All attacks of a
cell land on the same shard, so they share the cell's clean scoring as in an
unsharded run. The hash is SHA-256 of the cell's text: the same on every
machine and Python version (Python's own ``hash`` is salted per process).

Each shard writes its own run folder (``<name>.shard-I-of-N``) and cache
(``<cache stem>.shard-I-of-N.sqlite``, or ``cache.sqlite`` inside the shard
folder when the sweep names no cache), so shards never share a SQLite file
(WAL does not work over network file systems). ``merge_runs`` then copies
every shard's records into one folder exactly once (key: job id + prompt id),
and ``engine.serving.cache.merge_caches`` merges their caches.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from promptrobust.engine.errors import PromptRobustError
from promptrobust.engine.safe_io import atomic_io
from promptrobust.engine.safe_io.folder_lock import folder_lock
from promptrobust.engine.measuring.records import consolidate_parquet, read_jsonl
from promptrobust.engine.runs.sweep.config import Job, SweepConfig

__all__ = [
    "MergeResult", "Shard", "ShardError", "cell_shard", "merge_runs", "parse_shard", "select_jobs", "shard_config",
]

_SHARD_TEXT = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
_SHARD_SUFFIX = re.compile(r"\.shard-\d+-of-\d+$")
_SHARD_PART = re.compile(r"\.shard-\d+-of-\d+")
#: config.json keys that may differ between the shards of one sweep.
_PER_SHARD_KEYS = {"name", "output_dir", "cache", "source", "max_jobs", "shard", "scheduler", "merged_from"}


class ShardError(PromptRobustError, ValueError):
    """A bad --shard value or run folders that cannot be merged; one line naming the fix."""


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (1-based, as in "part 1 of 4")."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if not (isinstance(self.count, int) and self.count >= 1 and isinstance(self.index, int) and 1 <= self.index <= self.count):
            raise ShardError(f"--shard {self.index}/{self.count}: use I/N with 1 <= I <= N, e.g. --shard 1/4")

    @property
    def suffix(self) -> str:
        return f"shard-{self.index}-of-{self.count}"

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``"2/4"`` -> Shard(2, 4)."""
    match = _SHARD_TEXT.match(text or "")
    if not match:
        raise ShardError(f"--shard {text!r}: use I/N with 1 <= I <= N, e.g. --shard 1/4")
    return Shard(int(match.group(1)), int(match.group(2)))


def stable_hash(*parts: object) -> int:
    """A process- and machine-independent hash of ``parts`` (their text)."""
    raw = "\x1f".join("auto" if p is None else str(p) for p in parts)
    return int.from_bytes(hashlib.sha256(raw.encode("utf-8")).digest()[:8], "big")


def cell_shard(job: Job, count: int) -> int:
    """The 1-based shard of a job's cell among ``count`` shards."""
    return stable_hash(*job.cell) % count + 1


def select_jobs(jobs: Iterable[Job], shard: Shard) -> list[Job]:
    """The jobs of one shard, in grid order."""
    return [j for j in jobs if cell_shard(j, shard.count) == shard.index]


def shard_config(cfg: SweepConfig, shard: Shard) -> SweepConfig:
    """The config of one shard: its own run folder and its own cache file."""
    name = f"{base_name(cfg.name)}.{shard.suffix}"
    if cfg.cache:
        cache = Path(cfg.cache)
        cache_path = cache.with_name(f"{cache.stem}.{shard.suffix}{cache.suffix or '.sqlite'}")
    else:
        cache_path = cfg.output_dir / name / "cache.sqlite"
    return cfg.with_(name=name, cache=str(cache_path))


def base_name(name: str) -> str:
    """A sweep name without its ``.shard-I-of-N`` suffix."""
    return _SHARD_SUFFIX.sub("", name)


@dataclass
class MergeResult:
    """What ``merge_runs`` did."""

    added: int = 0
    """Records newly written to the merged folder."""
    already: int = 0
    """Records skipped because the merged folder already had them."""
    duplicates: int = 0
    """Records present in more than one shard (or twice in one): written once."""
    total: int = 0
    """Records in the merged folder after the merge."""
    per_shard: dict[str, int] = field(default_factory=dict)
    """Records added from each shard folder."""


def _results_file(folder: Path) -> Path:
    path = folder / "results.jsonl" if folder.is_dir() else folder
    if not path.is_file() or path.name != "results.jsonl":
        raise ShardError(f"{folder} is not a sweep run folder (no results.jsonl); pass the shard folders of `pre sweep --shard`")
    return path


def _read_config(folder: Path) -> dict[str, Any] | None:
    """A sweep folder's config.json, or None when it has none."""
    path = folder / "config.json"
    if not path.is_file():
        return None
    try:
        data = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError:
        raise ShardError(f"{path} is not valid JSON; rerun that shard to rewrite it") from None
    if not isinstance(data, dict):
        raise ShardError(f"{path} is not a sweep config (not a JSON object); rerun that shard to rewrite it")
    return data


def _comparable(data: dict[str, Any]) -> dict[str, Any]:
    """What a sweep's records depend on: its config less what may differ per shard or machine."""
    out = {k: v for k, v in data.items() if k not in _PER_SHARD_KEYS}
    # Where a model is served and how fast may differ per machine; what is measured may not.
    out["model_options"] = {
        model: ",".join(a for a in str(opts.get("model_args", "")).split(",") if not a.strip().startswith("base_url="))
        for model, opts in (data.get("model_options") or {}).items()
    }
    return out


def _differences(a: dict[str, Any], b: dict[str, Any]) -> str:
    differing = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    return ", ".join(differing[:3])


def _key(row: dict[str, Any], where: Path) -> tuple[str, str]:
    job_id, prompt_id = row.get("job_id"), row.get("prompt_id")
    if not job_id or not prompt_id:
        raise ShardError(f"{where} holds a record without job_id/prompt_id: only sweep run folders can be merged")
    return str(job_id), str(prompt_id)


def merge_runs(out: str | os.PathLike[str], shard_dirs: Sequence[str | os.PathLike[str]], *,
               say: Callable[[str], None] = lambda message: None, lock_wait: float = 10.0) -> MergeResult:
    """Merge the records of shard run folders into ``out`` exactly once each.

    The key is (job id, prompt id). A finished record wins over a failed one;
    a failed record is kept only while no shard has that key finished (a
    later merge, after the shard is rerun, adds the finished one, and reports
    read the last). Merging again adds nothing; a merge killed midway is
    resumed by running it again (a torn last line is dropped first).

    Settings are never pooled: every shard folder must keep its config.json,
    the shards must come from the same sweep config (grid and settings), and
    records already in ``out`` must have been made under the same settings
    (its config.json says so; ``out`` holding records without one is refused).
    ``out``'s config.json lists every folder ever merged into it.
    """
    out_dir = Path(out)
    folders = [Path(d) for d in shard_dirs]
    if not folders:
        raise ShardError("pass at least one shard run folder to merge")
    files = [_results_file(f) for f in folders]
    for f in files:
        if out_dir.resolve() == f.parent.resolve():
            raise ShardError(f"{out_dir} is both the output and a shard; merge into a new folder")
    configs: list[tuple[Path, dict[str, Any]]] = []
    for f in files:
        data = _read_config(f.parent)
        if data is None:
            raise ShardError(f"{f.parent} has no config.json, so the settings of its records cannot be checked: "
                             "rerun that shard (a rerun keeps its records) or restore its config.json")
        configs.append((f.parent, data))
    first_folder, first = configs[0]
    for folder, data in configs[1:]:
        if _comparable(data) != _comparable(first):
            raise ShardError(f"{folder} comes from a different sweep than {first_folder} (config differs in "
                             f"{_differences(_comparable(data), _comparable(first))}); merge shards of one config only")

    shard_rows = [(f, read_jsonl(f)) for f in files]
    finished_anywhere = {
        _key(row, f) for f, rows in shard_rows for row in rows if row.get("status", "attacked") != "failed"
    }

    # Built in a temporary folder beside OUT and renamed over it: a merge killed or stopped
    # by a full disk leaves OUT as it was (and a .OUT.work-* folder the next merge removes).
    # One writer: a sweep or another merge into OUT is waited for, then refused in one line.
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with folder_lock(out_dir, f"folder {out_dir}").hold(wait=lock_wait, say=say):
        merged_config = _merged_config(out_dir, configs)
        return _merge_locked(out_dir, files, merged_config, shard_rows, finished_anywhere)


def _merged_config(out_dir: Path, configs: list[tuple[Path, dict[str, Any]]]) -> dict[str, Any]:
    """OUT's config.json after the merge; refuses incoming records made under other settings than
    the records OUT already holds (merging one shard at a time must not pool settings either)."""
    first_folder, first = configs[0]
    for name in ("results.jsonl", "config.json"):
        if (out_dir / name).is_symlink():
            raise ShardError(f"{out_dir / name} is a symbolic link: a merge never takes records or settings through a "
                             "link (it may point outside the folder); replace it with the file itself, or merge into a new folder")
    existing = _read_config(out_dir) if out_dir.is_dir() else None
    target = out_dir / "results.jsonl"
    holds_records = target.is_file() and target.stat().st_size > 0
    if existing is None and holds_records:
        raise ShardError(f"{out_dir} holds records but no config.json, so their settings cannot be compared with "
                         f"{first_folder}'s: merge into a new folder")
    if existing is not None and _comparable(existing) != _comparable(first):
        raise ShardError(f"{first_folder} was made with other settings than the records already in {out_dir} "
                         f"(config differs in {_differences(_comparable(first), _comparable(existing))}); "
                         "merge it into another folder")
    merged = dict(existing if existing is not None else first)
    merged["name"] = base_name(str(merged.get("name", out_dir.name)))
    if merged.get("cache"):  # the unsharded sweep's cache: where `pre cache merge` should write
        merged["cache"] = _SHARD_PART.sub("", str(merged["cache"]))
    recorded = merged.get("merged_from")
    earlier = [str(f) for f in recorded] if isinstance(recorded, list) else []
    merged["merged_from"] = list(dict.fromkeys([*earlier, *(str(folder) for folder, _ in configs)]))
    return merged


def _merge_locked(out_dir: Path, files: list[Path], merged_config: dict[str, Any],
                  shard_rows: list[tuple[Path, list[dict[str, Any]]]], finished_anywhere: set[tuple[str, str]]) -> MergeResult:
    atomic_io.remove_leftovers(out_dir.parent, out_dir.name)
    target = out_dir / "results.jsonl"
    old_raw = target.read_bytes() if target.exists() else b""
    old_raw = old_raw[: old_raw.rfind(b"\n") + 1]  # a torn last line (an older, non-atomic merge) is dropped
    existing = read_jsonl(target) if target.exists() else []
    have_finished = {_key(r, target) for r in existing if r.get("status", "attacked") != "failed"}
    have_failed = {_key(r, target) for r in existing if r.get("status", "attacked") == "failed"}

    result = MergeResult()
    to_write: list[dict[str, Any]] = []
    seen_in_shards: set[tuple[str, str, bool]] = set()
    for f, rows in shard_rows:
        added_here = 0
        for row in rows:
            key = _key(row, f)
            failed = row.get("status", "attacked") == "failed"
            marker = (*key, failed)
            if marker in seen_in_shards:
                result.duplicates += 1
                continue
            seen_in_shards.add(marker)
            if key in have_finished or (failed and (key in have_failed or key in finished_anywhere)):
                result.already += 1
                continue
            to_write.append(row)
            (have_failed if failed else have_finished).add(key)
            added_here += 1
        result.per_shard[str(f.parent)] = added_here
    result.added = len(to_write)
    result.total = len(existing) + len(to_write)

    work = out_dir.parent / f".{out_dir.name}.work-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        work.mkdir()
        if out_dir.is_dir():  # whatever else OUT holds comes along unchanged
            for item in out_dir.iterdir():
                if item.name in ("results.jsonl", "results.parquet", "config.json"):
                    continue
                if item.is_symlink():  # kept as a link: never read or written through
                    os.symlink(os.readlink(item), work / item.name)
                elif item.is_dir():
                    shutil.copytree(item, work / item.name, symlinks=True)
                else:
                    shutil.copy2(item, work / item.name)
        atomic_io.write_bytes(work / "results.jsonl", old_raw + atomic_io.jsonl_bytes(to_write))
        atomic_io.write_bytes(work / "config.json", orjson.dumps(merged_config, option=orjson.OPT_INDENT_2, default=str))
        consolidate_parquet(work / "results.jsonl", work / "results.parquet")
        atomic_io.replace_folder(work, out_dir)
    except BaseException as exc:
        shutil.rmtree(work, ignore_errors=True)
        refused = atomic_io.as_output_error(exc, out_dir) if isinstance(exc, Exception) else None
        if refused is not None:
            raise refused from None
        raise
    return result
