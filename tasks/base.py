"""What a task is: samples, how a prompt and a sample become model input,
how an answer is read, and how it is scored.

The engine and the attacks use tasks only through this module's types, so a
new dataset is a new ``Task`` and nothing else changes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

# "given": a prompt a caller passed in to be scored (pre eval, score_prompts), from no prompt set.
PromptType = Literal["task", "role", "semantic", "given"]
#: The type of the prompts written as speakers of other languages phrase English, each with its
#: language: the Semantic attack's candidates. This module owns the prompt types; the one
#: prompt type that shares its word with an attack's name is written here only
#: (tests/test_attack_names.py).
SEMANTIC_PROMPTS: PromptType = "semantic"
#: The paper's prompt sets: task-oriented, role-oriented and the semantic prompts.
PROMPT_TYPES: tuple[PromptType, ...] = ("task", "role", SEMANTIC_PROMPTS)
Shot = Literal["zero", "few"]
ParserName = Literal["last_word", "robust"]
#: The most new tokens a task or a command may ask a model for (the paper's answers are 20; a
#: translation a few hundred): a larger number is a mistake, not an answer length.
MAX_NEW_TOKENS = 32_768


@dataclass(frozen=True)
class Sample:
    """One dataset item. ``fields`` are the input fields by name (e.g.
    ``{"sentence": ...}`` or ``{"question": ..., "context": ...}``); ``target``
    is what the metric compares against (a label string, a list of reference
    answers, a reference translation, a number as a string...)."""

    id: str
    fields: Mapping[str, str]
    target: Any


@dataclass(frozen=True)
class Prompt:
    """An instruction that is combined with every sample of a dataset."""

    id: str
    dataset: str
    type: PromptType
    text: str
    language: str = "en"


class Metric(ABC):
    """A score on the 0..1 scale (higher is better).

    ``decomposable`` metrics are the mean of per-sample scores in [0, 1]
    (accuracy, F1, exact match). Only those allow exact early stopping,
    because a partial sum bounds the final score. Corpus BLEU is not.
    """

    name: str = ""
    decomposable: bool = True

    @abstractmethod
    def sample_score(self, prediction: object, sample: Sample) -> float:
        """Score of one prediction (None = unparseable answer) in [0, 1]."""

    def corpus_score(self, predictions: Sequence[object], samples: Sequence[Sample]) -> float:
        if not samples:
            return 0.0
        return sum(self.sample_score(p, s) for p, s in zip(predictions, samples)) / len(samples)

    def sample_scores(self, predictions: Sequence[object], samples: Sequence[Sample]) -> list[float]:
        """The per-sample scores intervals and paired tests resample. For a
        decomposable metric these are ``sample_score``; a corpus metric may
        return contributions whose mean is its ``corpus_score`` (macro-F1)."""
        return [float(self.sample_score(p, s)) for p, s in zip(predictions, samples)]

    def majority_score(self, targets: Sequence[object]) -> float | None:
        """The score of always answering the most frequent target, where it is not
        the majority rate (accuracy's chance level); None: the majority rate."""
        return None


@dataclass
class Task(ABC):
    """A dataset plus everything needed to query a model on it and score it."""

    name: str
    #: Canonical label strings; empty for open-ended generation tasks.
    labels: tuple[str, ...] = ()
    #: label -> the word the model is asked to answer with (used for label scoring).
    verbalizers: Mapping[str, str] = field(default_factory=dict)
    #: Words no attack may modify beyond the labels and verbalisers (which the
    #: engine adds): promptbench's few task words ("translate", "math",
    #: "unanswerable", label ids). Template words such as "Answer" stay attackable.
    protected_words: frozenset[str] = frozenset()
    #: Generation length for generate mode, and stop sequences. The dataset
    #: tasks set promptbench's (20 new tokens, end of sequence only, for label
    #: tasks); these defaults serve only test doubles.
    max_tokens: int = 8
    stop: tuple[str, ...] = ("\n",)
    #: Whether label scoring (``--mode choices``) applies.
    supports_choices: bool = True

    @property
    @abstractmethod
    def metric(self) -> Metric: ...

    @abstractmethod
    def load(
        self,
        *,
        limit: int | None = None,
        seed: int = 0,
        data_dir: str | None = None,
        data_file: str | None = None,
    ) -> list[Sample]:
        """Evaluation samples (the paper's sample size by default, drawn with ``seed``)."""

    @abstractmethod
    def few_shot_pool(self, *, seed: int = 0, data_dir: str | None = None) -> list[Sample]:
        """Samples the few-shot examples are drawn from (never the evaluation samples)."""

    @abstractmethod
    def render(self, instruction: str, sample: Sample, examples: Sequence[Sample] = ()) -> str:
        """Model input text: instruction, optional worked examples, then the sample.
        Must never use ``str.format`` on data: braces in a sample stay braces."""

    @abstractmethod
    def parse(self, answer: str, parser: ParserName = "last_word") -> str | None:
        """Read a prediction from a generated answer; None when unparseable."""

    def choices(self) -> tuple[str, ...]:
        """The verbaliser words, in label order, for label scoring."""
        return tuple(self.verbalizers[label] for label in self.labels)

    @property
    def cache_namespace(self) -> str:
        """Key material, besides the rendered input, that decides how an answer is read:
        a user's own task gives its definition hash, so an edited task never reuses
        answers cached for the old one. Empty for the built-in tasks, whose cache keys
        stay those of release 0.1."""
        return ""

    @property
    def definition_hash(self) -> str | None:
        """A user's own task: the hash of its definition (what decides a prompt's score on it),
        carried by every record so two edits of one task name are never one measurement;
        None for the built-in tasks, which their name identifies."""
        return None

    def provenance(self) -> dict[str, object] | None:
        """What results.json records about a user's own task (its file, definition, data and
        their hashes); None for the built-in tasks."""
        return None

    def own_prompts(self) -> Sequence[Prompt] | None:
        """The prompt set a task brings with it (a user's own task); None: the stored
        set of its name (``tasks.prompt_sets``)."""
        return None
