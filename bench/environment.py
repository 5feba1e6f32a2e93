"""What a benchmark ran on: machine, versions and commit, for its Markdown and JSON.

Versions come from package metadata (``importlib.metadata``), so describing
the environment never imports torch or vLLM.
"""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

_PACKAGES = ("promptrobust", "torch", "transformers", "vllm", "openai", "httpx")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _memory_gib() -> float | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return None


def _gpu() -> str | None:
    """The first GPU's name from nvidia-smi, without importing torch."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0] if out else None


def _commit() -> str | None:
    try:
        root = Path(__file__).resolve().parents[2]
        return subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10, check=True).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def describe() -> dict[str, Any]:
    """Machine, OS, Python, installed versions of the packages that matter, git commit."""
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    memory = _memory_gib()
    return {
        "arch": platform.machine(),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "memory_gib": round(memory, 1) if memory else None,
        "gpu": _gpu(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "versions": versions,
        "commit": _commit(),
    }


def describe_line(env: dict[str, Any] | None = None) -> str:
    """One Markdown line: ``Machine: ...; versions ...; commit ...``."""
    env = env or describe()
    parts = [f"{env['arch']}, {env['cpu']}, {env['cpus']} CPUs"]
    if env.get("memory_gib"):
        parts.append(f"{env['memory_gib']:g} GiB RAM")
    parts.append(env.get("gpu") or "no GPU")
    versions = ", ".join(f"{k} {v}" for k, v in env["versions"].items())
    line = f"Machine: {'; '.join(parts)}; {env['os']}; Python {env['python']}; {versions}"
    if env.get("commit"):
        line += f"; commit {env['commit']}"
    return line + "."
