"""The `next:` line after `pre run`: a command that keeps the user's flags and makes sense.

Two rules. The suggested command keeps every model, data and query flag the
user gave (model, model args, dataset, data files, limit, shots, seed, mode,
parser, max tokens, prompt type, cache, output folder), so the next run
measures the same thing. And a prompt whose clean score is at chance is never
suggested for an attack (its PDR would be noise): the hint then offers label
scoring, more samples or another model instead.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Sequence
from typing import Any

#: (args attribute, flag, value meaning "not given") of the flags a follow-up run keeps.
KEPT_FLAGS: tuple[tuple[str, str, Any], ...] = (
    ("model", "--model", None),  # None here: compared with the registry's default below
    ("model_args", "--model-args", ""),
    ("dataset", "--dataset", "rotten_tomatoes"),
    ("data_dir", "--data-dir", None),
    ("data_file", "--data-file", None),
    ("limit", "--limit", None),
    ("shots", "--shots", None),
    ("seed", "--seed", 0),
    ("mode", "--mode", "generate"),
    ("parser", "--parser", "last_word"),
    ("max_tokens", "--max-tokens", None),
    ("prompt_type", "--prompt-type", "task"),
    ("cache", "--cache", None),
    ("output_dir", "--output-dir", "runs"),
)

#: Below this many samples an interval is wide enough that more samples is the first advice.
FEW_SAMPLES = 200


def kept_flags(args: argparse.Namespace, *, drop: Sequence[str] = ()) -> list[str]:
    """The user's model/data/query flags as command-line words (only those that differ from the defaults)."""
    from promptrobust.engine.serving.registry import DEFAULT_MODEL

    words: list[str] = []
    for attr, flag, unset in KEPT_FLAGS:
        if attr in drop or not hasattr(args, attr):
            continue
        value = getattr(args, attr)
        default = DEFAULT_MODEL if attr == "model" else unset
        if value is None or value == default:
            continue
        words += [flag, _limit_text(value) if attr == "limit" else str(value)]
    return words


def _limit_text(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def command(args: argparse.Namespace, *extra: str, drop: Sequence[str] = ()) -> str:
    """The suggested command, keeping the user's flags but never a credential from a base URL."""
    from promptrobust.engine.safe_io.redact import redact_text

    return redact_text(shlex.join(["pre", "run", *kept_flags(args, drop=drop), *extra]))


def after_clean(args: argparse.Namespace, clean: Sequence[Any], samples: int) -> str:
    """What to run after clean scores: attack the best prompt, unless every prompt is at chance."""
    usable = [c for c in clean if not c.at_chance and c.score > 0]
    if usable:
        best = max(usable, key=lambda c: c.score)
        return f"{command(args, '--attack', 'stresstest', '--top-k', '1')}  (attack the best prompt, {best.prompt.id}; PDR with its interval)"
    return at_chance_advice(args, samples)


def at_chance_advice(args: argparse.Namespace, samples: int,
                     lead: str = "every prompt scores at chance, so an attack would measure noise") -> str:
    """Prompts at chance: an attack would measure noise. Offer what can lift the clean score."""
    options = []
    if getattr(args, "mode", "generate") == "generate":
        options.append(f"{command(args, drop=('mode',))} --mode choices  (label scoring: no answer parsing)")
    if samples < FEW_SAMPLES and getattr(args, "limit", None) is not None:
        options.append(f"{command(args, drop=('limit',))} --limit {max(FEW_SAMPLES, 2 * samples)}  (more samples: a narrower interval)")
    options.append(f"{command(args, drop=('model', 'model_args', 'shots'))} --model MODEL  (a stronger model; `pre list models`)")
    return f"{lead}; try\n  " + "\n  ".join(options)


def after_attack(args: argparse.Namespace, records: Sequence[Any], attacks: Sequence[str], report_dir: str) -> str:
    """What to run after an attack: the report of the runs, and other attacks on the same setting."""
    report = f"pre report {shlex.quote(report_dir)}  (tables, plots, APDR with intervals)"
    attacked = [r for r in records if r.status == "attacked"]
    if attacked and all(r.at_chance for r in attacked):
        advice = at_chance_advice(args, _samples(records), "the attacked prompts score at chance, so their PDR is noise")
        return f"{report}\n  {advice}"
    others = [a for a in ("deepwordbug", "textfooler", "checklist") if a not in attacks][:2]
    if not others:
        return report
    top_k = getattr(args, "top_k", None)
    extra = ["--attack", ",".join(others)] + (["--top-k", str(top_k)] if top_k is not None and top_k != 3 else [])
    return f"{report}  |  {command(args, *extra)}"


def _samples(records: Sequence[Any]) -> int:
    for r in records:
        scores = getattr(r, "clean_sample_scores", None)
        if scores:
            return len(scores)
    return 0
