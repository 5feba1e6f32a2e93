"""The hf backend's levers as benchmark settings, and the measurements made on recorded requests.

``configure`` switches one loaded HFBackend between lever settings (kernel,
prefix sharing, prefix cache, length order, dropping finished rows) so that
contenders share one model and can be interleaved. ``Recorder`` sits between
a scheduler and the backend and keeps what the engine sent, which later
phases replay: each lever's speed, the backend's share of the fp32 peak, the
positions lower bound and bfloat16's agreement with fp32.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from promptrobust.engine.serving.backends.hf.kernels import install
from promptrobust.engine.serving.backends.hf.observer import HFObserver, PassKind
from promptrobust.engine.serving.backends.hf.prefix import PrefixCache, common_prefix_length
from promptrobust.engine.serving.types import Completion, Request


@dataclass(frozen=True)
class Levers:
    """One setting of the backend's levers (kernel "best": the one chosen at load)."""

    label: str
    kernel: str = "best"
    #: the output layer's kernel ("best": decided on its own at load; "follow": the other layers'; or a kernel name)
    head_kernel: str = "best"
    share_prefix: bool = True
    prefix_cache: bool = True
    length_order: bool = True
    drop_finished: bool = True
    prefix_without_head: bool = True
    kv_views: bool = True
    label_logsumexp: bool = True
    short_tail_batches: bool = True


#: What the baselines run: torch's default kernels, nothing shared (they send one request per call anyway).
_OFF = {"prefix_without_head": False, "kv_views": False, "label_logsumexp": False, "short_tail_batches": False,
        "head_kernel": "follow"}
BASELINE = Levers("baseline", kernel="default", share_prefix=False, prefix_cache=False, length_order=False, drop_finished=False,
                  **_OFF)
#: Every exact lever on.
ENGINE = Levers("engine: every lever")
#: The engine before these levers, then one lever added at a time.
LADDER = (
    Levers("before: per-batch prefix, token-id order, default kernel, rows kept to the end",
           kernel="default", prefix_cache=False, length_order=False, drop_finished=False, **_OFF),
    Levers("+ fastest Linear kernel", prefix_cache=False, length_order=False, drop_finished=False, **_OFF),
    Levers("+ length order across candidates, cut where padding costs more than a pass", prefix_cache=False,
           drop_finished=False, **_OFF),
    Levers("+ persistent prefix cache", drop_finished=False, **_OFF),
    Levers("+ finished rows dropped", **_OFF),
    Levers("+ prefix passes without the output layer", kv_views=False, label_logsumexp=False, short_tail_batches=False,
           head_kernel="follow"),
    Levers("+ cached prefixes enter a pass as views", label_logsumexp=False, short_tail_batches=False, head_kernel="follow"),
    Levers("+ label log-probs from the logsumexp", short_tail_batches=False, head_kernel="follow"),
    Levers("+ short-tail batches", head_kernel="follow"),
    Levers("+ the output layer's kernel chosen on its own (= every lever)"),
)


#: Each of this issue's levers on its own: every lever, then every lever but one (what that one lever gives).
ABLATION = (
    Levers(LADDER[-1].label),
    Levers("every lever but: prefix passes without the output layer", prefix_without_head=False),
    Levers("every lever but: cached prefixes enter a pass as views", kv_views=False),
    Levers("every lever but: label log-probs from the logsumexp", label_logsumexp=False),
    Levers("every lever but: short-tail batches", short_tail_batches=False),
    Levers("every lever but: the output layer's kernel chosen on its own (torch's default there)", head_kernel="default"),
)


def configure(backend: Any, levers: Levers, *, prefixes: PrefixCache | None = None, cache_mb: float = 256.0) -> None:
    """Put ``backend`` into ``levers``; ``prefixes`` is the prefix cache to use when the cache lever is on."""
    body = backend.kernel.kernel if levers.kernel == "best" else levers.kernel
    head = {"best": backend.kernel.head, "follow": body}.get(levers.head_kernel, levers.head_kernel)
    install(backend.model, body, head)
    backend.with_options(share_prefix=levers.share_prefix, prefix_cache_mb=cache_mb if levers.prefix_cache else 0.0,
                        length_order=levers.length_order, drop_finished=levers.drop_finished,
                        prefix_without_head=levers.prefix_without_head, kv_views=levers.kv_views,
                        label_logsumexp=levers.label_logsumexp, short_tail_batches=levers.short_tail_batches)
    if levers.prefix_cache:
        backend.prefixes = prefixes if prefixes is not None else PrefixCache(int(cache_mb * 2**20))
    else:
        backend.prefixes = PrefixCache(0)


