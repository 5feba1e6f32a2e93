"""What one attack run reports."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


def performance_drop_rate(clean: float, adversarial: float) -> float:
    """PDR = 1 - adversarial / clean.

    A clean score of 0 leaves nothing to drop, so the PDR is defined as 0.0
    there (the paper's formula is undefined at 0; the protocol skips such
    prompts). Negative values mean the "attacked" prompt did better than the
    clean one (Semantic, CheckList, StressTest); nothing clips them.
    """
    if clean == 0:
        return 0.0
    return 1.0 - adversarial / clean


@dataclass(frozen=True)
class AttackOutcome:
    """The result of attacking one prompt against one scorer.

    ``queries`` counts candidate prompts submitted to the scorer (the clean
    prompt's own evaluation is not a candidate and is not counted, so
    ``queries <= budget``). ``pruned`` counts candidate scores that came back
    incomplete (abandoned by exact early stopping). ``samples_evaluated`` sums
    the per-candidate sample counts the scorer reported, clean prompt included.
    The engine adds model requests, cache hits and model/dataset ids.
    """

    attack: str
    clean_prompt: str
    clean_score: float
    adversarial_prompt: str
    adversarial_score: float
    pdr: float
    queries: int
    pruned: int
    samples_evaluated: int
    wall_time_s: float
    seed: int
    budget: int | None
    budget_exhausted: bool = False
    perturbed_words: int = 0
    settings: dict[str, object] = field(default_factory=dict)
    #: Semantic attack: (language, prompt, score) of every prompt of the set
    #: (the paper reports each); empty for the other attacks.
    prompt_scores: tuple[tuple[str, str, float], ...] = ()
    #: (old, new) text of every changed stretch of the prompt, in order.
    substitutions: tuple[tuple[str, str], ...] = ()
    #: The final prompt's whole-prompt similarity to the clean one
    #: ({"angular", "cosine", "encoder"}; see ``attack.final_similarity``).
    final_similarity: dict[str, object] = field(default_factory=dict)
    #: The independent meaning verdict on the final prompt (``meaning_check.MeaningVerdict.to_dict``).
    meaning: dict[str, object] = field(default_factory=dict)
    #: Why the search could try no change ("" when it tried some): the result is the clean prompt
    #: because nothing could change, not because the prompt resisted (``search.SearchResult``).
    nothing_to_change: str = ""

    @property
    def succeeded(self) -> bool:
        """Whether the attack lowered the score at all (brute-force attacks and
        Semantic may return a prompt that scores higher: negative PDR)."""
        return self.adversarial_score < self.clean_score

    def to_dict(self) -> dict[str, object]:
        """Plain data for JSONL/Parquet records."""
        return asdict(self)
