"""Where a pass's time goes: self time per part of the hf backend and the model, measured in a real run.

``PassProfile(backend)`` wraps, for as long as it is active, the backend's
methods (tokenisation, prefix planning and computation, stacking the cached
prefixes, the log-softmax over the vocabulary, its own Python) and the
model's modules (attention projections, the attention core, the key/value
concatenation, the MLP, the output head) with timers that count **self
time**: a part's time minus the time of the parts inside it, so the rows add
up to the time spent in the backend. What the engine spends outside the
backend (scheduler, evaluator, score cache, early stopping, asyncio) is the
wall time minus the backend's. Timers cost about a microsecond per call, far
below a forward pass of milliseconds.
"""

from __future__ import annotations

import threading
import time
import types
from collections import defaultdict
from collections.abc import Callable
from typing import Any

#: row label -> what it holds (the order of the table)
PARTS = {
    "tokenisation": "encoding inputs and label words (tokenizer calls)",
    "prefix planning": "prefix groups, cache look-ups, batch order (arrange_batches, row_prefixes' own Python)",
    "prefix stacking": "assembling each batch's cached prefixes into key/value tensors (stack_prefixes)",
    "kv concatenation": "the cache's torch.cat of prefix and new keys/values, every layer, every row",
    "attention projections": "q/k/v/o Linear layers",
    "attention core": "q/k norms, rotary embedding, repeat of kv heads, scaled dot-product attention",
    "mlp": "gate/up/down Linear layers and the activation",
    "lm head": "the output layer over the whole vocabulary (last position only)",
    "log-softmax": "log-softmax over the vocabulary and picking the label tokens",
    "model other": "embeddings, RMSNorms, residuals, masks, per-layer Python of the forward",
    "backend python": "padding, position ids, masks, result rows (the backend's own Python)",
}
#: (where, name) -> part: the backend's methods whose self time is counted; ``where`` is the backend itself,
#: its forward passes (``backend.passes``) or the scoring module (hf/scoring.py's functions)
_METHODS = {
    ("backend", "_encode_uncached"): "tokenisation",
    ("backend", "choice_ids"): "tokenisation",
    ("backend", "arrange_batches"): "prefix planning",
    ("passes", "row_prefixes"): "prefix planning",
    ("passes", "stack_prefixes"): "prefix stacking",
    ("scoring", "_next_token_logprobs"): "log-softmax",
    ("scoring", "_continuation_logprobs"): "log-softmax",
    ("backend", "_run"): "backend python",
    ("passes", "forward_after"): "backend python",
}
#: the forward passes' methods timed as a pass: (name, kind of pass, part of its self time)
_PASSES = (("compute_prefix", "prefix", "model other"),
           ("compute_prefix_batch", "prefix", "prefix stacking"),  # its own time: cutting entries out
           ("forward_logits", "rows", "model other"))


class PassProfile:
    """Self-time timers on a backend and its model while active (``with PassProfile(backend) as prof``)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        #: forward passes and their seconds, split by what they computed
        self.passes = {"prefix": [0, 0.0], "rows": [0, 0.0]}
        self._local = threading.local()
        self._undo: list[Callable[[], None]] = []

    # -- the self-time stack (one per thread: tokenisation also runs on the event loop)

    def _stack(self) -> list[list[float]]:
        st = getattr(self._local, "stack", None)
        if st is None:
            st = self._local.stack = []
        return st

    def enter(self) -> None:
        self._stack().append([time.perf_counter(), 0.0])

    def leave(self, part: str) -> float:
        st = self._stack()
        start, inner = st.pop()
        elapsed = time.perf_counter() - start
        self.seconds[part] += elapsed - inner
        self.calls[part] += 1
        if st:
            st[-1][1] += elapsed
        return elapsed

    def timed(self, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.enter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.leave(part)

        return wrapper

    # -- installing and removing

    def __enter__(self) -> "PassProfile":
        from promptrobust.engine.serving.backends.hf import scoring

        b = self.backend
        owners = {"backend": b, "passes": b.passes, "scoring": scoring}
        for (where, name), part in _METHODS.items():
            self._wrap(owners[where], name, self.timed(part, getattr(owners[where], name)))
        for name, kind, part in _PASSES:
            self._wrap(b.passes, name, self._pass_timer(kind, part, getattr(b.passes, name)))
        self._hook_modules(b.model)
        self._patch_cache_update()
        return self

    def __exit__(self, *exc: object) -> None:
        while self._undo:
            self._undo.pop()()

    def _wrap(self, owner: Any, name: str, wrapper: Callable[..., Any]) -> None:
        """Put ``wrapper`` in place of ``owner.name`` until the profile ends."""
        original = owner.__dict__.get(name) if isinstance(owner, types.ModuleType) else None
        setattr(owner, name, wrapper)
        if original is not None:  # a module's function: put it back
            self._undo.append(lambda: setattr(owner, name, original))
        else:  # an instance attribute over the class's method: remove it
            self._undo.append(lambda: owner.__dict__.pop(name, None))

    def _pass_timer(self, kind: str, part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Self time to ``part``; the pass counted once, as the outermost kind (a prefix batch runs ``forward_logits``)."""

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            outer = getattr(self._local, "pass_kind", None)
            if outer is None:
                self._local.pass_kind = kind
            self.enter()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = self.leave(part)
                if outer is None:
                    self._local.pass_kind = None
                    self.passes[kind][0] += 1
                    self.passes[kind][1] += elapsed

        return wrapper

    def _hook_modules(self, model: Any) -> None:
        import torch

        def around(module: Any, part: str) -> None:
            def pre(*_: Any) -> None:  # a hook that returns something replaces the module's input or output
                self.enter()

            def post(*_: Any) -> None:
                self.leave(part)

            h1 = module.register_forward_pre_hook(pre)
            h2 = module.register_forward_hook(post)
            self._undo += [h1.remove, h2.remove]

        for name, module in model.named_modules():
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "self_attn":
                around(module, "attention core")
                for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
                    if isinstance(getattr(module, proj, None), torch.nn.Module):
                        around(getattr(module, proj), "attention projections")
            elif leaf == "mlp":
                around(module, "mlp")
            elif leaf == "lm_head":
                around(module, "lm head")

    def _patch_cache_update(self) -> None:
        from transformers import cache_utils

        for cls_name in ("DynamicLayer", "DynamicSlidingWindowLayer"):
            cls = getattr(cache_utils, cls_name, None)
            if cls is None or "update" not in cls.__dict__:
                continue
            original = cls.__dict__["update"]
            setattr(cls, "update", self.timed("kv concatenation", original))
            self._undo.append(lambda cls=cls, original=original: setattr(cls, "update", original))

    # -- reading

    @property
    def backend_seconds(self) -> float:
        return sum(self.seconds.values())


