"""lm-evaluation-harness habits: its flag spellings, --gen_kwargs, chat template, system instruction,
a fractional --limit, several datasets in one command, and batch size in one place."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from promptrobust.cli.lm_eval import normalize_argv
from promptrobust.cli.main import build_parser, main
from promptrobust.testing.fake_openai import FakeOpenAIServer

ALIASES = [
    ("--model_args", "--model-args", "base_url=http://127.0.0.1:9/v1", "model_args"),
    ("--output_path", "--output-dir", "elsewhere", "output_dir"),
    ("--num_fewshot", "--shots", "2", "shots"),
    ("--batch_size", "--batch-size", "4", "batch_size"),
    ("--gen-kwargs", "--gen_kwargs", "max_gen_toks=5", "gen_kwargs"),
]


@pytest.mark.parametrize(("alias", "flag", "value", "dest"), ALIASES, ids=[a[0] for a in ALIASES])
def test_each_lm_eval_spelling_parses_as_pre_flag(alias: str, flag: str, value: str, dest: str) -> None:
    parser = build_parser()
    ours = parser.parse_args(["run", flag, value])
    for argv in (["run", alias, value], ["run", f"{alias}={value}"]):
        theirs = parser.parse_args(normalize_argv(argv))
        assert getattr(theirs, dest) == getattr(ours, dest)


def test_log_samples_spelling_and_values_are_left_alone() -> None:
    parser = build_parser()
    args = parser.parse_args(normalize_argv(["run", "--log_samples", "--prompt-text", "--num_fewshot is text here"]))
    assert args.log_samples is True
    assert args.prompt_text == "--num_fewshot is text here"  # a value, not a flag: kept (argparse takes it as the value)


@pytest.fixture()
def server():
    with FakeOpenAIServer(answer=lambda text: "positive") as srv:
        yield srv


def _only_folder(out: Path) -> Path:
    (folder,) = [p for p in out.iterdir() if not p.name.startswith(".")]
    return folder


def test_a_run_with_lm_eval_spellings_end_to_end(tmp_path: Path, server: FakeOpenAIServer) -> None:
    out = tmp_path / "lm-eval-out"
    code = main([
        "run", "--model", "openai:fake-model", "--model_args", f"base_url={server.url}", "--limit", "4",
        "--num_fewshot", "1", "--output_path", str(out), "--log_samples", "--batch_size", "2", "--mode", "choices",
        "--cache", str(tmp_path / "c.sqlite"), "--prompt", "sst2-task-01", "--no_progress",
    ])
    assert code == 0
    folder = _only_folder(out)  # --output_path is the folder of run folders
    assert (folder / "samples.jsonl").read_text().count("\n") == 4  # --log_samples
    results = orjson.loads((folder / "results.json").read_bytes())["configs"]["measurement"]
    assert results["shots"] == 1  # --num_fewshot
    config = orjson.loads((folder / "config.json").read_bytes())
    assert config["batch_size"] == 2 and config["model_args"] == f"base_url={server.url}"


def _requests(server: FakeOpenAIServer) -> list[dict]:
    """The run's own requests: not the start-up probes (the log-probs probe, the label-scoring path check)."""
    return [b for path, b in server.bodies
            if path.endswith("/completions") and "water wet" not in str(b) and not b.get("echo")
            and "prompt_logprobs" not in b and not isinstance(b.get("prompt"), list)]


def _generate(tmp_path: Path, server: FakeOpenAIServer, *extra: str) -> Path:
    out = tmp_path / "runs"
    code = main([
        "run", "--model", "openai:fake-model", "--model-args", f"base_url={server.url},api=completions", "--limit", "3",
        "--mode", "generate", "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(out), "--prompt", "sst2-task-01",
        "--no-progress", *extra,
    ])
    assert code == 0
    return _only_folder(out)


def test_gen_kwargs_set_new_tokens_and_stop_sequences_in_every_request(tmp_path: Path, server: FakeOpenAIServer) -> None:
    folder = _generate(tmp_path, server, "--gen_kwargs", 'max_gen_toks=7,until=["\\n\\n", "Q:"],temperature=0')
    bodies = _requests(server)  # not the probe
    assert len(bodies) == 3
    assert all(b["max_tokens"] == 7 and b["stop"] == ["\n\n", "Q:"] for b in bodies)
    results = orjson.loads((folder / "results.json").read_bytes())["configs"]["measurement"]
    assert results["max_new_tokens"] == 7 and results["stop"] == ["\n\n", "Q:"]


