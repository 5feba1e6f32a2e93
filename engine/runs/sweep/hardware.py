"""What each model of a sweep needs to run, whether this machine has it, and how many of the
sweep's jobs can run here now (``pre sweep --dry-run``).

A model's needs come from its size, read from its name or registry description (``13b``,
``780M``), and the dtype its arguments give: its weights take parameters x bytes, and a run
about a fifth more (activations, the key/value cache), rounded up to whole 80 GB GPUs beyond
one. A model named by an API runs on the provider's servers. This machine is looked at once:
its GPUs (through torch, where installed) and its memory. A model "runs here" when it fits this
machine's largest GPU, or, without one, its memory on the CPU (which the dry run calls slow:
the paper's grid on a CPU is months of work). Time on GPUs is an upper bound from the dry
run's own token counts: 2 x parameters FLOPs per token on an H100 (989 TFLOPS dense BF16) at
40% of its peak, every input token computed (prefix caching, docs/scale.md section 2, makes it
several times less).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache

from promptrobust.engine.runs.sweep.checks import BLOCKED, NETWORK, Finding, blocked_jobs
from promptrobust.engine.runs.sweep.config import Job
from promptrobust.engine.serving.registry import ModelSpec, served_remotely

#: Parameters beyond which a model on a CPU is said to run slowly (the embedded ones run there by design).
SLOW_ON_CPU = 1e9
#: A run takes its weights' memory and about this share more (activations, the key/value cache).
RUN_OVERHEAD = 1.2
#: The GPU size counted in when one is not enough (H100 / A100 80 GB).
BIG_GPU_GB = 80
#: H100 SXM dense BF16 peak, and the share of it a long prefill-bound run reaches (docs/scale.md).
H100_FLOPS = 989e12
MFU = 0.4
_BYTES = {"float32": 4, "float": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2,
          "int8": 1, "8bit": 1, "int4": 0.5, "4bit": 0.5}
#: Hub organisations whose weights are gated: the model's page asks to accept a licence first.
GATED = ("meta-llama/", "google/gemma")
_SIZE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s*([bm])(?![a-z])", re.IGNORECASE)


@dataclass(frozen=True)
class Machine:
    """This machine, as far as running a model goes."""

    gpus: tuple[tuple[str, float], ...]
    """(name, GB of memory) of each GPU torch sees."""
    memory_gb: float
    cpus: int
    note: str = ""
    """Why no GPU could be seen, when none was (torch not installed)."""

    def describe(self) -> str:
        if self.gpus:
            kinds: dict[str, int] = {}
            for name, gb in self.gpus:
                kinds[f"{name} ({gb:.0f} GB)"] = kinds.get(f"{name} ({gb:.0f} GB)", 0) + 1
            gpus = ", ".join(f"{n} x {k}" for k, n in kinds.items())
        else:
            gpus = "no GPU" + (f" ({self.note})" if self.note else "")
        return f"{gpus}, {self.memory_gb:.0f} GB of memory, {self.cpus} CPU cores"


@cache
def this_machine() -> Machine:
    """This machine's GPUs (through torch, where installed) and memory, looked at once."""
    import importlib.util

    gpus: list[tuple[str, float]] = []
    note = ""
    if importlib.util.find_spec("torch") is None:
        note = "torch is not installed to look"
    else:
        try:
            import torch

            for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):
                props = torch.cuda.get_device_properties(i)
                gpus.append((str(props.name), props.total_memory / 1e9))
        except Exception as exc:  # noqa: BLE001 - a broken driver is "no GPU seen", said so
            note = f"torch could not look: {' '.join(str(exc).split())[:80]}"
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (ValueError, OSError, AttributeError):
        memory = 0.0
    return Machine(tuple(gpus), memory, os.cpu_count() or 1, note)


def parameters(spec: ModelSpec) -> float | None:
    """The model's size in parameters, read from its name, id or description (None: not said)."""
    for text in (spec.model, spec.name, spec.description):
        found = _SIZE.findall(text or "")
        if found:
            value, unit = found[-1]
            return float(value) * (1e9 if unit.lower() == "b" else 1e6)
    return None


@dataclass(frozen=True)
class Needs:
    """What one model needs to run, and whether this machine has it."""

    model: str
    api: bool
    parameters: float | None
    dtype: str
    gb: float | None
    """Memory a run takes on a GPU (None: an API model, or a size not known)."""
    gated: bool
    fits: bool | None
    """Runs on this machine (on a GPU, or on its CPU); None: not known (a size not said)."""
    text: str
    here: str

    def gpu_hours(self, tokens: int) -> float | None:
        """H100-hours ``tokens`` take at most (every token computed; ``MFU`` of the peak)."""
        if self.api or self.parameters is None:
            return None
        return 2 * self.parameters * tokens / (H100_FLOPS * MFU) / 3600


