"""A user's own task through every command (issue 34, round two), on a real HTTP server on
127.0.0.1 (``FakeOpenAIServer``) that routes the docs' support tickets by their words: pre run
with a task file and with the columns form (the same records from the same cache keys), the
hub form offline, decode-and-parse and label scoring, held-out samples, all seven attacks with
the answer words untouched, pre report, pre eval, pre transfer, pre defend, pre attention's
plan, pre list prompts and the Python API. The real model's run: tests/test_own_task_model.py;
sweeps: tests/test_own_task_sweep.py; bad input: tests/test_own_task_cli_errors.py."""

from __future__ import annotations

import hashlib
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from promptrobust.attacks.words import protected_sequence
from promptrobust.cli.main import main
from promptrobust.engine.measuring.records import read_jsonl
from promptrobust.engine.measuring.workbench import protected_words
from promptrobust.tasks import load_task_file
from promptrobust.testing.fake_openai import FakeOpenAIServer

DOCS = Path(__file__).resolve().parents[1] / "docs" / "examples" / "tickets"
LABELS = "BIL=billing,TEC=technical,OTH=other"
BILLING = ("charg", "refund", "invoice", "price", "paid", "receipt", "payment", "billed", "fee", "plan")
TECHNICAL = ("app ", "crash", "log in", "sync", "export", "error", "notification", "search", "page", "freez")
#: Record fields that depend on timing or on what the cache held.
VOLATILE = ("cost",)


def route(text: str) -> str:
    """The 'model': the last ticket's queue by its words, unless the instruction holds a word that is
    not plain English (a homoglyph, an inserted random string): then billing tickets go to 'other'."""
    ticket = re.split(r"(?:Ticket|Body): ", text)[-1].lower()
    instruction = re.split(r"(?:Ticket|Body): ", text)[0].split("\n")[0]
    confused = any(not w.isascii() or (re.search(r"\d", w) and re.search(r"[A-Za-z]", w)) for w in instruction.split())
    if any(k in ticket for k in BILLING):
        return "other" if confused else "billing"
    return "technical" if any(k in ticket for k in TECHNICAL) else "other"


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(answer=route) as srv:
        yield srv


@pytest.fixture
def tickets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The docs' ticket router in a folder of its own (the working folder, for the columns form's paths)."""
    shutil.copytree(DOCS, tmp_path / "tickets")
    monkeypatch.chdir(tmp_path / "tickets")
    return tmp_path / "tickets"


def pre(server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str], root: Path, *words: str) -> tuple[int, str, str]:
    """``pre WORDS`` on the fake model with the test's cache and output folder: (exit code, stdout, stderr)."""
    command, *rest = words
    model = ["--model", "openai:fake-model", "--model-args", f"base_url={server.url}"] if command in ("run", "eval", "transfer") else []
    if command == "defend":
        model = ["--model-args", f"base_url={server.url}"]
    code = main([command, *rest, *model, "--cache", str(root / "cache.sqlite"), "--output-dir", str(root / "runs"), "--no-progress"])
    out, err = capsys.readouterr()
    return code, out, err


def folders(root: Path, command: str = "") -> list[Path]:
    return sorted(p for p in (root / "runs").iterdir() if p.is_dir() and command in p.name)


def records(folder: Path) -> list[dict[str, Any]]:
    return read_jsonl(folder / "results.jsonl")


def results(folder: Path) -> dict[str, Any]:
    return orjson.loads((folder / "results.json").read_bytes())


def stable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows]


def sent(server: FakeOpenAIServer) -> int:
    return server.count("/v1/chat/completions") + server.count("/v1/completions")


