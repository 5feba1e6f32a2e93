"""A user's own task on a real small model through the command line (issue 34): the docs' 3-class
ticket router (its own column names, labels that are not positive/negative, a file of worked
examples) measured by the embedded Gemma 3 270M, 3-shot (a base model) in choices mode:
``pre run --task FILE --mode choices --attack textbugger,checklist --top-k 1`` then ``pre report``.
Records and report name the task, the answer words are never modified by the attacks, clean
scores carry intervals; the same task given by its columns (and the best prompt's text) is
answered from the same cache keys (nothing sent) and gives the same records. About a minute
and a half on two loaded CPU cores (12 tickets, TextBugger's budget 40).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from promptrobust.attacks.words import normalize_protected, protected_sequence
from promptrobust.cli.main import main
from promptrobust.engine.measuring.records import read_jsonl
from promptrobust.engine.measuring.workbench import protected_words
from promptrobust.engine.serving.model_store import ModelNotInstalled, ensure_embedded
from promptrobust.tasks import load_task_file

pytestmark = pytest.mark.slow  # loads a real model

DOCS = Path(__file__).resolve().parents[1] / "docs" / "examples" / "tickets"
MODEL = "gemma3-270m"
LIMIT = 12
BUDGET = 40
LABELS = "BIL=billing,TEC=technical,OTH=other"


@pytest.fixture(scope="module")
def model_installed() -> None:
    try:
        ensure_embedded(MODEL)
    except ModelNotInstalled as exc:
        pytest.skip(str(exc))


def run(root: Path, capsys: pytest.CaptureFixture[str], *words: str) -> Path:
    """``pre run WORDS`` on Gemma, the protocol of the issue; its run folder."""
    before = set((root / "runs").iterdir()) if (root / "runs").exists() else set()
    code = main(["run", *words, "--model", MODEL, "--mode", "choices", "--attack", "textbugger,checklist", "--top-k", "1",
                 "--limit", str(LIMIT), "--budget", str(BUDGET), "--cache", str(root / "cache.sqlite"),
                 "--output-dir", str(root / "runs"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 0, err
    (folder,) = set((root / "runs").iterdir()) - before
    return folder


def results(folder: Path) -> dict[str, Any]:
    return orjson.loads((folder / "results.json").read_bytes())


def sent(folder: Path) -> int:
    return int(sum(s["backend_requests"] for s in results(folder)["counters"]["scheduler"].values()))


def test_a_task_file_on_gemma_then_the_report_and_the_columns_form_from_the_cache(
        tmp_path: Path, model_installed: None, capsys: pytest.CaptureFixture[str]) -> None:
    tickets = tmp_path / "tickets"
    shutil.copytree(DOCS, tickets)
    task = load_task_file(tickets / "tickets.toml")
    folder = run(tmp_path, capsys, "--task", str(tickets / "tickets.toml"))

    doc = results(folder)
    assert doc["dataset"] == "tickets" and doc["tasks"][0]["definition_hash"] == task.definition_hash
    measurement = doc["configs"]["measurement"]
    assert measurement["shots"] == 3 and measurement["mode"] == "choices" and measurement["samples"] == LIMIT
    clean = doc["results"]["clean"]
    assert sorted(c["prompt_id"] for c in clean) == ["route-task-1", "route-task-2"]  # its task prompts
    for c in clean:
        low, high = c["ci95"]
        assert 0.0 <= low <= c["score"] <= high <= 1.0 and low < high and isinstance(c["at_chance"], bool)
    best = clean[0]  # ranked, best first
    assert best["score"] > 1 / 3 and not best["at_chance"]  # the model knows something of the task

    records = read_jsonl(folder / "results.jsonl")
    assert sorted(r["attack"] for r in records) == ["checklist", "textbugger"]
    answer_words = normalize_protected(task.choices())
    guarded = protected_words(task)
    for r in records:
        assert r["dataset"] == "tickets" and r["task_definition"] == task.definition_hash
        assert r["prompt_id"] == best["prompt_id"]
        if r["status"] == "nothing_to_change":  # a word attack on an instruction whose every word is kept (issue 42)
            assert r["attack"] == "textbugger" and r["pdr"] is None and "ticket" in r["note"], r
            continue
        assert r["status"] == "attacked" and r["clean_ci95"] and r["adversarial_ci95"] and r["pdr_ci95"]
        # every protected word of the clean prompt is there, unchanged and in order
        assert protected_sequence(r["adversarial_prompt"], guarded) == protected_sequence(r["clean_prompt"], guarded)
        assert set(protected_sequence(r["clean_prompt"], answer_words)) == {"billing", "technical", "other"}
    assert next(r for r in records if r["attack"] == "checklist")["adversarial_prompt"] != best["prompt"]
    assert sent(folder) > 0

    # The same task given by its columns, scoring the best prompt's text: the same cache keys.
    again = run(tmp_path, capsys, "--data-file", str(tickets / "tickets.csv"), "--input-column", "body",
                "--template", "Ticket: {body}", "--label-column", "queue", "--labels", LABELS,
                "--few-shot-file", str(tickets / "examples.csv"), "--id-column", "ticket_id", "--protected", "ticket",
                "--prompt-text", best["prompt"])
    assert sent(again) == 0  # every answer came from the cache the task file's run filled
    strip = lambda r: {k: v for k, v in r.items() if k not in ("cost", "prompt_id")}  # noqa: E731
    assert [strip(r) for r in read_jsonl(again / "results.jsonl")] == [strip(r) for r in records]

    assert main(["report", str(tmp_path / "runs"), "--output-dir", str(tmp_path / "report"), "--format", "md", "--quiet"]) == 0
    report = "\n".join(p.read_text() for p in (tmp_path / "report").rglob("*.md"))
    assert "tickets" in report and "rotten_tomatoes" not in report and "tickets@" not in report
