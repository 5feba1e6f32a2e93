"""Every choice the hf backend takes, as one frozen, documented, validated value.

``HFOptions`` holds where and how the model loads (device, dtype, revision,
GGUF file, chat format), the kernels decided at load, and each exact speed
lever (``tests/test_hf_levers.py`` proves each one leaves the answers as they
were). The backend takes it whole: ``HFBackend(model, HFOptions(...))``.

``--model-args`` reach it in one place: ``HFOptions.from_model_args`` (the
registry builds every hf and ``random:`` backend through it), and the CLI's
early check of model-argument values reads the same per-field checks
(``option_problem``), so a value is judged once, by the same words.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from promptrobust.engine.errors import SettingsError
from promptrobust.engine.serving.backends.hf.kernels import KERNELS

__all__ = ["DTYPES", "HFOptions", "LEVERS", "LOAD_FIELDS", "OPTION_NAMES", "option_problem"]

DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass(frozen=True)
class HFOptions:
    """How the hf backend loads and runs a model. Defaults: the paper's exact answers, every lever on."""

    # -- where and how the model loads ------------------------------------------------------------
    device: str = "auto"
    """``auto`` (cuda when a GPU is there, else cpu), ``cpu``, ``cuda``, ``cuda:N`` or ``mps``."""
    dtype: str = "auto"
    """``auto`` (bfloat16, or float16 without bf16 support, on a GPU; float32 on the CPU), ``float32``,
    ``bfloat16`` or ``float16``. Part of the cache key: answers of two dtypes never mix."""
    batch_size: int = 16
    """Most whole inputs in one forward pass (short-tail batches may hold more rows of short tails)."""
    revision: str | None = None
    """Hub revision (branch, tag or commit) of a Hugging Face id; None: the default branch."""
    gguf_file: str | None = None
    """A GGUF file inside the model folder to load (dequantised by transformers)."""
    trust_remote_code: bool = False
    """Run the model repository's own Python code (only for models that need it)."""
    chat: bool | None = None
    """Render inputs with the tokenizer's chat template; None: whenever the tokenizer has one."""

    # -- kernels, decided at load (hf/kernels.py) ---------------------------------------------------
    linear_kernel: str = "auto"
    """fp32 Linear layers on CPU: ``onednn``, ``default`` (torch's MKL path) or ``auto`` (timed at load)."""
    head_kernel: str = "auto"
    """The output layer's kernel, decided on its own: ``onednn`` (packed once), ``default`` or ``auto``."""

    # -- exact speed levers ------------------------------------------------------------------------
    share_prefix: bool = True
    """Run the tokens a candidate's requests share (template, instruction, few-shot block) once per candidate."""
    prefix_cache_mb: float = 256.0
    """Memory for cached prefix keys/values (LRU); 0: a prefix is shared within a batch only."""
    length_order: bool = True
    """Order a window of requests by the length after their prefix (little padding), across candidates."""
    drop_finished: bool = True
    """Generation drops a row from the batch once it has finished (a batch costs its longest answer)."""
    prefix_without_head: bool = True
    """Prefix passes stop before the output layer: a prefix is computed for its keys and values only."""
    short_tail_batches: bool = True
    """A batch of rows after cached prefixes may hold more rows, within ``batch_size`` whole inputs' positions."""
    kv_views: bool = True
    """Cached prefixes enter a pass as views of the stored tensors, not as copies."""
    label_logsumexp: bool = True
    """Label scoring reads the labels' logits and the vocabulary's logsumexp, not a full log-softmax."""

    def __post_init__(self) -> None:
        problem = option_problem({f.name: getattr(self, f.name) for f in fields(self)})
        if problem:
            raise SettingsError(problem, setting="model_args")

    @classmethod
    def from_model_args(cls, args: Mapping[str, object]) -> HFOptions:
        """The options ``--model-args`` give (typed values, as ``registry.parse_model_args`` makes them)."""
        unknown = sorted(set(args) - set(OPTION_NAMES))
        if unknown:
            raise SettingsError(f"model argument(s) {', '.join(unknown)} not understood by the hf backend; "
                                f"it takes {', '.join(sorted(OPTION_NAMES))}", setting="model_args")
        return cls(**args)  # type: ignore[arg-type]  # each value checked in __post_init__

    def levers(self) -> dict[str, object]:
        """The exact levers and their values (for benchmark records)."""
        return {name: getattr(self, name) for name in LEVERS}


Check = Callable[[Any], "str | None"]  # None when fine, else what the value must be


def _flag(v: Any) -> str | None:
    return None if isinstance(v, bool) else "true or false"


def _flag_or_none(v: Any) -> str | None:
    return None if v is None or isinstance(v, bool) else "true, false or unset"


def _one_of(*values: str) -> Check:
    return lambda v: None if v in values else "one of " + ", ".join(values)


def _text_or_none(v: Any) -> str | None:
    return None if v is None or (isinstance(v, str) and v.strip()) else "a non-empty text"


def _whole_positive(v: Any) -> str | None:
    return None if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else "a whole number >= 1"


def _mebibytes(v: Any) -> str | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
    return None if ok else "a number of MiB >= 0"


def _device(v: Any) -> str | None:
    text = str(v)
    if text in ("auto", "cpu", "mps"):
        return None
    if text == "cuda" or (text.startswith("cuda:") and text[5:].isdigit()):
        import torch  # only when a GPU is asked for

        return None if torch.cuda.is_available() else "auto or cpu here: this machine has no CUDA GPU"
    return "auto, cpu, cuda, cuda:N or mps"


_CHECKS: dict[str, Check] = {
    "device": _device,
    "dtype": _one_of(*DTYPES),
    "batch_size": _whole_positive,
    "revision": _text_or_none,
    "gguf_file": _text_or_none,
    "trust_remote_code": _flag,
    "chat": _flag_or_none,
    "linear_kernel": _one_of(*KERNELS),
    "head_kernel": _one_of(*KERNELS),
    "prefix_cache_mb": _mebibytes,
}
#: Every option's name (what ``--model-args`` may set for the hf backend).
OPTION_NAMES: tuple[str, ...] = tuple(f.name for f in fields(HFOptions))
#: The exact speed levers: switching one changes the speed, never an answer.
LEVERS: tuple[str, ...] = ("share_prefix", "prefix_cache_mb", "length_order", "drop_finished", "prefix_without_head",
                           "short_tail_batches", "kv_views", "label_logsumexp")
#: Options that decide how the model is loaded: changing one needs a new backend.
LOAD_FIELDS: tuple[str, ...] = ("device", "dtype", "revision", "gguf_file", "trust_remote_code", "chat",
                                "linear_kernel", "head_kernel")


def option_problem(args: Mapping[str, object]) -> str | None:
    """The first bad value among the hf options in ``args`` as one line naming the fix, or None
    (names that are not hf options are not looked at)."""
    for name, value in args.items():
        if name not in OPTION_NAMES:
            continue
        check = _CHECKS.get(name, _flag)  # every lever without its own check is a switch
        what = check(value)
        if what:
            return f"model argument {name}={value!r}: {name} must be {what}"
    return None