@pytest.mark.parametrize(("value", "needle"), [
    ("temperature=0.7", "greedily"), ("do_sample=true", "greedily"), ("top_p=0.9", "not supported"),
    ("max_gen_toks=0", ">= 1"), ("until=[1]", "strings"), ("oops", "key=value"),
])
def test_gen_kwargs_that_pre_cannot_honour_are_one_line_and_exit_2(value: str, needle: str, capsys, tmp_path: Path) -> None:  # noqa: ANN001
    code = main(["run", "--gen_kwargs", value, "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and needle in err[0]
    assert not (tmp_path / "out").exists()


def test_system_instruction_and_chat_template_reach_the_model(tmp_path: Path, server: FakeOpenAIServer) -> None:
    folder = _generate(tmp_path, server, "--system_instruction", "You label film reviews.")
    bodies = _requests(server)
    assert bodies and all(b["prompt"].startswith("You label film reviews.\n\n") for b in bodies)  # completion input
    measurement = orjson.loads((folder / "results.json").read_bytes())["configs"]["measurement"]
    assert measurement["system_instruction"] == "You label film reviews."
    server.bodies.clear()
    out = tmp_path / "chat"
    assert main([
        "run", "--model", "openai:fake-model", "--model-args", f"base_url={server.url}", "--apply_chat_template",
        "--system_instruction", "You label film reviews.", "--limit", "3", "--mode", "generate", "--no-progress",
        "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(out), "--prompt", "sst2-task-01",
    ]) == 0
    chats = [b for path, b in server.bodies if path.endswith("/chat/completions") and "water wet" not in str(b)]
    assert len(chats) == 3
    assert all(b["messages"][0] == {"role": "system", "content": "You label film reviews."} for b in chats)
    assert all(b["messages"][1]["role"] == "user" for b in chats)
    assert orjson.loads((_only_folder(out) / "results.json").read_bytes())["configs"]["measurement"]["input_format"] == "chat"


def test_apply_chat_template_sets_each_backend_own_switch() -> None:
    from promptrobust.engine.errors import SettingsError
    from promptrobust.engine.runs.plan import model_and_scheduler

    assert model_and_scheduler("openai:m", chat=True)[0].args["api"] == "chat"
    assert model_and_scheduler("hf:org/model", chat=True)[0].args["chat"] is True
    assert model_and_scheduler("hf:org/model")[0].args == {}
    with pytest.raises(SettingsError, match="api=completions"):
        model_and_scheduler("openai:m", "api=completions", chat=True)


def test_a_fractional_limit_is_a_share_of_the_dataset(tmp_path: Path, server: FakeOpenAIServer) -> None:
    from promptrobust.tasks import get_task

    size = len(get_task("rotten_tomatoes").load(limit=None, seed=0))
    out = tmp_path / "runs"
    assert main([
        "run", "--model", "openai:fake-model", "--model-args", f"base_url={server.url}", "--limit", "0.01",
        "--mode", "choices", "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(out),
        "--prompt", "sst2-task-01", "--no-progress",
    ]) == 0
    folder = _only_folder(out)
    results = orjson.loads((folder / "results.json").read_bytes())
    assert results["samples"]["evaluated"] == round(0.01 * size) != size
    assert results["configs"]["evaluation"]["limit"] == orjson.loads((folder / "config.json").read_bytes())["limit"] == 0.01


def test_several_datasets_in_one_command_write_one_folder_each(tmp_path: Path, server: FakeOpenAIServer) -> None:
    out = tmp_path / "runs"
    assert main([
        "run", "--model", "openai:fake-model", "--model-args", f"base_url={server.url}", "--dataset", "rotten_tomatoes,math",
        "--limit", "2", "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(out), "--no-progress",
        "--prompt-type", "task",
    ]) == 0
    datasets = sorted(orjson.loads((f / "results.json").read_bytes())["dataset"] for f in out.iterdir())
    assert datasets == ["math", "rotten_tomatoes"]


def test_batch_size_is_set_in_one_place(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    code = main(["run", "--model", "hf:org/model", "--model-args", "batch_size=8", "--batch-size", "4",
                 "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--batch-size 4 and the model argument batch_size=8 disagree" in err
    from promptrobust.engine.runs.plan import model_and_scheduler
    from promptrobust.engine.serving.scheduler_settings import SchedulerSettings

    spec, scheduler = model_and_scheduler("hf:org/model", {"batch_size": 8})
    assert scheduler.batch_size == 8 and spec.args["batch_size"] == 8  # the scheduler and the backend agree
    spec, scheduler = model_and_scheduler("hf:org/model", None, SchedulerSettings(batch_size=6))
    assert scheduler.batch_size == spec.args["batch_size"] == 6
    spec, scheduler = model_and_scheduler("openai:m", None, SchedulerSettings(batch_size=6))
    assert scheduler.batch_size == 6 and "batch_size" not in spec.args  # an HTTP backend has no passes to cut


def test_a_missing_api_key_is_said_before_any_data_loads(tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setattr("promptrobust.engine.runs.plan.resolve_task", _no_data)  # the plan checks the key first
    code = main(["run", "--model", "openai:gpt-4o-mini", "--dataset", "sst2", "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "OPENAI_API_KEY" in err and "data" not in err.lower()


def _no_data(name: str):  # noqa: ANN202
    raise AssertionError(f"data for {name} was loaded before the key was checked")


def test_eval_transfer_and_defend_set_batch_size_in_one_place_too(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    prompts = tmp_path / "p.txt"
    prompts.write_text("Is this review positive or negative?\n")
    code = main(["eval", "--prompts", str(prompts), "--model", "hf:org/model", "--model_args", "batch_size=8",
                 "--batch_size", "4", "--output-dir", str(tmp_path / "out")])
    assert code == 2 and "disagree" in capsys.readouterr().err
