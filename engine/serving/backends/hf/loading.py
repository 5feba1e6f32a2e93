"""Loading a transformers model for the hf backend: where it runs, what identifies it, and the load itself.

``load`` reads a Hugging Face id or a local folder (a GGUF file inside it is
dequantised by transformers) and hands the model to ``finish``, which every
model the backend runs goes through, also the randomly initialised ones of
``random_model``: the Linear kernels are decided and installed, the tokenizer
gets a pad token, and what the passes need to know of the model is read once
into a ``LoadedModel``.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from promptrobust.engine.serving.backends.base import BackendUnavailable
from promptrobust.engine.serving.backends.hf.kernels import KernelChoice, choose_kernel, install
from promptrobust.engine.serving.backends.hf.options import HFOptions

__all__ = ["LoadedModel", "finish", "load", "peek_chat_template", "pick_device", "placement", "planned_dtype",
           "resolve_revision"]

_MODEL_FILE_SUFFIXES = (".safetensors", ".bin", ".json", ".model", ".jinja", ".txt", ".tiktoken")


@dataclass(frozen=True)
class LoadedModel:
    """A model ready for forward passes, and what the passes need to know of it."""

    model: Any
    """The transformers model, in eval mode on its device, kernels installed."""
    tokenizer: Any
    """Its tokenizer (with a pad token)."""
    device: Any
    """The ``torch.device`` the model runs on."""
    dtype_name: str
    """``float32``, ``bfloat16`` or ``float16``."""
    encdec: bool
    """An encoder-decoder model (T5): no prefix sharing, ``generate`` for generation."""
    has_logits_to_keep: bool
    """Its forward takes ``logits_to_keep`` (the output layer runs on the last positions only)."""
    cache_keyword: str
    """The keyword its forward takes the key/value cache by: ``cache`` (transformers 5.24 on; the old name
    warns there and is gone in 5.40) or ``past_key_values`` (before)."""
    max_len: int | None
    """The longest input it takes (its position embeddings), when the configuration says."""
    kernel: KernelChoice
    """What runs its Linear layers and its output layer, and why."""


def _hub_offline() -> bool:
    """HF_HUB_OFFLINE as set now (huggingface_hub reads it only once, at import)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def pick_device(options: HFOptions) -> str:
    """The device asked for; ``auto``: cuda when a GPU is there, else cpu."""
    if options.device != "auto":
        return options.device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def planned_dtype(options: HFOptions) -> str:
    """The dtype asked for; ``auto``: bfloat16 (float16 without bf16 support) on a GPU, float32 elsewhere."""
    if options.dtype != "auto":
        return options.dtype
    import torch

    if pick_device(options).startswith("cuda"):
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    return "float32"


def placement(options: HFOptions) -> tuple[str, str]:
    """(device, dtype name) a model loads on under ``options``."""
    return pick_device(options), planned_dtype(options)


def resolve_revision(model_ref: str, options: HFOptions) -> str:
    """A weights revision: the hub commit sha when cached, else a sha256 of the local model files."""
    local = Path(model_ref).expanduser()
    if local.is_dir():
        from promptrobust.engine.serving.model_store import cached_sha256, store_root

        if options.gguf_file:
            files = [local / options.gguf_file]
        else:
            files = sorted(p for p in local.iterdir() if p.is_file() and p.suffix in _MODEL_FILE_SUFFIXES)
        if not files or not all(f.is_file() for f in files):
            return "unknown"
        key = hashlib.sha256(str(local.resolve()).encode()).hexdigest()[:24]
        return "sha256:" + cached_sha256(files, store_root() / ".hashes" / f"{key}.json")
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(model_ref, "config.json", revision=options.revision)
    except Exception:  # noqa: BLE001 - a best-effort lookup; fall through
        found = None
    if isinstance(found, str) and "/snapshots/" in found:
        return found.split("/snapshots/", 1)[1].split("/", 1)[0]
    return options.revision or "unknown"


