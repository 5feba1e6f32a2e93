"""`pre sweep merge OUT SHARD_DIR...`: every shard's records in OUT, exactly once each."""

from __future__ import annotations

from promptrobust.cli.errors import UserError


def handle_merge(paths: list[str]) -> int:
    """Merge the shards into OUT and say which caches to merge too."""
    from pathlib import Path

    import orjson

    from promptrobust.engine.runs.run_folder import recorded_cache
    from promptrobust.engine.runs.sweep.sharding import ShardError, merge_runs

    if len(paths) < 2:
        raise UserError("pre sweep merge needs OUT and at least one SHARD_DIR, e.g. pre sweep merge runs/sweeps/grid runs/sweeps/grid.shard-*")
    out, shards = paths[0], paths[1:]
    try:
        result = merge_runs(out, shards)
    except ShardError as exc:
        raise UserError(str(exc)) from None
    for folder, added in result.per_shard.items():
        print(f"{folder}: {added} new records")
    print(f"{out}: {result.added} added, {result.already} already there, {result.total} records in total")
    caches = [cache for cache in map(recorded_cache, shards) if cache]
    merged = Path(out) / "config.json"
    target = (orjson.loads(merged.read_bytes()).get("cache") if merged.is_file() else None) or "CACHE"
    if caches:
        print(f"merge their caches too: pre cache merge {target} {' '.join(caches)}")
    return 0
