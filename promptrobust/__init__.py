"""promptrobust: how robust is a large language model to adversarial prompts?

The public Python API, loaded lazily (importing ``promptrobust`` loads no
model, no torch and no dataset)::

    import promptrobust as pr

    result = pr.evaluate(dataset="rotten_tomatoes", limit=100)
    print(result.table())

    plan = pr.build_plan("gemma3-270m", ["rotten_tomatoes"], evaluation=pr.EvaluationSettings(limit=100, mode="choices"),
                         attacks=pr.attack_settings("stresstest", top_k=1))
    outcome = pr.run_plan(plan)          # what `pre run --limit 100 --mode choices --attack stresstest --top-k 1` does

The folders of the repository install as ``promptrobust.engine`` (serving core
and orchestration), ``promptrobust.tasks``, ``promptrobust.attacks`` and
``promptrobust.cli``; ``promptrobust.testing`` holds public test doubles.
"""

from __future__ import annotations

import importlib
import os
from importlib import metadata as _metadata
from typing import TYPE_CHECKING, Any

try:  # one source of the version: pyproject.toml, read back from the installed metadata
    __version__ = _metadata.version("promptrobust")
except _metadata.PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0+unknown"

# Process-wide defaults, set once here because every module of the package is
# imported through this one. torch's OpenMP threads spin-wait by default; on a
# shared or small CPU that makes a forward pass many times slower. It must be
# set before torch is imported; a value the user exported wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Third-party progress bars (transformers' "Loading weights", hub downloads) would break our
# one progress line and ignore --no-progress; pre reports its own phases (engine/progress.py).
# Read by huggingface_hub and transformers when they are imported; a value the user exported wins.
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

#: public name -> module that defines it (``module:attribute`` where the names differ)
_EXPORTS: dict[str, str] = {
    "Session": "promptrobust.engine.runs.session",
    "SchedulerSettings": "promptrobust.engine.serving.scheduler_settings",
    "EvaluationSettings": "promptrobust.engine.measuring.settings",
    "AttackSettings": "promptrobust.engine.measuring.settings",
    "EvaluationResult": "promptrobust.engine.runs.session",
    "CleanScore": "promptrobust.engine.measuring.workbench",
    "MeasurementSettings": "promptrobust.engine.measuring.settings",
    "AttackRecord": "promptrobust.engine.measuring.records",
    "ProtocolResult": "promptrobust.engine.measuring.protocol",
    "Workbench": "promptrobust.engine.measuring.workbench",
    "PromptEvalResult": "promptrobust.engine.analysis.prompt_eval",
    "TransferResult": "promptrobust.engine.analysis.transfer",
    "DefenseResult": "promptrobust.engine.analysis.defense",
    "SweepProgress": "promptrobust.engine.runs.sweep.runner",
    "Report": "promptrobust.engine.analysis.report",
    "evaluate": "promptrobust.engine.runs.api",
    "attack": "promptrobust.engine.runs.api",
    "attack_top_k": "promptrobust.engine.runs.api",
    "sweep": "promptrobust.engine.runs.api",
    "report": "promptrobust.engine.analysis.report:build_report",
    "run_sync": "promptrobust.engine.runs.sync",
    # Any command, as the CLI runs it: a plan (decided, nothing run), then the one executor.
    "build_plan": "promptrobust.engine.runs.plan",
    "attack_settings": "promptrobust.engine.runs.plan",
    "PromptChoice": "promptrobust.engine.runs.plan",
    "OutputOptions": "promptrobust.engine.runs.executor",
    "RunPlan": "promptrobust.engine.runs.execute",
    "run_plan": "promptrobust.engine.runs.executor",
    "execute": "promptrobust.engine.runs.executor",
    "plan_eval": "promptrobust.engine.analysis.commands",
    "plan_transfer": "promptrobust.engine.analysis.commands",
    "plan_defense": "promptrobust.engine.analysis.commands",
    "plan_attention": "promptrobust.engine.analysis.commands",
    "plan_sweep": "promptrobust.engine.runs.sweep.plan",
}

# Written out (not derived from _EXPORTS) so static tools read it; tests/test_architecture.py checks they agree.
__all__ = [
    "__version__", "AttackRecord", "AttackSettings", "CleanScore", "DefenseResult", "EvaluationResult",
    "EvaluationSettings", "MeasurementSettings", "PromptEvalResult", "ProtocolResult", "Report", "SchedulerSettings",
    "Session", "SweepProgress", "TransferResult", "Workbench", "attack", "attack_top_k", "evaluate", "report",
    "run_sync", "sweep",
    "OutputOptions", "PromptChoice", "RunPlan", "attack_settings", "build_plan", "execute", "plan_attention", "plan_defense",
    "plan_eval", "plan_sweep", "plan_transfer", "run_plan",
]

if TYPE_CHECKING:  # the same names, for type checkers and IDEs (``__getattr__`` loads them at run time)
    from promptrobust.engine.analysis.defense import DefenseResult
    from promptrobust.engine.analysis.prompt_eval import PromptEvalResult
    from promptrobust.engine.analysis.report import Report, build_report as report
    from promptrobust.engine.analysis.transfer import TransferResult
    from promptrobust.engine.measuring.protocol import ProtocolResult
    from promptrobust.engine.measuring.records import AttackRecord
    from promptrobust.engine.measuring.settings import AttackSettings, EvaluationSettings, MeasurementSettings
    from promptrobust.engine.measuring.workbench import CleanScore, Workbench
    from promptrobust.engine.runs.api import attack, attack_top_k, evaluate, sweep
    from promptrobust.engine.runs.session import EvaluationResult, Session
    from promptrobust.engine.runs.sweep.runner import SweepProgress
    from promptrobust.engine.analysis.commands import plan_attention, plan_defense, plan_eval, plan_transfer
    from promptrobust.engine.runs.execute import RunPlan
    from promptrobust.engine.runs.executor import OutputOptions, execute, run_plan
    from promptrobust.engine.runs.plan import PromptChoice, attack_settings, build_plan
    from promptrobust.engine.runs.sweep.plan import plan_sweep
    from promptrobust.engine.runs.sync import run_sync
    from promptrobust.engine.serving.scheduler_settings import SchedulerSettings


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'promptrobust' has no attribute {name!r}")
    module, _, attribute = module.partition(":")  # "module:attribute" where the names differ
    value = getattr(importlib.import_module(module), attribute or name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