def breakdown_lines(prof: PassProfile, wall_seconds: float, requests: int) -> list[str]:
    """The table: seconds, share of the wall time and milliseconds per request, for every part and outside."""
    outside = max(0.0, wall_seconds - prof.backend_seconds)
    rows = [(part, prof.seconds.get(part, 0.0), what) for part, what in PARTS.items()]
    rows.append(("outside the backend", outside, "scheduler, evaluator, score cache, early stopping, asyncio (wall - backend)"))
    out = ["| part | seconds | share of the wall time | ms per request | what |", "|---|---:|---:|---:|---|"]
    for part, sec, what in rows:
        out.append(f"| {part} | {sec:.2f} | {sec / wall_seconds:.1%} | {1000 * sec / max(1, requests):.2f} | {what} |")
    out.append(f"| **wall** | {wall_seconds:.2f} | 100% | {1000 * wall_seconds / max(1, requests):.2f} | {requests} requests |")
    (np, sp), (nr, sr) = prof.passes["prefix"], prof.passes["rows"]
    out += ["", f"Forward passes: {np} for new prefixes ({sp:.2f} s), {nr} for the requests' rows ({sr:.2f} s)."]
    return out


def breakdown_payload(prof: PassProfile, wall_seconds: float, requests: int) -> dict[str, Any]:
    return {"wall_seconds": wall_seconds, "requests": requests, "backend_seconds": prof.backend_seconds,
            "outside_backend_seconds": max(0.0, wall_seconds - prof.backend_seconds),
            "parts_seconds": dict(prof.seconds), "calls": dict(prof.calls),
            "passes": {k: {"count": v[0], "seconds": v[1]} for k, v in prof.passes.items()}}


def achieved_rates(model: Any, *, positions: int, lower_bound: int, requests: int, wall_seconds: float,
                   backend_seconds: float, peak_flops: float) -> dict[str, float]:
    """Model FLOP/s of a label-scoring run against the measured fp32 peak.

    FLOPs as ``levers.peak_fraction`` counts them: 2 x the parameters of every
    Linear but the head per position, plus the head once per request (its
    last position); attention scores are left out. ``computed``: the
    positions the backend ran; ``useful``: the lower bound's (what an ideal
    exact backend must run), so useful / computed = the bound / positions.
    """
    from bench.levers import _linear_layers, _params

    body, head = _linear_layers(model)
    head_flops = 2.0 * _params(head) * requests
    computed = 2.0 * _params(body) * positions + head_flops
    useful = 2.0 * _params(body) * lower_bound + head_flops
    return {
        "gflops_per_s_wall": computed / wall_seconds / 1e9,
        "gflops_per_s_backend": computed / backend_seconds / 1e9 if backend_seconds else 0.0,
        "useful_gflops_per_s_wall": useful / wall_seconds / 1e9,
        "peak_gflops": peak_flops / 1e9,
        "peak_fraction_wall": computed / wall_seconds / peak_flops,
        "peak_fraction_backend": computed / backend_seconds / peak_flops if backend_seconds else 0.0,
        "head_share_of_flops": head_flops / computed if computed else 0.0,
    }
