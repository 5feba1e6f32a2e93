"""Sweeps say before they run what cannot run here and why, record each failure once with its
real cause, and on Ctrl-C say what was kept and the command that resumes."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from promptrobust.cli.main import main
from promptrobust.testing.fake_openai import FakeOpenAIServer
from tests.sweep_helpers import hashed_text_answer


@pytest.fixture()
def offline_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty Hugging Face cache and no hub: BertAttack's masked LM cannot be had."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PRE_PROGRESS", "off")


def _config(tmp_path: Path, models: str, datasets: str, attacks: str, extra: str = "") -> Path:
    path = tmp_path / "grid.toml"
    path.write_text(
        f'[sweep]\nname = "g"\noutput_dir = "{tmp_path / "sweeps"}"\nlimit = 4\ntop_k = 1\nbudget = 4\nmode = "choices"\n'
        f'cache = "{tmp_path / "c.sqlite"}"\n\n[grid]\nmodels = {models}\ndatasets = {datasets}\nattacks = {attacks}\n{extra}'
    )
    return path


def test_dry_run_says_what_cannot_run_here_and_why(tmp_path: Path, offline_hub, capsys, monkeypatch) -> None:  # noqa: ANN001
    import importlib.util

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    config = _config(tmp_path, '["gemma3-270m", "openai:gpt-4o-mini"]', '["rotten_tomatoes", "sst2"]', '["checklist", "bertattack"]')
    assert main(["sweep", str(config), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "cannot run here (" in out
    assert "model openai:gpt-4o-mini: set OPENAI_API_KEY" in out
    assert "attack bertattack: needs the masked LM bert-base-uncased" in out and "HF_HUB_OFFLINE" in out
    if importlib.util.find_spec("datasets") is None:
        assert "dataset sst2: comes from the Hugging Face hub" in out and "promptrobust[hub]" in out
    assert not (tmp_path / "sweeps").exists()  # a dry run writes nothing


def test_a_failed_job_is_recorded_once_with_its_real_cause_even_after_resume(tmp_path: Path, offline_hub, capsys) -> None:  # noqa: ANN001
    with FakeOpenAIServer(answer=hashed_text_answer) as srv:
        config = _config(tmp_path, '["openai:fake-model"]', '["rotten_tomatoes"]', '["checklist", "bertattack"]',
                         f'\n[models."openai:fake-model"]\nmodel_args = "base_url={srv.url}"\n')
        assert main(["sweep", str(config)]) == 1
        first = capsys.readouterr().err
        assert main(["sweep", str(config)]) == 1  # resume: checklist is done, bertattack is tried again
        second = capsys.readouterr().err
    errors = [orjson.loads(line) for line in (tmp_path / "sweeps" / "g" / "errors.jsonl").read_text().splitlines()]
    assert len(errors) == 1 and "bertattack" in errors[0]["job"]
    assert "cannot load masked LM 'bert-base-uncased'" in errors[0]["error"]
    assert "needs torch and transformers" not in errors[0]["error"]
    for err in (first, second):
        assert "needs the masked LM bert-base-uncased" in err  # said before the run
        said = [line for line in err.splitlines() if "FAILED" in line and "bertattack" in line]
        assert len(said) == 1, err  # once while running (the summary line follows at the end)


def test_ctrl_c_says_what_was_kept_and_how_to_resume(tmp_path: Path, offline_hub, capsys, monkeypatch) -> None:  # noqa: ANN001
    import promptrobust.engine.runs.sweep.runner as sweep_module

    real = sweep_module.run_sweep

    async def interrupted_after_the_first_job(cfg, **kw):  # noqa: ANN001, ANN003, ANN202
        kw["jobs"] = kw["jobs"][:1]
        await real(cfg, **kw)
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_module, "run_sweep", interrupted_after_the_first_job)
    with FakeOpenAIServer(answer=hashed_text_answer) as srv:
        config = _config(tmp_path, '["openai:fake-model"]', '["rotten_tomatoes"]', '["checklist", "stresstest"]',
                         f'\n[models."openai:fake-model"]\nmodel_args = "base_url={srv.url}"\n')
        code = main(["sweep", str(config), "--output-dir", str(tmp_path / "elsewhere")])
    err = capsys.readouterr().err
    assert code == 130
    line = [x for x in err.splitlines() if x.startswith("pre: interrupted")][0]
    assert "no run folder was written" not in line
    assert f"1 finished records are kept in {tmp_path / 'elsewhere' / 'g' / 'results.jsonl'}" in line
    assert f"resume with: pre sweep {config} --output-dir {tmp_path / 'elsewhere'}" in line


def test_ctrl_c_before_any_record_names_no_results_file(tmp_path: Path, offline_hub, capsys, monkeypatch) -> None:  # noqa: ANN001
    import promptrobust.engine.runs.sweep.runner as sweep_module

    async def interrupted_at_once(cfg, **kw):  # noqa: ANN001, ANN003, ANN202
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_module, "run_sweep", interrupted_at_once)
    config = _config(tmp_path, '["openai:fake-model"]', '["rotten_tomatoes"]', '["checklist"]',
                     '\n[models."openai:fake-model"]\nmodel_args = "base_url=http://127.0.0.1:9/v1"\n')
    assert main(["sweep", str(config)]) == 130
    line = [x for x in capsys.readouterr().err.splitlines() if x.startswith("pre: interrupted")][0]
    assert "results.jsonl" not in line and "kept in" not in line
    assert "no record was finished yet" in line and f"resume with: pre sweep {config}" in line
    assert not (tmp_path / "sweeps" / "g" / "results.jsonl").exists()


def test_a_sweep_sets_batch_size_in_one_place(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    config = _config(tmp_path, '["hf:org/model"]', '["rotten_tomatoes"]', '["checklist"]',
                     '\n[models."hf:org/model"]\nmodel_args = "batch_size=8"\nbatch_size = 4\n')
    assert main(["sweep", str(config), "--dry-run"]) == 2
    assert "batch_size 4 and model_args batch_size=8 disagree" in capsys.readouterr().err


def test_the_credential_check_uses_each_models_own_model_args(tmp_path: Path, offline_hub, capsys, monkeypatch) -> None:  # noqa: ANN001
    """Issue 35: models served by local servers (model_args base_url=...) were said to need
    OPENAI_API_KEY on --dry-run and at the start of the run, then every job succeeded."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FakeOpenAIServer(model="fake-a", answer=hashed_text_answer) as a, FakeOpenAIServer(model="fake-b", answer=hashed_text_answer) as b:
        extra = (f'\n[models."openai:fake-a"]\nmodel_args = "base_url={a.url}"\n'
                 f'\n[models."openai:fake-b"]\nmodel_args = "base_url={b.url}"\n')
        config = _config(tmp_path, '["openai:fake-a", "openai:fake-b", "openai:gpt-4o-mini"]', '["rotten_tomatoes"]',
                         '["checklist"]', extra)
        assert main(["sweep", str(config), "--dry-run"]) == 0
        out = capsys.readouterr().out
        blocked = [line for line in out.splitlines() if "OPENAI_API_KEY" in line]
        assert blocked == ["  model openai:gpt-4o-mini: set OPENAI_API_KEY to your OpenAI API key to use "
                           "https://api.openai.com/v1 (or pass base_url=... for a local OpenAI-compatible server)"], out
        assert "cannot run here (1 of 3 jobs would fail)" in out
        config = _config(tmp_path, '["openai:fake-a", "openai:fake-b"]', '["rotten_tomatoes"]', '["checklist"]', extra)
        assert main(["sweep", str(config), "--quiet"]) == 0
        err = capsys.readouterr().err
        assert "cannot run here" not in err and "OPENAI_API_KEY" not in err


def test_bad_model_args_of_a_sweep_model_are_a_finding(tmp_path: Path, offline_hub, capsys) -> None:  # noqa: ANN001
    config = _config(tmp_path, '["openai:fake-a"]', '["rotten_tomatoes"]', '["checklist"]',
                     '\n[models."openai:fake-a"]\nmodel_args = "base_url=http://127.0.0.1:9/v1,bogus=1"\n')
    assert main(["sweep", str(config), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "cannot run here (1 of 1 jobs would fail)" in out and "bogus" in out
