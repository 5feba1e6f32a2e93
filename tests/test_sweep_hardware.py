"""`pre sweep --dry-run` says what hardware each model needs and whether this machine has it, and
gives one honest count of the jobs that can run here now (issue 42 item 8: `--preset model-size`
said only "needs the network", nothing said 13B and 70B cannot run on the machine it ran on,
that Llama 2's weights are gated or how many GPU-hours the grid is; the cost total read `0` while
its rows were `-`; `--preset paper` split its jobs into "cannot run here (728)" and "needs the
network (3,228)", leaving the reader to work out that none runs here)."""

from __future__ import annotations

import re

import pytest

from promptrobust.cli.main import main
from promptrobust.engine.runs.sweep import hardware
from promptrobust.engine.runs.sweep.estimate import ModelEstimate, format_estimates
from promptrobust.engine.serving.registry import resolve_model

LAPTOP = hardware.Machine(gpus=(), memory_gb=24.0, cpus=2)
ONE_H100 = hardware.Machine(gpus=(("NVIDIA H100 80GB HBM3", 85.0),), memory_gb=256.0, cpus=32)


@pytest.mark.parametrize("name, size", [
    ("hf:meta-llama/Llama-2-70b-chat-hf", 70e9), ("llama2-13b-chat", 13e9), ("flan-t5-large", 780e6), ("flan-ul2", 20e9),
    ("dolly-v1-6b", 6e9), ("gemma3-270m", 270e6), ("hf:Qwen/Qwen2.5-0.5B-Instruct", 0.5e9), ("gpt-4", None),
])
def test_a_models_size_is_read_from_its_name_or_description(name: str, size: float | None) -> None:
    assert hardware.parameters(resolve_model(name)) == size


def test_what_a_model_needs_and_whether_this_machine_has_it() -> None:
    big = hardware.needs(resolve_model("hf:meta-llama/Llama-2-70b-chat-hf", {"dtype": "bfloat16"}), LAPTOP)
    assert big.fits is False and big.gated and "3 x 80 GB GPUs" in big.text and "does not fit here" in big.here
    assert hardware.needs(resolve_model("hf:meta-llama/Llama-2-70b-chat-hf", {"dtype": "bfloat16"}), ONE_H100).fits is False
    mid = hardware.needs(resolve_model("llama2-13b-chat"), ONE_H100)
    assert mid.fits is True and mid.here == "fits this machine's GPU" and "one GPU of 40 GB or more" in mid.text
    small = hardware.needs(resolve_model("gemma3-270m"), LAPTOP)
    assert small.fits is True and small.here.startswith("no GPU here: fits its memory on the CPU") and "slowly" not in small.here
    api = hardware.needs(resolve_model("gpt-4"), LAPTOP)
    assert api.api and api.fits is True and api.gpu_hours(10**9) is None
    assert mid.gpu_hours(10**9) == pytest.approx(2 * 13e9 * 1e9 / (989e12 * 0.4) / 3600)


def test_the_cost_total_is_a_dash_when_no_model_has_a_price() -> None:
    rows = [ModelEstimate("hf:x", "hf", 2, 10, 20, 1000, 10)]
    assert format_estimates(rows)[-1].rstrip().endswith("-")
    priced = [*rows, ModelEstimate("gpt-4", "openai", 1, 1, 1, 10, 10, cost_usd=12.4)]
    assert format_estimates(priced)[-1].rstrip().endswith("12")


@pytest.fixture
def this_machine_is_a_laptop_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hardware, "this_machine", lambda: LAPTOP)
    monkeypatch.setattr("promptrobust.tasks.hf_data.hub_reachable", lambda timeout=3.0: (False, "cannot be reached from here (test)"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def test_the_model_size_dry_run_says_what_each_model_needs_and_that_none_runs_here(
        this_machine_is_a_laptop_offline: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "--preset", "model-size", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "hardware (this machine: no GPU, 24 GB of memory, 2 CPU cores):" in out
    lines = {size: next(line for line in out.splitlines() if f"Llama-2-{size}b-chat-hf " in line and "GPU memory" in line)
             for size in (7, 13, 70)}
    assert "3 x 80 GB GPUs" in lines[70] and "does not fit here" in lines[70] and "does not fit here" in lines[13]
    assert all("gated weights" in line and "H100-hours" in line for line in lines.values())
    assert "docs/scale.md" in out
    total = next(line for line in out.splitlines() if line.strip().startswith("total"))
    assert total.rstrip().endswith("-")  # no API model: no cost, not 0
    (count,) = [line for line in out.splitlines() if line.startswith("runs here:")]
    assert count.startswith("runs here: none of the 1092 jobs can run on this machine now (")
    assert "728 jobs: a model bigger than this machine holds" in count  # the 13B and 70B jobs
    assert re.search(r"1092 jobs: (something to fetch, and the Hugging Face hub|blocked)", count)  # the weights are not here


def test_the_paper_dry_run_says_plainly_that_none_of_its_jobs_runs_here(
        this_machine_is_a_laptop_offline: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "--preset", "paper", "--dry-run"]) == 0
    out = capsys.readouterr().out
    (count,) = [line for line in out.splitlines() if line.startswith("runs here:")]
    assert count.startswith("runs here: none of the 3276 jobs can run on this machine now (")
    assert "1820 jobs: a model bigger than this machine holds" in count  # 13B and more, without a GPU
    assert re.search(r"\b(728|3276) jobs: blocked", count)  # the API models (no key), or all (the hub switched off)
    assert re.search(r"gpt-4\s+a server over HTTP \(an API\): no local hardware", out)


def test_a_sweep_that_fits_says_every_job_runs_here(tmp_path, this_machine_is_a_laptop_offline: None,  # noqa: ANN001
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "small.toml"
    config.write_text('[sweep]\nname = "small"\nlimit = 10\n\n[grid]\nmodels = ["gemma3-270m"]\n'
                      'datasets = ["rotten_tomatoes"]\nattacks = ["stresstest", "checklist"]\n')
    assert main(["sweep", str(config), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "runs here: all 2 jobs can run on this machine now" in out
