"""``random:CONFIG``: a randomly initialised model of a real architecture, for benchmarks.

Throughput does not depend on the weights, only on the architecture, the
sizes and the number of tokens computed. So a benchmark on a GPU without
network access (no hub, no weights) can still measure a 7B or 13B model: we
build it from its published configuration, written here as data, with random
weights drawn from a seed, directly on the device (bf16 on a GPU, fp32 on the
CPU, as the hf backend picks by default).

Tokenizer: the embedded SmolLM2 model's tokenizer files (a few MB, from the
converted model store, or any directory given as ``tokenizer=``). The
model's vocabulary size FOLLOWS THE TOKENIZER (49,152 for SmolLM2) instead of
the published one (32,000 for Llama 2): every token id the tokenizer produces
is then a real row of the embedding and a real column of the logits, so
label scoring indexes logits by the tokenizer's ids unchanged. The cost is a
slightly larger LM head (Llama-2-7B: +2.1% parameters, +1.1% FLOPs per
token); benchmarks count FLOPs from the model actually built.

Generation length is fixed: EOS and stop strings are ignored, so every
generate request decodes exactly ``max_tokens`` new tokens and two contenders
always decode the same number of tokens. Random weights would otherwise stop
at an arbitrary token.

Everything runs through ``HFBackend`` (batching, padding, prefix sharing,
scoring, generation); only model construction differs. Its options
(``RandomOptions``) are the hf backend's, but those about loading files, plus
the seed and the tokenizer; ``REGISTRATION`` makes ``random:CONFIG`` a model
name, built here and served (and recorded) as the hf backend's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, Literal

from promptrobust.engine.errors import PromptRobustError
from promptrobust.engine.serving.backends.base import BackendUnavailable
from promptrobust.engine.serving.backends.hf import HFBackend, HFObserver, HFOptions
from promptrobust.engine.serving.backends.hf.loading import LoadedModel, finish
from promptrobust.engine.serving.model_args import ModelArgsError, Number, Text, model_arg
from promptrobust.engine.serving.registration import BackendRegistration, ModelSpec
from promptrobust.engine.serving.types import Completion, Request

PREFIX = "random:"
#: The embedded model whose tokenizer ``random:`` models use by default.
TOKENIZER_MODEL = "smollm2-135m-instruct"
#: Files a tokenizer directory needs (and all that ``save_tokenizer`` copies).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


#: The largest seed a model argument may ask for (torch seeds are 64-bit).
MAX_SEED = 2**63 - 1


class RandomModelError(PromptRobustError, ValueError):
    """An unknown ``random:`` configuration or a bad argument for one."""


@dataclass(frozen=True)
class RandomOptions(HFOptions):
    """The hf backend's options, but those about loading files (there is nothing to load), plus the seed of
    the weights and the tokenizer."""

    not_model_arguments: ClassVar[tuple[str, ...]] = ("revision", "gguf_file", "trust_remote_code")

    seed: int = model_arg(0, Number(0, MAX_SEED, whole=True))
    """Seed of the random weights: one seed, one model (part of its identity)."""
    tokenizer: str | None = model_arg(None, Text(optional=True))
    """A directory with tokenizer files; None: the embedded SmolLM2 model's (converted on first use)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.revision or self.gguf_file or self.trust_remote_code:
            raise ModelArgsError("revision, gguf_file and trust_remote_code do not apply to random weights")


@dataclass(frozen=True)
class RandomConfig:
    """The sizes of one published architecture (from its ``config.json``)."""

    name: str
    family: Literal["llama", "t5"]
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    #: The published vocabulary size (for the record: the built model uses the tokenizer's).
    published_vocab_size: int
    max_positions: int
    source: str
    num_kv_heads: int | None = None  # llama: grouped-query attention; None = num_heads
    head_dim: int | None = None  # t5: d_kv; llama: hidden_size // num_heads
    num_decoder_layers: int | None = None  # t5
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    feed_forward_proj: str = "gated-gelu"  # t5
    tie_word_embeddings: bool = False

    def __post_init__(self) -> None:
        for field_name in ("hidden_size", "num_layers", "num_heads", "intermediate_size", "max_positions"):
            if getattr(self, field_name) < 1:
                raise RandomModelError(f"random:{self.name}: {field_name} must be >= 1")
        if self.family == "llama" and self.hidden_size % self.num_heads:
            raise RandomModelError(f"random:{self.name}: hidden_size must be a multiple of num_heads")


