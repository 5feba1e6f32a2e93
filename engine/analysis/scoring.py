"""Scoring given prompts and (clean, adversarial) pairs, with the statistics
every figure carries: the shared core of ``pre eval``, ``pre transfer`` and
``pre defend``.

Each distinct prompt text is scored once on every sample, with exact scores
(no early stopping) and its per-sample scores kept, so a pair's PDR gets a
paired interval and a McNemar test (``engine.analysis.statistics``), and a
clean score its 95% interval and chance flag.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any


from promptrobust.engine.errors import PromptRobustError
from promptrobust.engine.analysis.report.tables import Table
from promptrobust.tasks.base import Prompt

if TYPE_CHECKING:
    from promptrobust.engine.measuring.target import MeasurementTarget
    from promptrobust.engine.measuring.workbench import ScoredPrompt, Workbench
    from promptrobust.engine.runs.session import Session
    from promptrobust.engine.serving.registry import ModelSpec

__all__ = [
    "AnalysisInputError",
    "prepare",
    "sample_rows",
    "score_prompts",
    "text_table",
]


class AnalysisInputError(PromptRobustError, ValueError):
    """Inputs an analysis cannot work with (missing runs, bad prompt files); the
    message names the fix."""


async def prepare(session: Session, spec: ModelSpec, target: MeasurementTarget) -> Workbench:
    """The workbench of a decided target on one model (``Session.workbench_for``: made once per
    session), refusing a dataset that gave no samples."""
    bench = await session.workbench_for(spec, target)
    if not bench.samples:
        raise AnalysisInputError(f"dataset {bench.task.name} gave no samples; check the data folder or file and the sample limit",
                                 setting="limit")
    return bench


async def score_prompts(bench: Workbench, prompts: Iterable[str], *, keep_samples: bool = False) -> dict[str, ScoredPrompt]:
    """Exact scores of the distinct ``prompts`` through ``Workbench.score_prompts``
    (the one loop: no early stopping, all submitted at once, each prompt's cost its own), by text.
    ``keep_samples`` keeps what happened on each sample (``sample_rows``, for ``--log-samples``)."""
    distinct = list(dict.fromkeys(prompts))
    given = [Prompt(id="", dataset=bench.task.name, type="given", text=t) for t in distinct]
    return {s.prompt.text: s for s in await bench.score_prompts(given, keep_records=keep_samples)}


def sample_rows(scored: ScoredPrompt) -> list[dict[str, object]]:
    """Every input, answer and score of a prompt scored with ``keep_samples`` (empty otherwise)."""
    return [dict(vars(r)) for r in scored.evaluation.records]


def text_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], *, name: str = "table", title: str = "") -> Any:
    """Rows as the report's ``Table`` (one Markdown/CSV writer for every analysis)."""
    def cell(v: object) -> str:
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
