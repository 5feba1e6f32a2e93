"""`pre run` end to end against a real local OpenAI-compatible server."""

from __future__ import annotations

import hashlib
from pathlib import Path

import orjson
import pytest

from promptrobust.cli.main import main
from promptrobust.testing.fake_openai import FakeOpenAIServer


def _oracle() -> dict[str, str]:
    from promptrobust.tasks import get_task

    return {s.fields["sentence"]: s.target for s in get_task("rotten_tomatoes").load(limit=12, seed=0)}


LABELS = _oracle()


def _answer(text: str) -> str:
    """A 'model' that knows every label, unless StressTest's tautology derails it."""
    if "true is true" in text.lower():
        return "negative"
    sentence = text.rsplit("Sentence: ", 1)[-1].split("\nAnswer:", 1)[0]
    return LABELS.get(sentence, "negative")


@pytest.fixture()
def server():
    with FakeOpenAIServer(answer=_answer) as srv:
        yield srv


def _run(tmp_path: Path, srv: FakeOpenAIServer, *extra: str) -> Path:
    out = tmp_path / "runs"
    before = set(out.iterdir()) if out.exists() else set()
    if "--mode" not in extra:
        extra = ("--mode", "choices", *extra)
    code = main(
        [
            "run", "--model", "openai:fake-model", "--model-args", f"base_url={srv.url}",
            "--limit", "12", "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(out), "--no-progress", *extra,
        ]
    )
    assert code == 0
    (folder,) = set(out.iterdir()) - before
    assert not folder.name.startswith(".")  # committed, not partial
    return folder


def test_run_writes_config_results_and_samples(tmp_path, server, capsys) -> None:  # noqa: ANN001
    folder = _run(tmp_path, server, "--prompt", "sst2-task-01,sst2-role-02", "--log-samples", "--seed", "3")
    config = orjson.loads((folder / "config.json").read_bytes())
    assert config["seed"] == 3 and config["limit"] == 12 and config["model"] == "openai:fake-model"
    results = orjson.loads((folder / "results.json").read_bytes())
    assert [p["prompt_id"] for p in results["results"]["clean"]] == ["sst2-task-01", "sst2-role-02"]
    measurement = results["configs"]["measurement"]
    assert measurement["mode"] == "choices" and measurement["input_format"] in ("chat", "completion")
    assert results["samples"] == {"evaluated": 12, "logged": 24}
    lines = (folder / "samples.jsonl").read_bytes().splitlines()
    assert len(lines) == 2 * 12
    first = orjson.loads(lines[0])
    assert {"prompt_id", "sample_id", "input", "target", "prediction", "score"} <= set(first)
    # The printed score is the mean of the logged per-sample scores.
    per_prompt = [orjson.loads(x)["score"] for x in lines[:12]]
    assert results["results"]["clean"][0]["score"] == pytest.approx(sum(per_prompt) / 12)
    assert "sst2-task-01" in capsys.readouterr().out


def test_second_run_is_answered_from_the_cache(tmp_path, server) -> None:  # noqa: ANN001
    _run(tmp_path, server, "--prompt", "sst2-task-01")
    sent_first = server.count("/v1/chat/completions") + server.count("/v1/completions")
    server.reset_counts()
    folder = _run(tmp_path, server, "--prompt", "sst2-task-01")
    assert server.count("/v1/chat/completions") + server.count("/v1/completions") == 0
    results = orjson.loads((folder / "results.json").read_bytes())
    # The first run also sent the backend's one start-up capability probe (does the
    # server return log-probs?); the second run answers it from the cache too.
    assert sent_first == 12 + 1
    (counters,) = results["counters"]["scheduler"].values()  # one model, under its served name
    assert counters["cache_hits"] >= 12


def test_generate_mode_records_parser(tmp_path, server) -> None:  # noqa: ANN001
    folder = _run(tmp_path, server, "--prompt", "sst2-task-01", "--mode", "generate", "--parser", "robust")
    results = orjson.loads((folder / "results.json").read_bytes())
    measurement = results["configs"]["measurement"]
    assert measurement["mode"] == "generate" and measurement["parser"] == "robust"


