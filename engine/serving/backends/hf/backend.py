"""The ``HFBackend``: a transformers model in this process (CPU or one GPU), behind the Backend interface.

All torch work runs in a worker thread (``asyncio.to_thread``) under a lock,
so the scheduler's event loop keeps accepting work while a micro-batch runs,
and two batches never fight over the same cores.

The backend composes the package's parts: ``options`` (one frozen value for
every choice), ``loading`` (the model and what identifies it), ``passes``
(forward passes with prefix reuse), ``scoring`` and ``generation`` (what a
request asks), ``prefix`` (the window's plan and the prefix cache) and
``kernels`` (the Linear layers' kernel). An ``observer`` sees inside
(benchmarks, tests); it is not an option.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from promptrobust.engine.serving.backends.base import Backend, BackendError, cut_into_batches, cut_least_padding
from promptrobust.engine.serving.backends.hf.generation import generate
from promptrobust.engine.serving.backends.hf.loading import LoadedModel, load, peek_chat_template, placement, planned_dtype, resolve_revision
from promptrobust.engine.serving.backends.hf.scoring import score
from promptrobust.engine.serving.backends.hf.kernels import KernelChoice, packed_weights
from promptrobust.engine.serving.backends.hf.observer import HFObserver
from promptrobust.engine.serving.backends.hf.options import LOAD_FIELDS, HFOptions
from promptrobust.engine.serving.backends.hf.passes import FORWARD_OVERHEAD_POSITIONS, SHORT_TAIL_MAX_FACTOR, ForwardPasses
from promptrobust.engine.serving.backends.hf.prefix import PrefixCache, plan_prefixes
from promptrobust.engine.serving.types import Completion, ModelIdentity, Request

__all__ = ["EmbeddedHFBackend", "HFBackend", "embedded_backend"]

#: Encoded inputs kept between ``arrange_batches`` and the batch that runs them.
_ENCODED_MEMORY = 4096


class HFBackend(Backend):
    """transformers ``AutoModelForCausalLM`` / ``AutoModelForSeq2SeqLM`` backend.

    ``model``: a Hugging Face id or a local folder; ``options``: every choice, whole.
    ``identity_name`` / ``identity_revision`` say who the model is when the registry
    knows better than the folder (an embedded model: its name and its GGUF's sha256);
    otherwise ``identity`` hashes a local folder's model files once (remembered in
    the model store, keyed by path, size and mtime) or reads the hub's commit.
    ``identity`` is available before ``start()``.
    """

    kind = "hf"
    batching = True

    def __init__(self, model: str, options: HFOptions | None = None, *, identity_name: str | None = None,
                 identity_revision: str | None = None, observer: HFObserver | None = None) -> None:
        if not model:
            raise ValueError("hf backend: model must be a Hugging Face id or a local directory")
        options = options if options is not None else HFOptions()
        if not isinstance(options, HFOptions):
            raise TypeError(f"hf backend: options must be an HFOptions, not {type(options).__name__}")
        self.model_ref = model
        self._identity_name = identity_name or model
        self._identity_revision = identity_revision
        self._lock = threading.Lock()
        self.passes = ForwardPasses(options, observer or HFObserver())
        self._choice_ids_cache: dict[str, list[int]] = {}
        self._encoded: OrderedDict[Request, list[int]] = OrderedDict()

    # ------------------------------------------------------------------ options and observer

    @property
    def options(self) -> HFOptions:
        return self.passes.options

    def use_options(self, options: HFOptions) -> None:
        """Switch the levers (or the batch size) of this backend: benchmarks and the lever tests compare them
        on one loaded model.

        Options that decide how the model loads (``LOAD_FIELDS``) must stay as they are once it is loaded;
        a different ``prefix_cache_mb`` starts an empty prefix cache of that size.
        """
        old = self.passes.options
        if self.passes.loaded is not None:
            changed = [f for f in LOAD_FIELDS if getattr(options, f) != getattr(old, f)]
            if changed:
                raise ValueError(f"hf backend: {', '.join(changed)} decide how the model loads; build a new backend")
        self.passes.options = options
        if options.prefix_cache_mb != old.prefix_cache_mb:
            self.passes.prefixes = PrefixCache(int(options.prefix_cache_mb * 2**20))

    def with_options(self, **changes: Any) -> None:
        """``use_options`` with these fields changed (``backend.with_options(share_prefix=False)``)."""
        self.use_options(replace(self.options, **changes))

    @property
    def observer(self) -> HFObserver:
        return self.passes.observer

    @observer.setter
    def observer(self, observer: HFObserver | None) -> None:
        self.passes.observer = observer or HFObserver()

    @property
    def batch_size(self) -> int:
        return self.options.batch_size

    @property
    def max_batch_size(self) -> int:  # type: ignore[override]  # the Backend attribute, from the options
        return self.options.batch_size

    @property
    def prefixes(self) -> PrefixCache:
        """The prefix key/value cache (a benchmark may hand in its own)."""
        return self.passes.prefixes

    @prefixes.setter
    def prefixes(self, cache: PrefixCache) -> None:
        self.passes.prefixes = cache

    @property
    def positions(self) -> int:
        """Token positions run through the model so far: prefixes, padded tails, decode steps."""
        return self.passes.positions

    @property
    def planned_prefixes(self) -> dict[tuple[int, ...], int]:
        """Input tokens -> the length of the prefix it runs after, as the latest ``arrange_batches`` planned."""
        return self.passes.planned

    # ------------------------------------------------------------------ identity

    @property
    def identity(self) -> ModelIdentity:
        if self._identity_revision is None:
            self._identity_revision = self._resolve_revision()
        loaded = self.passes.loaded
        dtype = loaded.dtype_name if loaded is not None else planned_dtype(self.options)
        extra = [("dtype", dtype)]
        if self.options.gguf_file:
            extra.append(("gguf_file", self.options.gguf_file))
        return ModelIdentity(backend="hf", name=self._identity_name, revision=self._identity_revision, extra=tuple(extra))

    def _resolve_revision(self) -> str:
        return resolve_revision(self.model_ref, self.options)

    def placement(self) -> tuple[str, str]:
        """(device, dtype name) this backend loads the model on."""
        return placement(self.options)

    # ------------------------------------------------------------------ lifecycle

    @property
    def is_chat(self) -> bool:
        if self.options.chat is not None:
            return self.options.chat
        if self.passes.loaded is not None:
            return bool(getattr(self.passes.loaded.tokenizer, "chat_template", None))
        peeked = peek_chat_template(self.model_ref, self.options)
        if peeked is None:
            raise BackendError("hf backend: is_chat is known after start(); call start() first")
        return peeked

    async def start(self) -> None:
        if self.passes.loaded is None:
            self.passes.loaded = await asyncio.to_thread(self._load_model)

    def _load_model(self) -> LoadedModel:
        """Load the model (in a worker thread); ``random_model`` builds its own instead."""
        return load(self.model_ref, self.options)

    async def close(self) -> None:
        self.passes.loaded = None
        self.passes.prefixes.clear()

    @property
    def model(self) -> Any:
        """The loaded transformers model (None before ``start()``)."""
        return self.passes.loaded.model if self.passes.loaded is not None else None

    @property
    def tokenizer(self) -> Any:
        """The loaded tokenizer (None before ``start()``)."""
        return self.passes.loaded.tokenizer if self.passes.loaded is not None else None

    @property
    def kernel(self) -> KernelChoice | None:
        """What runs the Linear layers and why (None before ``start()``)."""
        return self.passes.loaded.kernel if self.passes.loaded is not None else None

    def runtime(self) -> dict[str, object]:
        """How this backend computes (for benchmark records): kernel, levers, prefix cache and work counters."""
        cache = self.passes.prefixes
        st = cache.stats
        kernel = self.kernel
        return {
            "dtype": self.passes.loaded.dtype_name if self.passes.loaded is not None else planned_dtype(self.options),
            "linear_kernel": kernel.kernel if kernel else None,
            "linear_kernel_reason": kernel.reason if kernel else None,
            "head_kernel": kernel.head if kernel else None,
            "head_kernel_reason": kernel.head_reason if kernel else None,
            "packed_weights": packed_weights(self.model) if self.model is not None else False,
            **self.options.levers(),
            "prefix_cache_mb": cache.budget_bytes / 2**20,
            "prefix_cache": {"entries": len(cache.entries), "bytes": cache.bytes, "hits": st.hits,
                             "partial_hits": st.partial_hits, "misses": st.misses, "evictions": st.evictions},
            "positions": self.positions,
        }

    # ------------------------------------------------------------------ requests

    async def complete_batch(self, requests: Sequence[Request]) -> list[Completion]:
        if self.passes.loaded is None:
            raise BackendError("hf backend: call start() before sending requests")
        if not requests:
            return []
        return await asyncio.to_thread(self._run, list(requests))

    def _run(self, requests: list[Request]) -> list[Completion]:
        import torch

        passes = self.passes
        with self._lock, torch.inference_mode():
            encoded = [self.encode_input(r) for r in requests]
            out: list[Completion | None] = [None] * len(requests)
            gen = [i for i, r in enumerate(requests) if r.kind == "generate"]
            scored = [i for i, r in enumerate(requests) if r.kind == "score_choices"]
            for temp in sorted({requests[i].decoding.temperature for i in gen}):
                group = [i for i in gen if requests[i].decoding.temperature == temp]
                for chunk in passes.chunks(group, lambda i: len(encoded[i]), [encoded[i] for i in group]):
                    done = generate(passes, [requests[i] for i in chunk], [encoded[i] for i in chunk])
                    for i, c in zip(chunk, done):
                        out[i] = c
            if scored:
                reqs = [requests[i] for i in scored]
                choice_ids = [[self.choice_ids(c) for c in r.choices] for r in reqs]
                for i, c in zip(scored, score(passes, reqs, [encoded[i] for i in scored], choice_ids)):
                    out[i] = c
        assert all(c is not None for c in out)
        return out  # type: ignore[return-value]

    def encode_input(self, r: Request) -> list[int]:
        """Token ids of a request's input (after ``start()``), remembered for a while (``arrange_batches``
        encodes them first)."""
        ids = self._encoded.get(r)
        if ids is None:
            ids = self._encode_uncached(r)
            self._encoded[r] = ids
            if len(self._encoded) > _ENCODED_MEMORY:
                self._encoded.popitem(last=False)
        return ids

    def _encode_uncached(self, r: Request) -> list[int]:
        m = self.passes.model
        tok = m.tokenizer
        if r.messages is not None:
            if not getattr(tok, "chat_template", None):
                raise BackendError(
                    f"hf backend: model {self.model_ref!r} has no chat template; send prompt= requests instead of messages="
                )
            msgs = [{"role": msg.role, "content": msg.content} for msg in r.messages]
            text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
            ids = tok(text, add_special_tokens=False)["input_ids"]
        else:
            ids = tok(r.prompt, add_special_tokens=True)["input_ids"]
        if not ids:
            raise BackendError("hf backend: empty input after tokenisation")
        if m.max_len is not None and len(ids) >= m.max_len:
            raise BackendError(
                f"hf backend: input of {len(ids)} tokens exceeds the model's context of {m.max_len}; shorten it"
            )
        return list(ids)

    def choice_ids(self, choice: str) -> list[int]:
        """A choice's own tokens (no special tokens), as scoring appends them to an input."""
        ids = self._choice_ids_cache.get(choice)
        if ids is None:
            ids = list(self.passes.model.tokenizer(choice, add_special_tokens=False)["input_ids"]) if choice else []
            self._choice_ids_cache[choice] = ids
        return ids

    # ------------------------------------------------------------------ the window's plan

    def arrange_batches(self, requests: Sequence[Request], batch_size: int) -> list[list[int]]:
        """Group requests into batches by the length each has after its candidate's prefix.

        Groups are found on the token ids (``prefix.plan_prefixes``): the
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
        passes = self.passes
        if not passes.sharing_possible() or len(requests) < 2:
            return by_length
        try:
            encoded = [self.encode_input(r) for r in requests]
        except BackendError:
            return by_length  # the batch will report the error itself
        if not self.options.length_order:
            passes.planned = {}
            return cut_into_batches(sorted(range(len(requests)), key=lambda i: encoded[i]), batch_size)
        passes.planned, sort_key = plan_prefixes(encoded)
        order = sorted(range(len(requests)), key=sort_key.__getitem__)
        tails = [sort_key[i][0] for i in range(len(requests))]
        if self.options.short_tail_batches:  # rows after a prefix are short: more of them per pass, no more positions
            return cut_least_padding(order, tails, SHORT_TAIL_MAX_FACTOR * batch_size, _batch_overhead(requests),
                                     max_positions=batch_size * max(len(e) for e in encoded))
        return cut_least_padding(order, tails, batch_size, _batch_overhead(requests))


def _batch_overhead(requests: Sequence[Request]) -> int:
    """Positions one more batch of ``requests`` costs beyond its rows: one pass, plus one per decode step if it generates.

    A split batch computes the same rows but pays each pass's fixed cost twice.
    Answers stop at EOS well before ``max_tokens`` as a rule; half of it is
    the planning guess for the steps.
    """
    steps = max((r.decoding.max_tokens for r in requests if r.kind == "generate"), default=0)
    return FORWARD_OVERHEAD_POSITIONS * (1 + (steps + 1) // 2)


class EmbeddedHFBackend(HFBackend):
    """An HFBackend on an embedded model, converted from its GGUF when it first loads (``start``),
    not when built: a run whose every answer is in the cache never converts nor loads it. What
    identifies it (name, the GGUF's sha256, chat or not) is known without the conversion."""

    def __init__(self, name: str, options: HFOptions | None = None, *, observer: HFObserver | None = None) -> None:
        from promptrobust.engine.serving.model_store import locate_embedded

        m = locate_embedded(name)
        options = options if options is not None else HFOptions()
        if options.chat is None:
            options = replace(options, chat=m.is_chat)
        super().__init__(str(m.path), options, identity_name=m.name, identity_revision=m.revision, observer=observer)
        self.embedded_name = name

    def _load_model(self) -> LoadedModel:
        from promptrobust.engine.serving.model_store import ensure_embedded

        self.model_ref = str(ensure_embedded(self.embedded_name).path)  # converts once (said as it goes)
        return super()._load_model()


def embedded_backend(name: str, options: HFOptions | None = None, *, observer: HFObserver | None = None) -> HFBackend:
    """An HFBackend on an embedded model (converted on first load, not when built).

    Identity is the embedded name and the GGUF's sha256; ``options.chat`` unset: the model's own format.
    """
    return EmbeddedHFBackend(name, options, observer=observer)
