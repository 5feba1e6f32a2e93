"""Every choice the hf backend takes, as one frozen, documented, validated value.

``HFOptions`` holds where and how the model loads (device, dtype, revision,
GGUF file, chat format), the kernels decided at load, and each exact speed
lever (``tests/test_hf_levers.py`` proves each one leaves the answers as they
were). The backend takes it whole: ``HFBackend(model, HFOptions(...))``.

Each field is declared as a model argument (``model_args.model_arg``: its check, with its
range), so ``--model-args`` reach it in one place: the registry builds every hf backend through
``HFOptions.from_model_args`` (``random:`` models through ``RandomOptions``, which extends it), the
early check of model-argument values is the same, and ``pre list backends`` shows the same
words; a value is judged once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from promptrobust.engine.serving.backends.hf.kernels import KERNELS
from promptrobust.engine.serving.model_args import (
    Check,
    Flag,
    Number,
    OneOf,
    Text,
    argument_names,
    check_fields,
    model_arg,
    options_from_args,
    options_problem,
)

__all__ = ["DTYPES", "HFOptions", "LEVERS", "LOAD_FIELDS", "OPTION_NAMES", "option_problem"]

DTYPES = ("auto", "float32", "bfloat16", "float16")
#: The largest batch (rows of one forward pass) and prefix cache (MiB) a model argument may ask for.
MAX_BATCH_SIZE = 65_536
MAX_PREFIX_CACHE_MB = 1_048_576  # 1 TiB


class Device(Check):
    """``auto``, ``cpu``, ``mps``, ``cuda`` or ``cuda:N``; a CUDA device only where torch sees a GPU."""

    def takes(self) -> str:
        return "auto, cpu, cuda, cuda:N or mps"

    def accepts(self, value: object) -> bool:
        return self.problem(value) is None

    def problem(self, value: object) -> str | None:
        text = str(value)
        if text in ("auto", "cpu", "mps"):
            return None
        if text == "cuda" or (text.startswith("cuda:") and text[5:].isdigit()):
            import torch  # only when a GPU is asked for

            return None if torch.cuda.is_available() else "auto or cpu here: this machine has no CUDA GPU"
        return self.takes()


_SWITCH = Flag()


@dataclass(frozen=True)
class HFOptions:
    """How the hf backend loads and runs a model. Defaults: the paper's exact answers, every lever on."""

    # -- where and how the model loads ------------------------------------------------------------
    device: str = model_arg("auto", Device())
    """``auto`` (cuda when a GPU is there, else cpu), ``cpu``, ``cuda``, ``cuda:N`` or ``mps``."""
    dtype: str = model_arg("auto", OneOf(DTYPES))
    """``auto`` (bfloat16, or float16 without bf16 support, on a GPU; float32 on the CPU), ``float32``,
    ``bfloat16`` or ``float16``. Part of the cache key: answers of two dtypes never mix."""
    batch_size: int = model_arg(16, Number(1, MAX_BATCH_SIZE, whole=True))
    """Most whole inputs in one forward pass (short-tail batches may hold more rows of short tails)."""
    revision: str | None = model_arg(None, Text(optional=True))
    """Hub revision (branch, tag or commit) of a Hugging Face id; None: the default branch."""
    gguf_file: str | None = model_arg(None, Text(optional=True))
    """A GGUF file inside the model folder to load (dequantised by transformers)."""
    trust_remote_code: bool = model_arg(False, _SWITCH)
    """Run the model repository's own Python code (only for models that need it)."""
    chat: bool | None = model_arg(None, Flag(optional=True))
    """Render inputs with the tokenizer's chat template; None: whenever the tokenizer has one."""

    # -- kernels, decided at load (hf/kernels.py) ---------------------------------------------------
    linear_kernel: str = model_arg("auto", OneOf(KERNELS))
    """fp32 Linear layers on CPU: ``onednn``, ``default`` (torch's MKL path) or ``auto`` (timed at load)."""
    head_kernel: str = model_arg("auto", OneOf(KERNELS))
    """The output layer's kernel, decided on its own: ``onednn`` (packed once), ``default`` or ``auto``."""

    # -- exact speed levers ------------------------------------------------------------------------
    share_prefix: bool = model_arg(True, _SWITCH)
    """Run the tokens a candidate's requests share (template, instruction, few-shot block) once per candidate."""
    prefix_cache_mb: float = model_arg(256.0, Number(0, MAX_PREFIX_CACHE_MB, unit="MiB"))
    """Memory for cached prefix keys/values (LRU); 0: a prefix is shared within a batch only."""
    length_order: bool = model_arg(True, _SWITCH)
    """Order a window of requests by the length after their prefix (little padding), across candidates."""
    drop_finished: bool = model_arg(True, _SWITCH)
    """Generation drops a row from the batch once it has finished (a batch costs its longest answer)."""
    prefix_without_head: bool = model_arg(True, _SWITCH)
    """Prefix passes stop before the output layer: a prefix is computed for its keys and values only."""
    short_tail_batches: bool = model_arg(True, _SWITCH)
    """A batch of rows after cached prefixes may hold more rows, within ``batch_size`` whole inputs' positions."""
    kv_views: bool = model_arg(True, _SWITCH)
    """Cached prefixes enter a pass as views of the stored tensors, not as copies."""
    label_logsumexp: bool = model_arg(True, _SWITCH)
    """Label scoring reads the labels' logits and the vocabulary's logsumexp, not a full log-softmax."""

    def __post_init__(self) -> None:
        check_fields(self)

    @classmethod
    def from_model_args(cls, args: Mapping[str, object]) -> HFOptions:
        """The options ``--model-args`` give (typed values, as ``registry.parse_model_args`` makes them)."""
        return options_from_args(cls, args, "hf")

    def levers(self) -> dict[str, object]:
        """The exact levers and their values (for benchmark records)."""
        return {name: getattr(self, name) for name in LEVERS}


#: Every option's name (what ``--model-args`` may set for the hf backend).
OPTION_NAMES: tuple[str, ...] = argument_names(HFOptions)
#: The exact speed levers: switching one changes the speed, never an answer.
LEVERS: tuple[str, ...] = ("share_prefix", "prefix_cache_mb", "length_order", "drop_finished", "prefix_without_head",
                           "short_tail_batches", "kv_views", "label_logsumexp")
#: Options that decide how the model is loaded: changing one needs a new backend.
LOAD_FIELDS: tuple[str, ...] = ("device", "dtype", "revision", "gguf_file", "trust_remote_code", "chat",
                                "linear_kernel", "head_kernel")


def option_problem(args: Mapping[str, object]) -> str | None:
    """The first bad value among the hf options in ``args`` as one line naming the fix, or None
    (names that are not hf options are not looked at)."""
    return options_problem(HFOptions, args)
