"""What every bench script writes: a Markdown header and the Markdown + JSON pair."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from bench.environment import describe, describe_line


def command_line(script: str) -> str:
    """How this script was run, for the header and the JSON."""
    return f"python bench/{script} " + " ".join(sys.argv[1:])


def header(title: str, command: str, settings: str) -> list[str]:
    """Title, the exact command, the machine and versions, the settings."""
    return [f"# {title}", "", f"Command: `{command}`", describe_line(), f"Settings: {settings}", ""]


def write_results(out: str | Path, text: str, command: str, payload: dict[str, Any]) -> None:
    """``out`` gets the Markdown; the same name with ``.json`` the command, machine and ``payload``."""
    import orjson

    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith("\n") else text + "\n")
    data = {"command": command, "machine": describe(), **payload}
    path.with_suffix(".json").write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