class Recorder:
    """Forwards everything to a backend; keeps each request the engine sent and its completion."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend
        self.sent: dict[Request, Completion] = {}
        #: the protocol phase under way (set by the bench), and the phase each request was first sent in
        self.phase = ""
        self.phase_of: dict[Request, str] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def arrange_batches(self, requests: Sequence[Request], batch_size: int) -> list[list[int]]:
        return self._backend.arrange_batches(requests, batch_size)

    async def complete_batch(self, requests: Sequence[Request]) -> list[Completion]:
        out = await self._backend.complete_batch(requests)
        for r, c in zip(requests, out):
            if r not in self.sent:
                self.sent[r] = c
                self.phase_of[r] = self.phase
        return out


def lower_bound_positions(backend: Any, recorder: Recorder) -> int:
    """Positions an ideal exact backend computes: every distinct token prefix of the inputs once (the nodes of
    their token trie: shared instruction starts once, no padding), plus one decode step per generated token after
    the first, and one more where the answer ended at EOS (the step that predicts EOS must run)."""
    seqs = sorted({tuple(backend.encode_input(r)) for r in recorder.sent})
    total, prev = 0, ()
    for s in seqs:
        total += len(s) - common_prefix_length([prev, s])
        prev = s
    return total + sum(_decode_steps(r, c) for r, c in recorder.sent.items())


def _decode_steps(request: Request, completion: Completion) -> int:
    if request.kind != "generate" or completion.completion_tokens == 0:
        return 0
    n = completion.completion_tokens
    ended_at_eos = n < request.decoding.max_tokens and not request.decoding.stop
    return n if ended_at_eos else n - 1


def fp32_peak(size: int = 2048, repeats: int = 5) -> dict[str, Any]:
    """Best fp32 FLOP/s of a square matmul through torch's default path and through oneDNN (plain and packed weight)."""
    import torch

    from promptrobust.engine.serving.backends.hf.kernels import onednn_available

    a = torch.randn(size, size)
    b = torch.randn(size, size)
    paths: dict[str, Any] = {"default": lambda: torch.nn.functional.linear(a, b)}
    if onednn_available():
        paths["onednn"] = lambda: torch.ops.mkldnn._linear_pointwise(a, b, None, "none", [], "")
        try:  # the weight packed once, as the hf backend runs it
            packed = torch.ops.mkldnn._reorder_linear_weight(b, size)
            paths["onednn-packed"] = lambda: torch.ops.mkldnn._linear_pointwise(a, packed, None, "none", [], "")
        except (AttributeError, RuntimeError):
            pass
    best = {k: float("inf") for k in paths}
    with torch.inference_mode():
        for _ in range(repeats + 1):
            for k, fn in paths.items():
                t0 = time.perf_counter()
                fn()
                best[k] = min(best[k], time.perf_counter() - t0)
    rates = {k: 2.0 * size**3 / t for k, t in best.items()}
    top = max(rates, key=rates.get)
    return {"flops_per_s": rates[top], "by_path_gflops": {k: v / 1e9 for k, v in rates.items()},
            "source": f"best {size}^2 fp32 matmul, {top} path"}


async def replay(backend: Any, requests: list[Request], batch_size: int) -> tuple[float, int, list[Completion]]:
    """Send ``requests`` as the scheduler would (windows of 4 batches, the backend's plan); seconds in the backend."""
    seconds = 0.0
    positions = backend.positions
    out: dict[int, Completion] = {}
    window = 4 * batch_size
    for start in range(0, len(requests), window):
        chunk = requests[start : start + window]
        for batch in backend.arrange_batches(chunk, batch_size):
            t0 = time.perf_counter()
            got = await backend.complete_batch([chunk[i] for i in batch])
            seconds += time.perf_counter() - t0
            for i, c in zip(batch, got):
                out[start + i] = c
    return seconds, backend.positions - positions, [out[i] for i in range(len(requests))]


def _sample(recorder: Recorder, n: int) -> list[Request]:
    """The first ``n`` distinct requests the engine sent, in order (one attack's steps, as they came)."""
    return list(recorder.sent)[:n]


