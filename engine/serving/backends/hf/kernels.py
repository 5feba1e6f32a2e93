"""Which kernel runs the fp32 Linear layers of a CPU model.

torch's default fp32 ``linear`` on CPU calls MKL's sgemm; oneDNN's matmul is
another exact fp32 path (same arithmetic, another summation order: results
differ by float rounding, like a different batch size would). On AMD Zen 5
MKL stays on a slow code path and oneDNN runs model-shaped layers about 2x
faster; on other CPUs MKL may win. ``auto`` times both on the model's own
largest layer at load and keeps the faster one.

The output layer is decided on its own (``head``): it runs on a pass's last
positions only, a few rows against the whole vocabulary, a shape where MKL
packs the entire weight on every call (Gemma 3's 262,144 x 640 head: ~130 ms
for 13 rows on an Intel Xeon, against ~33 ms for oneDNN on a weight packed
once). ``auto`` times both on that layer at a pass's row count.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

KERNELS = ("auto", "onednn", "default")
#: oneDNN must beat the default by this factor to be picked (timing noise on a shared machine).
_MARGIN = 1.10


@dataclass(frozen=True)
class KernelChoice:
    """What runs the Linear layers and why."""

    kernel: str  # "onednn" or "default"
    reason: str
    #: default time / oneDNN time on the probe layer (0: not measured)
    probe_speedup: float = 0.0
    #: the output layer's kernel ("onednn": on a weight packed once; "default"), decided on its own
    head: str = "default"
    head_reason: str = "follows the other layers"
    #: default time / packed-oneDNN time on the output layer (0: not measured)
    head_speedup: float = 0.0


def onednn_available() -> bool:
    import torch

    return bool(torch.backends.mkldnn.is_available()) and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def _onednn_linear(x: Any, weight: Any, bias: Any) -> Any:
    import torch

    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def _linears(model: Any) -> list[Any]:
    import torch

    return [m for m in model.modules() if type(m) is torch.nn.Linear]


def output_layer(model: Any) -> Any:
    """The model's output layer (vocabulary head) when it is a plain fp32-able Linear, else None."""
    import torch

    get = getattr(model, "get_output_embeddings", None)
    head = get() if callable(get) else None
    return head if type(head) is torch.nn.Linear else None


def _probe(model: Any, rows: int = 64, rounds: int = 7) -> float:
    """default / oneDNN time of the model's largest non-output Linear on ``rows`` inputs (a decode step of a
    full batch, or a short pass), interleaved."""
    head = output_layer(model)
    layers = sorted((m for m in _linears(model) if m is not head), key=lambda m: m.weight.numel())
    if not layers:
        return 0.0
    # a block's MLP layer is what runs most; oneDNN is timed as it would run: on the packed weight when packing fits
    layer = layers[-1]
    packed = _packed(layer.weight) if _packing_fits(_linears(model)) else None
    return _time_pair(layer, layer.weight.detach() if packed is None else packed, rows, rounds, repeats=5)


def _time_pair(layer: Any, onednn_weight: Any, rows: int, rounds: int, repeats: int) -> float:
    """default time / oneDNN time of ``layer`` on ``rows`` random inputs (oneDNN on ``onednn_weight``), interleaved."""
    import torch

    w, b = layer.weight.detach(), None if layer.bias is None else layer.bias.detach()
    x = torch.randn(rows, w.shape[1], dtype=w.dtype)
    best = {"default": float("inf"), "onednn": float("inf")}
    paths = (("default", lambda: torch.nn.functional.linear(x, w, b)), ("onednn", lambda: _onednn_linear(x, onednn_weight, b)))
    with torch.inference_mode():
        for _, fn in paths:
            fn()
        for _ in range(rounds):
            for name, fn in paths:
                t0 = time.perf_counter()
                for _ in range(repeats):
                    fn()
                best[name] = min(best[name], time.perf_counter() - t0)
    return best["default"] / best["onednn"] if best["onednn"] > 0 else 0.0


#: Rows the output layer is probed on: a pass's last positions (one per request of a scoring pass, or a decode step).
_HEAD_PROBE_ROWS = 16


def _probe_head(model: Any, rounds: int = 3) -> float:
    """default / packed-oneDNN time of the output layer on a pass's row count (0: no head, or no packing)."""
    head = output_layer(model)
    if head is None or not _packing_fits([head]):
        return 0.0
    packed = _packed(head.weight)
    if packed is None:
        return 0.0
    return _time_pair(head, packed, _HEAD_PROBE_ROWS, rounds, repeats=1)


def choose_kernel(request: str, model: Any, device: str, dtype_name: str, head_request: str = "auto") -> KernelChoice:
    """Decide the Linear kernel for a loaded model, and the output layer's on its own (each one of ``KERNELS``)."""
    if head_request not in KERNELS:
        raise ValueError(f"hf backend: head_kernel {head_request!r} is not one of {', '.join(KERNELS)}")
    body = _choose_body(request, model, device, dtype_name)
    cpu_fp32 = device.startswith("cpu") and dtype_name == "float32" and onednn_available()
    if head_request == "onednn" and not cpu_fp32:
        raise ValueError("hf backend: head_kernel=onednn applies to float32 on CPU with a torch built with oneDNN only")
    if output_layer(model) is None or not cpu_fp32:
        return body
    if head_request == "default":
        return replace(body, head="default", head_reason="asked for")
    if head_request == "onednn":
        return replace(body, head="onednn", head_reason="asked for")
    speedup = _probe_head(model)
    if speedup >= _MARGIN:
        return replace(body, head="onednn", head_reason=f"packed oneDNN {speedup:.2f}x faster on the output layer "
                                                         f"({_HEAD_PROBE_ROWS} rows)", head_speedup=speedup)
    return replace(body, head=body.kernel, head_reason=f"packed oneDNN only {speedup:.2f}x on the output layer; "
                                                       "follows the other layers", head_speedup=speedup)


