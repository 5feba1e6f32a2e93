"""Scoring given prompts and (clean, adversarial) pairs, with the statistics
every figure carries: the shared core of ``pre eval``, ``pre transfer`` and
``pre defend``.

Each distinct prompt text is scored once on every sample, with exact scores
(no early stopping) and its per-sample scores kept, so a pair's PDR gets a
paired interval and a McNemar test (``engine.analysis.statistics``), and a
clean score its 95% interval and chance flag.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


from promptrobust.engine.errors import PromptRobustError
from promptrobust.engine.analysis.report.tables import Table
from promptrobust.engine.analysis.statistics import summarize_pdrs
from promptrobust.engine.records import AttackRecord, Cost
from promptrobust.engine.settings import EvaluationSettings
from promptrobust.tasks.base import Prompt

__all__ = [
    "AnalysisInputError",
    "PromptScore",
    "ProgressSink",
    "apdr_rows",
    "field_of",
    "format_apdr",
    "pair_record",
    "prepare",
    "score_prompts",
    "summed_counters",
    "text_table",
]


class AnalysisInputError(PromptRobustError, ValueError):
    """Inputs an analysis cannot work with (missing runs, bad prompt files); the
    message names the fix."""


class ProgressSink(Protocol):
    """Where a long analysis reports progress (the CLI draws a line from it)."""

    def start(self, total: int, counters: Callable[[], Mapping[str, float]]) -> None:
        """``total`` requests will be asked for; ``counters()`` are the schedulers' live counters."""

    async def stop(self) -> None:
        """The work is over (also called on errors)."""


async def prepare(session: Any, spec: Any, settings: EvaluationSettings) -> Any:
    """The evaluation resolved for one model (``Session.workbench``: prepared once per
    session): task, samples, few-shot examples (a base model without explicit shots
    gets the paper's 3), the mode, the chance rate and the shared scheduler."""
    bench = await session.workbench(spec, settings)
    if not bench.samples:
        raise AnalysisInputError(f"dataset {bench.task.name} gave no samples; check the data folder or file and the sample limit",
                                 setting="limit")
    return bench


@dataclass(frozen=True)
class PromptScore:
    """One prompt scored on every sample of a workbench."""

    prompt: str
    score: float
    sample_scores: tuple[float, ...]
    """Per-sample scores in sample order (the statistics pair them by position)."""
    ci95: tuple[float, float]
    at_chance: bool
    unparseable: int
    cost: Cost
    sample_log: tuple[dict[str, Any], ...] = ()
    """Every input, answer and score (only when asked for, for ``--log-samples``)."""


async def score_prompts(bench: Any, prompts: Iterable[str], *, keep_samples: bool = False) -> dict[str, PromptScore]:
    """Exact scores of the distinct ``prompts`` through ``Workbench.score_prompts``
    (the one loop: no early stopping, all submitted at once, each prompt's cost its own)."""
    distinct = list(dict.fromkeys(prompts))
    given = [Prompt(id="", dataset=bench.task.name, type="given", text=t) for t in distinct]
    out: dict[str, PromptScore] = {}
    for s in await bench.score_prompts(given, keep_records=keep_samples):
        c = s.clean
        log = tuple(dict(vars(r)) for r in s.evaluation.records) if keep_samples else ()
        out[s.prompt.text] = PromptScore(s.prompt.text, c.score, c.sample_scores, c.ci95, c.at_chance, c.unparseable, s.cost, log)
    return out


def pair_record(bench: Any, **pair: Any) -> AttackRecord:
    """``Workbench.pair`` (kept for callers of release 0.1)."""
    return bench.pair(**pair)


def field_of(record: Any, key: str) -> Any:
    """A record's value for a grouping key: a field, else its ``extra`` or ``settings`` entry."""
    if hasattr(record, key):
        return getattr(record, key)
    for holder in ("extra", "settings"):
        values = getattr(record, holder, None) or {}
        if key in values:
            return values[key]
    return None


def apdr_rows(records: Sequence[Any], by: Sequence[str], *, get: Callable[[Any, str], Any] = field_of) -> list[dict[str, Any]]:
    """APDR per group (first-seen order): ``statistics.summarize_pdrs`` of each
    group's records, so the numbers equal what ``pre report`` prints."""
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for r in records:
        groups.setdefault(tuple(get(r, k) for k in by), []).append(r)
    out = []
    for key, members in groups.items():
        s = summarize_pdrs(members)
        out.append(
            {
                **dict(zip(by, key)), "n": s.n, "n_prompts": s.n_prompts, "skipped": len(members) - s.n,
                "pdr_mean": s.mean, "pdr_std": s.std,
                "pdr_ci95_low": s.ci95[0] if s.ci95 else None, "pdr_ci95_high": s.ci95[1] if s.ci95 else None,
            }
        )
    return out


def format_apdr(row: Mapping[str, Any], digits: int = 2) -> str:
    """'0.31 ± 0.12 [0.20, 0.43]' (mean ± sample std, 95% interval), the PDR
    alone for one record, '–' for none: the same text as a ``pre report`` cell."""
    mean, std = row.get("pdr_mean"), row.get("pdr_std")
    if mean is None:
        return "–"
    if std is None or row.get("n", 0) < 2:
        return f"{mean:.{digits}f}"
    lo, hi = row.get("pdr_ci95_low"), row.get("pdr_ci95_high")
    ci = "–" if lo is None else f"[{lo:.{digits}f}, {hi:.{digits}f}]"
    return f"{mean:.{digits}f} ± {std:.{digits}f} {ci}"


def text_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], *, name: str = "table", title: str = "") -> Any:
    """Rows as the report's ``Table`` (one Markdown/CSV writer for every analysis)."""
    def cell(v: Any) -> str:
        if v is None:
            return "–"
        if isinstance(v, bool):
            return "yes" if v else ""
        if isinstance(v, float):
            return f"{v:.4f}"
        if isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(x, float) for x in v):
            return f"[{v[0]:.3f}, {v[1]:.3f}]"
        return " ".join(str(v).split())

    return Table(
        name=name, title=title or name, header=list(columns),
        rows=[[cell(r.get(c)) for c in columns] for r in rows],
        long=[{c: r.get(c) for c in columns} for r in rows],
    )


def summed_counters(schedulers: Sequence[Any]) -> Callable[[], dict[str, float]]:
    """Live counters of several schedulers added up (for one progress line)."""

    def counters() -> dict[str, float]:
        total: dict[str, float] = {}
        for s in schedulers:
            for k, v in s.stats.snapshot().items():
                total[k] = total.get(k, 0) + v
        return total

    return counters
