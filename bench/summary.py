"""bench/results/summary.json: the headline figures, rewritten by the benches that measure them.

Each bench replaces its own keys and leaves the others; every write records
the machine, versions and commit of the run and the command that produced
each figure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.environment import describe


def update_summary(path: str | Path, command: str, figures: dict[str, Any]) -> dict[str, Any]:
    """Merge ``figures`` into the summary at ``path`` (created if missing); returns the new summary."""
    import orjson

    p = Path(path)
    data: dict[str, Any] = orjson.loads(p.read_bytes()) if p.is_file() else {}
    env = describe()
    data.update(figures)
    data["machine"] = {k: v for k, v in env.items() if k not in ("versions", "commit")}
    data["versions"] = env["versions"]
    data["commit"] = env["commit"]
    # which command produced which figures (other benches keep their entries)
    by_command = {c: [k for k in keys if k not in figures] for c, keys in data.get("figures_by_command", {}).items()}
    by_command[command] = sorted(figures)
    data["figures_by_command"] = {c: keys for c, keys in by_command.items() if keys}
    data.pop("commands", None)
    data["command"] = command
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    return data


def update_section(path: str | Path, section: str, command: str, figures: dict[str, Any]) -> dict[str, Any]:
    """Replace one named section of the summary (its figures with their own machine, versions, commit and
    command); the top-level figures and their provenance are left as they are."""
    import orjson

    p = Path(path)
    data: dict[str, Any] = orjson.loads(p.read_bytes()) if p.is_file() else {}
    env = describe()
    data[section] = {**figures, "machine": {k: v for k, v in env.items() if k not in ("versions", "commit")},
                     "versions": env["versions"], "commit": env["commit"], "command": command}
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    return data
