"""The paper's grid, ready: `pre sweep --preset paper` and its dry-run estimates."""

from __future__ import annotations

from pathlib import Path

import pytest

from promptrobust.cli.main import main
from promptrobust.engine.serving.registry import resolve_model
from promptrobust.engine.runs.sweep.config import load_config
from promptrobust.engine.runs.sweep.estimate import (
    Price,
    attack_candidates,
    estimate,
    load_prices,
    preset_path,
    tokens_per_request,
)

# The paper's sample sizes (Zhu et al., Table 1 / promptbench), by our dataset names.
PAPER_SIZES = {"sst2": 872, "cola": 1000, "qqp": 1000, "mrpc": 408, "mnli": 1000, "qnli": 1000, "rte": 277,
               "wnli": 71, "mmlu": 564, "squad_v2": 200, "iwslt": 100, "un_multi": 99, "math": 160}


def test_the_paper_preset_is_the_papers_grid() -> None:
    from promptrobust.attacks.registry import list_attacks
    from promptrobust.tasks.registry import get_task

    cfg = load_config(preset_path("paper"))
    specs = [resolve_model(m) for m in cfg.models]
    assert len(specs) == 9 and all(s.paper for s in specs)  # registry names of the paper's nine
    assert {s.backend for s in specs} == {"hf", "openai"}
    assert set(cfg.datasets) == set(PAPER_SIZES) and len(cfg.datasets) == 13
    assert {d: get_task(d).sample_size for d in cfg.datasets} == PAPER_SIZES
    assert cfg.evaluation.limit is None  # the paper's sizes
    assert cfg.evaluation.mode == "generate" and cfg.evaluation.sample_selection == "first"
    assert set(cfg.prompt_types) == {"task", "role"} and set(cfg.shots) == {0, 3}
    assert set(cfg.attacks) == {name for name, _ in list_attacks()} and len(cfg.attacks) == 7
    assert cfg.attack.top_k == 3 and cfg.attack.budget is None
    assert len(cfg.jobs()) == 9 * 13 * 2 * 2 * 7


