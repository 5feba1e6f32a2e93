"""Reference PromptScorers over synthetic data, and a contract checker.

``SyntheticScorer`` is a real implementation of the PromptScorer contract
(with or without exact early stopping) over a made-up dataset whose
per-sample scores are a function of the prompt. The attack tests use it, and
the engine's evaluator can be checked against the same contract with
``contract_violations``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from promptrobust.attacks.base import CandidateScore

SampleFn = Callable[[str, int], float]


class SyntheticScorer:
    """Scores a prompt as the mean of ``sample_fn(prompt, i)`` over ``n_samples``.

    With ``prune=True`` candidates are evaluated in list order, sample by
    sample, and a candidate is abandoned as soon as its partial sum shows it
    cannot end strictly below ``to_beat`` and every earlier candidate (per-
    sample scores lie in [0, 1], so the partial mean is a lower bound).
    ``calls`` records (prompts, to_beat) of every call.
    """

    def __init__(
        self, sample_fn: SampleFn, n_samples: int, *, prune: bool = True
    ) -> None:
        if n_samples <= 0:
            raise ValueError("n_samples must be positive")
        self.sample_fn = sample_fn
        self.n = n_samples
        self.prune = prune
        self.calls: list[tuple[list[str], float | None]] = []

    def exact(self, prompt: str) -> float:
        return sum(self._sample(prompt, i) for i in range(self.n)) / self.n

    def _sample(self, prompt: str, i: int) -> float:
        v = float(self.sample_fn(prompt, i))
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"sample scores must lie in [0, 1], got {v}")
        return v

    async def __call__(
        self, prompts: Sequence[str], *, to_beat: float | None = None, incumbent: str | None = None
    ) -> list[CandidateScore]:
        # ``incumbent`` names the prompt ``to_beat`` is the score of; exact scoring needs no more than the score
        self.calls.append((list(prompts), to_beat))
        bar = math.inf if to_beat is None else to_beat
        out: list[CandidateScore] = []
        for prompt in prompts:
            total, done, complete = 0.0, 0, True
            for i in range(self.n):
                total += self._sample(prompt, i)
                done += 1
                if self.prune and done < self.n and total / self.n >= bar:
                    complete = False
                    break
            out.append(CandidateScore(prompt, total / self.n, complete, done))
            if complete:
                bar = min(bar, total / self.n)
        return out


def contract_violations(
    results: Sequence[CandidateScore],
    prompts: Sequence[str],
    exact: Sequence[float],
    to_beat: float | None,
    *,
    tol: float = 1e-12,
) -> list[str]:
    """What a PromptScorer's answer got wrong, given the exact scores.

    Checks order and length, that complete scores are exact, that incomplete
    scores are lower bounds, and that every candidate strictly below
    ``to_beat`` and all earlier candidates came back complete.
    """
    problems: list[str] = []
    if len(results) != len(prompts):
        return [f"{len(results)} results for {len(prompts)} prompts"]
    bar = math.inf if to_beat is None else to_beat
    for i, (r, p, e) in enumerate(zip(results, prompts, exact)):
        if r.prompt != p:
            problems.append(f"result {i} is for another prompt")
        if r.complete and abs(r.score - e) > tol:
            problems.append(f"result {i} complete but score {r.score} != exact {e}")
        if not r.complete and r.score > e + tol:
            problems.append(
                f"result {i} incomplete with score {r.score} above exact {e}"
            )
        if e < bar and not r.complete:
            problems.append(
                f"result {i} (exact {e}) beats everything before it but is incomplete"
            )
        bar = min(bar, e)
    return problems


def build_tiny_masked_lm(directory: str, words: Sequence[str], *, seed: int = 0) -> str:
    """Write a tiny randomly initialised BERT masked LM and a WordPiece
    tokenizer over ``words`` (plus BERT's special tokens) into ``directory``;
    returns the path, loadable with ``AutoModelForMaskedLM``/``AutoTokenizer``.
    For testing the BertAttack plumbing without a real model."""
    from pathlib import Path

    import torch
    from transformers import BertConfig, BertForMaskedLM, BertTokenizer

    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = specials + [w for w in dict.fromkeys(words) if w not in specials]
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = BertTokenizer(vocab=str(path / "vocab.txt"), do_lower_case=True)
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=128,
    )
    BertForMaskedLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def build_tiny_nli_model(directory: str, words: Sequence[str], *, answer: str = "entailment",
                         labels: Sequence[str] = ("contradiction", "entailment", "neutral")) -> str:
    """Write a tiny BERT sequence classifier with NLI labels (``labels``, in a cross-encoder's order)
    and a WordPiece tokenizer over ``words`` into ``directory``; its classifier ignores the text and
    always gives ``answer`` (weights 0, that label's bias high), so a test knows its verdict. For
    testing the ``--meaning-nli`` plumbing without a real NLI model (none ships offline)."""
    from pathlib import Path

    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab = specials + [w for w in dict.fromkeys(w.lower() for w in words) if w not in specials]
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tokenizer = BertTokenizer(vocab=str(path / "vocab.txt"), do_lower_case=True)
    config = BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=512,
                        id2label=dict(enumerate(labels)), label2id={label: i for i, label in enumerate(labels)})
    torch.manual_seed(0)
    model = BertForSequenceClassification(config)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.fill_(-4.0)
        if answer in labels:
            model.classifier.bias[list(labels).index(answer)] = 4.0
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def build_paragramcf_folder(
    directory: str, words: Sequence[str], vectors, *, neighbours: int | None = None
) -> str:
    """Write a word-vector folder in TextAttack's ``paragramcf`` layout
    (``paragram.npy``, ``wordlist.pickle``, ``nn.npy`` with each row's
    neighbours by Euclidean distance, itself first) into ``directory``;
    returns its path. For testing the loader without the real 65k x 300 file."""
    import pickle
    from pathlib import Path

    import numpy as np

    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    vecs = np.asarray(vectors, dtype=np.float32)
    if vecs.shape[0] != len(words):
        raise ValueError("need one vector per word")
    np.save(path / "paragram.npy", vecs)
    with open(path / "wordlist.pickle", "wb") as fh:
        pickle.dump({w: i for i, w in enumerate(words)}, fh)
    dist = ((vecs[:, None, :] - vecs[None, :, :]) ** 2).sum(-1)
    order = np.argsort(dist, axis=1, kind="stable")
    np.save(path / "nn.npy", order[:, : (neighbours or len(words))])
    return str(path)
