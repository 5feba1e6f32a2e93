"""A user's own task on a real small model (issue 34): the docs' 3-class ticket router
(its own column names, labels that are not positive/negative, a file of worked examples)
measured by the embedded Gemma 3 270M, 3-shot (a base model) in choices mode: clean scores
with intervals, TextBugger and CheckList on the top prompt with the answer words never
changed, records that name the task; the same task given by flags answers from the same
cache keys (nothing sent). About a minute on two loaded CPU cores (limit 6).
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from promptrobust.attacks.words import normalize_protected, protected_sequence
from promptrobust.engine.measuring.protocol import ProtocolResult
from promptrobust.engine.measuring.settings import AttackSettings, EvaluationSettings
from promptrobust.engine.measuring.workbench import protected_words
from promptrobust.engine.runs.session import Session
from promptrobust.engine.serving.model_store import ModelNotInstalled, ensure_embedded
from promptrobust.tasks import load_prompts, load_task_file, task_from_columns
from promptrobust.tasks.base import Prompt, Task

pytestmark = pytest.mark.slow  # loads a real model

DOCS = Path(__file__).resolve().parents[1] / "docs" / "examples" / "tickets"
MODEL = "gemma3-270m"
LIMIT = 6


@pytest.fixture(scope="module")
def model_installed() -> None:
    try:
        ensure_embedded(MODEL)
    except ModelNotInstalled as exc:
        pytest.skip(str(exc))


async def protocol(cache: Path, task: Task, prompts: list[Prompt]) -> tuple[ProtocolResult, dict]:
    async with Session(cache=cache) as session:
        result = await session.attack_top_k(
            EvaluationSettings(task=task, mode="choices", limit=LIMIT),
            AttackSettings(attacks=("textbugger", "checklist"), top_k=1),
            model=MODEL, prompts=prompts,
        )
        stats = next(iter(session._schedulers.values())).stats.snapshot()
    return result, stats


def test_own_task_on_gemma_attacks_keep_the_answer_words(tmp_path: Path, model_installed: None) -> None:
    shutil.copytree(DOCS, tmp_path / "tickets")
    task = load_task_file(tmp_path / "tickets" / "tickets.toml")
    prompts = load_prompts(task)
    result, stats = asyncio.run(protocol(tmp_path / "cache.sqlite", task, prompts))

    assert stats["backend_requests"] > 0
    assert result.measurement["shots"] == 3 and result.measurement["mode"] == "choices"
    assert len(result.clean) == len(prompts) == 3
    for clean in result.clean:
        low, high = clean.ci95
        assert 0.0 <= low <= clean.score <= high <= 1.0 and low < high
        assert isinstance(clean.at_chance, bool)
    best = max(result.clean, key=lambda c: c.score)
    assert best.score > 1 / 3  # the model knows something of the task

    assert sorted(r.attack for r in result.records) == ["checklist", "textbugger"]
    answer_words = normalize_protected(task.choices())
    guarded = protected_words(task)
    for record in result.records:
        assert record.dataset == "tickets" and record.status == "attacked" and record.prompt_id == best.prompt.id
        assert record.clean_ci95 is not None and record.adversarial_ci95 is not None and record.pdr_ci95 is not None
        # every protected word of the clean prompt is there, unchanged and in order
        assert protected_sequence(record.adversarial_prompt, guarded) == protected_sequence(record.clean_prompt, guarded)
        assert set(protected_sequence(record.clean_prompt, answer_words)) == {"billing", "technical", "other"}
    checklist = next(r for r in result.records if r.attack == "checklist")
    assert checklist.adversarial_prompt != checklist.clean_prompt

    # The same task given by flags: the same cache keys (nothing sent) and the same records.
    flags = task_from_columns(data_file=str(tmp_path / "tickets" / "tickets.csv"), input_columns="body",
                              label_column="queue", labels="BIL=billing,TEC=technical,OTH=other", id_column="ticket_id",
                              template="Ticket: {body}", few_shot_file=str(tmp_path / "tickets" / "examples.csv"),
                              protected=["ticket"])
    assert flags.cache_namespace == task.cache_namespace
    again, stats = asyncio.run(protocol(tmp_path / "cache.sqlite", flags, prompts))
    assert stats["backend_requests"] == 0 and stats["cache_hits"] > 0
    strip = lambda r: {k: v for k, v in r.to_dict().items() if k != "cost"}  # noqa: E731
    assert [strip(r) for r in again.records] == [strip(r) for r in result.records]
    assert [c.to_dict() for c in again.clean] == [c.to_dict() for c in result.clean]
