"""docs/coming-from.md: every lm-evaluation-harness and promptbench mapping is tested.

Table rows: both sides, as `pre run` flags, plan the same run (`pre run`'s own parser and plan
builder: cli/run.py plan_from_args). Commands: each plans what it says, and the offline ones run
on the fake server and write what they say (tests/test_docs_examples.py's runner). Python
snippets: executed with the fake model injected (the API's backend_factory).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from promptrobust.cli.errors import one_line, user_error_types
from promptrobust.cli.lm_eval import normalize_argv
from promptrobust.cli.main import build_parser
from promptrobust.cli.run import plan_from_args
from promptrobust.engine.runs.execute import RunPlan
from promptrobust.testing.fake_openai import FakeOpenAIServer
from tests.sweep_helpers import hashed_answer, hashed_text_answer
from tests.test_docs_examples import _commands_in, _runnable_offline, assert_ran, run_offline_example

PAGE = (Path(__file__).resolve().parents[1] / "docs" / "coming-from.md").read_text(encoding="utf-8")


def _table_rows(title: str) -> list[tuple[str, str]]:
    section = PAGE.split(f"## {title}", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) >= 2 and cells[0].startswith("`--"):
            left = re.findall(r"`([^`]+)`", cells[0])[0]
            right = cells[1]
            rights = re.findall(r"`([^`]+)`", right)
            rows.append((left, left if right == "the same" else rights[0]))
    return rows


LM_EVAL_ROWS = _table_rows("lm-evaluation-harness")


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


_HAVE_CUDA = _cuda()


def _plan(flags: str) -> RunPlan:
    """The plan `pre run FLAGS` runs: its own parser and its own plan builder, nothing re-implemented
    (the table's URL placeholder stands for a local server, and cuda:0 for the CPU on a machine without
    a GPU, where `pre run` refuses it: the same on both sides)."""
    flags = flags.replace("URL", "http://127.0.0.1:9")
    if not _HAVE_CUDA:
        flags = flags.replace("cuda:0", "cpu")
    return plan_from_args(build_parser().parse_args(normalize_argv(["run", *shlex.split(flags)])))


def _settings(flags: str) -> dict[str, Any]:
    """What `pre run FLAGS` would measure and where it would write it (not how the flags were spelled);
    a model that cannot be reached from here (vllm not installed) is refused, in the same words both ways."""
    try:
        plan = _plan(flags)
    except user_error_types() as exc:
        return {"refused": one_line(exc)}
    return {
        "model": (plan.model.name, plan.model.backend, dict(plan.model.args)), "scheduler": plan.scheduler,
        "targets": [(t.task.name, t.evaluation, t.mode, t.shots, [p.id for p in t.prompts]) for t in plan.targets],
        "attacks": plan.attacks, "output": (plan.output.output_dir, plan.output.cache, plan.output.use_cache, plan.output.log_samples),
    }


def test_the_table_rows_were_found() -> None:
    assert len(LM_EVAL_ROWS) >= 14


@pytest.mark.parametrize(("theirs", "ours"), LM_EVAL_ROWS, ids=[r[0] for r in LM_EVAL_ROWS])
def test_each_lm_eval_row_means_the_same_run(theirs: str, ours: str) -> None:
    assert _settings(theirs) == _settings(ours)
    assert _settings(theirs) != _settings("--seed 999 --dataset math")  # the comparison can fail


COMMANDS = [c for block in re.findall(r"```bash\n(.*?)```", PAGE, re.S) for c in _commands_in(block)]


def test_the_two_spellings_of_the_same_run_agree() -> None:
    lm_eval, ours = COMMANDS[0], COMMANDS[1]
    assert _settings(lm_eval.removeprefix("pre run ")) == _settings(ours.removeprefix("pre run "))


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_plans_what_it_says(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each command is planned as `pre run` would plan it (no model loads), and the plan holds
    the datasets, sample limit, shots and outputs the command names."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")  # planning an API model reads its key, sends nothing
    args = build_parser().parse_args(normalize_argv(shlex.split(command)[1:]))
    plan = plan_from_args(args)
    words = normalize_argv(shlex.split(command))
    given = dict(zip(words, words[1:]))
    expected = given.get("--dataset", "rotten_tomatoes").split(",")
    assert [t.task.name for t in plan.targets] == expected
    assert all(t.evaluation.dataset == t.task.name for t in plan.targets)
    if "--limit" in given:
        assert plan.targets[0].evaluation.limit == (float(given["--limit"]) if "." in given["--limit"] else int(given["--limit"]))
    if "--shots" in given:
        assert {t.shots for t in plan.targets} == {int(given["--shots"])}
    out = given.get("--output-dir", "runs")
    if out.endswith(".json"):  # lm-eval's --output_path FILE.json: that file, and the run folders beside it
        assert (plan.output.output_dir, plan.output.results_file) == (str(Path(out).parent), out)
    else:
        assert (plan.output.output_dir, plan.output.results_file) == (out, None)
    assert plan.output.log_samples == ("--log-samples" in words)
    assert (plan.attacks is not None) == ("--attack" in words)


@pytest.fixture(scope="module")
def server():
    with FakeOpenAIServer(answer=hashed_text_answer) as srv:
        yield srv


OFFLINE = [c for c in COMMANDS if _runnable_offline(c)]


def test_most_commands_run_offline() -> None:
    assert len(OFFLINE) >= 6


@pytest.mark.parametrize("command", OFFLINE)
def test_every_offline_command_runs_and_writes_what_it_says(command: str, server: FakeOpenAIServer, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    assert_ran(command, run_offline_example(command, server, tmp_path, capsys), tmp_path)


README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
SNIPPETS = re.findall(r"```python\n(.*?)```", PAGE, re.S) + re.findall(r"```python\n(.*?)```", README, re.S)


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[f"snippet-{i}" for i in range(len(SNIPPETS))])
def test_every_python_snippet_runs(snippet: str, monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # noqa: ANN001
    """This page's snippets and the README's, with the fake model injected."""
    import promptrobust as pr
    from promptrobust.testing.backends import CountingBackend

    def fake(spec: Any) -> CountingBackend:
        return CountingBackend(answer=hashed_answer)

    for name in ("evaluate", "attack", "attack_top_k"):
        real = getattr(pr, name)
        monkeypatch.setattr(pr, name, lambda *a, _real=real, **kw: _real(*a, backend_factory=fake, use_cache=False, progress=False, **kw))
    exec(compile(snippet, "docs/coming-from.md", "exec"), {"__name__": "coming_from"})  # noqa: S102
    assert capsys.readouterr().out.strip()  # it printed its results



# -- lm-eval's API models: the documented command runs as pasted (issue 35 item 3) ---------------

#: lm-eval's README command for a local OpenAI-compatible server, with pre's dataset for the task.
DOCUMENTED = ("--model local-completions --tasks rotten_tomatoes --model_args model=fake-model,base_url={url}/completions,"
              "num_concurrent={concurrent},max_retries=3,tokenized_requests=False,batch_size=16 --output_path out/results.json")


@pytest.mark.parametrize("concurrent", [1, 4])
def test_lm_evals_documented_local_completions_command_runs_as_pasted(concurrent: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    import orjson

    from promptrobust.cli.main import main
    from promptrobust.engine.runs.run_results import RESULTS_FILE_FORMAT

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FakeOpenAIServer(answer=hashed_text_answer) as srv:
        flags = DOCUMENTED.format(url=srv.url, concurrent=concurrent)
        code = main(["run", *shlex.split(flags), "--limit", "6", "--cache", "c.sqlite", "--no-progress"])
        assert srv.count("/v1/completions") > 0 and srv.count("/v1/chat/completions") == 0  # local-completions: the completions API
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "batch_size=16 changes nothing measured" in err  # said, not silently dropped
    results_file = tmp_path / "out" / "results.json"
    assert results_file.is_file()  # a file, not a folder named results.json
    document = orjson.loads(results_file.read_bytes())
    assert document["format"] == RESULTS_FILE_FORMAT and list(document["results"]) == ["rotten_tomatoes"]
    run_folder = Path(document["run_folders"]["rotten_tomatoes"])
    assert run_folder.parent == Path("out") and (tmp_path / run_folder / "config.json").is_file()  # beside it
    result = document["results"]["rotten_tomatoes"]
    assert result == orjson.loads((tmp_path / run_folder / "results.json").read_bytes())  # the run's own, whole
    assert result["model"] == "openai:fake-model" and result["samples"]["evaluated"] == 6  # the name the user gave
    scheduler = result["configs"]["scheduler"]
    assert (scheduler["concurrency"], scheduler["max_retries"]) == (concurrent, 2)  # lm-eval's 3 attempts = 2 retries


def _api_args(model_args: str) -> Any:
    from promptrobust.engine.runs.lm_eval_args import api_model_args

    return api_model_args("openai:m", model_args)


@pytest.mark.parametrize(("item", "setting", "value"), [
    ("num_concurrent=8", "concurrency", 8), ("max_retries=3", "max_retries", 2), ("max_retries=1", "max_retries", 0),
    ("max_gen_toks=32", "max_new_tokens", 32),
])
def test_api_arguments_that_are_pre_settings_become_them(item: str, setting: str, value: int) -> None:
    mapped = _api_args(f"base_url=http://127.0.0.1:9/v1,{item},timeout=30")
    assert [(m.setting, m.value) for m in mapped.settings] == [(setting, value)]
    assert mapped.model_args == "base_url=http://127.0.0.1:9/v1,timeout=30" and not mapped.notes


@pytest.mark.parametrize("item", ["seed=1234", "max_length=2048", "tokenizer=gpt2", "tokenizer_backend=huggingface",
                                  "use_fast_tokenizer=True", "trust_remote_code=True", "revision=main", "max_images=1",
                                  "batch_size=16"])
def test_api_arguments_that_change_nothing_measured_are_accepted_with_a_note(item: str) -> None:
    mapped = _api_args(f"{item},base_url=http://127.0.0.1:9/v1")
    assert mapped.model_args == "base_url=http://127.0.0.1:9/v1" and not mapped.settings
    (note,) = mapped.notes
    assert note.text.startswith(f"model argument {item} changes nothing") and note.setting == "model_args"


@pytest.mark.parametrize("item", ["tokenized_requests=False", "truncate=False", "add_bos_token=False", "verify_certificate=True",
                                  "batch_size=1", "batch_size=auto", "tokenizer_backend=None", "tokenizer_backend=none"])
def test_api_arguments_that_state_what_pre_does_are_accepted_silently(item: str) -> None:
    mapped = _api_args(item)
    assert (mapped.model_args, mapped.settings, mapped.notes) == ("", (), ())


@pytest.mark.parametrize(("item", "reason"), [
    ("tokenized_requests=True", "pre sends text, never token ids"),
    ("truncate=True", "never truncates"),
    ("add_bos_token=True", "never token ids"),
    ("custom_prefix_token_id=1", "never token ids"),
    ("verify_certificate=False", "SSL_CERT_FILE"),
    ("ca_cert_path=/etc/ca.pem", "SSL_CERT_FILE"),
    ("auth_token=sk-secret-value", "OPENAI_API_KEY"),
    ("header=X-Key:sk-secret-value", "OPENAI_API_KEY"),
    ("eos_string=</s>", "--gen_kwargs until"),
    ("num_concurrent=0", "whole number >= 1"),
    ("max_retries=0", "whole number >= 1"),
])
def test_api_arguments_that_cannot_apply_are_refused_in_one_line(item: str, reason: str) -> None:
    from promptrobust.engine.errors import SettingsError

    with pytest.raises(SettingsError) as err:
        _api_args(f"base_url=http://127.0.0.1:9/v1,{item}")
    text = one_line(err.value)
    assert reason in text and item.partition("=")[0] in text and "\n" not in str(err.value)
    assert "sk-secret-value" not in text  # a credential given on the command line is not repeated


def test_other_backends_keep_their_arguments() -> None:
    from promptrobust.engine.runs.lm_eval_args import api_model_args

    assert api_model_args("hf:org/name", "max_length=2048,dtype=bfloat16").model_args == "max_length=2048,dtype=bfloat16"


@pytest.mark.parametrize(("flags", "message"), [
    ("--concurrency 8 --model_args model=m,base_url=URL/v1/completions,num_concurrent=4", "--concurrency 8 and --model_args num_concurrent=4 disagree"),
    ("--max-retries 5 --model_args model=m,base_url=URL/v1/completions,max_retries=3", "--max-retries 5 and --model_args max_retries=3 disagree"),
])
def test_a_flag_and_an_api_argument_that_disagree_are_refused(flags: str, message: str) -> None:
    assert _settings(f"--model local-completions {flags}") == {"refused": message + ": give one"}
    agreeing = flags.replace("8 --", "4 --").replace("5 --", "2 --")
    assert "refused" not in _settings(f"--model local-completions {agreeing}")


def test_a_results_file_never_replaces_a_folder_or_a_foreign_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from promptrobust.cli.main import main

    folder = tmp_path / "results.json"
    folder.mkdir()  # what the old --output_path made
    foreign = tmp_path / "mine.json"
    foreign.write_text('{"my": "notes"}')
    for target, said in ((folder, "is a folder"), (foreign, "is not a results file pre wrote")):
        assert main(["run", "--model", "openai:m", "--model-args", "base_url=http://127.0.0.1:9/v1", "--output_path", str(target),
                     "--no-progress"]) == 2
        assert said in capsys.readouterr().err
    assert foreign.read_text() == '{"my": "notes"}'
    assert main(["transfer", "--source", str(tmp_path), "--model", "openai:m", "--output-dir", str(tmp_path / "x.json")]) == 2
    assert "a .json results file is pre run's" in capsys.readouterr().err


# -- issue 43 item 5: an lm-eval-shaped command scores what lm-eval scores -----------------------------

def _base_model_answer(prompt: str) -> str:
    """A 3-shot base model: it answers the last review, then invents a next example with the other label."""
    review = [line for line in prompt.splitlines() if line.startswith("Sentence:")][-1].lower()
    label = "positive" if any(w in review for w in ("good", "great", "warm", "clever", "moving", "fun")) else "negative"
    other = "negative" if label == "positive" else "positive"
    return f"{label}\n\nSentence: an invented review of another film\nAnswer: {other}"


def _run_json(tmp_path: Path, name: str, words: list[str]) -> tuple[int, str, dict[str, Any], list[dict[str, Any]]]:
    import orjson

    from promptrobust.cli.main import main

    with FakeOpenAIServer(answer=_base_model_answer, vllm=True) as srv:
        code = main(["run", *[w.replace("{url}", srv.url) for w in words], "--limit", "10", "--no-cache",
                     "--output-dir", str(tmp_path / name), "--no-progress", "--prompt", "sst2-task-01"])
        sent = [b for path, b in srv.bodies if path == "/v1/completions"]
        posts = [path for path, _ in srv.bodies]
    (folder,) = (tmp_path / name).iterdir()
    document = orjson.loads((folder / "results.json").read_bytes())
    assert "/tokenize" not in posts and not any(b.get("logprob_token_ids") for b in sent)  # no label-scoring probe
    return code, name, document, sent


def test_the_pasted_lm_eval_command_stops_as_lm_eval_does_and_says_so(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    pasted = shlex.split("--model local-completions --tasks rotten_tomatoes --model_args model=fake-model,"
                         "base_url={url}/completions,num_concurrent=4,tokenized_requests=False --num_fewshot 3")
    code, _, theirs, sent = _run_json(tmp_path, "lm-eval", normalize_argv(pasted))
    err = capsys.readouterr().err
    assert code == 0
    assert "answers stop at '\\n\\n'" in err and "deviation from the paper" in err and "(--gen_kwargs)" in err
    assert all(b["stop"] == ["\n\n"] for b in sent)
    evaluation = theirs["configs"]["evaluation"]
    assert evaluation["stop"] == ["\n\n"] and evaluation["stop_origin"] == "lm-eval"
    assert theirs["versions"]["vllm"] == "0.32.0"  # the vLLM that answered: the server's (/version)
    # pre's own spelling of the same model keeps the paper's rule (EOS only), and its parser reads the invented
    # example's label: what a pasted command scored before it stopped as lm-eval does.
    own = ["--model", "openai:fake-model", "--model-args", "base_url={url},api=completions", "--shots", "3"]
    code, _, ours, sent = _run_json(tmp_path, "pre", own)
    assert code == 0 and "answers stop at" not in capsys.readouterr().err
    assert not any(b.get("stop") for b in sent) and "stop_origin" not in ours["configs"]["evaluation"]
    score = {name: doc["results"]["clean"][0]["score"] for name, doc in (("lm-eval", theirs), ("pre", ours))}
    assert score["lm-eval"] + score["pre"] == pytest.approx(1.0)  # every parse the opposite: the invented label


def test_a_run_mixing_tasks_with_and_without_their_own_stop_is_refused_in_one_line(capsys) -> None:  # noqa: ANN001
    from promptrobust.cli.main import main

    code = main(["run", "--model", "local-completions", "--model_args", "model=m,base_url=http://127.0.0.1:9/v1/completions",
                 "--tasks", "rotten_tomatoes,iwslt", "--limit", "2", "--no-progress"])
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "iwslt stops at its own" in line and line.endswith("(--gen_kwargs)")
