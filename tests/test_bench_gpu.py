"""bench/gpu.py on this CPU at a tiny configuration, its FLOP counting and peaks, and `pre bench gpu`."""

from __future__ import annotations

import json
import statistics

import pytest

from bench import gpu
from bench.flops import FlopModel, datasheet_peak, flop_model
from promptrobust.cli.main import build_parser, main as pre_main
from promptrobust.engine.serving.backends.random_model import save_tokenizer
from promptrobust.engine.serving.model_store import ModelNotInstalled

TINY = ["--model", "random:tiny-llama", "--device", "cpu", "--candidates", "2", "--samples", "4", "--max-tokens", "3",
        "--batch-size", "4", "--batch-sizes", "2,4", "--reference-requests", "4"]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    try:
        return save_tokenizer(tmp_path_factory.mktemp("tok"))
    except ModelNotInstalled as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, tokenizer_dir):
    """One tiny run with --out (synthetic inputs: no dataset package needed)."""
    out = tmp_path_factory.mktemp("results")
    assert gpu.main([*TINY, "--inputs", "synthetic", "--tokenizer", str(tokenizer_dir), "--out", str(out)]) == 0
    data = json.loads((out / "gpu.json").read_text())
    assert len(data["runs"]) == 1
    return (out / "gpu.md").read_text(), data["runs"][0] | {"machine": data["machine"]}


def test_tables_have_the_three_contenders_the_sweep_and_prefix_sharing(tiny_run):
    text, _ = tiny_run
    assert "| (a) promptbench loop: model.generate, batch 1 | 4 of 8 | 1 |" in text
    assert "| (a2) reference loop: hf backend, batch 1 | 4 of 8 | 1 |" in text
    assert "| (b) engine, hf backend, generate | 8 | 4 |" in text
    assert "| (c) engine, label scoring | 8 | 4 |" in text
    assert text.startswith(gpu.TITLE) and "\n## random:tiny-llama\n" in text
    assert "### Batch size" in text and "### Prefix sharing at the best batch size" in text
    assert "(b)/(a) = **" in text and "(c)/(a) = **" in text
    assert "Command: `python bench/gpu.py --model random:tiny-llama" in text and "no GPU" in text


def test_rates_and_ratios_come_from_the_measured_numbers(tiny_run):
    _, data = tiny_run
    a, a2, b, c = data["rows"]
    for row in (*data["rows"], *data["batch_sizes"], *data["prefix_sharing"]):
        assert row["seconds"] > 0
        assert row["requests_per_s"] == pytest.approx(row["requests"] / row["seconds"])
        assert row["new_tokens_per_s"] == pytest.approx(row["new_tokens"] / row["seconds"])
        assert row["mfu"] == pytest.approx(row["flops"] / row["seconds"] / data["device"]["flops_per_s"])
    assert data["ratios"]["b_over_a"] == pytest.approx((b["requests"] / b["seconds"]) / (a["requests"] / a["seconds"]))
    assert data["ratios"]["c_over_a"] == pytest.approx((c["requests"] / c["seconds"]) / (a["requests"] / a["seconds"]))
    assert data["ratios"]["b_over_a2"] == pytest.approx((b["requests"] / b["seconds"]) / (a2["requests"] / a2["seconds"]))
    # Every generating side decodes exactly --max-tokens per request; scoring decodes none.
    assert [(r["requests"], r["new_tokens"]) for r in data["rows"]] == [(4, 12), (4, 12), (8, 24), (8, 0)]
    assert a["prompt_tokens"] == a2["prompt_tokens"]  # the same inputs, tokenised the same way
    assert a["batch_size"] == a2["batch_size"] == 1 and a["extra"]["model_calls"] == a2["extra"]["model_calls"] == 4
    assert b["extra"]["positions"] > 0 and c["extra"]["positions"] > 0
    for row in (*data["batch_sizes"], *data["prefix_sharing"]):  # median of the interleaved rounds
        assert len(row["extra"]["round_seconds"]) == 2
        assert row["seconds"] == pytest.approx(statistics.median(row["extra"]["round_seconds"]))


