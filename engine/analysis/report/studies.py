"""The paper's model studies: APDR across the sizes of one model family, and base against chat
(fine-tuned) models of one family and size (``pre sweep --preset model-size``, ``--preset fine-tuning``).

A model's family, size and tuning come from its name, in the way model hubs name them: the size a
token like ``7b`` or ``13B``, the tuning a token ``chat``, ``instruct`` or ``it``, the family the
rest (``hf:meta-llama/Llama-2-13b-chat-hf`` and ``openai:llama-2-13b-chat`` are family llama2, 13B,
chat). Models named otherwise are left out of these tables.

Comparisons are paired: the unit is a cell (dataset, attack, prompt type and shots) that both models
have; each model's value in a cell is the APDR of its records there, and the difference is averaged
over the shared cells with a bootstrap interval over cells (``statistics.paired_difference``). The
per-model APDR beside it is over all of the model's records (``summarize_pdrs``), as in the other
tables.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from promptrobust.engine.analysis.report.tables import MISSING, Table, _summary, apdr_cell, interval_text
from promptrobust.engine.measuring.statistics import paired_difference

_SIZE = re.compile(r"^(\d+(?:\.\d+)?)b$")
_TUNED = frozenset({"chat", "instruct", "it", "sft"})
_NOISE = frozenset({"hf", "gguf", "awq", "gptq"})

STUDY_STATISTIC = ("APDR per model (mean ± s.d. [95% bootstrap]); difference: mean over shared cells "
                   "(dataset, attack, prompt type, shots) of the per-cell APDR difference [95% bootstrap over cells]")
STUDY_NOTE = (
    "each model's APDR is over all of its attacked records; the difference pairs the two models over the cells "
    "(dataset, attack, prompt type and shots) both have, so a model measured on more cells is not compared on "
    "cells the other lacks; an interval needs at least 2 shared cells"
)


@dataclass(frozen=True)
class ModelName:
    """What a model's name says: family, size in billions of parameters, and whether it is tuned (chat)."""

    family: str
    size: float
    tuned: bool

    @property
    def size_text(self) -> str:
        return f"{self.size:g}B"


def parse_model_name(name: str) -> ModelName | None:
    """Family, size and tuning from a model name (module docstring); None when it names no size."""
    last = name.split(":", 1)[-1].rsplit("/", 1)[-1].lower()
    tokens = [t for t in re.split(r"[-_ ]+", last) if t]
    sizes = [float(m.group(1)) for t in tokens if (m := _SIZE.match(t))]
    if len(sizes) != 1:
        return None
    family = "".join(t for t in tokens if not _SIZE.match(t) and t not in _TUNED and t not in _NOISE)
    if not family:
        return None
    return ModelName(family, sizes[0], any(t in _TUNED for t in tokens))


def _cells(records: Sequence[Mapping[str, Any]]) -> dict[tuple[Any, ...], list[Mapping[str, Any]]]:
    cells: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for r in records:
        cells.setdefault((r["dataset"], r["attack"], r.get("prompt_type"), r.get("shots")), []).append(r)
    return cells


def _cell_mean(members: Sequence[Mapping[str, Any]]) -> float:
    return math.fsum(float(r["pdr"]) for r in members) / len(members)


