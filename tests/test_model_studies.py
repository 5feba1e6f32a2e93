"""The paper's model studies: `pre sweep --preset model-size` and `--preset fine-tuning` (Llama 2
7B/13B/70B; base and chat), and the report sections that compare APDR across size and base/chat,
paired over the cells (dataset, attack, prompt type, shots) both models have. Records come from
FakeOpenAIServers, one per model, answering with different hashed mistakes."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import orjson
import pytest

from promptrobust.cli.main import main
from promptrobust.engine.analysis.report import build_report
from promptrobust.engine.analysis.report.studies import ModelName, parse_model_name
from promptrobust.engine.measuring.statistics import paired_difference
from promptrobust.engine.runs.sweep.config import load_config
from promptrobust.engine.runs.sweep.estimate import preset_path
from promptrobust.tasks import get_task
from promptrobust.testing.fake_openai import FakeOpenAIServer

N = 8
SAMPLES = get_task("rotten_tomatoes").load(limit=N, seed=0)
LABELS = {s.fields["sentence"]: s.target for s in SAMPLES}
FLIP = {"positive": "negative", "negative": "positive"}


def _answerer(salt: str, rate: int):  # noqa: ANN202
    """Gold label, except on inputs whose hash (salted per model) falls in 1 of ``rate``: a different
    model makes different mistakes, and a prompt edit moves them."""
    def answer(text: str) -> str:
        sentence = text.rsplit("Sentence: ", 1)[-1].split("\nAnswer:", 1)[0]
        gold = LABELS.get(sentence, "negative")
        wrong = int(hashlib.sha256((salt + text).encode()).hexdigest(), 16) % rate == 0
        return FLIP[gold] if wrong else gold
    return answer


@pytest.mark.parametrize(("preset", "models", "jobs"), [
    ("model-size", [ModelName("llama2", s, True) for s in (7, 13, 70)], 3 * 13 * 2 * 2 * 7),
    ("fine-tuning", [ModelName("llama2", s, t) for s in (7, 13, 70) for t in (False, True)], 6 * 13 * 2 * 2 * 7),
])
def test_the_study_presets_dry_run(preset: str, models: list[ModelName], jobs: int, capsys) -> None:  # noqa: ANN001
    cfg = load_config(preset_path(preset))
    assert [parse_model_name(m) for m in cfg.models] == models
    assert cfg.attack.top_k == 3 and cfg.attack.budget is None and set(cfg.shots) == {0, 3}
    assert len(cfg.jobs()) == jobs
    assert main(["sweep", "--preset", preset, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"sweep {preset}: {jobs} jobs")
    assert all(m in out for m in cfg.models)


def test_model_names_say_family_size_and_tuning() -> None:
    assert parse_model_name("hf:meta-llama/Llama-2-70b-chat-hf") == ModelName("llama2", 70, True)
    assert parse_model_name("openai:llama-2-7b") == ModelName("llama2", 7, False)
    assert parse_model_name("llama2-13b-chat") == ModelName("llama2", 13, True)
    assert parse_model_name("gemma3-270m") is None and parse_model_name("gpt-4") is None


def test_paired_difference() -> None:
    d = paired_difference([0.1, 0.2, 0.3], [0.2, 0.2, 0.5])
    assert d.n == 3 and d.mean == pytest.approx(0.1) and d.ci95[0] <= d.mean <= d.ci95[1]
    assert paired_difference([], []).mean is None and paired_difference([0.1], [0.3]).ci95 is None


def _cells(rows: list[dict]) -> dict[tuple, float]:
    cells: dict[tuple, list[float]] = {}
    for r in rows:
        if r["status"] == "attacked":
            cells.setdefault((r["dataset"], r["attack"], r["prompt_type"], r["shots"]), []).append(r["pdr"])
    return {k: math.fsum(v) / len(v) for k, v in cells.items()}


def test_report_compares_apdr_across_size_and_base_vs_chat(tmp_path: Path) -> None:
    models = {"llama-2-7b-chat": ("a", 3), "llama-2-13b-chat": ("b", 5), "llama-2-7b": ("c", 2)}
    out = tmp_path / "runs"
    rows: dict[str, list[dict]] = {}
    for model, (salt, rate) in models.items():
        with FakeOpenAIServer(model=model, answer=_answerer(salt, rate)) as srv:
            assert main(["run", "--model", f"openai:{model}", "--model-args", f"base_url={srv.url}", "--mode", "choices",
                         "--limit", str(N), "--shots", "0", "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(out),
                         "--no-progress", "--prompt", "sst2-task-01,sst2-task-02", "--attack", "checklist,stresstest",
                         "--top-k", "2"]) == 0
        folder = max((p for p in out.iterdir() if model in p.name), key=lambda p: p.stat().st_mtime)
        rows[f"openai:{model}"] = [orjson.loads(x) for x in (folder / "results.jsonl").read_bytes().splitlines()]
    report = build_report([out], figures=False)
    size = report.table("apdr_model_size")
    (row13,) = [r for r in size.long if r["size"] == "13B"]
    small, large = _cells(rows["openai:llama-2-7b-chat"]), _cells(rows["openai:llama-2-13b-chat"])
    shared = sorted(set(small) & set(large), key=repr)
    assert row13["against"] == "7B" and row13["shared_cells"] == len(shared) == 2  # checklist, stresstest x task, 0-shot
    assert row13["difference"] == pytest.approx(math.fsum(large[c] - small[c] for c in shared) / len(shared))
    assert {r["model"] for r in size.long} == {"openai:llama-2-7b-chat", "openai:llama-2-13b-chat"}  # chat only: base has one size
    tuning = report.table("apdr_base_vs_chat")
    (pair,) = tuning.long
    base = _cells(rows["openai:llama-2-7b"])
    assert pair["base_model"] == "openai:llama-2-7b" and pair["chat_model"] == "openai:llama-2-7b-chat"
    assert pair["difference"] == pytest.approx(math.fsum(small[c] - base[c] for c in shared) / len(shared))
    lo, hi = pair["difference_ci95"]
    assert lo <= pair["difference"] <= hi
    md = report.markdown()
    assert "APDR across model size" in md and "APDR of base and chat (fine-tuned) models" in md
    assert size.statistic and tuning.statistic
