"""What a sweep cannot do on this machine, said before it runs (a dry run, and at the start of a run).

Each check is cheap and local (no model loads, no network): an embedded model's
package, an API key, the `datasets` package for hub data, and whether what comes
from the Hugging Face hub (a model's weights, a dataset, BertAttack's masked LM) is
in the local Hugging Face cache already: if not, it needs the network on first
use, and with ``HF_HUB_OFFLINE`` (or ``HF_DATASETS_OFFLINE`` for data) set it
cannot be had here at all. A ``Finding`` names the jobs it concerns and why.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from promptrobust.attacks.embeddings import PARAGRAMCF_NAME, textattack_cache_dir
from promptrobust.attacks.registry import recipe_of
from promptrobust.engine.runs.catalog import is_offline
from promptrobust.engine.runs.sweep.config import Job, SweepConfig
from promptrobust.engine.serving.backends.base import BackendError
from promptrobust.engine.serving.model_store import EMBEDDED_MODELS, ModelStoreError
from promptrobust.engine.serving.registry import (
    ModelArgsError,
    check_available,
    check_values,
    parse_model_args,
    registration_of,
    resolve_model,
)
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


_TRUE = ("1", "true", "yes", "on")


def hub_offline(*names: str) -> bool:
    """Whether the Hugging Face hub is switched off (``HF_HUB_OFFLINE``, or one of ``names``)."""
    return any(os.environ.get(n, "").strip().lower() in _TRUE for n in ("HF_HUB_OFFLINE", *names))


def _hf_home() -> Path:
    return Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface").expanduser()


def _hub_cache() -> Path:
    """Where huggingface_hub keeps downloads, read from the environment now (its own constant is read once, at import)."""
    return Path(os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE") or _hf_home() / "hub").expanduser()


def hub_model_cached(repo: str) -> bool:
    """Whether a hub model loads without the network: a local folder, or a snapshot with its config in the local cache."""
    if os.path.isdir(repo):
        return True
    snapshots = _hub_cache() / f"models--{repo.replace('/', '--')}" / "snapshots"
    return snapshots.is_dir() and any(snapshots.glob("*/config.json"))


def hub_dataset_cached(repo: str) -> bool:
    """Whether a hub dataset was downloaded here before: in the `datasets` cache (prepared) or the hub's."""
    prepared = Path(os.environ.get("HF_DATASETS_CACHE") or _hf_home() / "datasets").expanduser() / repo.replace("/", "___")
    downloaded = _hub_cache() / f"datasets--{repo.replace('/', '--')}" / "snapshots"
    return prepared.is_dir() or (downloaded.is_dir() and any(downloaded.iterdir()))


def _from_the_hub(what: str, fix: str, *offline_names: str) -> tuple[str, str]:
    """(reason, kind) of something the hub has and this machine's cache does not."""
    if hub_offline(*offline_names):
        return (f"{what} not in the local Hugging Face cache, and the hub is switched off here "
                f"({' or '.join(('HF_HUB_OFFLINE', *offline_names))}): cannot be downloaded; {fix}"), BLOCKED
    return f"{what} not in the local Hugging Face cache: downloaded on first use, which needs the network; {fix}", NETWORK


def _model(name: str, model_args: str = "") -> Finding | None:
    """What stops ``name`` here, resolved with the model arguments its sweep gives it (a base_url
    to local servers needs no API key; bad arguments are said as a blocker too)."""
    try:
        spec = resolve_model(name, parse_model_args(model_args))
        check_values(spec)
    except ModelArgsError as exc:
        return Finding(f"model {name}", str(exc), BLOCKED)
    if spec.embedded:
        try:
            EMBEDDED_MODELS[spec.model].parts()
        except ModelStoreError as exc:
            return Finding(f"model {name}", str(exc), BLOCKED)
        return None
    try:
        check_available(spec)  # the backend's extra; its own check (an API model's key is read, nothing sent)
    except (BackendError, ModelArgsError) as exc:
        return Finding(f"model {name}", str(exc), BLOCKED)
    if registration_of(spec).weights_from_hub and not hub_model_cached(spec.model):
        reason, kind = _from_the_hub("weights", "run once online, or give a local folder as the model")
        return Finding(f"model {name}", reason, kind)
    return None


def _dataset(name: str, cfg: SweepConfig) -> Finding | None:
    task = get_task(name)
    if is_offline(task) or cfg.evaluation.data_dir or cfg.evaluation.data_file:
        return None
    if importlib.util.find_spec("datasets") is None:
        return Finding(f"dataset {name}", "comes from the Hugging Face hub and the `datasets` package is not installed: "
                       "pip install 'promptrobust[hub]' (and be online once)", BLOCKED)
    source = getattr(task, "source", None)
    repos = dict.fromkeys(split.path for split in getattr(source, "hf_eval", ()))
    if all(hub_dataset_cached(repo) for repo in repos):
        return None
    reason, kind = _from_the_hub("data", "run once online, or give local files (the sweep's data_dir)",
                                 "HF_DATASETS_OFFLINE")
    return Finding(f"dataset {name}", reason, kind)


def masked_lm_cached(model_id: str = "bert-base-uncased") -> bool:
    """Whether BertAttack's masked LM loads without the network (a folder, or the local HF cache)."""
    return hub_model_cached(model_id)


def _attack(name: str) -> Finding | None:
    recipe = recipe_of(name)
    masked_lm = recipe.resource("masked LM")
    if masked_lm is not None and not masked_lm_cached(masked_lm):
        offline = hub_offline()
        how = "offline (HF_HUB_OFFLINE is set) it cannot be downloaded" if offline else "it is downloaded on first use, which needs the network"
        return Finding(
            f"attack {recipe.name}",
            f"needs the masked LM {masked_lm}, which is not in the local Hugging Face cache; {how}. "
            "A sweep takes no attack options: run it online once, or use "
            f"`pre run --attack {recipe.name} --attack-option mlm=PATH` with a local copy",
            BLOCKED if offline else NETWORK,
        )
    if recipe.resource("word vectors") == PARAGRAMCF_NAME:
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
        found = _dataset(name, cfg)
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
    """The findings under three headings, each with how many of ``jobs`` they concern; subjects of
    one sort with the same reason share a line ("models a, b: ...")."""
    headings = {
        BLOCKED: "cannot run here ({n} of {total} jobs would fail):",
        NETWORK: "needs the network ({n} of {total} jobs fail offline):",
        SUBSTITUTE: "runs here with a substitute, said in every record ({n} of {total} jobs):",
    }
    lines = []
    for kind, heading in headings.items():
        these = [f for f in found if f.kind == kind]
        if not these:
            continue
        lines.append(heading.format(n=len(blocked_jobs(jobs, found, (kind,))), total=len(jobs)))
        grouped: dict[tuple[str, str], list[str]] = {}
        for f in these:
            sort, _, name = f.subject.partition(" ")
            grouped.setdefault((sort, f.reason), []).append(name)
        for (sort, reason), names in grouped.items():
            lines.append(f"  {sort}{'s' if len(names) > 1 else ''} {', '.join(names)}: {reason}")
    return lines
