"""The ``hf`` backend: a transformers model in this process (CPU or one GPU).

All torch work runs in a worker thread (``asyncio.to_thread``) under a lock,
so the scheduler's event loop keeps accepting work while a micro-batch runs,
and two batches never fight over the same cores.

Batches are sorted by length and padded on the left (decoder-only), with
position ids derived from the attention mask, so a request scores the same
alone or inside a batch of longer requests.

Prefix sharing: the requests of one candidate prompt start with the same
tokens (chat template, system turn, the instruction), often more than half of
each input. When every input of a decoder-only batch shares such a prefix, it
is run once, its key/value cache is repeated across the batch, and only each
input's own tail is computed (vLLM's prefix caching, per batch). The scheduler
asks ``arrange_batches`` how to group requests so that batches share long
prefixes when that costs fewer tokens than grouping by length.

Choice scoring tokenises each choice on its own (no special tokens) and
appends its tokens to the input's tokens. That matches the literal text
"input + choice" whenever the input ends on a token boundary, which chat
templates (ending with a newline or special token) always do; it also keeps a
choice's tokens identical across inputs, which the one-pass fast path needs.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from promptrobust.engine.backends.base import (
    Backend,
    BackendError,
    BackendUnavailable,
    cut_into_batches,
)
from promptrobust.engine.types import Completion, ModelIdentity, Request

# OMP_WAIT_POLICY=PASSIVE is set once, in promptrobust/__init__.py, before torch loads.

_DTYPES = ("auto", "float32", "bfloat16", "float16")
#: Shorter common prefixes are not worth a separate forward pass.
MIN_SHARED_PREFIX = 8
#: Encoded inputs kept between ``arrange_batches`` and the batch that runs them.
_ENCODED_MEMORY = 4096
_MODEL_FILE_SUFFIXES = (".safetensors", ".bin", ".json", ".model", ".jinja", ".txt", ".tiktoken")


def _hub_offline() -> bool:
    """HF_HUB_OFFLINE as set now (huggingface_hub reads it only once, at import)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


