"""The sets of (clean, adversarial) pairs labelled by hand that measure the meaning verdict, in one place.

``scripts/calibrate_meaning_check.py`` (the shipped check) and ``scripts/measure_meaning_nli.py`` (an
NLI judge, its ceiling and floor) score the same sets, named the same way in their output and in
docs/fidelity.md; a new set is one line here. Each set says how it was written relative to the
check, since that decides what its figures can claim (a set whose errors were read while rules were
written measures less than one committed before the check ever ran on it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

FOLDER = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "meaning"


@dataclass(frozen=True)
class LabelledSet:
    """One labelled set: its name in output, its file, the rows it keeps (a ``split`` value; None: all)."""

    name: str
    file: str
    split: str | None
    history: str  # how and when it was written, relative to the check

    @property
    def path(self) -> Path:
        return FOLDER / self.file

    def rows(self) -> list[dict[str, Any]]:
        return [r for r in read_rows(self.path) if self.split is None or r.get("split") == self.split]


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Every labelled pair of a JSON Lines file (both halves of one that has a ``split``)."""
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


CALIBRATION = LabelledSet("calibration half", "verdict_pairs.jsonl", "calibration",
                          "used to choose the thresholds")
HELD_OUT = LabelledSet("held-out half", "verdict_pairs.jsonl", "held-out",
                       "never used to choose the thresholds; its errors were read while rules were written")
EARLIER = LabelledSet("earlier 80 pairs", "labelled_pairs.jsonl", None, "issue 30's set")
BLIND_SETS: tuple[LabelledSet, ...] = (
    LabelledSet("blind 1", "blind_pairs.jsonl", None, "written after check v4 was fixed, before it was run on them"),
    LabelledSet("blind 2", "blind2_pairs.jsonl", None,
                "written by someone who never saw the check, committed before check v5 was run on them"),
    LabelledSet("blind 3", "blind3_pairs.jsonl", None,
                "written by someone who never saw the check, committed before check v6's rules were run on them"),
    LabelledSet("blind 4", "blind4_pairs.jsonl", None,
                "written by another person who never saw the check, committed before check v6 was run on them; "
                "two of its rules narrowed after"),
    LabelledSet("blind 5", "blind5_pairs.jsonl", None,
                "written by someone who never saw the check, committed before the final check v6 was run on them; "
                "nothing changed after for v6; check v7's rules were written from its errors"),
    LabelledSet("blind 6", "blind6_pairs.jsonl", None,
                "written by someone who never saw the check, committed before check v6 or any candidate after it "
                "was run on them; nothing changed after for v6; check v7's rules were written from its errors"),
    LabelledSet("blind 7", "blind7_pairs.jsonl", None,
                "written by someone who never saw the check, committed before check v7 (whose rules were written from "
                "the fifth and sixth sets' errors) or any candidate was run on them; nothing changed after; check v8's "
                "rules were written from its errors"),
    LabelledSet("blind 8", "blind8_pairs.jsonl", None,
                "written by someone who never saw the check, committed after check v7 was measured on the seventh "
                "set and before it was run on them; nothing changed after; check v8's rules were written from its "
                "errors"),
    LabelledSet("blind 9", "blind9_pairs.jsonl", None,
                "written by someone who never saw the check, committed before check v8 (whose rules were written from "
                "the seventh and eighth sets' errors) or any candidate was run on them; nothing changed after; check "
                "v9's rules were written from its errors"),
    LabelledSet("blind 10", "blind10_pairs.jsonl", None,
                "written by someone who never saw the check, committed before check v9 (whose rules were written from "
                "the ninth set's errors) or any candidate was run on them; check v10's rules were written from its "
                "errors"),
    LabelledSet("blind 11", "blind11_pairs.jsonl", None,
                "written by someone who never saw the check, committed before check v9 or v10 (whose rules were "
                "written from the tenth set's errors) was run on them; nothing changed after"),
    LabelledSet("blind 12", "blind12_pairs.jsonl", None,
                "written by someone who never saw the check, committed before check v10 or the learned judge "
                "(scripts/fit_meaning_judge.py, fitted on every other set) was run on them; nothing changed after"),
)
#: Every set, in the order the scripts print them.
ALL_SETS: tuple[LabelledSet, ...] = (CALIBRATION, HELD_OUT, EARLIER, *BLIND_SETS)


def labelled_set(name: str) -> LabelledSet:
    """The set called ``name`` ("blind 5", "held-out half", ...)."""
    for found in ALL_SETS:
        if found.name == name:
            return found
    raise KeyError(f"no labelled set {name!r}: one of {', '.join(s.name for s in ALL_SETS)}")