def peek_chat_template(model_ref: str, options: HFOptions) -> bool | None:
    """Whether a local model folder ships a chat template, without loading it (None: cannot tell)."""
    local = Path(model_ref).expanduser()
    if not local.is_dir() or options.gguf_file:
        return None
    if (local / "chat_template.jinja").is_file() or (local / "chat_template.json").is_file():
        return True
    try:
        import orjson

        return bool(orjson.loads((local / "tokenizer_config.json").read_bytes()).get("chat_template"))
    except (OSError, ValueError):
        return None


def load(model_ref: str, options: HFOptions) -> LoadedModel:
    """Load ``model_ref`` (a hub id or a local folder) as ``options`` say; ``BackendUnavailable`` in one line."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    ref = model_ref
    local = Path(ref).expanduser()
    looks_like_path = ref.startswith(("/", ".", "~")) or ref.count("/") > 1
    if looks_like_path and not local.is_dir():
        raise BackendUnavailable(f"hf backend: model directory {ref} does not exist")
    if local.is_dir():
        ref = str(local)
        if options.gguf_file and not (local / options.gguf_file).is_file():
            raise BackendUnavailable(f"hf backend: GGUF file {options.gguf_file} not found in {ref}")
    kw: dict[str, object] = {"trust_remote_code": options.trust_remote_code}
    if options.revision:
        kw["revision"] = options.revision
    if options.gguf_file:
        kw["gguf_file"] = options.gguf_file
    if not local.is_dir() and _hub_offline():
        kw["local_files_only"] = True
    device, dtype_name = placement(options)
    from promptrobust.engine.serving.gguf_parse import one_gguf_parse
    from promptrobust.engine.serving.model_store import quiet_transformers_progress  # issue 12: no "Loading weights" bar

    quiet_transformers_progress()
    try:
        with one_gguf_parse() if options.gguf_file else contextlib.nullcontext():  # a GGUF: one parse for the three loads
            config = AutoConfig.from_pretrained(ref, **kw)
            tok = AutoTokenizer.from_pretrained(ref, **kw)
            encdec = bool(getattr(config, "is_encoder_decoder", False))
            cls = AutoModelForSeq2SeqLM if encdec else AutoModelForCausalLM
            model = cls.from_pretrained(ref, dtype=getattr(torch, dtype_name), **kw)
    except (OSError, ValueError, KeyError, ImportError) as e:
        raise BackendUnavailable(f"hf backend: cannot load model {model_ref!r}: {_first_line(e)}") from None
    model.to(device)  # type: ignore[arg-type]  # transformers wraps .to in functools.wraps, whose typing drops the bound self
    model.eval()
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    return finish(model, tok, model_ref=model_ref, options=options, device=device, dtype_name=dtype_name,
                  encdec=encdec, max_len=int(limit) if limit else None)


def finish(model: Any, tokenizer: Any, *, model_ref: str, options: HFOptions, device: str, dtype_name: str,
           encdec: bool, max_len: int | None) -> LoadedModel:
    """A built model made ready: its kernels decided and installed, a pad token, what the passes read of it.

    The kernel choice times random inputs; it runs on a forked random generator, so loading leaves
    torch's global generator as it found it (a seeded sampling run does not depend on the probe).
    """
    import torch

    try:
        with torch.random.fork_rng(devices=[]):
            kernel = choose_kernel(options.linear_kernel, model, device, dtype_name, options.head_kernel)
    except ValueError as e:
        raise BackendUnavailable(str(e)) from None
    install(model, kernel.kernel, kernel.head)
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token is not None:
            tokenizer.pad_token = tokenizer.eos_token
        elif tokenizer.unk_token is not None:
            tokenizer.pad_token = tokenizer.unk_token
        else:
            raise BackendUnavailable(f"hf backend: tokenizer of {model_ref!r} has no pad, eos or unk token")
    return LoadedModel(
        model=model, tokenizer=tokenizer, device=torch.device(device), dtype_name=dtype_name, encdec=encdec,
        has_logits_to_keep="logits_to_keep" in inspect.signature(model.forward).parameters, max_len=max_len,
        kernel=kernel, cache_keyword=cache_keyword(model),
    )


def cache_keyword(model: Any) -> str:
    """``cache`` where the model's forward names its key/value cache so, else ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