def test_json_records_device_model_workload_and_best_batch(tiny_run):
    _, data = tiny_run
    assert data["device"]["device"] == "cpu" and data["device"]["source"].startswith("measured")
    assert data["machine"]["gpu"] is None and data["command"].startswith("python bench/gpu.py")
    assert data["model"]["name"] == "random:tiny-llama" and data["model"]["dtype"] == "float32"
    assert data["model"]["vocab_size"] == 49152  # follows the SmolLM2 tokenizer
    assert data["workload"]["requests"] == 8 and data["workload"]["inputs"].startswith("synthetic")
    assert {(r["kind"], r["batch_size"]) for r in data["batch_sizes"]} == {
        (k, s) for k in ("generate", "score_choices") for s in (2, 4)}
    for kind, size in data["best_batch_size"].items():
        rates = {r["batch_size"]: r["requests_per_s"] for r in data["batch_sizes"] if r["kind"] == kind}
        assert rates[size] == max(rates.values())
    assert sorted((r["kind"], r["prefix_sharing"]) for r in data["prefix_sharing"]) == [
        ("generate", False), ("generate", True), ("score_choices", False), ("score_choices", True)]


def test_no_files_without_out(tmp_path, tokenizer_dir, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    args = [*TINY, "--inputs", "synthetic", "--tokenizer", str(tokenizer_dir), "--batch-sizes", "none"]
    assert gpu.main(args) == 0
    assert "### Batch size" not in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_out_keeps_other_models_of_the_same_device_and_replaces_a_rerun(tmp_path, tokenizer_dir):
    base = [*TINY, "--inputs", "synthetic", "--tokenizer", str(tokenizer_dir), "--batch-sizes", "none",
            "--out", str(tmp_path)]
    assert gpu.main(base) == 0
    first = json.loads((tmp_path / "gpu.json").read_text())["runs"][0]
    # two models in one command: tiny-t5 is added, tiny-llama is measured again and replaces the first run
    assert gpu.main([*base, "--model", "random:tiny-t5,random:tiny-llama"]) == 0
    runs = json.loads((tmp_path / "gpu.json").read_text())["runs"]
    assert [r["model"]["name"] for r in runs] == ["random:tiny-t5", "random:tiny-llama"]
    assert runs[1]["rows"] != first["rows"]  # a new measurement (times differ)
    text = (tmp_path / "gpu.md").read_text()
    assert text.count("\n## random:") == 2 and "random:tiny-t5,random:tiny-llama" not in text  # one command per run
    t5 = runs[0]
    assert [(r["requests"], r["new_tokens"]) for r in t5["rows"]] == [(4, 12), (4, 12), (8, 24), (8, 0)]


def test_runs_of_another_device_are_dropped_with_a_note():
    old = {"runs": [{"device": {"name": "NVIDIA H100 80GB HBM3"}, "model": {"name": "random:llama-2-7b"}},
                    {"device": {"name": "cpu box"}, "model": {"name": "random:llama-2-13b"}}]}
    new = [{"device": {"name": "cpu box"}, "model": {"name": "random:tiny-llama"}}]
    runs, note = gpu.merge_runs(old, new)
    assert [r["model"]["name"] for r in runs] == ["random:llama-2-13b", "random:tiny-llama"]
    assert "1 earlier run(s) made on another device" in note


@pytest.mark.parametrize("args,message", [
    (["--candidates", "0"], "--candidates must be at least 1"),
    (["--model", "smollm2-135m-instruct"], "needs a random: model"),
    (["--model", "random:nope"], "unknown random model"),
    (["--batch-sizes", "4,x"], "--batch-sizes"),
])
def test_bad_settings_are_one_line(args, message, capsys):
    assert gpu.main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_model_too_big_for_the_device_is_refused_before_building(tokenizer_dir, capsys, monkeypatch):
    # 13.19B parameters (with the tokenizer's vocabulary) in fp32 on a 24 GiB machine: counted on the
    # meta device, refused in one line before anything is allocated.
    monkeypatch.setattr(gpu, "device_memory", lambda device: 24 * 2**30)
    assert gpu.main(["--model", "random:llama-2-13b", "--device", "cpu", "--tokenizer", str(tokenizer_dir)]) == 2
    err = capsys.readouterr().err
    assert "13.19B parameters need 49.1 GiB in float32, the cpu has 24.0 GiB of memory" in err
    assert "choose a smaller --model" in err


def test_cuda_without_a_gpu_is_one_line(tokenizer_dir, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert gpu.main([*TINY[:1], "random:tiny-llama", "--device", "cuda", "--tokenizer", str(tokenizer_dir)]) == 2
    assert "has no CUDA device" in capsys.readouterr().err


def test_candidates_are_distinct_single_edits_and_reference_subset_is_spread():
    base = "Classify the review as positive or negative"
    cands = gpu.candidate_prompts(base, 20)
    assert len(set(cands)) == 20
    assert all(sum(x != y for x, y in zip(c.split(), base.split())) == 1 for c in cands)
    cfg = gpu.GpuBenchConfig(candidates=32, samples=256, reference_requests=64)
    prompts, samples = gpu.reference_subset(cfg, cands, list(range(256)))
    assert len(prompts) == 1 and samples == list(range(0, 256, 4))
    prompts, samples = gpu.reference_subset(gpu.GpuBenchConfig(reference_requests=600), cands, list(range(256)))
    assert len(prompts) == 2 and len(samples) == 256


def test_flops_by_hand():
    fm = FlopModel(False, body_params=100, head_params=10, layers=2, attention_width=4)
    # scoring, 3 positions: body 2*100*3, attention 4*4*2*(1+2+3), head 2*10 once
    assert fm.request_flops(3, 0, generate=False) == 600 + 192 + 20
    # generation of 2 tokens after 3: 4 positions fed, logits at 2
    assert fm.request_flops(3, 2, generate=True) == 800 + 4 * 4 * 2 * 10 + 40
    enc = FlopModel(True, body_params=50, head_params=10, layers=1, attention_width=4, encoder_params=30,
                    encoder_layers=1, cross_kv_params=6)
    # encoder 2*30*2 + 16*4; cross K/V 2*6*2; decoder 1 position: 2*50 + 16*(1 + 2); head 20
    assert enc.request_flops(2, 0, generate=False) == 120 + 64 + 24 + 100 + 48 + 20


def test_flop_model_counts_every_linear_of_the_tiny_model(tokenizer_dir):
    from promptrobust.engine.serving.backends.random_model import build_model, load_tokenizer, random_config

    tok = load_tokenizer(tokenizer_dir)
    model = build_model(random_config("tiny-llama"), tok, device="meta", dtype="float32", seed=0)
    fm = flop_model(model)
    assert fm.head_params == 49152 * 64 and fm.layers == 2 and fm.attention_width == 64
    embeddings = 2 * 49152 * 64  # input embeddings + LM head (untied)
    norms = 64 * (2 * 2 + 1)
    assert fm.body_params + fm.head_params == sum(p.numel() for p in model.parameters()) - embeddings + fm.head_params - norms


@pytest.mark.parametrize("name,tflops", [
    ("NVIDIA H100 80GB HBM3", 989), ("NVIDIA H100 PCIe", 756), ("NVIDIA H100 NVL", 835), ("NVIDIA H200", 989),
    ("NVIDIA A100-SXM4-80GB", 312), ("NVIDIA A100-PCIE-40GB", 312),
])
def test_datasheet_peaks(name, tflops):
    assert datasheet_peak(name) == tflops * 1e12


def test_unknown_gpu_has_no_datasheet_peak():
    assert datasheet_peak("NVIDIA GeForce GTX 1080") is None


def test_pre_bench_gpu_runs_the_script(capfd):
    assert build_parser().parse_args(["bench", "gpu", "--samples", "4"]).script == "gpu.py"
    assert pre_main(["bench", "gpu", "--help"]) == 0
    assert "usage: gpu.py" in capfd.readouterr().out
