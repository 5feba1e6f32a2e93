"""lm-evaluation-harness's model forms, and the flags that change a model's arguments.

- ``--model hf --model_args pretrained=ORG/NAME`` (and the API types with ``model=``)
  become pre's ``--model hf:ORG/NAME``; ``--device D`` means ``device=D``.
- ``--apply_chat_template`` sends inputs as chat messages (``chat=true``, or
  ``api=chat`` for OpenAI-compatible servers).
- Batch size lives in one place, ``--batch-size``: ``--model-args batch_size=N``
  means the same and the two may not disagree.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from promptrobust.cli.errors import UserError

#: lm-eval's --model (a backend type; the model itself is in --model_args) -> pre's backend prefix.
LM_EVAL_BACKENDS = {
    "hf": "hf", "huggingface": "hf", "vllm": "vllm",
    "local-completions": "openai", "local-chat-completions": "openai",
    "openai-completions": "openai", "openai-chat-completions": "openai",
}


def lm_eval_model(model: str, model_args: str) -> tuple[str, str]:
    """lm-eval's ``--model hf --model_args pretrained=ORG/NAME,dtype=...`` -> pre's
    ``--model hf:ORG/NAME --model-args dtype=...`` (``model=`` for the API types; ``api`` follows
    the chat/completions choice). Anything else is returned unchanged."""
    backend = LM_EVAL_BACKENDS.get(model)
    if backend is None:
        return model, model_args
    items = [i.strip() for i in model_args.split(",") if i.strip()]
    key = "model" if backend == "openai" else "pretrained"
    named = [i for i in items if i.partition("=")[0].strip() == key]
    if not named:
        raise UserError(f"--model {model} needs --model_args {key}=NAME (lm-eval style), or write --model {backend}:NAME")
    rest = [_base_url(i) for i in items if i not in named]
    if backend == "openai" and not any(i.startswith("api=") for i in rest):
        rest.append("api=chat" if "chat" in model else "api=completions")
    return f"{backend}:{named[0].partition('=')[2].strip()}", ",".join(rest)


def model_from_flags(args: argparse.Namespace) -> tuple[str, str]:
    """``--model``/``--model-args`` after lm-eval's forms: ``--model hf --model_args pretrained=X``
    and ``--device D`` (= ``device=D`` in the model args)."""
    model, model_args = lm_eval_model(args.model, args.model_args or "")
    device = getattr(args, "device", None)
    if device:
        items = [i for i in model_args.split(",") if i.strip()]
        given = [i.partition("=")[2].strip() for i in items if i.partition("=")[0].strip() == "device"]
        if given and given[0] != device:
            raise UserError(f"--device {device} and --model-args device={given[0]} disagree: give one")
        if not given:
            items.append(f"device={device}")
        model_args = ",".join(items)
    return model, model_args


def _base_url(item: str) -> str:
    """lm-eval gives the endpoint (``.../v1/completions``); pre takes the API root (``.../v1``)."""
    key, _, value = item.partition("=")
    if key.strip() != "base_url":
        return item
    for suffix in ("/chat/completions", "/completions"):
        if value.rstrip("/").endswith(suffix):
            return f"base_url={value.rstrip('/')[: -len(suffix)]}"
    return item


def chat_model_args(spec: Any, args: argparse.Namespace) -> Any:
    """``--apply_chat_template``: the backend's own switch for chat input, added to the model's args."""
    if not getattr(args, "apply_chat_template", False):
        return spec
    key, value = ("api", "chat") if spec.backend == "openai" else ("chat", True)
    current = spec.args.get(key)
    if current is not None and str(current).lower() not in (str(value).lower(), "auto"):
        raise UserError(f"--apply_chat_template and --model-args {key}={current} disagree: give one")
    return replace(spec, args={**spec.args, key: value})


def one_batch_size(spec: Any, args: argparse.Namespace) -> Any:
    """Batch size in one place: ``--batch-size`` and ``--model-args batch_size=`` mean the same micro-batch
    (the scheduler's and, for in-process backends, the backend's); they may not disagree."""
    flag = getattr(args, "batch_size", None)
    in_args = spec.args.get("batch_size")
    if flag is not None and in_args is not None and int(in_args) != flag:
        raise UserError(f"--batch-size {flag} and --model-args batch_size={in_args} disagree: batch size is set in one place, --batch-size")
    size = flag if flag is not None else (int(in_args) if in_args is not None else None)
    if size is None:
        return spec
    args.batch_size = size
    if spec.backend == "hf":  # in-process: the backend cuts its forward passes at this size too
        return replace(spec, args={**spec.args, "batch_size": size})
    return spec
