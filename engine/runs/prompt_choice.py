"""Which prompts a run scores: a literal instruction, stored prompt ids, promptbench's own
prompts from a checkout, or a stored prompt set. Bad ids and prompts holding promptbench's
``{content}`` placeholder fail here, before any model loads."""

from __future__ import annotations

from promptrobust.tasks.base import Prompt, Task
from promptrobust.tasks.errors import TaskError
from promptrobust.tasks.placeholders import check_no_content_placeholder
from promptrobust.tasks.base import PROMPT_TYPES as TASK_PROMPT_TYPES
from promptrobust.tasks.prompt_sets import get_prompt, load_prompts
from promptrobust.tasks.own import resolve_task
from promptrobust.tasks.promptbench_import import load_promptbench_prompts

__all__ = ["PROMPT_TYPES", "choose_prompts", "prompt_set"]

#: Prompt sets a run may score ('all' = task + role, the paper's two attacked sets).
PROMPT_TYPES = (*TASK_PROMPT_TYPES, "all")


def choose_prompts(task: Task | str, *, prompt_ids: str | None = None, prompt_type: str = "task",
                   text: str | None = None, promptbench: str | None = None, shots: int = 0) -> list[Prompt]:
    """The prompts to score, first match wins: ``text`` (one prompt, id "custom"), ``promptbench``
    (a checkout; ``shots`` picks its zero- or few-shot file), ``prompt_ids`` (comma-separated),
    else the stored set of ``prompt_type`` ('all' = task + role). ``task``: a task value, a dataset
    name or a task file; a user's own task serves its own prompts."""
    task = resolve_task(task)
    prompts = _choose(task, prompt_ids, prompt_type, text, promptbench, shots)
    check_no_content_placeholder((p.id, p.text) for p in prompts)
    return prompts


def _choose(task: Task, prompt_ids: str | None, prompt_type: str, text: str | None,
            promptbench: str | None, shots: int) -> list[Prompt]:
    if text:
        return [Prompt(id="custom", dataset=task.name, type="task", text=text)]
    if promptbench:
        types = ["task", "role"] if prompt_type == "all" else [prompt_type]
        return list(load_promptbench_prompts(promptbench, task.name, types=types, shot="few" if shots else "zero"))
    if prompt_ids:
        return [get_prompt(task, pid.strip()) for pid in prompt_ids.split(",") if pid.strip()]
    return prompt_set(task, prompt_type)


def prompt_set(task: Task, prompt_type: str) -> list[Prompt]:
    """The task's prompts of one type ('task', 'role', 'semantic', or 'all' = task + role): a
    built-in dataset's stored set, a user's task's own."""
    types = ["task", "role"] if prompt_type == "all" else [prompt_type]
    prompts = load_prompts(task, types=types)
    if not prompts:
        what, where = ("dataset", f"--dataset {task.name}") if task.own_prompts() is None else ("task", "--task FILE")
        raise TaskError(f"{what} {task.name} has no {prompt_type} prompts; see `pre list prompts {where}`", setting="prompt_type")
    return prompts