async def lever_table(backend: Any, recorded: dict[str, Recorder], n: int, batch_size: int, cache_mb: float,
                      rounds: int = 2, ladder: tuple[Levers, ...] = LADDER) -> dict[str, Any]:
    """Each lever added in turn (or, with ``ABLATION``, each taken away from every lever), on the engines' recorded
    requests; configurations interleaved for ``rounds``."""
    rows: list[dict[str, Any]] = []
    peak = fp32_peak()
    if ladder is ABLATION:
        return await _ablation_table(backend, recorded, n, batch_size, cache_mb, rounds, peak)
    lines = ["## Each exact lever, added one at a time", "",
             f"The first {n} requests each engine sent, replayed through the backend as the scheduler sends them "
             f"(batch {batch_size}); configurations interleaved, best of {rounds} rounds; a fresh prefix cache per round.", "",
             "| mode | configuration | seconds | positions computed | speed vs before | this lever alone (vs the row above) | same answers as before |",
             "|---|---|---:|---:|---:|---:|---|"]
    for mode, rec in recorded.items():
        reqs = _sample(rec, n)
        if not reqs:
            continue
        best: dict[str, tuple[float, int, list[Completion]]] = {}
        for _ in range(rounds):
            again = fp32_peak()  # the peak is measured between replays, under the same load
            if again["flops_per_s"] > peak["flops_per_s"]:
                peak = again
            for lv in LADDER:
                configure(backend, lv, cache_mb=cache_mb)
                sec, pos, out = await replay(backend, reqs, batch_size)
                if lv.label not in best or sec < best[lv.label][0]:
                    best[lv.label] = (sec, pos, out)
        base_sec, _, base_out = best[LADDER[0].label]
        prev_sec = base_sec
        for lv in LADDER:
            sec, pos, out = best[lv.label]
            agree = sum(_same(a, b) for a, b in zip(out, base_out))
            rows.append({"mode": mode, "configuration": lv.label, "seconds": sec, "positions": pos,
                         "speedup": base_sec / sec, "step_speedup": prev_sec / sec, "same_answers": agree,
                         "requests": len(reqs)})
            lines.append(f"| {mode} | {lv.label} | {sec:.2f} | {pos} | {base_sec / sec:.2f}x | {prev_sec / sec:.2f}x | "
                         f"{agree} of {len(reqs)} |")
            prev_sec = sec
    configure(backend, ENGINE, cache_mb=cache_mb)
    return {"rows": rows, "lines": lines, "peak": peak}


async def _ablation_table(backend: Any, recorded: dict[str, Recorder], n: int, batch_size: int, cache_mb: float,
                          rounds: int, peak: dict[str, Any]) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    lines = ["## Each lever on its own: every lever against every lever but that one", "",
             f"The first {n} requests each engine sent, replayed through the backend as the scheduler sends them "
             f"(batch {batch_size}); configurations interleaved, best of {rounds} rounds; a fresh prefix cache per round.", "",
             "| mode | configuration | seconds | positions computed | forward passes | what the lever gives | same answers as every lever |",
             "|---|---|---:|---:|---:|---:|---|"]
    for mode, rec in recorded.items():
        reqs = _sample(rec, n)
        if not reqs:
            continue
        best: dict[str, tuple[float, int, list[Completion], int]] = {}
        for _ in range(rounds):
            again = fp32_peak()
            if again["flops_per_s"] > peak["flops_per_s"]:
                peak = again
            for lv in ABLATION:
                configure(backend, lv, cache_mb=cache_mb)
                backend.observer = passes = PassCounter()
                try:
                    sec, pos, out = await replay(backend, reqs, batch_size)
                finally:
                    backend.observer = None
                if lv.label not in best or sec < best[lv.label][0]:
                    best[lv.label] = (sec, pos, out, passes.count)
        all_sec, _, all_out, _ = best[ABLATION[0].label]
        for lv in ABLATION:
            sec, pos, out, npass = best[lv.label]
            agree = sum(_same(a, b) for a, b in zip(out, all_out))
            rows.append({"mode": mode, "configuration": lv.label, "seconds": sec, "positions": pos, "passes": npass,
                         "lever_gives": sec / all_sec, "same_answers": agree, "requests": len(reqs)})
            gives = "-" if lv is ABLATION[0] else f"{sec / all_sec:.2f}x"
            lines.append(f"| {mode} | {lv.label} | {sec:.2f} | {pos} | {npass} | {gives} | {agree} of {len(reqs)} |")
    configure(backend, ENGINE, cache_mb=cache_mb)
    return {"rows": rows, "lines": lines, "peak": peak}


class PassCounter(HFObserver):
    """Counts the forward passes of request rows, decode steps and batched prefixes (a lone prefix runs apart)."""

    def __init__(self) -> None:
        self.count = 0

    def forward_pass(self, kind: PassKind, rows: int, columns: int, keep: int) -> None:
        if kind != "prefix":
            self.count += 1


def _same(a: Completion, b: Completion) -> bool:
    if a.choice_logprobs is not None and b.choice_logprobs is not None:
        return all(abs(x - y) <= 1e-4 for x, y in zip(a.choice_logprobs, b.choice_logprobs))
    return a.text == b.text


