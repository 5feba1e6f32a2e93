"""Label scoring in the hf backend: each choice's log-probability after its input.

A choice is tokenised on its own (no special tokens) and its tokens appended
to the input's tokens. That matches the literal text "input + choice" whenever
the input ends on a token boundary, which chat templates (ending with a
newline or special token) always do; it also keeps a choice's tokens
identical across inputs, which the one-pass fast path needs: when every choice
of a request is one token, one pass per input reads them all from the logits
after the input (with ``label_logsumexp``: the labels' logits minus the
vocabulary's logsumexp, nothing of the vocabulary's size copied out). Longer
choices run one sequence per (input, choice) and sum their tokens' log-probs.
Labels whose tokens cannot tell them apart (none at all, or the same ids as
another label's: a word-level tokenizer's ``[UNK]``) are refused before any
pass (``label_tokens.check_label_ids``).
"""

from __future__ import annotations

from typing import Any

from promptrobust.engine.serving.backends.hf.passes import ForwardPasses
from promptrobust.engine.serving.backends.label_tokens import check_label_ids
from promptrobust.engine.serving.types import Completion, Request

__all__ = ["score"]


def score(passes: ForwardPasses, reqs: list[Request], inputs: list[list[int]],
          choice_ids: list[list[list[int]]]) -> list[Completion]:
    """One completion per request: its choices' log-probabilities (``choice_ids``: each choice's tokens);
    ``IndistinctLabels`` when a request's labels cannot be told apart by their tokens."""
    for r, ids in zip(reqs, choice_ids):
        check_label_ids(r.choices, ids)
    results: list[list[float]] = [[0.0] * len(r.choices) for r in reqs]
    encdec = passes.model.encdec
    single = [i for i in range(len(reqs)) if all(len(c) == 1 for c in choice_ids[i])]
    single_set = set(single)
    # Fast path: every choice is one token -> one forward pass per input.
    for chunk in passes.chunks(single, lambda i: len(inputs[i]), [inputs[i] for i in single]):
        if passes.options.label_logsumexp and not encdec:
            got = _label_logprobs(passes, [inputs[i] for i in chunk], [[c[0] for c in choice_ids[i]] for i in chunk])
            for row, i in enumerate(chunk):
                results[i] = got[row]
            continue
        dist = _next_token_logprobs(passes, [inputs[i] for i in chunk])
        for row, i in enumerate(chunk):
            results[i] = [float(dist[row, c[0]]) for c in choice_ids[i]]
    # General path: one sequence per (input, choice); sum the choice tokens' log-probs.
    pairs = [
        (i, j)
        for i in range(len(reqs))
        if i not in single_set
        for j, c in enumerate(choice_ids[i])
        if c  # (no choice is empty: check_label_ids refused that)
    ]
    for chunk_idx in passes.chunks(list(range(len(pairs))), lambda k: len(inputs[pairs[k][0]]) + len(choice_ids[pairs[k][0]][pairs[k][1]])):
        items = [pairs[k] for k in chunk_idx]
        sums = _continuation_logprobs(passes, [inputs[i] for i, _ in items], [choice_ids[i][j] for i, j in items])
        for (i, j), s in zip(items, sums):
            results[i][j] = s
    return [
        Completion(choice_logprobs=tuple(results[i]), prompt_tokens=len(inputs[i]), completion_tokens=0)
        for i in range(len(reqs))
    ]


def _next_token_logprobs(passes: ForwardPasses, inputs: list[list[int]]) -> Any:
    """Log-softmax over the vocabulary of the token after each input, shape (B, V)."""
    import torch

    m = passes.model
    if m.encdec:
        enc, enc_mask = passes.pad_right(inputs)
        dec = torch.full((len(inputs), 1), passes.decoder_start(), dtype=torch.long, device=m.device)
        logits = m.model(input_ids=enc, attention_mask=enc_mask, decoder_input_ids=dec, use_cache=False).logits[:, 0, :]
    else:
        logits = passes.rows_forward(inputs, inputs, 1)[0][:, -1, :]
    return torch.log_softmax(logits.float(), dim=-1).cpu()


def _label_logprobs(passes: ForwardPasses, inputs: list[list[int]], labels: list[list[int]]) -> list[list[float]]:
    """log p(label token | input) for each row's label tokens: their logits minus the logsumexp over the
    whole vocabulary (the exact normaliser); nothing of the vocabulary's size leaves the pass."""
    import torch

    logits = passes.rows_forward(inputs, inputs, 1)[0][:, -1, :].float()
    norm = torch.logsumexp(logits, dim=-1)
    width = max(len(x) for x in labels)
    idx = torch.tensor([x + [x[0]] * (width - len(x)) for x in labels], dtype=torch.long, device=logits.device)
    picked = (logits.gather(1, idx) - norm.unsqueeze(1)).cpu().tolist()
    return [row[: len(x)] for row, x in zip(picked, labels)]


def _continuation_logprobs(passes: ForwardPasses, inputs: list[list[int]], conts: list[list[int]]) -> list[float]:
    """Sum of log p(continuation tokens | input) for each (input, continuation) pair."""
    m = passes.model
    if m.encdec:
        enc, enc_mask = passes.pad_right(inputs)
        start = passes.decoder_start()
        dec, dec_mask = passes.pad_right([[start] + c[:-1] for c in conts])
        logits = m.model(
            input_ids=enc, attention_mask=enc_mask, decoder_input_ids=dec, decoder_attention_mask=dec_mask, use_cache=False
        ).logits
        return _sum_gathered(logits, conts, right_aligned=False)
    seqs = [a + c for a, c in zip(inputs, conts)]
    longest = max(len(c) for c in conts)
    # Left padding puts every sequence's end in the last column: the logits
    # predicting a continuation of n tokens are at columns -n-1 .. -2. A
    # row's prefix stops at least one token before its input's end, so
    # those columns always lie in the tails.
    logits = passes.rows_forward(seqs, inputs, longest + 1)[0]
    return _sum_gathered(logits[:, :longest, :], conts, right_aligned=True)


def _sum_gathered(logits: Any, conts: list[list[int]], *, right_aligned: bool) -> list[float]:
    """Sum over each row of log p(token) for its continuation tokens.

    ``logits[row, k]`` predicts the k-th column of a (B, width) target grid; a
    row's tokens sit at the right end of it (left-padded decoder-only) or the
    left end (encoder-decoder decoder).
    """
    import torch

    width = logits.shape[1]
    targets = torch.zeros((len(conts), width), dtype=torch.long)
    mask = torch.zeros((len(conts), width), dtype=torch.bool)
    for row, c in enumerate(conts):
        cols = slice(width - len(c), width) if right_aligned else slice(0, len(c))
        targets[row, cols] = torch.tensor(c, dtype=torch.long)
        mask[row, cols] = True
    logp = torch.log_softmax(logits.float(), dim=-1)
    picked = logp.gather(-1, targets.to(logp.device).unsqueeze(-1)).squeeze(-1)
    sums = torch.where(mask.to(logp.device), picked, torch.zeros_like(picked)).sum(-1)
    return [float(x) for x in sums.cpu()]