def _compare(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """APDR of each side and the paired difference b - a over their shared cells."""
    ca, cb = _cells(a), _cells(b)
    shared = sorted(set(ca) & set(cb), key=repr)
    diff = paired_difference([_cell_mean(ca[c]) for c in shared], [_cell_mean(cb[c]) for c in shared])
    (sa, sam_a), (sb, sam_b) = _summary(a), _summary(b)
    return {"a": sa, "a_samples": sam_a, "b": sb, "b_samples": sam_b, "diff": diff}


def _diff_cells(diff: Any) -> tuple[str, str]:
    if diff.mean is None:
        return MISSING, "0"
    return f"{diff.mean:+.3f} {interval_text(diff.ci95, 3)}", str(diff.n)


def _by_model(attacked: Sequence[Mapping[str, Any]]) -> dict[str, tuple[ModelName, list[Mapping[str, Any]]]]:
    out: dict[str, tuple[ModelName, list[Mapping[str, Any]]]] = {}
    for r in attacked:
        parsed = parse_model_name(str(r["model"]))
        if parsed is not None:
            out.setdefault(str(r["model"]), (parsed, []))[1].append(r)
    return out


def size_table(attacked: Sequence[Mapping[str, Any]], suffix: str = "", title_suffix: str = "") -> Table | None:
    """Each family and tuning with two or more sizes: every size's APDR, and each size against the
    next smaller one, paired over shared cells. None when no family has two sizes."""
    groups: dict[tuple[str, bool], list[tuple[ModelName, str, list[Mapping[str, Any]]]]] = {}
    for model, (parsed, records) in _by_model(attacked).items():
        groups.setdefault((parsed.family, parsed.tuned), []).append((parsed, model, records))
    display: list[list[str]] = []
    long: list[dict[str, Any]] = []
    for (family, tuned), members in sorted(groups.items()):
        members.sort(key=lambda m: m[0].size)
        if len({m[0].size for m in members}) < 2:
            continue
        for i, (parsed, model, records) in enumerate(members):
            summary, samples = _summary(records)
            tuning = "chat" if tuned else "base"
            row: dict[str, Any] = {"family": family, "tuning": tuning, "size": parsed.size_text, "model": model,
                   "records": summary.n, "apdr": summary.mean,
                   "apdr_ci95": list(summary.ci95) if summary.ci95 else None}
            diff_text, n_cells, against = MISSING, MISSING, MISSING
            if i > 0:
                smaller = members[i - 1]
                cmp = _compare(smaller[2], records)
                diff_text, n_cells = _diff_cells(cmp["diff"])
                against = smaller[0].size_text
                row.update({"against": against, "difference": cmp["diff"].mean,
                            "difference_ci95": list(cmp["diff"].ci95) if cmp["diff"].ci95 else None,
                            "shared_cells": cmp["diff"].n})
            display.append([family, tuning, parsed.size_text, model, str(summary.n),
                            apdr_cell(summary, samples=samples), against, diff_text, n_cells])
            long.append(row)
    if not display:
        return None
    return Table("apdr_model_size" + suffix, "APDR across model size" + title_suffix,
                 ["family", "tuning", "size", "model", "records", "APDR", "vs size", "APDR difference [95%]",
                  "shared cells"], display, long, STUDY_NOTE, statistic=STUDY_STATISTIC)


def tuning_table(attacked: Sequence[Mapping[str, Any]], suffix: str = "", title_suffix: str = "") -> Table | None:
    """Each family and size with a base and a chat model: both APDRs and chat - base, paired over shared
    cells. None when no such pair exists."""
    pairs: dict[tuple[str, float], dict[bool, tuple[str, list[Mapping[str, Any]]]]] = {}
    for model, (parsed, records) in _by_model(attacked).items():
        pairs.setdefault((parsed.family, parsed.size), {})[parsed.tuned] = (model, records)
    display: list[list[str]] = []
    long: list[dict[str, Any]] = []
    for (family, size), sides in sorted(pairs.items()):
        if set(sides) != {False, True}:
            continue
        (base_model, base), (chat_model, chat) = sides[False], sides[True]
        cmp = _compare(base, chat)
        diff_text, n_cells = _diff_cells(cmp["diff"])
        size_text = f"{size:g}B"
        display.append([family, size_text, base_model, apdr_cell(cmp["a"], samples=cmp["a_samples"]), chat_model,
                        apdr_cell(cmp["b"], samples=cmp["b_samples"]), diff_text, n_cells])
        long.append({"family": family, "size": size_text, "base_model": base_model, "base_apdr": cmp["a"].mean,
                     "base_records": cmp["a"].n, "chat_model": chat_model, "chat_apdr": cmp["b"].mean,
                     "chat_records": cmp["b"].n, "difference": cmp["diff"].mean,
                     "difference_ci95": list(cmp["diff"].ci95) if cmp["diff"].ci95 else None,
                     "shared_cells": cmp["diff"].n})
    if not display:
        return None
    return Table("apdr_base_vs_chat" + suffix, "APDR of base and chat (fine-tuned) models" + title_suffix,
                 ["family", "size", "base model", "APDR base", "chat model", "APDR chat", "chat - base [95%]",
                  "shared cells"], display, long, STUDY_NOTE, statistic=STUDY_STATISTIC)
