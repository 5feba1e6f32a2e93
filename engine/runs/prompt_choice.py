"""Which prompts a run scores: a literal instruction, stored prompt ids, promptbench's own
prompts from a checkout, or a stored prompt set. Bad ids and prompts holding promptbench's
``{content}`` placeholder fail here, before any model loads."""

from __future__ import annotations

from promptrobust.engine.runs.session import prompt_set
from promptrobust.tasks.base import Prompt
from promptrobust.tasks.placeholders import check_no_content_placeholder
from promptrobust.tasks.prompt_sets import get_prompt
from promptrobust.tasks.promptbench_import import load_promptbench_prompts
from promptrobust.tasks.registry import get_task

__all__ = ["choose_prompts"]


def choose_prompts(task_name: str, *, prompt_ids: str | None = None, prompt_type: str = "task",
                   text: str | None = None, promptbench: str | None = None, shots: int = 0) -> list[Prompt]:
    """The prompts to score, first match wins: ``text`` (one prompt, id "custom"), ``promptbench``
    (a checkout; ``shots`` picks its zero- or few-shot file), ``prompt_ids`` (comma-separated),
    else the stored set of ``prompt_type`` ('all' = task + role)."""
    prompts = _choose(task_name, prompt_ids, prompt_type, text, promptbench, shots)
    check_no_content_placeholder((p.id, p.text) for p in prompts)
    return prompts


def _choose(task_name: str, prompt_ids: str | None, prompt_type: str, text: str | None,
            promptbench: str | None, shots: int) -> list[Prompt]:
    if text:
        return [Prompt(id="custom", dataset=task_name, type="task", text=text)]
    if promptbench:
        types = ["task", "role"] if prompt_type == "all" else [prompt_type]
        return list(load_promptbench_prompts(promptbench, task_name, types=types, shot="few" if shots else "zero"))
    if prompt_ids:
        return [get_prompt(task_name, pid.strip()) for pid in prompt_ids.split(",") if pid.strip()]
    return prompt_set(get_task(task_name), prompt_type)
