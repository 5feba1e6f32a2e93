"""The ``hf`` backend: a transformers model in this process (CPU or one GPU).

All torch work runs in a worker thread (``asyncio.to_thread``) under a lock,
so the scheduler's event loop keeps accepting work while a micro-batch runs,
and two batches never fight over the same cores.

Batches are sorted by length and padded on the left (decoder-only), with
position ids derived from the attention mask, so a request scores the same
alone or inside a batch of longer requests.

Exact CPU levers (each leaves log-probabilities within float rounding and
greedy texts identical; ``tests/test_hf_levers.py``):

* the fp32 Linear kernel: oneDNN (weights packed once) or torch's default (MKL), whichever is
  faster on this CPU, decided at load (``hf_kernels``; ``linear_kernel``); the output layer's
  kernel is decided on its own (``head_kernel``): a few rows against the whole vocabulary is a
  shape where MKL repacks the entire weight on every call, and oneDNN on a weight packed once
  is ~4x faster for Gemma 3's head on an Intel Xeon;
* prefix sharing: the requests of one candidate prompt start with the same
  tokens (chat template, instruction, few-shot block), often more than half
  of each input. Those tokens run once, their key/value tensors stay in a
  byte-bounded LRU keyed by the token prefix (``hf_prefix``;
  ``prefix_cache_mb``) and every later batch of the candidate reuses them;
  each row of a batch may carry its own cached prefix;
* length order: ``arrange_batches`` finds each request's candidate prefix
  in the scheduler's window and orders the window by what is left after it
  (the sample's length), across candidates: a batch then holds rows of one
  length, each after its own cached prefix, and pads little (``length_order``);
* generation decodes the batch step by step and drops finished rows, so a
  batch costs what its longest answer needs (``drop_finished``);
* prefix passes stop before the output layer (``prefix_without_head``): a
  prefix is computed for its keys and values, and a large vocabulary's head
  (Gemma 3: 262,144 x 640, 0.67 GB in fp32, read whole on every pass) costs
  a pass ~0.1 s on this CPU whatever its rows;
* short-tail batches (``short_tail_batches``): after a cached prefix a row is
  only its sample, so a batch may hold more rows, as many as keep its
  positions within ``batch_size`` whole inputs: fewer passes, each paying the
  head and the per-layer fixed costs once for more rows;
* cached prefixes enter a pass as views (``kv_views``): the key/value cache
  starts from the stored (or broadcast) tensors instead of a copy of them;
* label scoring reads only the labels' logits and the vocabulary's
  logsumexp (``label_logsumexp``) instead of a full log-softmax copied out.

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

from promptrobust.engine.serving.backends.base import (
    Backend,
    BackendError,
    BackendUnavailable,
    cut_into_batches,
    cut_least_padding,
)
from promptrobust.engine.serving.backends.hf_kernels import KERNELS, KernelChoice, choose_kernel, install, packed_weights
from promptrobust.engine.serving.backends.hf_prefix import PrefixCache, PrefixEntry, common_prefix_length, prefix_groups
from promptrobust.engine.serving.types import Completion, ModelIdentity, Request

# OMP_WAIT_POLICY=PASSIVE is set once, in promptrobust/__init__.py, before torch loads.

_DTYPES = ("auto", "float32", "bfloat16", "float16")
#: Shorter common prefixes are not worth a separate forward pass.
MIN_SHARED_PREFIX = 8
#: What one more forward pass costs, in positions (fixed cost of a pass over the marginal cost of a position,
#: SmolLM2-135M on the 2-core CPU of bench/results: ~18 ms over ~0.57 ms); decides where a batch is cut.
_FORWARD_OVERHEAD_POSITIONS = 32
#: Short-tail batches hold at most this many times ``batch_size`` rows (the scheduler's window is 4 batches).
_SHORT_TAIL_MAX_FACTOR = 4
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
        linear_kernel: str = "auto",
        head_kernel: str = "auto",
        prefix_cache_mb: float = 256.0,
        length_order: bool = True,
        drop_finished: bool = True,
        prefix_without_head: bool = True,
        short_tail_batches: bool = True,
        kv_views: bool = True,
        label_logsumexp: bool = True,
    ) -> None:
        if not model:
            raise ValueError("hf backend: model must be a Hugging Face id or a local directory")
        if dtype not in _DTYPES:
            raise ValueError(f"hf backend: dtype {dtype!r} is not one of {', '.join(_DTYPES)}")
        if batch_size < 1:
            raise ValueError(f"hf backend: batch_size must be >= 1 (got {batch_size})")
        if linear_kernel not in KERNELS:
            raise ValueError(f"hf backend: linear_kernel {linear_kernel!r} is not one of {', '.join(KERNELS)}")
        if head_kernel not in KERNELS:
            raise ValueError(f"hf backend: head_kernel {head_kernel!r} is not one of {', '.join(KERNELS)}")
        if not prefix_cache_mb >= 0:
            raise ValueError(f"hf backend: prefix_cache_mb must be >= 0 (got {prefix_cache_mb})")
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
        self.linear_kernel_request = linear_kernel
        self.head_kernel_request = head_kernel
        self.kernel: KernelChoice | None = None
        self.prefixes = PrefixCache(int(prefix_cache_mb * 2**20))
        #: input tokens -> length of its candidate's prefix, as the latest ``arrange_batches`` found it
        self._planned_prefixes: dict[tuple[int, ...], int] = {}
        self.length_order = length_order
        self.drop_finished = drop_finished
        self.prefix_without_head = prefix_without_head
        self.short_tail_batches = short_tail_batches
        self.kv_views = kv_views
        self.label_logsumexp = label_logsumexp
        #: token positions run through the model: prefixes, padded tails, decode steps
        self.positions = 0
        #: None, or a dict a benchmark hands in: each greedy request's smallest gap between its two highest
        #: logits over its decode steps (how far its text is from changing under float rounding)
        self.greedy_margins: dict[Request, float] | None = None
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

    def placement(self) -> tuple[str, str]:
        """(device, dtype name) this backend loads the model on."""
        return self._pick_device(), self._planned_dtype()

    def _pick_device(self) -> str:
        if self.device_request != "auto":
            return self.device_request
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def _resolve_revision(self) -> str:
        """A weights revision: hub commit sha when cached, else a sha256 of the local model files."""
        local = Path(self.model_ref).expanduser()
        if local.is_dir():
            from promptrobust.engine.serving.model_store import cached_sha256, store_root

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
        self.prefixes.clear()

    @property
    def model(self) -> Any:
        """The loaded transformers model (None before ``start()``)."""
        return self._model

    @property
    def tokenizer(self) -> Any:
        """The loaded tokenizer (None before ``start()``)."""
        return self._tok

    def runtime(self) -> dict[str, Any]:
        """How this backend computes (for benchmark records): kernel, levers, prefix cache and work counters."""
        st = self.prefixes.stats
        return {
            "dtype": self._dtype_name or self._planned_dtype(),
            "linear_kernel": self.kernel.kernel if self.kernel else None,
            "linear_kernel_reason": self.kernel.reason if self.kernel else None,
            "head_kernel": self.kernel.head if self.kernel else None,
            "head_kernel_reason": self.kernel.head_reason if self.kernel else None,
            "packed_weights": packed_weights(self._model) if self._model is not None else False,
            "share_prefix": self.share_prefix,
            "prefix_cache_mb": self.prefixes.budget_bytes / 2**20,
            "length_order": self.length_order,
            "drop_finished": self.drop_finished,
            "prefix_without_head": self.prefix_without_head,
            "short_tail_batches": self.short_tail_batches,
            "kv_views": self.kv_views,
            "label_logsumexp": self.label_logsumexp,
            "prefix_cache": {"entries": len(self.prefixes.entries), "bytes": self.prefixes.bytes, "hits": st.hits,
                             "partial_hits": st.partial_hits, "misses": st.misses, "evictions": st.evictions},
            "positions": self.positions,
        }

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
        device, dtype_name = self.placement()
        from promptrobust.engine.serving.model_store import quiet_transformers_progress  # issue 12: no "Loading weights" bar

        quiet_transformers_progress()
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
        try:
            kernel = choose_kernel(self.linear_kernel_request, model, device, dtype_name, self.head_kernel_request)
        except ValueError as e:
            raise BackendUnavailable(str(e)) from None
        install(model, kernel.kernel, kernel.head)
        self.kernel = kernel
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
                for chunk in self._chunks(group, lambda i: len(encoded[i]), [encoded[i] for i in group]):
                    for i, c in zip(chunk, self._generate([requests[i] for i in chunk], [encoded[i] for i in chunk])):
                        out[i] = c
            if score:
                for i, c in zip(score, self._score([requests[i] for i in score], [encoded[i] for i in score])):
                    out[i] = c
        assert all(c is not None for c in out)
        return out  # type: ignore[return-value]

    def _chunks(self, idx: list[int], length, inputs: Sequence[list[int]] = ()) -> list[list[int]]:
        return cut_into_batches(sorted(idx, key=length), self._row_cap(inputs))

    def _row_cap(self, inputs: Sequence[list[int]]) -> int:
        """Most rows of one pass: ``batch_size``; with ``short_tail_batches``, a batch that ``arrange_batches``
        planned (each row after its prefix, its size already bounded there) runs whole, up to the window."""
        size = self.batch_size
        if not (self.short_tail_batches and self._sharing_possible() and inputs):
            return size
        planned = self._planned_prefixes
        if not all(tuple(s) in planned for s in inputs):
            return size
        return max(size, min(_SHORT_TAIL_MAX_FACTOR * size, len(inputs)))

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
        """Group requests into batches by the length each has after its candidate's prefix.

        Groups are found on the token ids (``hf_prefix.prefix_groups``): the
        requests of one candidate share its prefix, which runs once (and is
        then cached). The prefix found for each input is remembered for the
        batches of this plan, so a row keeps it even when it shares its batch
        with rows of other candidates; the window is then ordered by the
        length after the prefix, which keeps each batch's padding small.
        With ``length_order=False`` the requests keep token-id order (the
        engine's old plan, for comparison); without prefix sharing, batches
        follow input length alone.
        """
        by_length = super().arrange_batches(requests, batch_size)
        if not self._sharing_possible() or len(requests) < 2:
            return by_length
        try:
            encoded = [self._encode_input(r) for r in requests]
        except BackendError:
            return by_length  # the batch will report the error itself
        if not self.length_order:
            self._planned_prefixes = {}
            return cut_into_batches(sorted(range(len(requests)), key=lambda i: encoded[i]), batch_size)
        planned: dict[tuple[int, ...], int] = {}
        sort_key: dict[int, tuple[int, int]] = {}
        for g, (shared, rows) in enumerate(prefix_groups(encoded)):
            shares = len(rows) >= 2 and shared >= MIN_SHARED_PREFIX
            for i in rows:
                if shares:
                    planned[tuple(encoded[i])] = shared
                sort_key[i] = (len(encoded[i]) - (shared if shares else 0), g)
        self._planned_prefixes = planned
        order = sorted(range(len(requests)), key=sort_key.__getitem__)
        tails = [sort_key[i][0] for i in range(len(requests))]
        if self.short_tail_batches:  # rows after a prefix are short: more of them per pass, no more positions
            return cut_least_padding(order, tails, _SHORT_TAIL_MAX_FACTOR * batch_size, _batch_overhead(requests),
                                     max_positions=batch_size * max(len(e) for e in encoded))
        return cut_least_padding(order, tails, batch_size, _batch_overhead(requests))

    def _sharing_possible(self) -> bool:
        return self.share_prefix and not self._encdec and self._model is not None

    def _row_prefixes(self, basis: Sequence[list[int]]) -> list[PrefixEntry | None]:
        """Each row's cached prefix (None: the row runs whole); a prefix always leaves the row a token of its own."""
        rows: list[PrefixEntry | None] = [None] * len(basis)
        if not self._sharing_possible():
            return rows
        planned = self._planned_prefixes  # one reference: arrange_batches may replace it meanwhile
        unplanned: list[int] = []
        wanted: dict[int, tuple[int, ...]] = {}
        for i, b in enumerate(basis):
            shared = planned.get(tuple(b))
            if shared is None:
                unplanned.append(i)
            else:
                wanted[i] = tuple(b[:shared])
        keys = list(wanted.values())
        root = tuple(keys[0][: common_prefix_length(keys)]) if keys else ()
        if len(set(keys)) > 1 and root not in self.prefixes.entries and len(root) >= MIN_SHARED_PREFIX:
            # what the new prefixes share (chat template, the instruction a word attack edits) runs once
            self.prefixes.obtain(root, self._compute_prefix, MIN_SHARED_PREFIX)
        fresh = self._compute_prefixes(self.prefixes.missing(keys, MIN_SHARED_PREFIX))
        for i, key in wanted.items():
            rows[i] = fresh.get(key) or self.prefixes.obtain(key, self._compute_prefix, MIN_SHARED_PREFIX)
        if not unplanned:
            return rows
        groups = prefix_groups(basis, unplanned)
        alone: list[int] = []
        for shared, members in groups:
            if len(members) >= 2 and shared >= MIN_SHARED_PREFIX:
                entry = self.prefixes.obtain(tuple(basis[members[0]][:shared]), self._compute_prefix, MIN_SHARED_PREFIX)
                for i in members:
                    rows[i] = entry
            else:
                alone += members
        # Rows alone in this batch (after the groups, whose prefixes they may share): the longest start
        # any cached prefix holds; failing that, the start every row of the batch shares (chat template,
        # common instruction words), so that no row widens the whole batch with its full length.
        batch_shared = min(common_prefix_length(basis), min(len(b) for b in basis) - 1)
        for i in alone:
            entry = self.prefixes.longest_within(tuple(basis[i][:-1]), MIN_SHARED_PREFIX)
            if (entry is None or len(entry.tokens) < batch_shared) and batch_shared >= MIN_SHARED_PREFIX:
                entry = self.prefixes.obtain(tuple(basis[i][:batch_shared]), self._compute_prefix, MIN_SHARED_PREFIX)
            rows[i] = entry
        return rows

    def _compute_prefix(self, tokens: tuple[int, ...], start: PrefixEntry | None) -> PrefixEntry:
        """Key/value tensors of ``tokens``, continuing from a cached ``start`` when there is one."""
        import torch
        from transformers import DynamicCache

        done = len(start.tokens) if start is not None else 0
        cache = self._cache_of(start.layers) if start is not None else DynamicCache()
        ids = torch.tensor([tokens[done:]], dtype=torch.long, device=self._device)
        pos = torch.arange(done, len(tokens), device=self._device).unsqueeze(0)
        if self._headless() is not None:  # keys and values are all a prefix is for
            self._headless()(input_ids=ids, position_ids=pos, past_key_values=cache, use_cache=True)
        else:
            kw: dict[str, Any] = {"logits_to_keep": 1} if self._has_logits_to_keep else {}
            self._model(input_ids=ids, position_ids=pos, past_key_values=cache, use_cache=True, **kw)
        self.positions += len(tokens) - done
        return PrefixEntry.of(tokens, [(layer.keys, layer.values) for layer in cache.layers])

    def _compute_prefixes(self, todo: list[tuple[tuple[int, ...], PrefixEntry | None]]) -> dict[tuple[int, ...], PrefixEntry]:
        """Compute the prefixes ``todo`` (tokens, cached start), several per forward pass, and cache them.

        Each row continues from its own start, as in a batch of requests; its
        entry is then cut out of the batch's key/value cache without the
        padding. One pass for the several new candidates of a batch costs
        far less than one pass each (a pass's fixed cost is ~30 positions);
        prefixes of very different lengths go in separate passes where the
        padding would cost more (``cut_least_padding``).
        """
        out: dict[tuple[int, ...], PrefixEntry] = {}
        rest = [len(t) - (len(s.tokens) if s is not None else 0) for t, s in todo]
        order = sorted(range(len(todo)), key=rest.__getitem__)
        for run in cut_least_padding(order, rest, self.batch_size, _FORWARD_OVERHEAD_POSITIONS):
            if len(run) == 1:
                tokens = todo[run[0]][0]
                out[tokens] = self.prefixes.obtain(tokens, self._compute_prefix, MIN_SHARED_PREFIX)
            else:
                out.update(self._compute_prefix_batch([todo[i] for i in run]))
        return out

    def _compute_prefix_batch(self, todo: list[tuple[tuple[int, ...], PrefixEntry | None]]) -> dict[tuple[int, ...], PrefixEntry]:
        """One forward pass for ``todo``; each row's entry cut out of the pass's key/value cache."""
        import torch

        seqs = [list(t) for t, _ in todo]
        starts = [s for _, s in todo]
        _, (cache, _, _) = self._forward_after(seqs, starts, 0 if self._headless() is not None else 1, keep_cache=True)
        width = max(len(s.tokens) if s is not None else 0 for s in starts)
        out: dict[tuple[int, ...], PrefixEntry] = {}
        for row, (tokens, start) in enumerate(todo):
            done = len(start.tokens) if start is not None else 0
            tail = len(tokens) - done
            layers = []
            for layer in cache.layers:
                k, v = layer.keys, layer.values  # (rows, heads, width + tail width, head dim), left-padded parts
                end = k.shape[2]
                layers.append((torch.cat([k[row : row + 1, :, width - done : width], k[row : row + 1, :, end - tail :]], dim=2),
                               torch.cat([v[row : row + 1, :, width - done : width], v[row : row + 1, :, end - tail :]], dim=2)))
            out[tokens] = PrefixEntry.of(tokens, layers)
            self.prefixes.add_computed(out[tokens], start)
        return out

    def _rows_forward(self, seqs: list[list[int]], basis: list[list[int]], keep: int, *, keep_cache: bool = False):
        """Forward pass of ``seqs``, each row after its own cached prefix of ``basis`` (its input); see ``_forward_after``."""
        return self._forward_after(seqs, self._row_prefixes(basis), keep, keep_cache=keep_cache)

    def _forward_after(self, seqs: list[list[int]], entries: list[PrefixEntry | None], keep: int, *, keep_cache: bool = False):
        """Forward pass of ``seqs``, each row after its cached prefix ``entries[row]`` (None: the row runs whole).

        Layout per row: [padding | cached prefix | padding | tail]; keys and
        values of the prefix come from the prefix cache, the padding is
        masked, and each tail keeps the positions it would have alone, so a
        row scores as it would unbatched and without a prefix. Returns the
        logits of the last ``keep`` columns, and with ``keep_cache`` the
        key/value cache, attention mask and each row's next position.
        """
        import torch
        from transformers import DynamicCache

        lens = [len(e.tokens) if e is not None else 0 for e in entries]
        width = max(lens)
        ids, tail_mask, tail_pos = self._pad_left([s[n:] for s, n in zip(seqs, lens)])
        self.positions += ids.numel()
        rows = len(seqs)
        lens_t = torch.tensor(lens, dtype=torch.long, device=self._device)
        pos = tail_pos + lens_t.unsqueeze(1)
        if width:
            prefix_mask = (torch.arange(width, device=self._device).unsqueeze(0) >= (width - lens_t).unsqueeze(1)).long()
            mask = torch.cat([prefix_mask, tail_mask], dim=1)
            cache = self._cache_of(self._stack_prefixes(entries, lens, width))
        else:
            mask = tail_mask
            cache = DynamicCache() if keep_cache else None
        logits = self._forward_logits(ids, mask, pos, keep, cache=cache)
        if not keep_cache:
            return logits, None
        lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long, device=self._device)
        return logits, (cache, mask, lengths)

    def _cache_of(self, layers: list[tuple[Any, Any]]) -> Any:
        """A DynamicCache holding ``layers``: with ``kv_views`` the tensors themselves (the pass's own
        concatenation is then their only copy), else as transformers fills one (a copy on creation)."""
        from transformers import DynamicCache

        if not self.kv_views:
            return DynamicCache(ddp_cache_data=layers)
        cache = DynamicCache(ddp_cache_data=[(k[..., :0, :], v[..., :0, :]) for k, v in layers])
        for layer, (k, v) in zip(cache.layers, layers):
            layer.keys, layer.values = k, v
        return cache

    def _stack_prefixes(self, entries: list[PrefixEntry | None], lens: list[int], width: int) -> list[tuple[Any, Any]]:
        """Per layer (keys, values) of shape (rows, heads, width, head_dim), each row's prefix right-aligned."""
        import torch

        first = next(e for e in entries if e is not None)
        if all(e is first for e in entries):  # one prefix for the whole batch
            return [(k.expand(len(entries), -1, -1, -1), v.expand(len(entries), -1, -1, -1)) for k, v in first.layers]
        out = []
        for layer, (k0, v0) in enumerate(first.layers):
            shape = (len(entries), k0.shape[1], width, k0.shape[3])
            keys = torch.zeros(shape, dtype=k0.dtype, device=k0.device)
            values = torch.zeros((len(entries), v0.shape[1], width, v0.shape[3]), dtype=v0.dtype, device=v0.device)
            for row, (e, n) in enumerate(zip(entries, lens)):
                if e is not None:
                    keys[row, :, width - n :] = e.layers[layer][0][0]
                    values[row, :, width - n :] = e.layers[layer][1][0]
            out.append((keys, values))
        return out

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
        if not self._encdec:
            return self._decode(reqs, inputs)
        from transformers import GenerationConfig, StoppingCriteriaList

        tok = self._tok
        model = self._model
        max_new = [max(1, r.decoding.max_tokens) for r in reqs]
        ids, mask = self._pad_right(inputs)
        model_inputs: dict[str, Any] = {"input_ids": ids, "attention_mask": mask}
        prefix = 1  # decoder start token
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

    def _decode(self, reqs: list[Request], inputs: list[list[int]]) -> list[Completion]:
        """Decoder-only generation, one step for the whole batch at a time.

        Each row stops at EOS, at its own ``max_tokens`` or once its text
        holds a stop string; with ``drop_finished`` a finished row leaves the
        batch (its key/value rows are dropped), so later steps cost only the
        rows still writing.
        """
        import torch

        tok = self._tok
        max_new = [max(1, r.decoding.max_tokens) for r in reqs]
        stops = [r.decoding.stop for r in reqs]
        temp = reqs[0].decoding.temperature
        eos = set(self._eos_ids())
        logits, state = self._rows_forward(inputs, inputs, 1, keep_cache=True)
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
                if self.greedy_margins is not None:
                    self._note_margins(last, [reqs[i] for i in active], live, active)
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
            if self.drop_finished and len(keep) < len(active):
                sel = torch.tensor(keep, dtype=torch.long, device=self._device)
                cache.batch_select_indices(sel)
                mask, next_pos, picked = mask[sel], next_pos[sel], picked[sel]
                active = [active[row] for row in keep]
            rows = len(active)
            mask = torch.cat([mask, torch.ones((rows, 1), dtype=mask.dtype, device=self._device)], dim=1)
            logits = self._forward_logits(picked.unsqueeze(1), mask, next_pos.unsqueeze(1), 1, cache=cache)
            self.positions += rows
            next_pos = next_pos + 1
        out = []
        for i, r in enumerate(reqs):
            text = _cut_at_stop(tok.decode(new[i], skip_special_tokens=True), r.decoding.stop)
            out.append(Completion(text=text, prompt_tokens=len(inputs[i]), completion_tokens=len(new[i])))
        return out

    def _note_margins(self, last: Any, rows: list[Request], live: list[bool], active: list[int]) -> None:
        """Record each live row's gap between its two highest logits at this step (``greedy_margins``)."""
        import torch

        top = torch.topk(last, 2, dim=-1).values
        gaps = (top[:, 0] - top[:, 1]).tolist()
        margins = self.greedy_margins
        for row, (request, i) in enumerate(zip(rows, active)):
            if live[i]:
                margins[request] = min(margins.get(request, float("inf")), gaps[row])

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
        for chunk in self._chunks(single, lambda i: len(inputs[i]), [inputs[i] for i in single]):
            if self.label_logsumexp and not self._encdec:
                got = self._label_logprobs([inputs[i] for i in chunk], [[c[0] for c in choice_ids[i]] for i in chunk])
                for row, i in enumerate(chunk):
                    results[i] = got[row]
                continue
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

    def _headless(self) -> Any:
        """The decoder without its output layer (None: lever off, or no such module to call)."""
        if not self.prefix_without_head or self._encdec:
            return None
        decoder = getattr(self._model, "model", None)  # transformers' CausalLM: .model is the decoder stack
        return decoder if decoder is not None and decoder is not self._model and callable(decoder) else None

    def _forward_logits(self, ids, mask, pos, keep: int, cache: Any = None):
        """Logits of the last ``keep`` columns; ``keep=0``: the decoder alone runs (no output layer), returns None."""
        kw: dict[str, Any] = {"input_ids": ids, "attention_mask": mask, "position_ids": pos, "use_cache": cache is not None}
        if cache is not None:
            kw["past_key_values"] = cache
        if keep == 0:
            self._headless()(**kw)
            return None
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
            logits = self._rows_forward(inputs, inputs, 1)[0][:, -1, :]
        return torch.log_softmax(logits.float(), dim=-1).cpu()

    def _label_logprobs(self, inputs: list[list[int]], labels: list[list[int]]) -> list[list[float]]:
        """log p(label token | input) for each row's label tokens: their logits minus the logsumexp over the
        whole vocabulary (the exact normaliser); nothing of the vocabulary's size leaves the pass."""
        import torch

        logits = self._rows_forward(inputs, inputs, 1)[0][:, -1, :].float()
        norm = torch.logsumexp(logits, dim=-1)
        width = max(len(x) for x in labels)
        idx = torch.tensor([x + [x[0]] * (width - len(x)) for x in labels], dtype=torch.long, device=logits.device)
        picked = (logits.gather(1, idx) - norm.unsqueeze(1)).cpu().tolist()
        return [row[: len(x)] for row, x in zip(picked, labels)]

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
        # predicting a continuation of n tokens are at columns -n-1 .. -2. A
        # row's prefix stops at least one token before its input's end, so
        # those columns always lie in the tails.
        logits = self._rows_forward(seqs, inputs, longest + 1)[0]
        return _sum_gathered(logits[:, :longest, :], conts, right_aligned=True)


def _batch_overhead(requests: Sequence[Request]) -> int:
    """Positions one more batch of ``requests`` costs beyond its rows: one pass, plus one per decode step if it generates.

    A split batch computes the same rows but pays each pass's fixed cost twice.
    Answers stop at EOS well before ``max_tokens`` as a rule; half of it is
    the planning guess for the steps.
    """
    steps = max((r.decoding.max_tokens for r in requests if r.kind == "generate"), default=0)
    return _FORWARD_OVERHEAD_POSITIONS * (1 + (steps + 1) // 2)


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
    from promptrobust.engine.serving.model_store import ensure_embedded

    m = ensure_embedded(name)
    kwargs.setdefault("chat", m.is_chat)
    return HFBackend(str(m.path), identity_name=m.name, identity_revision=m.revision, **kwargs)


__all__ = ["HFBackend", "embedded_backend"]
