"""Model FLOPs of a request and the device's peak, for MFU.

Counting convention (the usual "model FLOPs"): a matrix multiply with a
weight of P parameters costs 2 x P FLOPs per token position it runs on;
attention costs 4 x layers x (heads x head_dim) x (keys attended) per
position (scores and weighted values). Embedding lookups, norms and
activations are left out. Each request is counted as if it ran alone: no
padding, no shared prefix (a contender that shares a prefix computes fewer
FLOPs than it is credited with, which the prefix-sharing table shows).

Positions a request runs (decoder-only, P input tokens, G generated):
generation feeds P + G - 1 positions (the last token is never fed back) and
needs logits at G of them; label scoring feeds P positions and needs logits
at the last one (the hf backend keeps only that column). Encoder-decoder:
the encoder runs P positions, cross-attention keys/values are projected once
per encoder position, the decoder runs G positions (1 for scoring).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

#: Dense bf16 tensor-core peaks from NVIDIA's datasheets, TFLOP/s, matched on
#: ``torch.cuda.get_device_name`` (first match wins: specific names first).
DATASHEET_PEAKS_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H200", 989.0),
    ("GH200", 989.0),
    ("H100 NVL", 835.0),
    ("H100 PCIE", 756.0),
    ("H100", 989.0),  # SXM5 (e.g. "NVIDIA H100 80GB HBM3")
    ("A100", 312.0),
    ("L40S", 362.0),
    ("L4", 121.0),
)


@dataclass(frozen=True)
class FlopModel:
    """Parameter counts by role and attention sizes of one built model."""

    encoder_decoder: bool
    body_params: int  # decoder-only: every Linear but the LM head; enc-dec: decoder Linears but cross K/V
    head_params: int  # the LM head
    layers: int  # decoder layers
    attention_width: int  # heads x head_dim
    encoder_params: int = 0
    encoder_layers: int = 0
    cross_kv_params: int = 0  # decoder cross-attention key/value projections (run over encoder positions)

    def request_flops(self, prompt_tokens: int, new_tokens: int, *, generate: bool) -> float:
        """FLOPs of one request with ``prompt_tokens`` input tokens (see the module docstring)."""
        p = prompt_tokens
        attn = 4.0 * self.attention_width
        if self.encoder_decoder:
            g = max(1, new_tokens) if generate else 1
            flops = 2.0 * self.encoder_params * p + attn * self.encoder_layers * p * p
            flops += 2.0 * self.cross_kv_params * p
            flops += 2.0 * self.body_params * g + attn * self.layers * (g * (g + 1) / 2 + g * p)
            return flops + 2.0 * self.head_params * g
        if generate:
            g = max(1, new_tokens)
            fed = p + g - 1
            return 2.0 * self.body_params * fed + attn * self.layers * fed * (fed + 1) / 2 + 2.0 * self.head_params * g
        return 2.0 * self.body_params * p + attn * self.layers * p * (p + 1) / 2 + 2.0 * self.head_params


def flop_model(model: Any) -> FlopModel:
    """Count the Linear parameters of a transformers model by role."""
    import torch

    cfg = model.config
    encdec = bool(getattr(cfg, "is_encoder_decoder", False))
    head = body = enc = xkv = 0
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        n = module.weight.numel()
        if name.endswith("lm_head"):
            head += n
        elif encdec and name.startswith("encoder."):
            enc += n
        elif encdec and ("EncDecAttention.k" in name or "EncDecAttention.v" in name):
            xkv += n
        else:
            body += n
    if encdec:
        width = cfg.num_heads * cfg.d_kv
        return FlopModel(True, body, head, cfg.num_decoder_layers, width, enc, cfg.num_layers, xkv)
    heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    return FlopModel(False, body, head, cfg.num_hidden_layers, heads * head_dim)


@dataclass(frozen=True)
class DevicePeak:
    """The FLOP/s an MFU is measured against, and where the figure comes from."""

    device: str  # "cuda" or "cpu"
    name: str
    dtype: str
    flops_per_s: float
    source: str  # "datasheet ..." or "measured ..."


def datasheet_peak(gpu_name: str) -> float | None:
    """Dense bf16 peak in FLOP/s for a known GPU name, else None."""
    upper = gpu_name.upper()
    for key, tflops in DATASHEET_PEAKS_TFLOPS:
        if key in upper:
            return tflops * 1e12
    return None


def measured_matmul_flops(device: str, dtype: str, size: int, repeats: int = 5) -> float:
    """Best FLOP/s of ``repeats`` square matmuls of ``size`` on ``device`` (after one warm-up)."""
    import torch

    dt = getattr(torch, dtype)
    a = torch.randn(size, size, device=device, dtype=dt)
    b = torch.randn(size, size, device=device, dtype=dt)
    best = float("inf")
    for k in range(repeats + 1):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        (a @ b).sum().item()
        elapsed = time.perf_counter() - t0
        if k:
            best = min(best, elapsed)
    return 2.0 * size**3 / best


def device_peak(device: str, dtype: str) -> DevicePeak:
    """The datasheet bf16 peak of a known GPU, else a measured matmul rate (CPU, unknown GPUs)."""
    if device.startswith("cuda"):
        import torch

        name = torch.cuda.get_device_name(torch.device(device))
        peak = datasheet_peak(name)
        if peak is not None and dtype == "bfloat16":
            return DevicePeak("cuda", name, dtype, peak, f"datasheet dense bf16 peak ({peak / 1e12:g} TFLOP/s)")
        rate = measured_matmul_flops(device, dtype, 8192)
        return DevicePeak("cuda", name, dtype, rate, f"measured: best 8192^2 {dtype} matmul (no datasheet figure used)")
    from bench.environment import describe

    rate = measured_matmul_flops("cpu", dtype, 1024)
    return DevicePeak("cpu", describe()["cpu"], dtype, rate, f"measured: best 1024^2 {dtype} matmul on this CPU")