def _choose_body(request: str, model: Any, device: str, dtype_name: str) -> KernelChoice:
    if request not in KERNELS:
        raise ValueError(f"hf backend: linear_kernel {request!r} is not one of {', '.join(KERNELS)}")
    if request == "default":
        return KernelChoice("default", "asked for")
    if not device.startswith("cpu") or dtype_name != "float32":
        if request == "onednn":
            raise ValueError("hf backend: linear_kernel=onednn applies to float32 on CPU only")
        return KernelChoice("default", f"{dtype_name} on {device}: torch's own kernels")
    if not onednn_available():
        if request == "onednn":
            raise ValueError("hf backend: linear_kernel=onednn needs a torch built with oneDNN (mkldnn)")
        return KernelChoice("default", "this torch has no oneDNN")
    if request == "onednn":
        return KernelChoice("onednn", "asked for", head="onednn")
    speedup = _probe(model)
    if speedup >= _MARGIN:
        return KernelChoice("onednn", f"oneDNN {speedup:.2f}x faster on the probe layer", speedup, head="onednn")
    return KernelChoice("default", f"oneDNN only {speedup:.2f}x on the probe layer", speedup)


#: Row count oneDNN is told to expect when it packs a weight (any count runs; this one picks a layout good
#: for prefill batches and decode steps alike on the CPUs measured: bench/results/protocol.md).
_PACK_ROWS_HINT = 64
#: Packed weights are a second copy of every Linear: only kept while they need at most this share of RAM.
_PACK_MEMORY_SHARE = 0.25


def install(model: Any, kernel: str, head: str | None = None) -> int:
    """Route every fp32 ``nn.Linear`` of ``model`` through ``kernel``, its output layer through ``head``
    (None: ``kernel`` too); returns how many layers changed.

    With oneDNN each weight is also reordered once into oneDNN's blocked
    layout when the copies fit in memory (``_PACK_MEMORY_SHARE``): the
    arithmetic is the same (identical outputs), but no call pays for the
    reorder again, which is most of a small call's time (a decode step, a
    prefix of a few tokens). Weights changed after ``install`` need another
    ``install``.
    """
    layers = _linears(model)
    out = output_layer(model)
    kernel_of = {id(m): (head or kernel) if m is out else kernel for m in layers}
    pack = _packing_fits([m for m in layers if kernel_of[id(m)] == "onednn"])
    changed = 0
    for m in layers:
        current = m.__dict__.get("forward")
        if kernel_of[id(m)] == "onednn":
            if isinstance(current, _OneDNNForward) and current.serves(m.weight, pack):
                continue  # already there: no second reorder of an unchanged weight
            m.weight.data = m.weight.data.contiguous()
            m.forward = _OneDNNForward(m, _packed(m.weight) if pack else None)
            changed += 1
        elif current is not None:
            del m.forward
            changed += 1
    return changed


def packed_weights(model: Any) -> bool:
    """Whether ``model``'s Linear layers run on weights packed for oneDNN."""
    return any(isinstance(m.__dict__.get("forward"), _OneDNNForward) and m.forward.packed is not None for m in _linears(model))


def _packing_fits(layers: list[Any]) -> bool:
    import os

    need = sum(m.weight.numel() * m.weight.element_size() for m in layers)
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return False
    return need <= _PACK_MEMORY_SHARE * total


def _packed(weight: Any) -> Any:
    """``weight`` reordered for oneDNN, or None where this torch cannot (the plain weight then serves)."""
    import torch

    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), _PACK_ROWS_HINT)
    except (AttributeError, RuntimeError):
        return None


def _weight_state(weight: Any) -> tuple[int, int]:
    """Where a weight's values live and how often they were written in place (any change moves one of them)."""
    return weight.data_ptr(), weight._version


class _OneDNNForward:
    """A Linear's forward through oneDNN (an instance attribute, so ``install(model, "default")`` undoes it)."""

    __slots__ = ("layer", "packed", "_source")

    def __init__(self, layer: Any, packed: Any = None) -> None:
        self.layer = layer
        self.packed = packed
        self._source = _weight_state(layer.weight)

    def serves(self, weight: Any, packed: bool) -> bool:
        """Whether this forward already runs ``weight`` as it is now, packed or not as asked."""
        return (self.packed is not None) == packed and self._source == _weight_state(weight)

    def __call__(self, x: Any) -> Any:
        return _onednn_linear(x, self.layer.weight if self.packed is None else self.packed, self.layer.bias)


__all__ = ["KERNELS", "KernelChoice", "choose_kernel", "install", "onednn_available", "output_layer", "packed_weights"]