class HFBackend(Backend):
    """transformers ``AutoModelForCausalLM`` / ``AutoModelForSeq2SeqLM`` backend.

    ``identity`` is available before ``start()``; for a local directory without
    ``identity_revision`` it hashes the model files once (remembered in the
    model store, keyed by path, size and mtime).
    """

    kind = "hf"
    batching = True

    def __init__(
        self,
        model: str,
        *,
        gguf_file: str | None = None,
        revision: str | None = None,
        device: str = "auto",
        dtype: str = "auto",
        batch_size: int = 16,
        trust_remote_code: bool = False,
        chat: bool | None = None,
        identity_name: str | None = None,
        identity_revision: str | None = None,
        share_prefix: bool = True,
    ) -> None:
        if not model:
            raise ValueError("hf backend: model must be a Hugging Face id or a local directory")
        if dtype not in _DTYPES:
            raise ValueError(f"hf backend: dtype {dtype!r} is not one of {', '.join(_DTYPES)}")
        if batch_size < 1:
            raise ValueError(f"hf backend: batch_size must be >= 1 (got {batch_size})")
        self.model_ref = model
        self.gguf_file = gguf_file
        self.revision = revision
        self.device_request = device
        self.dtype_request = dtype
        self.batch_size = batch_size
        self.max_batch_size = batch_size
        self.trust_remote_code = trust_remote_code
        self._chat_override = chat
        self._identity_name = identity_name or model
        self._identity_revision = identity_revision
        self.share_prefix = share_prefix
        self._lock = threading.Lock()
        self._model: Any = None
        self._tok: Any = None
        self._device: Any = None
        self._dtype_name = ""
        self._encdec = False
        self._has_logits_to_keep = False
        self._max_len: int | None = None
        self._choice_ids_cache: dict[str, list[int]] = {}
        self._encoded: OrderedDict[Request, list[int]] = OrderedDict()

    # ------------------------------------------------------------------ identity

    @property
    def identity(self) -> ModelIdentity:
        if self._identity_revision is None:
            self._identity_revision = self._resolve_revision()
        dtype = self._dtype_name or self._planned_dtype()
        extra = [("dtype", dtype)]
        if self.gguf_file:
            extra.append(("gguf_file", self.gguf_file))
        return ModelIdentity(backend="hf", name=self._identity_name, revision=self._identity_revision, extra=tuple(extra))

    def _planned_dtype(self) -> str:
        if self.dtype_request != "auto":
            return self.dtype_request
        import torch

        device = self._pick_device()
        if device.startswith("cuda"):
            return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
        return "float32"

    def _pick_device(self) -> str:
        if self.device_request != "auto":
            return self.device_request
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def _resolve_revision(self) -> str:
        """A weights revision: hub commit sha when cached, else a sha256 of the local model files."""
        local = Path(self.model_ref).expanduser()
        if local.is_dir():
            from promptrobust.engine.model_store import cached_sha256, store_root

            if self.gguf_file:
                files = [local / self.gguf_file]
            else:
                files = sorted(p for p in local.iterdir() if p.is_file() and p.suffix in _MODEL_FILE_SUFFIXES)
            if not files or not all(f.is_file() for f in files):
                return "unknown"
            key = hashlib.sha256(str(local.resolve()).encode()).hexdigest()[:24]
            return "sha256:" + cached_sha256(files, store_root() / ".hashes" / f"{key}.json")
        try:
            from huggingface_hub import try_to_load_from_cache

            found = try_to_load_from_cache(self.model_ref, "config.json", revision=self.revision)
        except Exception:  # noqa: BLE001 - a best-effort lookup; fall through
            found = None
        if isinstance(found, str) and "/snapshots/" in found:
            return found.split("/snapshots/", 1)[1].split("/", 1)[0]
        return self.revision or "unknown"

    # ------------------------------------------------------------------ lifecycle

    @property
    def is_chat(self) -> bool:
        if self._chat_override is not None:
            return self._chat_override
        if self._tok is not None:
            return bool(getattr(self._tok, "chat_template", None))
        peeked = self._peek_chat_template()
        if peeked is None:
            raise BackendError("hf backend: is_chat is known after start(); call start() first")
        return peeked

    def _peek_chat_template(self) -> bool | None:
        """Whether a local model dir ships a chat template, without loading it (None: cannot tell)."""
        local = Path(self.model_ref).expanduser()
        if not local.is_dir() or self.gguf_file:
            return None
        if (local / "chat_template.jinja").is_file() or (local / "chat_template.json").is_file():
            return True
        try:
            import orjson

            return bool(orjson.loads((local / "tokenizer_config.json").read_bytes()).get("chat_template"))
        except (OSError, ValueError):
            return None

    async def start(self) -> None:
        if self._model is None:
            await asyncio.to_thread(self._load)

    async def close(self) -> None:
        self._model = None
        self._tok = None

    def _load(self) -> None:
        import torch
        from transformers import (
            AutoConfig,
            AutoModelForCausalLM,
            AutoModelForSeq2SeqLM,
            AutoTokenizer,
        )

        ref = self.model_ref
        local = Path(ref).expanduser()
        looks_like_path = ref.startswith(("/", ".", "~")) or ref.count("/") > 1
        if looks_like_path and not local.is_dir():
            raise BackendUnavailable(f"hf backend: model directory {ref} does not exist")
        if local.is_dir():
            ref = str(local)
            if self.gguf_file and not (local / self.gguf_file).is_file():
                raise BackendUnavailable(f"hf backend: GGUF file {self.gguf_file} not found in {ref}")
        kw: dict[str, Any] = {"trust_remote_code": self.trust_remote_code}
        if self.revision:
            kw["revision"] = self.revision
        if self.gguf_file:
            kw["gguf_file"] = self.gguf_file
        if not local.is_dir() and _hub_offline():
            kw["local_files_only"] = True
        device = self._pick_device()
        dtype_name = self._planned_dtype()
        try:
            config = AutoConfig.from_pretrained(ref, **kw)
            tok = AutoTokenizer.from_pretrained(ref, **kw)
            encdec = bool(getattr(config, "is_encoder_decoder", False))
            cls = AutoModelForSeq2SeqLM if encdec else AutoModelForCausalLM
            model = cls.from_pretrained(ref, dtype=getattr(torch, dtype_name), **kw)
        except (OSError, ValueError, KeyError, ImportError) as e:
            raise BackendUnavailable(f"hf backend: cannot load model {self.model_ref!r}: {_first_line(e)}") from None
        model.to(device)
        model.eval()
        if tok.pad_token_id is None:
            if tok.eos_token is not None:
                tok.pad_token = tok.eos_token
            elif tok.unk_token is not None:
                tok.pad_token = tok.unk_token
            else:
                raise BackendUnavailable(f"hf backend: tokenizer of {self.model_ref!r} has no pad, eos or unk token")
        self._encdec = encdec
        self._has_logits_to_keep = "logits_to_keep" in inspect.signature(model.forward).parameters
        limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
        self._max_len = int(limit) if limit else None
        self._device = torch.device(device)
        self._dtype_name = dtype_name
        self._tok = tok
        self._model = model

    # ------------------------------------------------------------------ requests

    async def complete_batch(self, requests: Sequence[Request]) -> list[Completion]:
        if self._model is None:
            raise BackendError("hf backend: call start() before sending requests")
        if not requests:
            return []
        return await asyncio.to_thread(self._run, list(requests))

    def _run(self, requests: list[Request]) -> list[Completion]:
        import torch

        with self._lock, torch.inference_mode():
            encoded = [self._encode_input(r) for r in requests]
            out: list[Completion | None] = [None] * len(requests)
            gen = [i for i, r in enumerate(requests) if r.kind == "generate"]
            score = [i for i, r in enumerate(requests) if r.kind == "score_choices"]
            for temp in sorted({requests[i].decoding.temperature for i in gen}):
                group = [i for i in gen if requests[i].decoding.temperature == temp]
                for chunk in self._chunks(group, lambda i: len(encoded[i])):
                    for i, c in zip(chunk, self._generate([requests[i] for i in chunk], [encoded[i] for i in chunk])):
                        out[i] = c
            if score:
                for i, c in zip(score, self._score([requests[i] for i in score], [encoded[i] for i in score])):
                    out[i] = c
        assert all(c is not None for c in out)
        return out  # type: ignore[return-value]

    def _chunks(self, idx: list[int], length) -> list[list[int]]:
        return cut_into_batches(sorted(idx, key=length), self.batch_size)

    def _encode_input(self, r: Request) -> list[int]:
        """Token ids of a request's input, remembered for a while (``arrange_batches`` encodes them first)."""
        ids = self._encoded.get(r)
        if ids is None:
            ids = self._encode_uncached(r)
            self._encoded[r] = ids
            if len(self._encoded) > _ENCODED_MEMORY:
                self._encoded.popitem(last=False)
        return ids

    def _encode_uncached(self, r: Request) -> list[int]:
        tok = self._tok
        if r.messages is not None:
            if not getattr(tok, "chat_template", None):
                raise BackendError(
                    f"hf backend: model {self.model_ref!r} has no chat template; send prompt= requests instead of messages="
                )
            msgs = [{"role": m.role, "content": m.content} for m in r.messages]
            text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
            ids = tok(text, add_special_tokens=False)["input_ids"]
        else:
            ids = tok(r.prompt, add_special_tokens=True)["input_ids"]
        if not ids:
            raise BackendError("hf backend: empty input after tokenisation")
        if self._max_len is not None and len(ids) >= self._max_len:
            raise BackendError(
                f"hf backend: input of {len(ids)} tokens exceeds the model's context of {self._max_len}; shorten it"
            )
        return list(ids)

    def _choice_ids(self, choice: str) -> list[int]:
        ids = self._choice_ids_cache.get(choice)
        if ids is None:
            ids = list(self._tok(choice, add_special_tokens=False)["input_ids"]) if choice else []
            self._choice_ids_cache[choice] = ids
        return ids

    # ------------------------------------------------------------------ prefix sharing

    def arrange_batches(self, requests: Sequence[Request], batch_size: int) -> list[list[int]]:
        """Group requests into batches: by length, or by shared prefix when that is cheaper.

        The cost of a plan is the number of token positions it computes: a
        batch costs its shared prefix once plus its width of padded tails per
        row. Sorting the token ids puts requests with long common prefixes
        (one candidate prompt over many samples) next to each other.
        """
        by_length = super().arrange_batches(requests, batch_size)
        if not self._sharing_possible() or len(requests) < 2:
            return by_length
        try:
            encoded = [self._encode_input(r) for r in requests]
        except BackendError:
            return by_length  # the batch will report the error itself
        by_prefix_plan = cut_into_batches(sorted(range(len(requests)), key=lambda i: encoded[i]), batch_size)

        def cost(plan: list[list[int]]) -> int:
            total = 0
            for batch in plan:
                seqs = [encoded[i] for i in batch]
                shared = self._shared_prefix_length(seqs)
                total += shared + len(seqs) * (max(len(s) for s in seqs) - shared)
            return total

        return by_prefix_plan if cost(by_prefix_plan) < cost(by_length) else by_length

    def _sharing_possible(self) -> bool:
        return self.share_prefix and not self._encdec and self._model is not None

    def _shared_prefix_length(self, inputs: Sequence[list[int]]) -> int:
        """Tokens every input starts with, leaving each input at least one of its own (0: don't share)."""
        if len(inputs) < 2 or not self._sharing_possible():
            return 0
        shared = min(len(os.path.commonprefix(list(inputs))), min(len(s) for s in inputs) - 1)
        return shared if shared >= MIN_SHARED_PREFIX else 0

    def _prefix_cache(self, prefix: list[int], rows: int) -> Any:
        """The key/value cache of ``prefix``, computed once and repeated for ``rows`` rows."""
        import torch

        ids = torch.tensor([prefix], dtype=torch.long, device=self._device)
        kw: dict[str, Any] = {"logits_to_keep": 1} if self._has_logits_to_keep else {}
        cache = self._model(input_ids=ids, use_cache=True, **kw).past_key_values
        cache.batch_repeat_interleave(rows)
        return cache

    def _prefixed_tails(self, seqs: list[list[int]], shared: int):
        """Left-padded tails after a shared prefix of ``shared`` tokens, and the prefix's cache.

        Returns (tail ids, attention mask over prefix + tails, tail position ids,
        prefix cache): the padding sits between the prefix and each tail, and
        every row keeps the positions it would have alone.
        """
        import torch

        cache = self._prefix_cache(seqs[0][:shared], len(seqs))
        ids, tail_mask, tail_pos = self._pad_left([s[shared:] for s in seqs])
        mask = torch.cat([torch.ones((len(seqs), shared), dtype=torch.long, device=self._device), tail_mask], dim=1)
        return ids, mask, tail_pos + shared, cache

    def _decoder_logits(self, seqs: list[list[int]], keep: int, shared: int):
        """Logits of the last ``keep`` columns of left-padded ``seqs``; the first ``shared`` tokens run once."""
        if not shared:
            ids, mask, pos = self._pad_left(seqs)
            return self._forward_logits(ids, mask, pos, keep)
        ids, mask, pos, cache = self._prefixed_tails(seqs, shared)
        return self._forward_logits(ids, mask, pos, keep, cache=cache)

    # ------------------------------------------------------------------ padding helpers

    def _pad_left(self, seqs: list[list[int]]):
        """Left-padded ids, attention mask and position ids (positions count real tokens only)."""
        import torch

        width = max(len(s) for s in seqs)
        pad = self._tok.pad_token_id
        ids = torch.full((len(seqs), width), pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, s in enumerate(seqs):
            ids[row, width - len(s) :] = torch.tensor(s, dtype=torch.long)
            mask[row, width - len(s) :] = 1
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        return ids.to(self._device), mask.to(self._device), pos.to(self._device)

    def _pad_right(self, seqs: list[list[int]]):
        import torch

        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self._tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, s in enumerate(seqs):
            ids[row, : len(s)] = torch.tensor(s, dtype=torch.long)
            mask[row, : len(s)] = 1
        return ids.to(self._device), mask.to(self._device)

    def _decoder_start(self) -> int:
        cfg = self._model.config
        start = getattr(self._model.generation_config, "decoder_start_token_id", None)
        if start is None:
            start = getattr(cfg, "decoder_start_token_id", None)
        if start is None:
            start = self._tok.pad_token_id
        return int(start)

    # ------------------------------------------------------------------ generation

    def _generate(self, reqs: list[Request], inputs: list[list[int]]) -> list[Completion]:
        from transformers import GenerationConfig, StoppingCriteriaList

        tok = self._tok
        model = self._model
        max_new = [max(1, r.decoding.max_tokens) for r in reqs]
        if self._encdec:
            ids, mask = self._pad_right(inputs)
            model_inputs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
            prefix = 1  # decoder start token
        else:
            model_inputs = self._generation_inputs(inputs)
            prefix = model_inputs["input_ids"].shape[1]
        eos = self._eos_ids()
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
            decoder_start_token_id=self._decoder_start() if self._encdec else None,
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
            text = _cut_at_stop(tok.decode(new[:cut], skip_special_tokens=True), r.decoding.stop)
            out.append(Completion(text=text, prompt_tokens=len(inputs[row]), completion_tokens=cut))
        return out

    def _generation_inputs(self, inputs: list[list[int]]) -> dict[str, Any]:
        """Left-padded decoder-only inputs for ``generate``, with a shared prefix's cache when there is one.

        ``generate`` wants the whole ids (it feeds only those past the cache)
        and derives position ids from the attention mask.
        """
        import torch

        shared = self._shared_prefix_length(inputs)
        if not shared:
            ids, mask, _pos = self._pad_left(inputs)
            return {"input_ids": ids, "attention_mask": mask}
        tail_ids, mask, _pos, cache = self._prefixed_tails(inputs, shared)
        prefix = torch.tensor([inputs[0][:shared]], dtype=torch.long, device=self._device).expand(len(inputs), -1)
        return {"input_ids": torch.cat([prefix, tail_ids], dim=1), "attention_mask": mask, "past_key_values": cache}

    def _eos_ids(self) -> list[int]:
        ids: set[int] = set()
        cfg_eos = getattr(self._model.generation_config, "eos_token_id", None)
        if isinstance(cfg_eos, int):
            ids.add(cfg_eos)
        elif cfg_eos:
            ids.update(int(x) for x in cfg_eos)
        if self._tok.eos_token_id is not None:
            ids.add(int(self._tok.eos_token_id))
        return sorted(ids)

    # ------------------------------------------------------------------ scoring

    def _score(self, reqs: list[Request], inputs: list[list[int]]) -> list[Completion]:
        results: list[list[float]] = [[0.0] * len(r.choices) for r in reqs]
        choice_ids = [[self._choice_ids(c) for c in r.choices] for r in reqs]
        single = [i for i in range(len(reqs)) if all(len(c) == 1 for c in choice_ids[i])]
        single_set = set(single)
        # Fast path: every choice is one token -> one forward pass per input.
        for chunk in self._chunks(single, lambda i: len(inputs[i])):
            dist = self._next_token_logprobs([inputs[i] for i in chunk])
            for row, i in enumerate(chunk):
                results[i] = [float(dist[row, c[0]]) for c in choice_ids[i]]
        # General path: one sequence per (input, choice); sum the choice tokens' log-probs.
        pairs = [
            (i, j)
            for i in range(len(reqs))
            if i not in single_set
            for j, c in enumerate(choice_ids[i])
            if c  # an empty choice has log-probability 0
        ]
        for chunk_idx in self._chunks(list(range(len(pairs))), lambda k: len(inputs[pairs[k][0]]) + len(choice_ids[pairs[k][0]][pairs[k][1]])):
            items = [pairs[k] for k in chunk_idx]
            sums = self._continuation_logprobs([inputs[i] for i, _ in items], [choice_ids[i][j] for i, j in items])
            for (i, j), s in zip(items, sums):
                results[i][j] = s
        return [
            Completion(choice_logprobs=tuple(results[i]), prompt_tokens=len(inputs[i]), completion_tokens=0)
            for i in range(len(reqs))
        ]

    def _forward_logits(self, ids, mask, pos, keep: int, cache: Any = None):
        kw: dict[str, Any] = {"input_ids": ids, "attention_mask": mask, "position_ids": pos, "use_cache": cache is not None}
        if cache is not None:
            kw["past_key_values"] = cache
        if self._has_logits_to_keep:
            kw["logits_to_keep"] = keep
        logits = self._model(**kw).logits
        return logits[:, -keep:, :]

    def _next_token_logprobs(self, inputs: list[list[int]]):
        """Log-softmax over the vocabulary of the token after each input, shape (B, V)."""
        import torch

        if self._encdec:
            enc, enc_mask = self._pad_right(inputs)
            dec = torch.full((len(inputs), 1), self._decoder_start(), dtype=torch.long, device=self._device)
            logits = self._model(input_ids=enc, attention_mask=enc_mask, decoder_input_ids=dec, use_cache=False).logits[:, 0, :]
        else:
            logits = self._decoder_logits(inputs, 1, self._shared_prefix_length(inputs))[:, -1, :]
        return torch.log_softmax(logits.float(), dim=-1).cpu()

    def _continuation_logprobs(self, inputs: list[list[int]], conts: list[list[int]]) -> list[float]:
        """Sum of log p(continuation tokens | input) for each (input, continuation) pair."""
        if self._encdec:
            enc, enc_mask = self._pad_right(inputs)
            start = self._decoder_start()
            dec, dec_mask = self._pad_right([[start] + c[:-1] for c in conts])
            logits = self._model(
                input_ids=enc, attention_mask=enc_mask, decoder_input_ids=dec, decoder_attention_mask=dec_mask, use_cache=False
            ).logits
            return _sum_gathered(logits, conts, right_aligned=False)
        seqs = [a + c for a, c in zip(inputs, conts)]
        longest = max(len(c) for c in conts)
        # Left padding puts every sequence's end in the last column: the logits
        # predicting a continuation of n tokens are at columns -n-1 .. -2. The
        # shared prefix stops at least one token before each input's end, so
        # those columns always lie in the tails.
        logits = self._decoder_logits(seqs, longest + 1, self._shared_prefix_length(inputs))
        return _sum_gathered(logits[:, :longest, :], conts, right_aligned=True)


def _sum_gathered(logits, conts: list[list[int]], *, right_aligned: bool) -> list[float]:
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

        def __call__(self, input_ids, scores, **kwargs):
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


def _cut_at_stop(text: str, stops: tuple[str, ...]) -> str:
    """Truncate ``text`` before the earliest occurrence of any stop string."""
    cut = len(text)
    for s in stops:
        if s:
            k = text.find(s)
            if k != -1:
                cut = min(cut, k)
    return text[:cut]


def embedded_backend(name: str, **kwargs: Any) -> HFBackend:
    """An HFBackend on an embedded model (converted on first use; blocking).

    Identity is the embedded name and the GGUF's sha256.
    """
    from promptrobust.engine.model_store import ensure_embedded

    m = ensure_embedded(name)
    kwargs.setdefault("chat", m.is_chat)
    return HFBackend(str(m.path), identity_name=m.name, identity_revision=m.revision, **kwargs)


__all__ = ["HFBackend", "embedded_backend"]
