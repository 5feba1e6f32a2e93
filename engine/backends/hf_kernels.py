"""Which kernel runs the fp32 Linear layers of a CPU model.

torch's default fp32 ``linear`` on CPU calls MKL's sgemm; oneDNN's matmul is
another exact fp32 path (same arithmetic, another summation order: results
differ by float rounding, like a different batch size would). On AMD Zen 5
MKL stays on a slow code path and oneDNN runs model-shaped layers about 2x
faster; on other CPUs MKL may win. ``auto`` times both on the model's own
largest layer at load and keeps the faster one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
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


def onednn_available() -> bool:
    import torch

    return bool(torch.backends.mkldnn.is_available()) and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def _onednn_linear(x: Any, weight: Any, bias: Any) -> Any:
    import torch

    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def _linears(model: Any) -> list[Any]:
    import torch

    return [m for m in model.modules() if type(m) is torch.nn.Linear]


def _probe(model: Any, rows: int = 128, rounds: int = 3) -> float:
    """default / oneDNN time of the model's largest non-output Linear on ``rows`` inputs, interleaved."""
    import torch

    layers = sorted(_linears(model), key=lambda m: m.weight.numel())
    if not layers:
        return 0.0
    # the output head is the largest; a block's MLP layer is what runs most
    layer = layers[-2] if len(layers) > 1 else layers[-1]
    w, b = layer.weight.detach(), None if layer.bias is None else layer.bias.detach()
    x = torch.randn(rows, w.shape[1], dtype=w.dtype)
    best = {"default": float("inf"), "onednn": float("inf")}
    with torch.inference_mode():
        torch.nn.functional.linear(x, w, b)
        _onednn_linear(x, w, b)
        for _ in range(rounds):
            for name, fn in (("default", torch.nn.functional.linear), ("onednn", _onednn_linear)):
                t0 = time.perf_counter()
                for _ in range(3):
                    fn(x, w, b)
                best[name] = min(best[name], time.perf_counter() - t0)
    return best["default"] / best["onednn"] if best["onednn"] > 0 else 0.0


def choose_kernel(request: str, model: Any, device: str, dtype_name: str) -> KernelChoice:
    """Decide the Linear kernel for a loaded model (``request`` is one of ``KERNELS``)."""
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
        return KernelChoice("onednn", "asked for")
    speedup = _probe(model)
    if speedup >= _MARGIN:
        return KernelChoice("onednn", f"oneDNN {speedup:.2f}x faster on the probe layer", speedup)
    return KernelChoice("default", f"oneDNN only {speedup:.2f}x on the probe layer", speedup)


#: Row count oneDNN is told to expect when it packs a weight (any count runs; this one picks a layout good
#: for prefill batches and decode steps alike on the CPUs measured: bench/results/protocol.md).
_PACK_ROWS_HINT = 64
#: Packed weights are a second copy of every Linear: only kept while they need at most this share of RAM.
_PACK_MEMORY_SHARE = 0.25


def install(model: Any, kernel: str) -> int:
    """Route every fp32 ``nn.Linear`` of ``model`` through ``kernel``; returns how many layers changed.

    With oneDNN each weight is also reordered once into oneDNN's blocked
    layout when the copies fit in memory (``_PACK_MEMORY_SHARE``): the
    arithmetic is the same (identical outputs), but no call pays for the
    reorder again, which is most of a small call's time (a decode step, a
    prefix of a few tokens). Weights changed after ``install`` need another
    ``install``.
    """
    layers = _linears(model)
    pack = kernel == "onednn" and _packing_fits(layers)
    changed = 0
    for m in layers:
        if kernel == "onednn":
            m.weight.data = m.weight.data.contiguous()
            m.forward = _OneDNNForward(m, _packed(m.weight) if pack else None)
            changed += 1
        elif "forward" in m.__dict__:
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


class _OneDNNForward:
    """A Linear's forward through oneDNN (an instance attribute, so ``install(model, "default")`` undoes it)."""

    __slots__ = ("layer", "packed")

    def __init__(self, layer: Any, packed: Any = None) -> None:
        self.layer = layer
        self.packed = packed

    def __call__(self, x: Any) -> Any:
        return _onednn_linear(x, self.layer.weight if self.packed is None else self.packed, self.layer.bias)


__all__ = ["KERNELS", "KernelChoice", "choose_kernel", "install", "onednn_available", "packed_weights"]