def test_attack_run_records_pdr_and_costs(tmp_path, server) -> None:  # noqa: ANN001
    from promptrobust.tasks import get_prompt, get_task

    folder = _run(tmp_path, server, "--prompt", "sst2-task-01", "--attack", "stresstest", "--budget", "10")
    records = [orjson.loads(x) for x in (folder / "results.jsonl").read_bytes().splitlines()]
    (rec,) = records
    assert rec["attack"] == "stresstest" and rec["prompt_id"] == "sst2-task-01"
    # Worked out by hand: the clean prompt is right where _answer is right; any
    # tautology suffix makes every answer "negative", so only negatives stay right.
    task = get_task("rotten_tomatoes")
    samples = task.load(limit=12, seed=0)
    prompt = get_prompt("rotten_tomatoes", "sst2-task-01").text
    clean = sum(_answer(task.render(prompt, s)) == s.target for s in samples) / 12
    assert clean == 1.0
    attacked = sum(s.target == "negative" for s in samples) / 12
    assert rec["clean_score"] == pytest.approx(clean)
    assert rec["adversarial_score"] == pytest.approx(attacked)
    assert rec["pdr"] == pytest.approx(1 - attacked / clean)
    assert "true is true" in rec["adversarial_prompt"]
    cost = rec["cost"]
    assert cost["candidate_evaluations"] == 3  # StressTest's three suffixes
    assert cost["model_requests"] == cost["requests_sent"] + cost["cache_hits"] + cost["deduplicated"]
    # Every figure carries its uncertainty: clean 12/12, attacked = the negatives only.
    assert rec["clean_ci95"][0] < 1.0 and rec["clean_ci95"][1] == pytest.approx(1.0)
    assert rec["pdr_ci95"][0] <= rec["pdr"] <= rec["pdr_ci95"][1]
    assert rec["status"] == "attacked" and 0.0 <= rec["mcnemar_p"] <= 1.0
    assert (folder / "results.parquet").exists()
    summary = orjson.loads((folder / "results.json").read_bytes())
    assert summary["results"]["records"] == {"total": 1, "by_kind": {"attack": 1}, "by_status": {"attacked": 1}}
    assert summary["results"]["apdr"][0]["pdr_mean"] == pytest.approx(rec["pdr"])
    assert summary["configs"]["measurement"]["budget"] == 10


def test_identity_of_the_cache_key_material_is_stable() -> None:
    # Guard against accidental changes of the key scheme (they would orphan every cache).
    from promptrobust.engine.serving.types import Decoding, ModelIdentity, Request, request_key

    key = request_key(ModelIdentity("hf", "m", "r"), Request("generate", prompt="x", decoding=Decoding(max_tokens=3)))
    assert key == request_key(ModelIdentity("hf", "m", "r"), Request("generate", prompt="x", decoding=Decoding(max_tokens=3)))
    assert key != request_key(ModelIdentity("hf", "m", "r2"), Request("generate", prompt="x", decoding=Decoding(max_tokens=3)))
    assert len(key) == len(hashlib.sha256().hexdigest())


def test_python_api_without_the_cli(tmp_path, server) -> None:  # noqa: ANN001
    import promptrobust

    result = promptrobust.evaluate(
        mode="choices",
        model="openai:fake-model",
        model_args={"base_url": server.url},
        dataset="rotten_tomatoes",
        limit=12,
        cache=tmp_path / "api.sqlite",
    )
    assert len(result.scores) == 10 and result.samples == 12
    # The oracle 'model' knows every label: every prompt scores 1.0.
    assert set(result.scores.values()) == {1.0}
    assert result.scheduler["backend_requests"] == 10 * 12


def test_a_failing_attack_keeps_the_clean_scores_and_the_other_attacks(tmp_path, server, capsys) -> None:  # noqa: ANN001
    """BertAttack cannot load its masked LM offline: that attack fails as a record, the run
    folder is still written with every clean score and the StressTest record, exit 1."""
    out = tmp_path / "runs"
    code = main([
        "run", "--model", "openai:fake-model", "--model-args", f"base_url={server.url}", "--mode", "choices",
        "--limit", "12", "--attack", "bertattack,stresstest", "--top-k", "1", "--attack-option", "mlm=/nonexistent/mlm",
        "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(out), "--no-progress",
    ])
    err = capsys.readouterr().err
    assert code == 1
    (folder,) = out.iterdir()
    assert not folder.name.startswith(".")
    records = [orjson.loads(x) for x in (folder / "results.jsonl").read_bytes().splitlines()]
    assert [(r["attack"], r["status"]) for r in records] == [("bertattack", "failed"), ("stresstest", "attacked")]
    assert records[0]["error"] and records[0]["clean_score"] == records[1]["clean_score"]
    summary = orjson.loads((folder / "results.json").read_bytes())
    assert len(summary["results"]["clean"]) == 10 and len(summary["results"]["failures"]) == 1
    assert "Errno" not in err and "Traceback" not in err
