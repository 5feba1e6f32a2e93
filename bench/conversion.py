"""A new user's first wait: converting an embedded model's GGUF once, with one parse of the file
against transformers parsing it at each of its three reads.

    python bench/conversion.py                       # both embedded models, one round each
    python bench/conversion.py --models gemma3-270m --rounds 2

Each round converts the model twice into empty stores, one way then the other (the order swaps
every round, so a machine that slows down does not favour one way): ``transformers alone`` lets
transformers parse the GGUF for the tokenizer, the config and the weights as it does by itself;
``one parse`` is what ``pre`` does (``model_store._conversion_progress``: the three reads share one
parse, which slices the mapped file as a plain array). The converted folders are compared byte for
byte: the speed-up must not change a single weight or tokenizer file. Writes
``bench/results/conversion.md`` and ``conversion.json``.
"""

from __future__ import annotations

import argparse
import filecmp
import functools
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson

from bench.environment import describe, describe_line
from promptrobust.engine.serving.model_store import _ensure, _spec, convert_gguf

HERE = Path(__file__).resolve().parent
OUT_MD = HERE / "results" / "conversion.md"
OUT_JSON = HERE / "results" / "conversion.json"
WAYS = {"transformers alone": False, "one parse": True}


def convert_once(name: str, store: Path, one_parse: bool) -> tuple[float, Path]:
    """Seconds to convert ``name`` into the empty ``store``, and the converted folder."""
    started = time.perf_counter()
    model = _ensure(_spec(name), store, functools.partial(convert_gguf, one_parse=one_parse))
    return time.perf_counter() - started, model.path


def same_files(a: Path, b: Path) -> bool:
    """Whether two converted folders hold the same files with the same bytes."""
    names = sorted(p.name for p in a.iterdir() if p.is_file())
    if names != sorted(p.name for p in b.iterdir() if p.is_file()):
        return False
    _, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
    return not mismatch and not errors


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["smollm2-135m-instruct", "gemma3-270m"])
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args(argv)
    env = describe()
    results: dict[str, Any] = {"environment": env, "models": {}}
    rows = []
    for name in args.models:
        seconds: dict[str, list[float]] = {way: [] for way in WAYS}
        identical = True
        for r in range(args.rounds):
            order = list(WAYS) if r % 2 == 0 else list(reversed(WAYS))
            with tempfile.TemporaryDirectory(prefix="pre-conv-") as tmp:
                folders = {}
                for way in order:
                    took, folders[way] = convert_once(name, Path(tmp) / way.replace(" ", "-"), WAYS[way])
                    seconds[way].append(took)
                    print(f"{name} round {r + 1}: {way} {took:.1f} s", flush=True)
                identical &= same_files(*folders.values())
        alone, ours = (statistics.median(seconds[w]) for w in WAYS)
        results["models"][name] = {"seconds": seconds, "ratio": round(alone / ours, 2), "identical_files": identical}
        rows.append(f"| {name} | {alone:.1f} | {ours:.1f} | {alone / ours:.2f}x | {'yes' if identical else '**no**'} |")
    lines = ["# Converting an embedded model's GGUF once: one parse against transformers alone", "",
             f"Command: `python bench/conversion.py {' '.join(argv if argv is not None else sys.argv[1:])}`".rstrip(),
             describe_line(env), "",
             f"Median of {args.rounds} round(s) of each way, the order swapped every round; seconds from an empty store to "
             "a complete converted folder (dequantising, writing and the fsyncs included).", "",
             "| model | transformers alone (s) | one parse (s) | ratio | same bytes written |", "|---|---:|---:|---:|---|",
             *rows, ""]
    OUT_MD.write_text("\n".join(lines))
    OUT_JSON.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    print("\n".join(lines))
    if not all(m["identical_files"] for m in results["models"].values()):
        sys.exit("the two ways wrote different files")


if __name__ == "__main__":
    main()