#: Published configurations (Hugging Face config.json of each model), as data.
RANDOM_CONFIGS: dict[str, RandomConfig] = {
    c.name: c
    for c in (
        RandomConfig("llama-2-7b", "llama", 4096, 32, 32, 11008, 32000, 4096, "meta-llama/Llama-2-7b-hf config.json"),
        RandomConfig("llama-2-13b", "llama", 5120, 40, 40, 13824, 32000, 4096, "meta-llama/Llama-2-13b-hf config.json"),
        RandomConfig(
            "vicuna-13b", "llama", 5120, 40, 40, 13824, 32000, 2048, "lmsys/vicuna-13b-v1.3 config.json (LLaMA 13B)",
            rms_norm_eps=1e-6,
        ),
        RandomConfig(
            "flan-t5-large", "t5", 1024, 24, 16, 2816, 32128, 512, "google/flan-t5-large config.json",
            head_dim=64, num_decoder_layers=24, rms_norm_eps=1e-6,
        ),
        # Tiny stand-ins of the two families, for CPU tests and smoke runs.
        RandomConfig("tiny-llama", "llama", 64, 2, 4, 176, 32000, 2048, "test size (Llama architecture)", num_kv_heads=2),
        RandomConfig(
            "tiny-t5", "t5", 64, 2, 4, 128, 32128, 512, "test size (T5 v1.1 architecture)",
            head_dim=16, num_decoder_layers=2, rms_norm_eps=1e-6,
        ),
    )
}


def random_config(name: str) -> RandomConfig:
    """The configuration called ``name`` (with or without the ``random:`` prefix)."""
    key = name[len(PREFIX):] if name.startswith(PREFIX) else name
    cfg = RANDOM_CONFIGS.get(key)
    if cfg is None:
        raise RandomModelError(f"unknown random model {key!r}: use one of {', '.join('random:' + n for n in RANDOM_CONFIGS)}")
    return cfg


