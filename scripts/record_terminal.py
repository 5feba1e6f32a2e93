"""Record the README's first command as a user sees it: in a pseudo-terminal of a given width,
or as a log (issues 31 and 42).

    python scripts/record_terminal.py tests/fixtures/terminal/first-command-80 --columns 80 --empty-model-store
    python scripts/record_terminal.py tests/fixtures/terminal/first-command-log --log --empty-model-store

In a terminal it writes ``PREFIX.raw`` (every byte the terminal received, after a ``$ COMMAND``
line as a shell would echo it) and ``PREFIX.txt`` (the screen those bytes leave, rendered by
``promptrobust.testing.render`` at that width). ``--log`` runs it with stdout and stderr going
to one file (``pre run ... > run.log 2>&1``) and writes that file as ``PREFIX.txt``. The command
runs in a fresh folder (its run folder lands in ``runs/`` there) with an empty score cache;
``--empty-model-store`` gives it an empty model store too (``PRE_MODEL_STORE``: the embedded model
is converted first, which takes minutes), else the machine's store is used. ``--python EXE`` runs
it with another interpreter (a fresh ``pip install -e '.[local]'`` environment: what a new user
has). Extra arguments after ``--`` replace the command's own (e.g. ``-- --model
smollm2-135m-instruct --limit 10``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

README_FIRST = ["run", "--limit", "100", "--mode", "choices", "--attack", "stresstest", "--top-k", "1"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prefix", type=Path)
    parser.add_argument("--columns", type=int, default=120)
    parser.add_argument("--log", action="store_true", help="no terminal: stdout and stderr into one file")
    parser.add_argument("--empty-model-store", action="store_true")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("extra", nargs="*")
    args = parser.parse_args(argv)
    words = README_FIRST + args.extra
    root = Path(__file__).resolve().parents[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRE_") and k not in ("PYTHONWARNINGS", "PYTHONPATH")}
    if Path(args.python).resolve() == Path(sys.executable).resolve():
        env["PYTHONPATH"] = str(root)  # this checkout's code (another interpreter has its own install)
    with tempfile.TemporaryDirectory(prefix="pre-recording-") as work:
        env["PRE_CACHE_DIR"] = str(Path(work) / "cache")  # nothing answered before
        if args.empty_model_store:
            env["PRE_MODEL_STORE"] = str(Path(work) / "models")
        command = [args.python, "-m", "promptrobust.cli.main", *words]
        began = time.monotonic()
        echo = f"$ {shlex.join(['pre', *words])}"
        args.prefix.parent.mkdir(parents=True, exist_ok=True)
        if args.log:
            env.pop("COLUMNS", None)
            with open(Path(work) / "run.log", "wb") as log:
                code = subprocess.run(command, env=env, cwd=work, stdout=log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, timeout=3600).returncode
            text = (Path(work) / "run.log").read_text(encoding="utf-8")
            args.prefix.with_suffix(".txt").write_text(f"{echo}\n{text}", encoding="utf-8")
            size = len(text)
        else:
            from promptrobust.testing import render, run_in_terminal

            seen = run_in_terminal(command, env=env, cwd=work, timeout=3600, columns=args.columns)
            code = seen.returncode
            raw = f"{echo}\r\n".encode() + seen.raw
            args.prefix.with_suffix(".raw").write_bytes(raw)
            args.prefix.with_suffix(".txt").write_text("\n".join(render(raw, columns=args.columns)) + "\n")
            size = len(raw)
        seconds = time.monotonic() - began
    print(f"exit {code} after {seconds:.0f} s; {size} bytes -> {args.prefix}.*")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
