"""The prompt set of a user's label task that brings no prompts of its own: ten
task-oriented and ten role-oriented instructions, as the paper has per dataset.
Written for promptrobust. ``ANSWERS`` stands for the task's answer words
("billing, technical or other"); ids become ``<task name>-<id>``.
"""

from __future__ import annotations

from promptrobust.tasks.base import PromptType

#: What the instructions write where the task's answer words go.
ANSWERS = "ANSWERS"

#: (id, type, text) per instruction.
DEFAULT_PROMPTS: tuple[tuple[str, PromptType, str], ...] = (
    ("task-01", "task", "Classify the input below. Answer with one word: ANSWERS."),
    ("task-02", "task", "Read the input and decide which category it belongs to: ANSWERS. Reply with that word only."),
    ("task-03", "task", "Which of these labels fits the input best: ANSWERS? Answer with the label."),
    ("task-04", "task", "Assign the input to one of the following classes: ANSWERS."),
    ("task-05", "task", "Label the following input as ANSWERS."),
    ("task-06", "task", "Decide whether the input is ANSWERS, and answer with exactly one of these words."),
    ("task-07", "task", "Pick the correct category for the input (ANSWERS) and write only that word."),
    ("task-08", "task", "Categorise the input. Possible answers: ANSWERS."),
    ("task-09", "task", "Given the input, respond with the matching label: ANSWERS."),
    ("task-10", "task", "Determine the class of the input; the answer must be one of ANSWERS."),
    ("role-01", "role", "You are a careful annotator. Label the input as ANSWERS."),
    ("role-02", "role", "As an expert classifier, assign the input to one of these categories: ANSWERS."),
    ("role-03", "role", "You work as a data labeller. Reply with one word, ANSWERS, for the input."),
    ("role-04", "role", "Acting as a reviewer who sorts items by category, answer ANSWERS for the input."),
    ("role-05", "role", "You are an assistant that routes each input to the right category: ANSWERS. Answer with the category."),
    ("role-06", "role", "Imagine you are a domain expert. Which of ANSWERS describes the input? Answer with that word."),
    ("role-07", "role", "As a quality-control specialist, classify the input as ANSWERS."),
    ("role-08", "role", "You are a meticulous analyst. Read the input and answer with one of: ANSWERS."),
    ("role-09", "role", "In the role of a triage officer, decide the input's category (ANSWERS) and reply with it alone."),
    ("role-10", "role", "You are a helpful classification system. Output one label from ANSWERS."),
)