def hf_config(cfg: RandomConfig, tokenizer: Any) -> Any:
    """A transformers config of ``cfg`` whose vocabulary and special ids follow ``tokenizer``.

    EOS is left unset on purpose: generation never stops early.
    """
    vocab = len(tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    if cfg.family == "llama":
        from transformers import LlamaConfig

        return LlamaConfig(
            vocab_size=vocab,
            hidden_size=cfg.hidden_size,
            intermediate_size=cfg.intermediate_size,
            num_hidden_layers=cfg.num_layers,
            num_attention_heads=cfg.num_heads,
            num_key_value_heads=cfg.num_kv_heads or cfg.num_heads,
            max_position_embeddings=cfg.max_positions,
            rms_norm_eps=cfg.rms_norm_eps,
            rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
            tie_word_embeddings=cfg.tie_word_embeddings,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=None,
            pad_token_id=pad,
        )
    from transformers import T5Config

    config = T5Config(
        vocab_size=vocab,
        d_model=cfg.hidden_size,
        d_kv=cfg.head_dim or cfg.hidden_size // cfg.num_heads,
        d_ff=cfg.intermediate_size,
        num_layers=cfg.num_layers,
        num_decoder_layers=cfg.num_decoder_layers or cfg.num_layers,
        num_heads=cfg.num_heads,
        feed_forward_proj=cfg.feed_forward_proj,
        layer_norm_epsilon=cfg.rms_norm_eps,
        pad_token_id=pad,
        eos_token_id=None,
    )
    # tie_word_embeddings is not passed: T5Config (transformers 5) drops it and ties the LM head,
    # as it did when it was passed. Setting it false afterwards unties the encoder's and decoder's
    # embeddings too (848.9M parameters for flan-t5-large, not the published 783.2M): left tied.
    # Not in T5Config's typed signature; kept as plain config attributes, as **kwargs would.
    config.n_positions = cfg.max_positions
    config.decoder_start_token_id = pad
    return config


def build_model(cfg: RandomConfig, tokenizer: Any, *, device: str, dtype: str, seed: int) -> Any:
    """The model of ``cfg`` with weights drawn from ``seed``, created directly on ``device`` in ``dtype``.

    The caller's random state is left as it was.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    config = hf_config(cfg, tokenizer)
    cls = AutoModelForSeq2SeqLM if cfg.family == "t5" else AutoModelForCausalLM
    dev = torch.device(device)
    fork = [dev.index if dev.index is not None else torch.cuda.current_device()] if dev.type == "cuda" else []
    with torch.random.fork_rng(devices=fork):
        torch.manual_seed(seed)
        with dev:
            model = cls.from_config(config, dtype=getattr(torch, dtype))
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = config.pad_token_id
    model.eval()
    return model


def default_tokenizer_dir() -> Path:
    """The embedded SmolLM2 model's directory in the model store (converted on first use)."""
    from promptrobust.engine.serving.model_store import ensure_embedded

    return ensure_embedded(TOKENIZER_MODEL).path


def load_tokenizer(directory: str | Path) -> Any:
    """A tokenizer from local files only, with a pad token."""
    from transformers import AutoTokenizer

    path = Path(directory).expanduser()
    if not (path / "tokenizer.json").is_file() and not (path / "tokenizer_config.json").is_file():
        raise BackendUnavailable(
            f"random model: {path} holds no tokenizer files; pass tokenizer=DIR with tokenizer.json "
            "(python bench/gpu.py --save-tokenizer DIR writes one)"
        )
    tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token if tok.eos_token is not None else tok.unk_token
    return tok


def without_eos(tokenizer: Any) -> Any:
    """``tokenizer`` with no EOS token (its pad token kept), so nothing ends a generation early."""
    tokenizer.eos_token = None
    return tokenizer


def save_tokenizer(target: str | Path, source: str | Path | None = None) -> Path:
    """Copy the tokenizer files (default: SmolLM2's) into ``target``, e.g. to carry them to a GPU machine."""
    import shutil

    src = Path(source).expanduser() if source is not None else default_tokenizer_dir()
    out = Path(target).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    copied = [f for f in TOKENIZER_FILES if (src / f).is_file()]
    if "tokenizer.json" not in copied:
        raise BackendUnavailable(f"random model: {src} has no tokenizer.json to copy")
    for f in copied:
        shutil.copyfile(src / f, out / f)
    return out


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


class RandomHFBackend(HFBackend):
    """``HFBackend`` over a randomly initialised model of a published configuration.

    Identity: name ``random:CONFIG``, revision from the seed, the configuration
    and the tokenizer, so cached answers never mix with a real model's. ``options``
    as for any hf model (``chat`` unset: plain prompts), with the seed and the
    tokenizer directory (``RandomOptions``).
    """

    def __init__(self, config: str, options: RandomOptions | None = None, *, observer: HFObserver | None = None) -> None:
        self.random_config = random_config(config)
        name = PREFIX + self.random_config.name
        options = options if options is not None else RandomOptions()
        if not isinstance(options, RandomOptions):
            raise TypeError(f"{name}: options must be a RandomOptions, not {type(options).__name__}")
        if options.chat is None:
            options = replace(options, chat=False)
        self.seed = options.seed
        self.tokenizer_dir = Path(options.tokenizer).expanduser() if options.tokenizer else None
        super().__init__(name, options, identity_name=name, observer=observer)

    def _resolve_revision(self) -> str:
        cfg = hashlib.sha256(json.dumps(asdict(self.random_config), sort_keys=True).encode()).hexdigest()[:12]
        tok = _file_digest(self.tokenizer_path() / "tokenizer.json")[:12]
        return f"random-init:seed={self.seed}:config={cfg}:tokenizer={tok}"

    def tokenizer_path(self) -> Path:
        """The tokenizer directory (default: the embedded SmolLM2 model's, converted on first use)."""
        if self.tokenizer_dir is None:
            self.tokenizer_dir = default_tokenizer_dir()
        return self.tokenizer_dir

    def _load_model(self) -> LoadedModel:
        """The model built from its configuration with seeded weights, made ready as a loaded one."""
        tok = without_eos(load_tokenizer(self.tokenizer_path()))
        device, dtype_name = self.placement()
        model = build_model(self.random_config, tok, device=device, dtype=dtype_name, seed=self.seed)
        return finish(model, tok, model_ref=self.model_ref, options=self.options, device=device, dtype_name=dtype_name,
                      encdec=self.random_config.family == "t5", max_len=self.random_config.max_positions)

    @staticmethod
    def _fixed_length(requests: Sequence[Request]) -> list[Request]:
        """The requests without stop strings: decode exactly ``max_tokens`` tokens."""
        return [r if not r.decoding.stop else replace(r, decoding=replace(r.decoding, stop=())) for r in requests]

    def arrange_batches(self, requests: Sequence[Request], batch_size: int) -> list[list[int]]:
        return super().arrange_batches(self._fixed_length(requests), batch_size)

    async def complete_batch(self, requests: Sequence[Request]) -> list[Completion]:
        return await super().complete_batch(self._fixed_length(requests))

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without special tokens (after ``start()``)."""
        if self.tokenizer is None:
            raise RandomModelError("random model: call start() before encoding")
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def parameter_count(self) -> int:
        """Parameters of the built model (after ``start()``)."""
        if self.model is None:
            raise RandomModelError("random model: call start() before counting parameters")
        return sum(p.numel() for p in self.model.parameters())


__all__ = [
    "PREFIX",
    "REGISTRATION",
    "TOKENIZER_FILES",
    "default_tokenizer_dir",
    "without_eos",
    "RANDOM_CONFIGS",
    "RandomConfig",
    "RandomHFBackend",
    "RandomModelError",
    "RandomOptions",
    "build_model",
    "hf_config",
    "load_tokenizer",
    "random_config",
    "save_tokenizer",
]


def _model_spec(config: str) -> ModelSpec:
    """``random:CONFIG``: a known architecture, a base model (few-shot prompts), served by the hf backend."""
    cfg = random_config(config)
    return ModelSpec(f"{PREFIX}{cfg.name}", "hf", f"{PREFIX}{cfg.name}",
                     f"random weights, {cfg.name} architecture ({cfg.source}); benchmarks only", base_model=True,
                     built_by="random")


def _build(spec: ModelSpec, options: RandomOptions) -> RandomHFBackend:
    return RandomHFBackend(spec.model, options)


REGISTRATION = BackendRegistration(
    name="random",
    options=RandomOptions,
    build=_build,
    description="random weights of a published architecture, for benchmarks: random:CONFIG (served by hf)",
    extra="local",
    model_spec=_model_spec,
    served_by="hf",
    chat_switch=("chat", True),
)
