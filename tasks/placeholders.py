"""promptbench's ``{content}`` placeholder in a prompt: refused in one line.

promptbench's package prompts end in ``Question: {content} Answer:`` and its
evaluation puts the sample where ``{content}`` stands. pre lays out the sample
itself, after the instruction (``Task.render``), so the importer drops that
tail (``promptbench_import.normalize_prompt_text``). A ``{content}`` anywhere
else, in an imported or a user's prompt, would be sent to the model literally
(the sample appearing once more after it): such prompts are refused before
any model loads, with the fix in the message.
"""

from __future__ import annotations

from collections.abc import Iterable

from promptrobust.tasks.errors import TaskError

PLACEHOLDER = "{content}"


class PlaceholderError(TaskError):
    """A prompt holds promptbench's ``{content}`` placeholder."""


def check_no_content_placeholder(prompts: Iterable[tuple[str, str | None]]) -> None:
    """Raise ``PlaceholderError`` for the first (name, text) whose text holds ``{content}``."""
    for name, text in prompts:
        if text and PLACEHOLDER in text:
            raise PlaceholderError(
                f"prompt {name} holds promptbench's {PLACEHOLDER} placeholder; pre places the sample after the "
                f"instruction itself: remove {PLACEHOLDER} (and a 'Question: ... Answer:' frame around it) from the prompt"
            )
