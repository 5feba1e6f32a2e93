"""A sweep says before it runs which of its models and datasets come from the Hugging Face hub
and are not in the local cache (issue 31 item 5): with the hub switched off (HF_HUB_OFFLINE)
they cannot run here; otherwise they need the network on first use; once in the cache (or given
as local files) nothing is said. Checked in the local cache folders only: nothing is sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from promptrobust.cli.main import main
from promptrobust.engine.runs.sweep import checks
from promptrobust.engine.runs.sweep.config import load_config
from promptrobust.engine.runs.sweep.estimate import preset_path

HUB_MODELS = ("flan-t5-large", "dolly-v1-6b", "vicuna-13b", "llama2-13b-chat", "cerebras-gpt-13b", "gpt-neox-20b", "flan-ul2")
HUB_DATASETS = ("sst2", "cola", "qqp", "mrpc", "mnli", "qnli", "rte", "wnli", "mmlu", "squad_v2", "iwslt", "un_multi")


@pytest.fixture()
def empty_hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "hf"
    monkeypatch.setenv("HF_HOME", str(home))
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_DATASETS_CACHE", "HF_DATASETS_OFFLINE", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    return home


def _by_subject(found: list[checks.Finding]) -> dict[str, str]:
    return {f.subject: f.kind for f in found}


def test_offline_the_paper_dry_run_names_every_hub_model_and_dataset(empty_hf_cache: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["sweep", "--preset", "paper", "--dry-run"]) == 0
    out = capsys.readouterr().out
    blocked = out[out.index("cannot run here"):].split("\nruns here with a substitute", 1)[0]
    assert "cannot run here (3276 of 3276 jobs would fail)" in blocked
    assert f"models {', '.join(HUB_MODELS)}: weights not in the local Hugging Face cache" in blocked
    assert f"datasets {', '.join(HUB_DATASETS)}: data not in the local Hugging Face cache" in blocked
    assert "HF_HUB_OFFLINE" in blocked and "math" not in blocked  # DeepMind Mathematics is generated here
    assert "models gpt-3.5-turbo, gpt-4: set OPENAI_API_KEY" in blocked and "attack bertattack" in blocked


def test_online_they_need_the_network_and_once_cached_nothing_is_said(empty_hf_cache: Path, monkeypatch) -> None:  # noqa: ANN001
    pytest.importorskip("datasets")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    cfg = load_config(preset_path("paper"))
    found = _by_subject(checks.findings(cfg))
    assert {found[f"model {m}"] for m in HUB_MODELS} == {checks.NETWORK}
    assert {found[f"dataset {d}"] for d in HUB_DATASETS} == {checks.NETWORK}
    # What a download leaves in the cache: a model's snapshot with its config, a prepared dataset.
    snapshot = empty_hf_cache / "hub" / "models--google--flan-t5-large" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (empty_hf_cache / "datasets" / "nyu-mll___glue").mkdir(parents=True)
    found = _by_subject(checks.findings(cfg))
    assert "model flan-t5-large" not in found and "model flan-ul2" in found
    assert not {f"dataset {d}" for d in ("sst2", "cola", "qqp", "mrpc", "mnli", "qnli", "rte", "wnli")} & set(found)
    assert "dataset mmlu" in found
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")  # the datasets library's own switch blocks data only
    found = _by_subject(checks.findings(cfg))
    assert found["dataset mmlu"] == checks.BLOCKED and found["model flan-ul2"] == checks.NETWORK


def test_local_data_files_need_no_hub(empty_hf_cache: Path, monkeypatch, tmp_path: Path) -> None:  # noqa: ANN001
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = load_config(preset_path("paper"))
    cfg = cfg.with_(evaluation=cfg.evaluation.with_(data_dir=str(tmp_path)))
    assert not [f for f in checks.findings(cfg) if f.subject.startswith("dataset ")]
