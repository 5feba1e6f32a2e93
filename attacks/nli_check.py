"""An NLI model as the meaning verdict's judge of replaced words (``--meaning-nli MODEL``).

The shipped verdict decides a replaced word, once its rules have passed it, by the in-context cosine
of two sentence encoders; docs/fidelity.md measures it at 0.77-0.82 accuracy on pairs written
blind, short of what a published acceptable-only figure needs. The evidence that would separate a
true synonym from a same-field neighbour is a model of entailment, and none ships in a registry
package (so none can be used or calibrated offline). Users who can reach the Hugging Face hub, or
who have one on disk, can let such a model decide instead: ``NliJudge.kept`` asks whether the
prompt and the prompt with only this word replaced entail each other, both ways (bidirectional
entailment, the criterion Kuhn et al. 2023 use to decide that two generations mean the same). The
rules run first and are unchanged: an instruction word, an opposite or a label-defining word
replaced is a change whatever the model says.

No threshold is fitted: entailment must be the most probable of the model's labels in both
directions. promptrobust has not measured this judge (no NLI model can be loaded here);
``scripts/measure_meaning_nli.py MODEL`` scores it on the committed labelled sets in a few
minutes, and the verdict's ``check`` names the model, so a report never pools its verdicts
with the encoders'.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from promptrobust.attacks.errors import AttackResourceError

#: A model commonly used for this (MNLI + SNLI, 184M parameters); the docs' example, not a default.
EXAMPLE_MODEL = "cross-encoder/nli-deberta-v3-base"


@dataclass(frozen=True)
class Entailment:
    """Both directions' probability of entailment, and whether entailment was the most probable label in each."""

    forward: float
    backward: float
    forward_top: bool
    backward_top: bool

    @property
    def both_ways(self) -> bool:
        return self.forward_top and self.backward_top


@dataclass(frozen=True)
class NliJudge:
    """An NLI sequence classifier and the index of its entailment label."""

    name: str
    entailment_index: int
    tokenizer: Any = field(compare=False, repr=False)
    model: Any = field(compare=False, repr=False)

    def entailment(self, premise: str, hypothesis: str) -> Entailment:
        """How far ``premise`` entails ``hypothesis`` and the reverse (one batch of two pairs)."""
        import torch

        batch = self.tokenizer([premise, hypothesis], [hypothesis, premise], return_tensors="pt", padding=True,
                               truncation=True, max_length=512)
        batch = {k: v.to(self.model.device) for k, v in batch.items()}
        with torch.no_grad():
            probs = torch.softmax(self.model(**batch).logits.float(), dim=-1).cpu()
        top = probs.argmax(dim=-1).tolist()
        index = self.entailment_index
        return Entailment(float(probs[0, index]), float(probs[1, index]), top[0] == index, top[1] == index)


def entailment_index(labels: Sequence[str], model: str) -> int:
    """Which of a classifier's labels is entailment; one line naming the fix when none is."""
    found = [i for i, label in enumerate(labels) if str(label).strip().lower().startswith("entail")]
    if len(found) != 1:
        raise AttackResourceError(
            f"--meaning-nli {model}: its labels are {', '.join(map(str, labels))}, with "
            f"{'no' if not found else 'more than one'} entailment label; pass an NLI model whose config names "
            f"'entailment' (e.g. {EXAMPLE_MODEL})")
    return found[0]


@functools.cache
def load_nli_judge(model: str) -> NliJudge:
    """The NLI model ``model`` (a Hugging Face id or a local folder), once per process, on a GPU when one
    is there; ``AttackResourceError`` with the fix when it cannot be loaded."""
    try:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
    except ImportError as exc:
        raise AttackResourceError(f"--meaning-nli needs torch and transformers: pip install 'promptrobust[local]' "
                                  f"({exc})") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(model)
        classifier = AutoModelForSequenceClassification.from_pretrained(model)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise AttackResourceError(f"--meaning-nli {model}: cannot load it ({first}); pass a local folder or a "
                                  f"Hugging Face id reachable from here (e.g. {EXAMPLE_MODEL})") from None
    id2label = getattr(classifier.config, "id2label", None) or {}
    labels = [id2label.get(i, id2label.get(str(i), f"LABEL_{i}")) for i in range(classifier.config.num_labels)]
    index = entailment_index(labels, model)
    classifier.eval()
    if torch.cuda.is_available():
        classifier.to("cuda")
    return NliJudge(model, index, tokenizer, classifier)