def peak_fraction(backend: Any, levers: dict[str, Any]) -> float | None:
    """Model FLOPs the backend computed per second with every lever on (label scoring rows), over the fp32 peak
    measured between the same replays (best of each).

    Counted: 2 x parameters of every Linear but the head per position computed,
    plus the head once per request; attention score FLOPs (a few percent at
    these lengths) are left out, so the fraction is slightly understated.
    """
    r = _every_lever_row(levers)
    if r is None:
        return None
    body, head = _linear_layers(backend.model)
    flops = 2.0 * _params(body) * r["positions"] + 2.0 * _params(head) * r["requests"]
    return flops / r["seconds"] / levers["peak"]["flops_per_s"]


def _every_lever_row(levers: dict[str, Any]) -> dict[str, Any] | None:
    """The lever table's label-scoring row with every lever on (None when no replay ran)."""
    rows = [r for r in levers["rows"] if r["mode"] == "engine" and r["configuration"] == LADDER[-1].label]
    return rows[0] if rows else None


def _linear_layers(model: Any) -> tuple[list[Any], list[Any]]:
    """The model's Linear layers: (every one but the output head, the output head)."""
    import torch

    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    return [m for n, m in linears if not n.endswith("lm_head")], [m for n, m in linears if n.endswith("lm_head")]


def _params(layers: list[Any]) -> int:
    return sum(m.weight.numel() for m in layers)


def peak_breakdown(backend: Any, levers: dict[str, Any], rows: int, repeats: int = 3) -> dict[str, Any] | None:
    """The fp32 peak's share at two depths below the backend, on one batch of the engine's shape.

    The batch: ``rows`` rows as long as the positions per request the engine
    computed with every lever on (label scoring). ``linear``: the model's
    Linear layers alone (the kernel); ``forward``: the model's whole forward
    pass (adds norms, rotary embeddings, attention, activations, the
    per-layer Python). The backend end to end is ``peak_fraction``.
    """
    import torch

    r = _every_lever_row(levers)
    if r is None or not r["requests"]:
        return None
    width = max(1, round(r["positions"] / r["requests"]))
    configure(backend, ENGINE)
    model = backend.model
    body, head = _linear_layers(model)
    body_params, head_params = _params(body), _params(head)
    ids = torch.randint(0, int(model.config.vocab_size), (rows, width))
    inputs = {m.in_features: torch.randn(rows * width, m.in_features) for m in body}

    def best(fn) -> float:
        fn()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    with torch.inference_mode():
        linear_s = best(lambda: [m(inputs[m.in_features]) for m in body])
        forward_s = best(lambda: model(input_ids=ids, logits_to_keep=1))
    peak = levers["peak"]["flops_per_s"]
    return {"rows": rows, "width": width,
            "linear": 2.0 * body_params * rows * width / linear_s / peak,
            "forward": (2.0 * body_params * rows * width + 2.0 * head_params * rows) / forward_s / peak}


async def bf16_agreement(model_name: str, fp32: Any, recorded: dict[str, Recorder], n: int, batch_size: int) -> dict[str, Any]:
    """How often bfloat16 gives fp32's label / text on recorded requests, and how much faster it is."""
    from promptrobust.engine.serving.backends.hf import HFOptions, embedded_backend

    bf16 = embedded_backend(model_name, HFOptions(batch_size=batch_size, dtype="bfloat16"))
    await bf16.start()
    result: dict[str, Any] = {"lines": ["| mode | requests | same answer | fp32 seconds | bf16 seconds | bf16 speed |",
                                        "|---|---:|---:|---:|---:|---:|"]}
    try:
        for mode, rec in recorded.items():
            reqs = _sample(rec, n)
            if not reqs:
                continue
            configure(fp32, ENGINE)
            t32, _, out32 = await replay(fp32, reqs, batch_size)
            t16, _, out16 = await replay(bf16, reqs, batch_size)
            if mode == "engine":
                same = sum(max(range(len(a.choice_logprobs)), key=a.choice_logprobs.__getitem__)
                           == max(range(len(b.choice_logprobs)), key=b.choice_logprobs.__getitem__)
                           for a, b in zip(out32, out16))
            else:
                same = sum(a.text == b.text for a, b in zip(out32, out16))
            result[mode] = {"requests": len(reqs), "same": same, "fp32_seconds": t32, "bf16_seconds": t16}
            result["lines"].append(f"| {mode} | {len(reqs)} | {same} | {t32:.2f} | {t16:.2f} | {t32 / t16:.2f}x |")
    finally:
        await bf16.close()
    return result
