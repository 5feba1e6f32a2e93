"""What a sweep cannot do on this machine, said before it runs (a dry run, and at the start of a run).

Each check is cheap and local (no model loads, no network): an embedded model's
package, an API key, the `datasets` package for hub data, and BertAttack's masked
LM in the local Hugging Face cache. A ``Blocker`` names the jobs it stops and why;
a ``Note`` is something that will run, but not as the paper ran it (a fallback).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from dataclasses import dataclass

from promptrobust.attacks.embeddings import textattack_cache_dir
from promptrobust.engine.runs.catalog import is_offline
from promptrobust.engine.runs.sweep.config import Job, SweepConfig
from promptrobust.engine.serving.backends.base import BackendError
from promptrobust.engine.serving.model_store import EMBEDDED_MODELS, ModelStoreError
from promptrobust.engine.serving.registry import build_backend, parse_model_args, resolve_model
from promptrobust.tasks.registry import get_task


@dataclass(frozen=True)
class Finding:
    subject: str  # "model gemma3-270m", "dataset sst2", "attack bertattack"
    reason: str
    kind: str  # BLOCKED: its jobs fail here; NETWORK: they fail without the network; SUBSTITUTE: they run with a fallback

    @property
    def blocks(self) -> bool:
        return self.kind == BLOCKED


BLOCKED, NETWORK, SUBSTITUTE = "blocked", "needs the network", "substitute"


def _model(name: str, model_args: str = "") -> Finding | None:
    """``model_args``: the sweep's ``[models."NAME"]`` arguments (a base_url needs no API key)."""
    spec = resolve_model(name, parse_model_args(model_args))
    if spec.embedded:
        try:
            EMBEDDED_MODELS[spec.model].parts()
        except ModelStoreError as exc:
            return Finding(f"model {name}", str(exc), BLOCKED)
        return None
    if spec.backend == "openai":
        try:
            build_backend(spec)  # reads the key; sends nothing
        except BackendError as exc:
            return Finding(f"model {name}", str(exc), BLOCKED)
        return None
    if spec.backend == "vllm" and importlib.util.find_spec("vllm") is None:
        return Finding(f"model {name}", "vllm is not installed: pip install 'promptrobust[vllm]'", BLOCKED)
    return None


def _dataset(name: str) -> Finding | None:
    if is_offline(get_task(name)) or importlib.util.find_spec("datasets") is not None:
        return None
    return Finding(f"dataset {name}", "comes from the Hugging Face hub and the `datasets` package is not installed: "
                   "pip install 'promptrobust[hub]' (and be online once)", BLOCKED)


def masked_lm_cached(model_id: str = "bert-base-uncased") -> bool:
    """Whether BertAttack's masked LM loads without the network (a folder, or the local HF cache)."""
    if os.path.isdir(model_id):
        return True
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    found = try_to_load_from_cache(model_id, "config.json")
    return isinstance(found, str)


def _attack(name: str) -> Finding | None:
    if name == "bertattack" and not masked_lm_cached():
        offline = os.environ.get("HF_HUB_OFFLINE", "").strip() in ("1", "true", "yes")
        how = "offline (HF_HUB_OFFLINE is set) it cannot be downloaded" if offline else "it is downloaded on first use, which needs the network"
        return Finding(
            "attack bertattack",
            f"needs the masked LM bert-base-uncased, which is not in the local Hugging Face cache; {how}. "
            "A sweep takes no attack options: run it online once, or use "
            "`pre run --attack bertattack --attack-option mlm=PATH` with a local copy",
            BLOCKED if offline else NETWORK,
        )
    if name in ("textfooler", "textbugger"):
        if not (textattack_cache_dir() / "word_embeddings" / "paragramcf" / "paragram.npy").exists():
            return Finding(f"attack {name}", "TextAttack's counter-fitted vectors are not cached: offline it falls "
                           "back to GloVe 6B 50d (recorded; run once online to download paragramcf)", SUBSTITUTE)
    return None


def findings(cfg: SweepConfig) -> list[Finding]:
    """Every blocker and note for the sweep's models, datasets and attacks."""
    out: list[Finding] = []
    for name in cfg.models:
        found = _model(name, str(cfg.model_options.get(name, {}).get("model_args", "")))
        if found:
            out.append(found)
    for name in cfg.datasets:
        found = _dataset(name)
        if found:
            out.append(found)
    for name in cfg.attacks:
        found = _attack(name)
        if found:
            out.append(found)
    return out


def blocked_jobs(jobs: Sequence[Job], found: Sequence[Finding], kinds: tuple[str, ...] = (BLOCKED,)) -> list[Job]:
    """The jobs the findings of ``kinds`` stop."""
    subjects = {f.subject for f in found if f.kind in kinds}
    return [j for j in jobs if {f"model {j.model}", f"dataset {j.dataset}", f"attack {j.attack}"} & subjects]


def finding_lines(jobs: Sequence[Job], found: Sequence[Finding]) -> list[str]:
    """The findings under three headings, each with how many of ``jobs`` they concern."""
    headings = {
        BLOCKED: "cannot run here ({n} of {total} jobs would fail):",
        NETWORK: "needs the network ({n} of {total} jobs fail offline):",
        SUBSTITUTE: "runs here with a substitute, said in every record ({n} of {total} jobs):",
    }
    lines = []
    for kind, heading in headings.items():
        these = [f for f in found if f.kind == kind]
        if these:
            lines.append(heading.format(n=len(blocked_jobs(jobs, found, (kind,))), total=len(jobs)))
            lines += [f"  {f.subject}: {f.reason}" for f in these]
    return lines