def test_pre_run_on_a_task_file_then_pre_report_name_the_task(tickets: Path, server: FakeOpenAIServer,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = pre(server, capsys, tickets, "run", "--task", "tickets.toml", "--mode", "choices",
                         "--attack", "textbugger,checklist", "--top-k", "1", "--budget", "30", "--log-samples")
    assert code == 0, err
    assert "fake-model on tickets:" in out
    (folder,) = folders(tickets)
    assert folder.name.endswith("_tickets")
    task = load_task_file(tickets / "tickets.toml")
    rows = records(folder)
    assert sorted(r["attack"] for r in rows) == ["checklist", "textbugger"]
    guarded = protected_words(task)
    for r in rows:
        assert r["dataset"] == "tickets" and r["task_definition"] == task.definition_hash
        if r["status"] == "nothing_to_change":  # every word of the instruction is kept (issue 42): said, not a PDR of 0
            assert r["attack"] == "textbugger" and r["pdr"] is None and "ticket" in r["note"]
            assert r["adversarial_prompt"] == r["clean_prompt"]
            continue
        assert r["status"] == "attacked"
        low, high = r["clean_ci95"]
        assert low <= r["clean_score"] <= high and r["pdr_ci95"] is not None
        # the answer words, the label values and the task's own protected word, unchanged and in order
        assert protected_sequence(r["adversarial_prompt"], guarded) == protected_sequence(r["clean_prompt"], guarded)
        assert {"billing", "technical", "other"} <= set(protected_sequence(r["clean_prompt"], guarded))
    assert any((r["pdr"] or 0) > 0 for r in rows)  # the router is confused by what the attacks insert
    doc = results(folder)
    (provenance,) = doc["tasks"]
    assert provenance["name"] == "tickets" and provenance["task_file"] == str((tickets / "tickets.toml").resolve())
    assert provenance["definition_hash"] == task.definition_hash
    assert provenance["data_hash"] == hashlib.sha256((tickets / "tickets.csv").read_bytes()).hexdigest()
    assert provenance["few_shot_hash"] == hashlib.sha256((tickets / "examples.csv").read_bytes()).hexdigest()
    assert provenance["labels"] == {"BIL": "billing", "TEC": "technical", "OTH": "other"}
    assert doc["dataset"] == "tickets" and all(c["ci95"][0] <= c["score"] <= c["ci95"][1] for c in doc["results"]["clean"])
    assert {s["sample_id"] for s in read_jsonl(folder / "samples.jsonl")} == {f"tickets:T{i:02d}" for i in range(1, 25)}

    code = main(["report", str(tickets / "runs"), "--output-dir", str(tickets / "report"), "--format", "md", "--quiet"])
    assert code == 0
    report = "\n".join(p.read_text() for p in (tickets / "report").rglob("*.md"))
    assert "tickets" in report and "rotten_tomatoes" not in report


QUICK = """\
name = "tickets"
data = "tickets.csv"
input = "body"
template = "Ticket: {body}"
label = "queue"
id = "ticket_id"
few_shot = "examples.csv"

[labels]
BIL = "billing"
TEC = "technical"
OTH = "other"
"""
COLUMNS = ("--data-file", "tickets.csv", "--input-column", "body", "--template", "Ticket: {body}", "--label-column", "queue",
           "--labels", LABELS, "--few-shot-file", "examples.csv", "--id-column", "ticket_id")


def test_the_columns_form_is_the_task_file_same_records_from_the_same_cache(tickets: Path, server: FakeOpenAIServer,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    (tickets / "quick.toml").write_text(QUICK)
    common = ("--mode", "choices", "--shots", "3", "--limit", "12", "--attack", "checklist", "--top-k", "1", "--budget", "20")
    code, _, err = pre(server, capsys, tickets, "run", "--task", "quick.toml", *common)
    assert code == 0, err
    server.reset_counts()
    code, _, err = pre(server, capsys, tickets, "run", *COLUMNS, *common)
    assert code == 0, err
    assert sent(server) == 0  # every request answered from the cache the task file's run filled
    by_file, by_columns = folders(tickets)
    assert stable(records(by_file)) == stable(records(by_columns))
    assert results(by_file)["tasks"][0]["definition_hash"] == results(by_columns)["tasks"][0]["definition_hash"]
    assert results(by_columns)["tasks"][0]["task_file"] is None  # given by its columns


def test_editing_a_label_word_asks_again_and_the_report_keeps_the_two_apart(tickets: Path, server: FakeOpenAIServer,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    words = ("run", "--task", "tickets.toml", "--mode", "choices", "--limit", "12", "--attack", "stresstest", "--top-k", "1")
    assert pre(server, capsys, tickets, *words)[0] == 0
    server.reset_counts()
    assert pre(server, capsys, tickets, *words)[0] == 0
    assert sent(server) == 0  # unchanged: nothing is asked again
    task = tickets / "tickets.toml"
    task.write_text(task.read_text().replace('OTH = "other"', 'OTH = "misc"'))
    assert pre(server, capsys, tickets, *words)[0] == 0
    assert sent(server) > 0  # a label word changed: the model is asked again
    first, rerun, edited = (records(f)[0] for f in folders(tickets))
    assert first["run_key"] == rerun["run_key"] != edited["run_key"]
    assert first["task_definition"] != edited["task_definition"]
    assert main(["report", str(tickets / "runs"), "--output-dir", str(tickets / "report"), "--format", "md", "--quiet"]) == 0
    report = "\n".join(p.read_text() for p in (tickets / "report").rglob("*.md"))
    for definition in (first["task_definition"], edited["task_definition"]):
        assert f"tickets@{definition[:8]}" in report  # two definitions of one name: two tasks, never pooled
    assert not re.search(r"\btickets\b(?!@)", report.replace("tickets.toml", ""))


def test_a_hub_dataset_saved_by_datasets_runs_offline_through_the_cli(tmp_path: Path, server: FakeOpenAIServer,
                                                                      capsys: pytest.CaptureFixture[str],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    rows = [{"ticket_id": f"T{i}", "body": b, "queue": q} for i, (b, q) in enumerate(
        [("I was charged twice", "BIL"), ("The app crashes", "TEC"), ("Where is your office?", "OTH"),
         ("Refund my payment", "BIL"), ("Sync stopped working", "TEC"), ("Are you hiring?", "OTH")], 1)]
    train = [{"ticket_id": f"X{i}", "body": f"an invoice question {i}", "queue": "BIL"} for i in range(3)]
    datasets.DatasetDict({"test": datasets.Dataset.from_list(rows), "train": datasets.Dataset.from_list(train)}).save_to_disk(
        str(tmp_path / "saved"))
    location = f"hf:{tmp_path / 'saved'}"
    code, out, err = pre(server, capsys, tmp_path, "run", "--dataset", location, "--input-column", "body", "--label-column", "queue",
                         "--labels", LABELS, "--split", "test", "--id-column", "ticket_id", "--task-name", "hub_tickets",
                         "--mode", "choices", "--shots", "2")
    assert code == 0, err
    (folder,) = folders(tmp_path)
    doc = results(folder)
    assert doc["dataset"] == "hub_tickets" and doc["samples"]["evaluated"] == 6
    assert doc["tasks"][0]["data"] == location and len(doc["tasks"][0]["data_hash"]) == 64
    assert all(c["score"] == 1.0 for c in doc["results"]["clean"])  # the router reads every ticket right


def test_pre_list_prompts_of_a_task_file(tickets: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "prompts", "--task", "tickets.toml"]) == 0
    out = capsys.readouterr().out
    assert ["route-task-1", "route-task-2", "route-role-1"] == [line.split()[0] for line in out.splitlines()[1:]]
    (tickets / "quick.toml").write_text(QUICK)  # no prompts of its own: ours, naming its answer words
    assert main(["list", "prompts", "--task", "quick.toml", "--prompt-type", "role"]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    assert len(lines) == 10 and all(line.startswith("tickets-role-") for line in lines)
    assert sum("billing, technical or other" in line for line in lines) >= 5


@pytest.mark.parametrize(("parser", "unparseable"), [("last_word", 24), ("robust", 0)])
def test_decode_and_parse_reads_the_tasks_answer_words(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch, parser: str, unparseable: int) -> None:
    shutil.copytree(DOCS, tmp_path / "tickets")
    monkeypatch.chdir(tmp_path / "tickets")
    with FakeOpenAIServer(answer=lambda text: f"{route(text)}, I believe") as srv:  # the word first, then more
        code, out, err = pre(srv, capsys, tmp_path, "run", "--task", "tickets.toml", "--mode", "generate", "--parser", parser,
                             "--prompt", "route-task-1")
    assert code == 0, err
    (clean,) = results(folders(tmp_path)[0])["results"]["clean"]
    assert clean["unparseable"] == unparseable  # the paper's rule reads the last word; robust finds the answer word
    assert clean["score"] == (1.0 if parser == "robust" else 0.0)


def test_held_out_samples_on_a_task(tickets: Path, server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = pre(server, capsys, tickets, "run", "--task", "tickets.toml", "--mode", "choices", "--attack", "checklist",
                       "--top-k", "1", "--budget", "10", "--holdout", "0.5")
    assert code == 0, err
    (folder,) = folders(tickets)
    (record,) = records(folder)
    assert record["held_out"] is not None and record["samples"] == 12
    assert results(folder)["results"]["held_out"]["samples"] == 12


def test_pre_eval_transfer_defend_and_attention_on_a_tasks_run(tickets: Path, server: FakeOpenAIServer,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = pre(server, capsys, tickets, "run", "--task", "tickets.toml", "--mode", "choices", "--attack",
                       "checklist,deepwordbug", "--top-k", "1", "--budget", "20", "--limit", "12")
    assert code == 0, err
    (run,) = folders(tickets)
    definition = load_task_file(tickets / "tickets.toml").definition_hash
    (tickets / "pairs.jsonl").write_bytes(b"".join(orjson.dumps({"clean": r["clean_prompt"], "adversarial": r["adversarial_prompt"],
                                                                 "attack": r["attack"]}) + b"\n" for r in records(run)))
    code, out, err = pre(server, capsys, tickets, "eval", "--prompts", "pairs.jsonl", "--task", "tickets.toml", "--mode", "choices",
                         "--limit", "12")
    assert code == 0, err
    (evaluated,) = folders(tickets, "_eval_")
    assert [r["pdr"] for r in records(evaluated)] == [r["pdr"] for r in records(run)]  # the same pairs, the same samples

    moved = tickets / "tickets.toml.moved"
    (tickets / "tickets.toml").rename(moved)  # the run folder recorded the definition: the file need not be there
    for command in (("transfer", "--source", str(run)), ("defend", "--source", str(run))):
        code, out, err = pre(server, capsys, tickets, *command)
        assert code == 0, err
        (folder,) = folders(tickets, f"_{command[0]}_" if command[0] == "transfer" else "_defend_")
        rows = records(folder)
        assert len(rows) == 2 and all(r["dataset"] == "tickets" and r["task_definition"] == definition for r in rows)
        assert results(folder)["tasks"][0]["definition_hash"] == definition

    from promptrobust.engine.analysis.commands import plan_attention

    plan = plan_attention(record=str(run))
    assert plan.evaluation.task is not None and plan.evaluation.task.definition_hash == definition

    data = tickets / "tickets.csv"
    data.write_text(data.read_text().replace("charged twice", "charged three times"))
    code, _, err = pre(server, capsys, tickets, "transfer", "--source", str(run))
    assert code == 2 and "changed since the run" in err and len(err.strip().splitlines()) == 1


def test_the_python_api_takes_a_task_file_or_value(tickets: Path, server: FakeOpenAIServer) -> None:
    import promptrobust as pr
    from promptrobust.engine.errors import SettingsError

    common: dict[str, Any] = {"model": "openai:fake-model", "model_args": {"base_url": server.url}, "mode": "choices",
                              "cache": str(tickets / "api.sqlite"), "progress": False}
    result = pr.evaluate(task="tickets.toml", **common)  # its own prompts: no prompts= needed
    assert result.dataset == "tickets" and [c.prompt.id for c in result.clean] == ["route-task-1", "route-task-2"]
    assert result.tasks[0]["definition_hash"] == load_task_file("tickets.toml").definition_hash
    protocol = pr.attack_top_k(settings=pr.AttackSettings(attacks=("stresstest",), top_k=1), task=load_task_file("tickets.toml"),
                               limit=6, **common)
    assert protocol.records[0].dataset == "tickets" and protocol.records[0].task_definition is not None
    with pytest.raises(SettingsError, match="give your own task as task="):
        pr.EvaluationSettings(dataset=load_task_file("tickets.toml"))  # type: ignore[arg-type]


SEMANTIC = """
[[prompts]]
id = "route-fr"
type = "semantic"
language = "fr"
text = "Classez ce ticket de support : billing, technical or other ?"

[[prompts]]
id = "route-es"
type = "semantic"
language = "es"
text = "Clasifica este ticket: billing, technical or other."
"""


def test_all_seven_attacks_leave_the_answer_words_alone(tickets: Path, server: FakeOpenAIServer,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from promptrobust.testing.synthetic import build_tiny_masked_lm

    words = ["the", "ticket", "route", "queue", "which", "handles", "this", "billing", "technical", "or", "other", ":", "?",
             ",", ".", "send", "sort", "file", "case", "##s"]
    mlm = build_tiny_masked_lm(str(tickets / "mlm"), words)
    task_file = tickets / "tickets.toml"
    task_file.write_text(task_file.read_text() + SEMANTIC)
    code, out, err = pre(server, capsys, tickets, "run", "--task", "tickets.toml", "--mode", "choices", "--attack", "all",
                         "--attack-option", f"mlm={mlm}", "--top-k", "1", "--budget", "12", "--limit", "9")
    assert code == 0, err
    (folder,) = folders(tickets)
    rows = records(folder)
    assert sorted(r["attack"] for r in rows) == sorted(
        ["textbugger", "deepwordbug", "textfooler", "bertattack", "checklist", "stresstest", "semantic"])
    guarded = protected_words(load_task_file(task_file))
    for r in rows:
        # a word attack on an instruction whose every word is kept has nothing to change (issue 42): said so
        assert r["status"] == "attacked" or (r["status"] == "nothing_to_change" and r["note"]), (r["attack"], r["error"])
        assert r["dataset"] == "tickets"
        if r["attack"] != "semantic":  # Semantic scores other prompts of the task, written whole
            assert protected_sequence(r["adversarial_prompt"], guarded) == protected_sequence(r["clean_prompt"], guarded), r["attack"]
    semantic = next(r for r in rows if r["attack"] == "semantic")
    assert {p[0] for p in semantic["prompt_scores"]} == {"fr", "es"}  # the task's own semantic prompts
