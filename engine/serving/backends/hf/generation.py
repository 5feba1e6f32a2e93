"""Generation in the hf backend: greedy (or sampled) answers up to each request's own length.

Decoder-only models decode the whole batch one step at a time on the passes'
key/value cache (each row after its cached prefix); a row stops at EOS, at its
own ``max_tokens`` or once its text holds a stop string, and with
``drop_finished`` it leaves the batch, so later steps cost only the rows still
writing. Encoder-decoder models go through transformers' ``generate`` with a
per-row stopping criterion.
"""

from __future__ import annotations

import functools
from typing import Any

from promptrobust.engine.serving.backends.hf.passes import ForwardPasses
from promptrobust.engine.serving.types import Completion, Request

__all__ = ["cut_at_stop", "generate"]


def generate(passes: ForwardPasses, reqs: list[Request], inputs: list[list[int]]) -> list[Completion]:
    """One completion per request (the requests of one call share a temperature)."""
    if not passes.model.encdec:
        return _decode(passes, reqs, inputs)
    return _generate_encdec(passes, reqs, inputs)


def _generate_encdec(passes: ForwardPasses, reqs: list[Request], inputs: list[list[int]]) -> list[Completion]:
    from transformers import GenerationConfig, StoppingCriteriaList

    m = passes.model
    tok, model = m.tokenizer, m.model
    max_new = [max(1, r.decoding.max_tokens) for r in reqs]
    ids, mask = passes.pad_right(inputs)
    model_inputs: dict[str, object] = {"input_ids": ids, "attention_mask": mask}
    prefix = 1  # decoder start token
    eos = _eos_ids(passes)
    temp = reqs[0].decoding.temperature
    gcfg = GenerationConfig(
        max_new_tokens=max(max_new),
        do_sample=temp > 0,
        temperature=temp if temp > 0 else None,
        top_p=None,
        top_k=None,
        pad_token_id=tok.pad_token_id,
        eos_token_id=eos or None,
        bos_token_id=getattr(model.generation_config, "bos_token_id", None),
        decoder_start_token_id=passes.decoder_start(),
    )
    stops = _row_stops_class()(tok, prefix, max_new, [r.decoding.stop for r in reqs])
    seqs = model.generate(**model_inputs, generation_config=gcfg, stopping_criteria=StoppingCriteriaList([stops]))
    out = []
    eos_set = set(eos)
    for row, r in enumerate(reqs):
        new = seqs[row, prefix:].tolist()
        cut = min(len(new), max_new[row])
        for k, t in enumerate(new[:cut]):
            if t in eos_set:
                cut = k
                break
        text = cut_at_stop(tok.decode(new[:cut], skip_special_tokens=True), r.decoding.stop)
        out.append(Completion(text=text, prompt_tokens=len(inputs[row]), completion_tokens=cut))
    return out


def _decode(passes: ForwardPasses, reqs: list[Request], inputs: list[list[int]]) -> list[Completion]:
    """Decoder-only generation, one step for the whole batch at a time (see the module docstring)."""
    import torch

    m = passes.model
    tok, device = m.tokenizer, m.device
    observer = passes.observer
    max_new = [max(1, r.decoding.max_tokens) for r in reqs]
    stops = [r.decoding.stop for r in reqs]
    temp = reqs[0].decoding.temperature
    eos = set(_eos_ids(passes))
    logits, state = passes.rows_forward(inputs, inputs, 1, keep_cache=True)
    cache, mask, next_pos = state
    new: list[list[int]] = [[] for _ in reqs]
    active = list(range(len(reqs)))  # request index of each batch row
    live = [True] * len(reqs)
    while True:
        last = logits[:, -1, :].float()
        if temp > 0:
            picked = torch.multinomial(torch.softmax(last / temp, dim=-1), 1).squeeze(1)
        else:
            picked = last.argmax(dim=-1)
            if observer.wants_greedy_gaps:
                _report_gaps(observer, last, reqs, live, active)
        tokens = picked.tolist()
        for row, i in enumerate(active):
            if not live[i]:
                continue
            t = tokens[row]
            if t in eos:
                live[i] = False
                continue
            new[i].append(t)
            if len(new[i]) >= max_new[i] or (stops[i] and any(x in tok.decode(new[i], skip_special_tokens=True) for x in stops[i])):
                live[i] = False
        keep = [row for row, i in enumerate(active) if live[i]]
        if not keep:
            break
        if passes.options.drop_finished and len(keep) < len(active):
            sel = torch.tensor(keep, dtype=torch.long, device=device)
            cache.batch_select_indices(sel)
            mask, next_pos, picked = mask[sel], next_pos[sel], picked[sel]
            active = [active[row] for row in keep]
        rows = len(active)
        mask = torch.cat([mask, torch.ones((rows, 1), dtype=mask.dtype, device=device)], dim=1)
        logits = passes.forward_logits(picked.unsqueeze(1), mask, next_pos.unsqueeze(1), 1, cache=cache, kind="step")
        passes.positions += rows
        next_pos = next_pos + 1
    out = []
    for i, r in enumerate(reqs):
        text = cut_at_stop(tok.decode(new[i], skip_special_tokens=True), r.decoding.stop)
        out.append(Completion(text=text, prompt_tokens=len(inputs[i]), completion_tokens=len(new[i])))
    return out


def _report_gaps(observer: Any, last: Any, reqs: list[Request], live: list[bool], active: list[int]) -> None:
    """Tell the observer each live row's gap between its two highest logits at this step."""
    import torch

    top = torch.topk(last, 2, dim=-1).values
    gaps = (top[:, 0] - top[:, 1]).tolist()
    rows = [row for row, i in enumerate(active) if live[i]]
    observer.greedy_step([reqs[active[row]] for row in rows], [gaps[row] for row in rows])


def _eos_ids(passes: ForwardPasses) -> list[int]:
    m = passes.model
    ids: set[int] = set()
    cfg_eos = getattr(m.model.generation_config, "eos_token_id", None)
    if isinstance(cfg_eos, int):
        ids.add(cfg_eos)
    elif cfg_eos:
        ids.update(int(x) for x in cfg_eos)
    if m.tokenizer.eos_token_id is not None:
        ids.add(int(m.tokenizer.eos_token_id))
    return sorted(ids)


@functools.cache
def _row_stops_class() -> type:
    """The stopping criterion class (built lazily so importing this module does not import transformers)."""
    import torch
    from transformers import StoppingCriteria

    class RowStops(StoppingCriteria):
        """Per-row stopping: a row is done at its own max_tokens or once its text holds a stop string."""

        def __init__(self, tokenizer: Any, prefix: int, max_new: list[int], stops: list[tuple[str, ...]]) -> None:
            self.tok = tokenizer
            self.prefix = prefix
            self.max_new = max_new
            self.stops = stops
            self.done = [False] * len(max_new)

        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            steps = input_ids.shape[1] - self.prefix
            for row in range(len(self.done)):
                if self.done[row]:
                    continue
                if steps >= self.max_new[row]:
                    self.done[row] = True
                elif self.stops[row]:
                    text = self.tok.decode(input_ids[row, self.prefix :], skip_special_tokens=True)
                    self.done[row] = any(s in text for s in self.stops[row])
            return torch.tensor(self.done, dtype=torch.bool, device=input_ids.device)

    return RowStops


def cut_at_stop(text: str, stops: tuple[str, ...]) -> str:
    """Truncate ``text`` before the earliest occurrence of any stop string."""
    cut = len(text)
    for s in stops:
        if s:
            k = text.find(s)
            if k != -1:
                cut = min(cut, k)
    return text[:cut]
