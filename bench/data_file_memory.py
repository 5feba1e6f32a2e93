"""What loading a user's data file costs in memory, per GB of file: a CSV of support tickets
(about 100 bytes a row: an id, a 14-word body, a queue) is written to a temporary folder, loaded
as a task of one's own in a fresh process (``task.load(limit=...)``), and that process's peak
RSS above its RSS before the load is reported, scaled to a GB of file. The file is deleted at the end.

    python bench/data_file_memory.py --size-mb 100 --limits none,20
    PYTHONPATH=/path/to/another/checkout python bench/data_file_memory.py ...   # the same, on other code

The child imports ``promptrobust`` from ``PYTHONPATH`` (else this checkout), so the same
command measures two versions of the code. ``PRE_MAX_DATA_FILE_MB`` is raised for the child
so a full read is measured rather than refused. RSS counts the file's pages that the CSV reader
maps (file-backed, reclaimable); the child also reports its anonymous memory (``RssAnon``) at
its peak's end, which is what the rows themselves hold.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, os, resource, sys
import polars  # its own memory (about 60 MB) is not the file's
def rss(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
from promptrobust.tasks import task_from_columns
task = task_from_columns(data_file=sys.argv[1], input_columns="body", label_column="queue",
                         labels="BIL=billing,TEC=technical,OTH=other", prompts=["Route the ticket."])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
limit = None if sys.argv[2] == "none" else int(sys.argv[2])
samples = task.load(limit=limit)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"samples": len(samples), "before_mb": before, "peak_mb": peak, "anon_mb": rss("RssAnon"),
                  "file_mb": rss("RssFile")}))
"""


def write_csv(path: Path, megabytes: float) -> int:
    """A CSV of about ``megabytes``; its number of rows."""
    target = int(megabytes * 1024 * 1024)
    rng = random.Random(0)
    words = ("refund invoice charged twice app crashes login password printer office hello where is the "
             "manager please help").split()
    rows = size = 0
    with path.open("w") as f:
        f.write("ticket_id,body,queue\n")
        while size < target:
            line = f"T{rows},{' '.join(rng.choice(words) for _ in range(14))},{('BIL', 'TEC', 'OTH')[rows % 3]}\n"
            f.write(line)
            size += len(line)
            rows += 1
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=float, default=100.0)
    ap.add_argument("--limits", default="none,20", help="comma-separated: none (read every row) or a number")
    args = ap.parse_args()
    env = dict(os.environ, PRE_MAX_DATA_FILE_MB="1000000")
    env.setdefault("PYTHONPATH", str(ROOT))
    code = env["PYTHONPATH"]
    with tempfile.TemporaryDirectory(prefix="pre-bench-") as folder:
        path = Path(folder) / "tickets.csv"
        rows = write_csv(path, args.size_mb)
        gb = path.stat().st_size / 1024**3
        print(f"code: {code}\nfile: {path.stat().st_size / 1024**2:.1f} MB, {rows:,} rows")
        print("limit | samples | RSS before load MB | peak RSS MB | load cost MB | per GB of file | RssAnon MB | RssFile MB")
        for limit in args.limits.split(","):
            done = subprocess.run([sys.executable, "-c", CHILD, str(path), limit.strip()], env=env, capture_output=True,
                                  text=True, check=True, cwd=folder)  # not this checkout: PYTHONPATH decides the code
            m = json.loads(done.stdout.strip().splitlines()[-1])
            cost = m["peak_mb"] - m["before_mb"]
            print(f"{limit:>5} | {m['samples']:>7} | {m['before_mb']:18.0f} | {m['peak_mb']:11.0f} | {cost:12.0f} | "
                  f"{cost / gb / 1024:11.2f} GB | {m['anon_mb']:10.0f} | {m['file_mb']:10.0f}")


if __name__ == "__main__":
    main()
