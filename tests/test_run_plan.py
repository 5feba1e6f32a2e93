"""The run plan (engine/runs/plan.py) and its execution (engine/runs/execute.py): everything `pre run`
decides, decided once before any model loads or folder is made, then run on a real local
OpenAI-compatible server (promptrobust.testing.FakeOpenAIServer) with the real scheduler, cache,
evaluator, tasks and run-folder writer."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson
import pytest

from promptrobust.cli.main import main
from promptrobust.engine.errors import PromptRobustError, SettingsError
from promptrobust.engine.measuring.mode import decide_mode
from promptrobust.engine.measuring.settings import EvaluationSettings
from promptrobust.engine.runs.executor import Hooks, OutputOptions, run_plan
from promptrobust.engine.runs.plan import PromptChoice, attack_settings, build_plan
from promptrobust.engine.serving.backends.base import BackendError
from promptrobust.engine.serving.scheduler_settings import SchedulerSettings
from promptrobust.tasks.registry import get_task
from promptrobust.testing.fake_openai import FakeOpenAIServer
from tests.sweep_helpers import hashed_text_answer


@pytest.fixture()
def server():
    with FakeOpenAIServer(answer=hashed_text_answer) as srv:
        yield srv


def _records(folder: Path) -> list[dict]:
    return [orjson.loads(line) for line in (folder / "results.jsonl").read_bytes().splitlines()]


def _comparable(record: dict) -> dict:
    """A record without what differs between two runs of the same measurement (costs, provenance)."""
    return {k: v for k, v in record.items() if k not in ("cost", "job_id", "extra", "started", "finished")}


def _posts(srv: FakeOpenAIServer) -> int:
    return srv.count("/v1/chat/completions") + srv.count("/v1/completions")


def test_a_plan_from_settings_runs_exactly_as_pre_run_does(tmp_path: Path, server: FakeOpenAIServer) -> None:
    """The library's plan, built from settings values and run through the API, writes the records
    `pre run` writes for the same flags (the CLI builds the same plan: cli/run.py plan_from_args)."""
    plan = build_plan(
        "openai:fake-model", ["rotten_tomatoes"], model_args={"base_url": server.url},
        evaluation=EvaluationSettings(limit=12, seed=7, mode="choices"),
        prompts=PromptChoice(ids=("sst2-task-01", "sst2-task-02", "sst2-task-03")),
        attacks=attack_settings("checklist,stresstest", top_k=2, budget="8"),
        output=OutputOptions(output_dir=str(tmp_path / "api"), cache=str(tmp_path / "api.sqlite"), log_samples=True),
    )
    (target,) = plan.targets
    assert target.mode == "choices" and target.shots == 0 and [p.id for p in target.prompts] == ["sst2-task-01", "sst2-task-02", "sst2-task-03"]
    outcome = run_plan(plan, progress=False)
    assert outcome.exit_status == 0
    (done,) = outcome.targets
    assert done.folder.parent == tmp_path / "api" and not done.folder.name.startswith(".")
    assert {p.name for p in done.folder.iterdir()} >= {"config.json", "results.json", "results.jsonl", "samples.jsonl"}
    records = _records(done.folder)
    assert [(r["attack"], r["kind"]) for r in records] == [("checklist", "attack"), ("stresstest", "attack")] * 2
    assert len(done.protocol.records) == 4 and [c.prompt.id for c in done.clean][:2] == sorted(
        {r["prompt_id"] for r in records}, key=[c.prompt.id for c in done.clean].index)
    results = orjson.loads((done.folder / "results.json").read_bytes())
    assert results["configs"]["evaluation"]["limit"] == 12 and results["samples"]["evaluated"] == 12

    code = main(["run", "--model", "openai:fake-model", "--model-args", f"base_url={server.url}", "--limit", "12",
                 "--seed", "7", "--mode", "choices", "--prompt", "sst2-task-01,sst2-task-02,sst2-task-03",
                 "--attack", "checklist,stresstest", "--top-k", "2", "--budget", "8", "--log-samples",
                 "--cache", str(tmp_path / "cli.sqlite"), "--output-dir", str(tmp_path / "cli"), "--no-progress"])
    assert code == 0
    (cli_folder,) = (tmp_path / "cli").iterdir()
    assert [_comparable(r) for r in _records(cli_folder)] == [_comparable(r) for r in records]
    assert (cli_folder / "samples.jsonl").read_bytes() == (done.folder / "samples.jsonl").read_bytes()


def test_every_decision_is_made_before_a_request_or_a_folder(tmp_path: Path, server: FakeOpenAIServer) -> None:
    base = {"model_args": {"base_url": server.url}, "output": OutputOptions(output_dir=str(tmp_path / "runs"))}
    cases = [
        (dict(datasets=["math"], evaluation=EvaluationSettings(mode="choices")), "mode", "free text"),
        (dict(prompts=PromptChoice(ids=("sst2-task-99",))), None, "sst2-task-99"),
        (dict(datasets=["rotten_tomatoes", "imagenet"]), None, "imagenet"),
        (dict(evaluation=EvaluationSettings(data_file=str(tmp_path / "nope.csv"))), "data_file", "does not exist"),
        (dict(prompts=PromptChoice(promptbench=str(tmp_path / "no-checkout"))), "promptbench", "does not exist"),
        (dict(model_args="base_url=notaurl"), "model_args", "base_url"),
        # the openai backend takes no batch_size: said first, from its options (the disagreement would not matter)
        (dict(model_args={"base_url": server.url, "batch_size": 8}, scheduler=SchedulerSettings(batch_size=4)), "model_args",
         "batch_size not understood by the openai backend"),
    ]
    for changes, setting, needle in cases:
        with pytest.raises(PromptRobustError, match=needle) as caught:
            build_plan("openai:fake-model", **{"datasets": ["rotten_tomatoes"], **base, **changes})
        assert caught.value.setting == setting or setting is None, (changes, caught.value.setting)
    with pytest.raises(SettingsError, match="holdout splits the samples") as caught:
        attack_settings(None, holdout=0.5)
    assert caught.value.setting == "holdout"
    with pytest.raises(SettingsError, match="none of checklist takes it"):
        attack_settings("checklist", options=["mlm=/models/bert"])
    assert _posts(server) == 0 and not (tmp_path / "runs").exists()


def test_an_api_key_is_checked_before_any_dataset_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setattr("promptrobust.engine.runs.plan.resolve_task", lambda name: pytest.fail(f"{name} was read before the key"))
    with pytest.raises(BackendError, match="OPENAI_API_KEY"):  # a PromptRobustError once the serving errors are
        build_plan("openai:gpt-4o-mini", ["sst2"])


def test_a_fraction_of_the_dataset_is_resolved_where_it_is_loaded_once(tmp_path: Path, server: FakeOpenAIServer,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    task = get_task("rotten_tomatoes")
    size = len(task.load(limit=None, seed=0))
    loads: list[object] = []
    real = type(task).load

    def counted(self, **kw):  # noqa: ANN001, ANN003, ANN202
        loads.append(kw["limit"])
        return real(self, **kw)

    monkeypatch.setattr(type(task), "load", counted)
    plan = build_plan("openai:fake-model", ["rotten_tomatoes"], model_args={"base_url": server.url},
                      evaluation=EvaluationSettings(limit=0.002, mode="choices"), prompts=PromptChoice(ids=("sst2-task-01",)),
                      output=OutputOptions(output_dir=str(tmp_path / "runs"), use_cache=False))
    assert loads == []  # planning reads no data
    (done,) = run_plan(plan, progress=False).targets
    assert loads == [None]  # the whole draw, once; the share taken from it
    assert done.samples == round(0.002 * size) == _posts(server) - 1  # every sample scored once (and one start-up probe)
    assert EvaluationSettings(limit=0.5).limit_for(3) == 2 and EvaluationSettings(limit=0.0001).limit_for(10) == 1


def test_a_task_value_stands_where_a_dataset_name_stands(tmp_path: Path, server: FakeOpenAIServer) -> None:
    mine = dataclasses.replace(get_task("rotten_tomatoes"), name="my_reviews")  # not in the registry
    plan = build_plan("openai:fake-model", [mine], model_args={"base_url": server.url},
                      evaluation=EvaluationSettings(limit=4, mode="choices"),
                      prompts=PromptChoice(text="Is this review positive or negative?"),
                      output=OutputOptions(output_dir=str(tmp_path / "runs"), use_cache=False))
    (target,) = plan.targets
    assert target.task is mine and target.task.name == target.evaluation.dataset == "my_reviews"
    (done,) = run_plan(plan, progress=False).targets
    results = orjson.loads((done.folder / "results.json").read_bytes())
    assert results["dataset"] == "my_reviews" and done.folder.name.endswith("_openai-fake-model_my_reviews")
    assert results["results"]["clean"][0]["prompt_id"] == "custom"


def test_each_dataset_is_a_target_with_its_own_folder_and_counters(tmp_path: Path, server: FakeOpenAIServer) -> None:
    plan = build_plan("openai:fake-model", ["rotten_tomatoes", "math ", "Rotten-Tomatoes"], model_args={"base_url": server.url},
                      evaluation=EvaluationSettings(limit=3, mode="generate"), prompts=PromptChoice(type="task"),
                      output=OutputOptions(output_dir=str(tmp_path / "runs"), cache=str(tmp_path / "c.sqlite")))
    assert [t.task.name for t in plan.targets] == ["rotten_tomatoes", "math"]  # a dataset named twice runs once
    said: list[str] = []
    outcome = run_plan(plan, progress=False, hooks=Hooks(on_part=lambda t: said.append(t.target.task.name)))
    assert said == ["rotten_tomatoes", "math"]  # each reported as its folder is committed
    counters = [orjson.loads((t.folder / "results.json").read_bytes())["counters"]["scheduler"] for t in outcome.targets]
    submitted = [next(iter(c.values()))["submitted"] for c in counters]
    assert submitted == [len(t.prompts) * 3 for t in plan.targets]  # each folder counts its own requests only
    assert [t.counters["submitted"] for t in outcome.targets] == submitted


def test_the_one_mode_decision() -> None:
    class Backend:
        supports_choice_scoring = False

        class identity:  # noqa: N801 - the attribute the decision reads
            name = "no-logprobs-model"

    sst2, math = get_task("sst2"), get_task("math")
    assert decide_mode("choices", sst2) == "choices"
    assert decide_mode("choices", math) == "generate"  # a grid or the API: free text generates
    with pytest.raises(SettingsError, match="free text") as caught:
        decide_mode("choices", math, strict=True)  # what the user asked for explicitly: said
    assert caught.value.setting == "mode"
    assert decide_mode("choices", sst2, Backend()) == "generate"  # a backend without label log-probs
    assert decide_mode("generate", sst2, Backend()) == "generate"


def test_what_the_plan_decides_is_what_runs(tmp_path: Path, server: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 39 item 1: task, shots and mode are decided once, by the plan; the workbench takes the
    target as given. The shots rule runs once on a run's path and the mode decision twice (the plan
    and the started backend's check), wherever the run goes from there."""
    from promptrobust.engine.measuring import mode as mode_module
    from promptrobust.engine.measuring import settings as settings_module
    from promptrobust.engine.measuring import target as target_module

    calls = {"shots_for": 0, "decide_mode": 0}
    shots_for, decide_mode_ = settings_module.EvaluationSettings.shots_for, mode_module.decide_mode

    def counted_shots(self: EvaluationSettings, base_model: bool) -> int:
        calls["shots_for"] += 1
        return shots_for(self, base_model)

    def counted_mode(*args: object, **kwargs: object) -> object:
        calls["decide_mode"] += 1
        return decide_mode_(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(settings_module.EvaluationSettings, "shots_for", counted_shots)
    monkeypatch.setattr(mode_module, "decide_mode", counted_mode)
    monkeypatch.setattr(target_module, "decide_mode", counted_mode)
    from promptrobust.engine.measuring import workbench as workbench_module

    monkeypatch.setattr(workbench_module, "decide_mode", counted_mode)
    plan = build_plan("openai:fake-model", ["rotten_tomatoes"], model_args={"base_url": server.url},
                      evaluation=EvaluationSettings(limit=6, mode="choices"),
                      prompts=PromptChoice(ids=("sst2-task-01", "sst2-task-02")),
                      attacks=attack_settings("stresstest", top_k=1),
                      output=OutputOptions(output_dir=str(tmp_path / "runs"), cache=str(tmp_path / "c.sqlite")))
    assert calls == {"shots_for": 1, "decide_mode": 1}  # decided while planning, before any model
    (target,) = plan.targets
    decided = target.measured
    outcome = run_plan(plan, progress=False)
    assert calls == {"shots_for": 1, "decide_mode": 2}  # running added only the backend's check
    (done,) = outcome.targets
    assert done.settings["mode"] == decided.mode and done.settings["shots"] == decided.shots
    # A target decided otherwise than the settings would decide is run as decided: the plan is what runs.
    three_shot = dataclasses.replace(target, measured=dataclasses.replace(decided, shots=2))
    (done,) = run_plan(dataclasses.replace(plan, targets=(three_shot,)), progress=False).targets
    assert done.settings["shots"] == 2