def needs(spec: ModelSpec, machine: Machine) -> Needs:
    """What ``spec`` needs and whether ``machine`` has it, in words."""
    remote = served_remotely(spec)
    gated = not remote and spec.model.startswith(GATED)
    if remote:
        return Needs(spec.name, True, None, "", None, False, True, "a server over HTTP (an API): no local hardware",
                     "nothing to hold")
    size = parameters(spec)
    dtype = str(spec.args.get("dtype") or "auto")
    if size is None:
        return Needs(spec.name, False, None, dtype, None, gated, None, "size not known (not in its name)",
                     "cannot say; see the model's card")
    gpu_dtype = "bfloat16" if dtype == "auto" else dtype
    gb = size * _BYTES.get(gpu_dtype, 2) * RUN_OVERHEAD / 1e9
    if gb <= BIG_GPU_GB:
        text = f"~{_gb(gb)} GB of GPU memory in {gpu_dtype}: one GPU of {_gpu_class(gb)} GB or more"
    else:
        count = math.ceil(gb / BIG_GPU_GB)
        text = f"~{_gb(gb)} GB of GPU memory in {gpu_dtype}: {count} x {BIG_GPU_GB} GB GPUs (vllm, tensor_parallel_size={count})"
    largest = max((g for _, g in machine.gpus), default=0.0)
    if largest >= gb:
        return Needs(spec.name, False, size, gpu_dtype, gb, gated, True, text, "fits this machine's GPU")
    if sum(g for _, g in machine.gpus) >= gb:
        return Needs(spec.name, False, size, gpu_dtype, gb, gated, True, text,
                     f"fits across this machine's {len(machine.gpus)} GPUs (vllm, tensor parallel)")
    if machine.gpus:
        return Needs(spec.name, False, size, gpu_dtype, gb, gated, False, text, "more than this machine's GPUs hold")
    cpu_dtype = "float32" if dtype == "auto" else dtype
    cpu_gb = size * _BYTES.get(cpu_dtype, 4) * RUN_OVERHEAD / 1e9
    if machine.memory_gb and cpu_gb <= 0.8 * machine.memory_gb:
        slowly = ", slowly" if size >= SLOW_ON_CPU else ""
        return Needs(spec.name, False, size, gpu_dtype, gb, gated, True, text,
                     f"no GPU here: fits its memory on the CPU (~{_gb(cpu_gb)} GB in {cpu_dtype}){slowly}")
    return Needs(spec.name, False, size, gpu_dtype, gb, gated, False, text,
                 f"does not fit here (no GPU; ~{_gb(cpu_gb)} GB in {cpu_dtype} on the CPU)")


def _hours(hours: float) -> str:
    return "< 1 H100-hour" if hours < 1 else f"<= {hours:,.0f} H100-hours"


def _gb(gb: float) -> str:
    return f"{gb:.1f}" if gb < 10 else f"{gb:.0f}"


def _gpu_class(gb: float) -> int:
    """The usual GPU memory size that holds ``gb``."""
    return next((size for size in (8, 16, 24, 40, 48, 80) if size >= gb), BIG_GPU_GB)


@dataclass(frozen=True)
class HereCount:
    """How many of a sweep's jobs can run on this machine now, and why the others cannot (a job
    may have several reasons)."""

    runnable: int
    total: int
    reasons: dict[str, int]


def runs_here(jobs: Sequence[Job], findings: Sequence[Finding], model_needs: Mapping[str, Needs],
              hub: tuple[bool, str]) -> HereCount:
    """The jobs that can run here now: no blocker, nothing to fetch from a hub that cannot be
    reached now (``hub``: ``tasks.hf_data.hub_reachable``), and a model this machine can hold."""
    kinds = (BLOCKED,) if hub[0] else (BLOCKED, NETWORK)
    stopped: dict[str, set[str]] = {}
    for f in findings:
        if f.kind in kinds:
            reason = ("something to fetch, and the Hugging Face hub " + hub[1]) if f.kind == NETWORK else \
                "blocked (the list above says why)"
            for job in blocked_jobs(jobs, [f], (f.kind,)):
                stopped.setdefault(job.id, set()).add(reason)
    for job in jobs:
        need = model_needs.get(job.model)
        if need is not None and need.fits is False:
            stopped.setdefault(job.id, set()).add("a model bigger than this machine holds (hardware above)")
    reasons: dict[str, int] = {}
    for why in stopped.values():
        for reason in why:
            reasons[reason] = reasons.get(reason, 0) + 1
    return HereCount(len(jobs) - len(stopped), len(jobs), reasons)


def hardware_lines(specs: Mapping[str, ModelSpec], tokens: Mapping[str, int], machine: Machine) -> tuple[list[str], dict[str, Needs]]:
    """The dry run's hardware section: per model its size, what it needs, whether this machine
    has it, and its H100-hours at most for ``tokens`` (input and output tokens of its jobs)."""
    found = {name: needs(spec, machine) for name, spec in specs.items()}
    width = max([len(n) for n in found] + [5])
    lines = [f"hardware (this machine: {machine.describe()}):"]
    total_hours = 0.0
    for name, need in found.items():
        size = "" if need.parameters is None else f"{need.parameters / 1e9:g}B" if need.parameters >= 1e9 else f"{need.parameters / 1e6:g}M"
        hours = need.gpu_hours(tokens.get(name, 0))
        total_hours += hours or 0.0
        spent = "" if hours is None else f"; {_hours(hours)}"
        gate = "; gated weights: accept the licence on the model's hub page and set HF_TOKEN" if need.gated else ""
        lines.append(f"  {name:<{width}}  {size:>5}  {need.text}; here: {need.here}{spent}{gate}")
    if total_hours:
        lines.append(f"  GPU time: {_hours(total_hours)} in all (every input token computed, {MFU:.0%} of the peak); "
                     "with prefix caching several times less: docs/scale.md section 2")
    return lines, found