def test_dry_run_prints_jobs_requests_tokens_and_api_cost(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", "--preset", "paper", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("sweep paper: 3276 jobs")
    table = out[out.index("per model"):out.index("config:")].splitlines()  # what cannot run here follows it
    rows = {line.split()[0]: line for line in table[2:]
            if line.strip() and not line.startswith("config") and not line.strip().startswith("with --early-stopping racing")}
    assert len(rows) == 10  # nine models and the total
    (raced,) = [line for line in table if line.strip().startswith("with --early-stopping racing, about: ")]
    assert int(raced.split("about: ")[1].split()[0].replace(",", "")) < int(rows["total"].split()[2].replace(",", ""))
    for model in ("gpt-3.5-turbo", "gpt-4"):
        assert rows[model].split()[1] == "openai" and rows[model].split()[-1].replace(",", "").isdigit()
    assert rows["llama2-13b-chat"].split()[-1] == "-"  # no price for a local model
    assert f"config: {preset_path('paper')}" in out


def test_an_edited_price_table_changes_the_cost(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def gpt4_cost(extra: list[str]) -> str:
        assert main(["sweep", "--preset", "paper", "--dry-run", *extra]) == 0
        out = capsys.readouterr().out
        return next(line for line in out.splitlines() if line.startswith("  gpt-4 ")).split()[-1]  # the per-model table

    shipped = gpt4_cost([])
    prices = tmp_path / "prices.toml"
    prices.write_text('[prices."gpt-4"]\ninput = 60.0\noutput = 120.0\n')  # twice the shipped table
    doubled = gpt4_cost(["--prices", str(prices)])
    assert abs(int(doubled.replace(",", "")) - 2 * int(shipped.replace(",", ""))) <= 1
    assert main(["sweep", "--preset", "paper", "--dry-run", "--prices", str(tmp_path / "none.toml")]) == 2
    assert "no such price file" in capsys.readouterr().err


def test_cost_is_tokens_times_price() -> None:
    from promptrobust.engine.runs.sweep.config import Job

    job = Job("gpt-4", "sst2", 0, "task", "stresstest")
    tin, tout = tokens_per_request("sst2", "task", 0, "generate")
    assert 20 < tin < 200 and tout == 20
    plan = [{"job": job, "clean": 100, "attack_max": 50}]
    (row,) = estimate(plan, mode="generate", backends={"gpt-4": "openai"}, base_models={}, prices={"gpt-4": Price(10.0, 20.0)})
    assert row.requests == 150 and row.input_tokens == 150 * tin and row.output_tokens == 150 * tout
    assert row.cost_usd == pytest.approx((150 * tin * 10.0 + 150 * tout * 20.0) / 1e6)
    # Few-shot requests carry the worked examples: longer inputs.
    assert tokens_per_request("sst2", "task", 3, "generate")[0] > tin
    shipped = load_prices()["gpt-4"]
    assert (shipped.input, shipped.output) == (30.0, 60.0) and "2026-11-28" in shipped.source  # the table's date said


def test_attack_candidates_follow_each_recipe() -> None:
    assert attack_candidates("stresstest", 20, None) == 3
    assert attack_candidates("checklist", 20, None) == 50
    assert attack_candidates("textfooler", 15, None) == 765  # docs/scale.md's worst case for a 15-word prompt
    assert attack_candidates("textfooler", 15, 100) == 100


def test_preset_errors_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["sweep", "--preset", "nope", "--dry-run"]) == 2
    assert "shipped presets: fine-tuning, model-size, paper" in capsys.readouterr().err
    assert main(["sweep", str(tmp_path / "x.toml"), "--preset", "paper"]) == 2
    assert "either a sweep config or a preset, not both (--preset)" in capsys.readouterr().err


def test_the_paper_dry_run_sums_its_jobs_per_axis_and_verbose_lists_each(capsys: pytest.CaptureFixture[str]) -> None:
    import re

    assert main(["sweep", "--preset", "paper", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) < 100  # not 3,276 job lines
    assert not re.search(r"^  [0-9a-f]{12}  ", out, re.M) and "a line per job: --verbose" in out
    axes: dict[str, list[tuple[str, int, int]]] = {}
    axis = ""
    for line in out.splitlines():
        if line.startswith("  by "):
            axis = line.strip()[3:-1]
            axes[axis] = []
        elif axis and line.startswith("    ") and " jobs  attack requests <= " in line:
            value, rest = line.strip().split("  ", 1)
            jobs, requests = rest.split(" jobs  attack requests <= ")
            axes[axis].append((value.strip(), int(jobs), int(requests.replace(",", ""))))
        elif not line.startswith("    "):
            axis = ""
    assert {a: len(v) for a, v in axes.items()} == {"model": 9, "dataset": 13, "prompt set": 4, "attack": 7}
    assert all(sum(jobs for _, jobs, _ in values) == 3276 for values in axes.values())
    attack_total = int(re.search(r"attacks <= (\d+)", out).group(1))  # the totals line below
    assert all(sum(requests for _, _, requests in values) == attack_total for values in axes.values())
    assert dict((v, j) for v, j, _ in axes["dataset"])["sst2"] == 9 * 4 * 7

    assert main(["sweep", "--preset", "paper", "--dry-run", "--verbose"]) == 0
    verbose = capsys.readouterr().out
    assert len(re.findall(r"^  [0-9a-f]{12}  ", verbose, re.M)) == 3276


def test_a_small_dry_run_lists_every_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import re

    config = tmp_path / "g.toml"
    config.write_text(f'[sweep]\nname = "g"\noutput_dir = "{tmp_path}"\nlimit = 4\n\n[grid]\nmodels = ["gemma3-270m"]\n'
                      'datasets = ["rotten_tomatoes"]\nattacks = ["checklist", "stresstest"]\n')
    assert main(["sweep", str(config), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert len(re.findall(r"^  [0-9a-f]{12}  ", out, re.M)) == 2 and "by model:" not in out
