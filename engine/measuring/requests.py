"""How a prompt and a sample become a model Request, in one place.

The evaluator, the reference loop, the benchmarks and the attention analysis
all need the same rendering: the task's text, wrapped as a chat turn for
instruction-tuned models or left as completion text for base models, and, for
label scoring, the verbalisers written the way they continue that input.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from promptrobust.engine.serving.types import ChatMessage, Decoding, Request
from promptrobust.tasks.base import Sample, Task

Mode = Literal["choices", "generate"]


def answer_continuation(word: str, chat: bool) -> str:
    """A label word as the model would write it next: bare after a chat
    template's assistant header, with a leading space after a completion cue
    such as "Answer:"."""
    return word if chat else " " + word


#: Label scoring never decodes, but its requests carry a ``Decoding`` that is part of
#: the cache key. It is frozen at the values the label tasks had in release 0.1 so
#: every cache written since then stays valid while generate mode follows the paper
#: (20 new tokens, EOS only); tests/test_architecture.py holds a 0.1 cache fixture.
CHOICE_KEY_MAX_TOKENS = {
    "sst2": 3, "cola": 4, "qqp": 6, "mrpc": 6, "mnli": 4, "qnli": 6, "rte": 6, "wnli": 6, "mmlu": 3,
    "rotten_tomatoes": 3,
}
CHOICE_KEY_STOP = ("\n",)


def choice_decoding(task: Task) -> Decoding:
    """The (inert) decoding of a label-scoring request: stable key material."""
    return Decoding(max_tokens=CHOICE_KEY_MAX_TOKENS.get(task.name, 8), stop=CHOICE_KEY_STOP)


class RequestBuilder:
    """Requests for one task, one input format (chat or completion) and one mode."""

    def __init__(
        self,
        task: Task,
        *,
        mode: Mode,
        chat: bool,
        examples: Sequence[Sample] = (),
        max_tokens: int | None = None,
        stop: Sequence[str] | None = None,
        system_instruction: str | None = None,
    ) -> None:
        self.task = task
        self.system_instruction = system_instruction
        self.mode: Mode = mode
        self.chat = chat
        self.examples = list(examples)
        if mode == "choices":
            self.decoding = choice_decoding(task)
        else:
            self.decoding = Decoding(max_tokens=max_tokens or task.max_tokens, stop=tuple(task.stop if stop is None else stop))
        words = task.choices() if mode == "choices" else ()
        self.choices = tuple(answer_continuation(w, chat) for w in words)

    def render(self, prompt: str, sample: Sample) -> str:
        """The input text (for completion models after the system instruction, if any)."""
        text = self.task.render(prompt, sample, self.examples)
        if self.system_instruction and not self.chat:
            return f"{self.system_instruction}\n\n{text}"
        return text

    def build(self, prompt: str, sample: Sample) -> Request:
        text = self.render(prompt, sample)
        if self.chat:
            system = (ChatMessage("system", self.system_instruction),) if self.system_instruction else ()
            payload: dict[str, Any] = {"messages": (*system, ChatMessage("user", text))}
        else:
            payload = {"prompt": text}
        # A user's own task keys its answers by its definition too (empty for the built-in tasks).
        namespace = self.task.cache_namespace
        if self.mode == "choices":
            return Request(kind="score_choices", choices=self.choices, decoding=self.decoding, namespace=namespace, **payload)
        return Request(kind="generate", decoding=self.decoding, namespace=namespace, **payload)
