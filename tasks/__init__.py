"""Datasets, prompts, answer parsing and metrics of the PromptRobust benchmark.

Entry points: ``get_task``/``list_tasks``/``task_info`` (tasks.registry),
``load_prompts``/``get_prompt`` (tasks.prompt_sets) and
``few_shot_examples`` (tasks.fewshot).
"""

from promptrobust.tasks.fewshot import few_shot_examples
from promptrobust.tasks.prompt_sets import get_prompt, load_prompts
from promptrobust.tasks.registry import get_task, list_tasks, task_info

__all__ = ["few_shot_examples", "get_prompt", "get_task", "list_tasks", "load_prompts", "task_info"]
