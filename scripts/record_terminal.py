"""Record the README's first command in a pseudo-terminal, as a user sees it (issue 31).

    python scripts/record_terminal.py tests/fixtures/terminal/first-command

writes ``first-command.raw`` (every byte the terminal received, after a ``$ COMMAND`` line as a
shell would echo it) and ``first-command.txt`` (the screen those bytes leave, rendered by
``promptrobust.testing.render``). The command runs in a fresh folder (its run folder lands in
``runs/`` there) with an empty score cache, on whatever model store this machine has (the
embedded model is converted first if it is not yet). Extra arguments after the prefix replace
the command's own (e.g. ``--model smollm2-135m-instruct --limit 10``).
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

from promptrobust.testing import render, run_in_terminal

README_FIRST = ["run", "--limit", "100", "--mode", "choices", "--attack", "stresstest", "--top-k", "1"]
COLUMNS = 120


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    prefix = Path(argv[0])
    args = README_FIRST + argv[1:]
    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRE_PROGRESS") and k not in ("PYTHONWARNINGS", "PRE_DEBUG")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
    with tempfile.TemporaryDirectory(prefix="pre-recording-") as work:
        env["PRE_CACHE_DIR"] = str(Path(work) / "cache")  # nothing answered before
        began = time.monotonic()
        seen = run_in_terminal([sys.executable, "-m", "promptrobust.cli.main", *args], env=env, cwd=work,
                               timeout=3600, columns=COLUMNS)
        seconds = time.monotonic() - began
    echo = f"$ {shlex.join(['pre', *args])}\r\n".encode()
    raw = echo + seen.raw
    prefix.parent.mkdir(parents=True, exist_ok=True)
    prefix.with_suffix(".raw").write_bytes(raw)
    prefix.with_suffix(".txt").write_text("\n".join(render(raw, columns=COLUMNS)) + "\n")
    print(f"exit {seen.returncode} after {seconds:.0f} s; {len(raw)} bytes -> {prefix}.raw, {prefix}.txt")
    return seen.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
