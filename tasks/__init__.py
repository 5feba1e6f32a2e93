"""Datasets, prompts, answer parsing and metrics of the PromptRobust benchmark.

Entry points: ``get_task``/``list_tasks``/``task_info`` (tasks.registry),
``load_prompts``/``get_prompt`` (tasks.prompt_sets) and
``few_shot_examples`` (tasks.fewshot); a user's own task: ``load_task_file``,
``task_from_columns``, ``resolve_task`` (tasks.own).
"""

from promptrobust.tasks.fewshot import few_shot_examples
from promptrobust.tasks.own import TaskDefinition, load_task_file, resolve_task, task_from_columns
from promptrobust.tasks.prompt_sets import get_prompt, load_prompts
from promptrobust.tasks.registry import get_task, list_tasks, task_info

__all__ = ["TaskDefinition", "few_shot_examples", "get_prompt", "get_task", "list_tasks", "load_prompts",
           "load_task_file", "resolve_task", "task_from_columns", "task_info"]
