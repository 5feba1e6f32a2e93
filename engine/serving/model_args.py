"""Checks of ``--model-args`` values before a backend is built, so a typo is one line.

Backends keep their own checks; these run first, name the argument, the value
and what it takes, and cost nothing. The hf backend's values are judged by its
options (``backends/hf/options.py``, no torch import unless ``device=cuda`` is
asked for), the same checks ``HFOptions`` runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlparse

Check = Callable[[Any], str | None]  # None when fine, else what the value must be


def _whole(minimum: int) -> Check:
    return lambda v: None if isinstance(v, int) and not isinstance(v, bool) and v >= minimum else f"a whole number >= {minimum}"


def _positive(v: Any) -> str | None:
    return None if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else "a positive number"


def _fraction(v: Any) -> str | None:
    return None if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 1 else "a number in (0, 1]"


def _boolean(v: Any) -> str | None:
    return None if isinstance(v, bool) else "true or false"


def _one_of(*values: str) -> Check:
    return lambda v: None if v in values else "one of " + ", ".join(values)


def _text(v: Any) -> str | None:
    return None if isinstance(v, str) and v.strip() else "a non-empty text"


def _urls(v: Any) -> str | None:
    for url in str(v).split("|"):
        parsed = urlparse(url.strip())
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            return "http(s)://HOST[:PORT]/v1 (several: URL1|URL2)"
    return None


OPENAI: dict[str, Check] = {
    "base_url": _urls,
    "api_key_env": _text,
    "api": _one_of("chat", "completions", "auto"),
    "timeout": _positive,
    "max_connections": _whole(1),
    "logprobs": _boolean,
    "eject_after": _whole(1),
    "cooldown": _positive,
    "max_body_mb": _positive,
    "max_outage": lambda v: None if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else "a number of seconds >= 0",
}
VLLM: dict[str, Check] = {
    "revision": _text,
    "dtype": _text,
    "max_model_len": _whole(1),
    "gpu_memory_utilization": _fraction,
    "tensor_parallel_size": _whole(1),
    "enable_prefix_caching": _boolean,
    "seed": _whole(0),
    "chat": _boolean,
}
CHECKS = {"openai": OPENAI, "vllm": VLLM}


def check_model_args(backend: str, args: Mapping[str, Any]) -> str | None:
    """The first bad value as one line naming the fix, or None."""
    if backend == "hf":  # the hf backend's options judge their own values (one place)
        from promptrobust.engine.serving.backends.hf.options import option_problem

        return option_problem(args)
    checks = CHECKS.get(backend, {})
    for key, value in args.items():
        check = checks.get(key)
        problem = check(value) if check is not None else None
        if problem:
            return f"model argument {key}={value!r}: {key} must be {problem}"
    return None
