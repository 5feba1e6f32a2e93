"""Forward passes of the hf backend's model, each row after its own cached prefix.

Batches are padded on the left (decoder-only) with position ids derived from
the attention mask, so a request scores the same alone or inside a batch of
longer requests. A row may start after a cached prefix: the prefix's keys and
values enter the pass's key/value cache (as views with ``kv_views``), the
padding between them and the row's tail is masked, and the tail keeps the
positions it would have alone. Prefixes the batch needs and the cache lacks
are computed first, several per pass where that pads little, without the
output layer where the model allows it (``prefix_without_head``).

``ForwardPasses`` owns what the passes share: the options' levers, the prefix
cache, the prefix each input was planned to run after (``planned``, set by the
backend's ``arrange_batches``), and the count of positions computed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from promptrobust.engine.serving.backends.base import cut_into_batches, cut_least_padding
from promptrobust.engine.serving.backends.hf.loading import LoadedModel
from promptrobust.engine.serving.backends.hf.observer import HFObserver, PassKind
from promptrobust.engine.serving.backends.hf.options import HFOptions
from promptrobust.engine.serving.backends.hf.prefix import (
    MIN_SHARED_PREFIX,
    PrefixCache,
    PrefixEntry,
    common_prefix_length,
    prefix_groups,
)

__all__ = ["FORWARD_OVERHEAD_POSITIONS", "SHORT_TAIL_MAX_FACTOR", "ForwardPasses"]

#: What one more forward pass costs, in positions (fixed cost of a pass over the marginal cost of a position,
#: SmolLM2-135M on the 2-core CPU of bench/results: ~18 ms over ~0.57 ms); decides where a batch is cut.
FORWARD_OVERHEAD_POSITIONS = 32
#: Short-tail batches hold at most this many times ``batch_size`` rows (the scheduler's window is 4 batches).
SHORT_TAIL_MAX_FACTOR = 4


class ForwardPasses:
    """The model's forward passes with prefix reuse; ``loaded`` is set once the model is loaded."""

    def __init__(self, options: HFOptions, observer: HFObserver) -> None:
        self.options = options
        self.observer = observer
        self.loaded: LoadedModel | None = None
        self.prefixes = PrefixCache(int(options.prefix_cache_mb * 2**20))
        #: input tokens -> length of its candidate's prefix, as the latest ``arrange_batches`` found it
        self.planned: dict[tuple[int, ...], int] = {}
        #: token positions run through the model: prefixes, padded tails, decode steps
        self.positions = 0

    @property
    def model(self) -> LoadedModel:
        if self.loaded is None:
            raise RuntimeError("hf backend: no model loaded")
        return self.loaded

    def sharing_possible(self) -> bool:
        return self.options.share_prefix and self.loaded is not None and not self.loaded.encdec

    # -- how many rows one pass takes ------------------------------------------------------------------

    def chunks(self, idx: list[int], length: Callable[[int], int], inputs: Sequence[list[int]] = ()) -> list[list[int]]:
        """``idx`` sorted by ``length`` and cut into passes of at most ``row_cap(inputs)`` rows."""
        return cut_into_batches(sorted(idx, key=length), self.row_cap(inputs))

    def row_cap(self, inputs: Sequence[list[int]]) -> int:
        """Most rows of one pass: ``batch_size``; with ``short_tail_batches``, a batch that ``arrange_batches``
        planned (each row after its prefix, its size already bounded there) runs whole, up to the window."""
        size = self.options.batch_size
        if not (self.options.short_tail_batches and self.sharing_possible() and inputs):
            return size
        planned = self.planned
        if not all(tuple(s) in planned for s in inputs):
            return size
        return max(size, min(SHORT_TAIL_MAX_FACTOR * size, len(inputs)))

    # -- one pass ------------------------------------------------------------------------------------

    def headless(self) -> Any:
        """The decoder without its output layer (None: lever off, or no such module to call)."""
        m = self.model
        if not self.options.prefix_without_head or m.encdec:
            return None
        decoder = getattr(m.model, "model", None)  # transformers' CausalLM: .model is the decoder stack
        return decoder if decoder is not None and decoder is not m.model and callable(decoder) else None

    def forward_logits(self, ids: Any, mask: Any, pos: Any, keep: int, cache: Any = None, *,
                       kind: PassKind = "rows") -> Any:
        """Logits of the last ``keep`` columns; ``keep=0``: the decoder alone runs (no output layer), returns None."""
        m = self.model
        self.observer.forward_pass(kind, int(ids.shape[0]), int(ids.shape[1]), keep)
        kw: dict[str, object] = {"input_ids": ids, "attention_mask": mask, "position_ids": pos, "use_cache": cache is not None}
        if cache is not None:
            kw[m.cache_keyword] = cache
        if keep == 0:
            self.headless()(**kw)
            return None
        if m.has_logits_to_keep:
            kw["logits_to_keep"] = keep
        logits = m.model(**kw).logits
        return logits[:, -keep:, :]

    def rows_forward(self, seqs: list[list[int]], basis: list[list[int]], keep: int, *, keep_cache: bool = False) -> Any:
        """Forward pass of ``seqs``, each row after its own cached prefix of ``basis`` (its input); see ``forward_after``."""
        return self.forward_after(seqs, self.row_prefixes(basis), keep, keep_cache=keep_cache)

    def forward_after(self, seqs: list[list[int]], entries: list[PrefixEntry | None], keep: int, *,
                      keep_cache: bool = False, kind: PassKind = "rows") -> Any:
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

        device = self.model.device
        lens = [len(e.tokens) if e is not None else 0 for e in entries]
        width = max(lens)
        ids, tail_mask, tail_pos = self.pad_left([s[n:] for s, n in zip(seqs, lens)])
        self.positions += ids.numel()
        lens_t = torch.tensor(lens, dtype=torch.long, device=device)
        pos = tail_pos + lens_t.unsqueeze(1)
        if width:
            prefix_mask = (torch.arange(width, device=device).unsqueeze(0) >= (width - lens_t).unsqueeze(1)).long()
            mask = torch.cat([prefix_mask, tail_mask], dim=1)
            cache = self.cache_of(self.stack_prefixes(entries, lens, width))
        else:
            mask = tail_mask
            cache = DynamicCache() if keep_cache else None
        logits = self.forward_logits(ids, mask, pos, keep, cache=cache, kind=kind)
        if not keep_cache:
            return logits, None
        lengths = torch.tensor([len(s) for s in seqs], dtype=torch.long, device=device)
        return logits, (cache, mask, lengths)

    def cache_of(self, layers: list[tuple[Any, Any]]) -> Any:
        """A DynamicCache holding ``layers``: with ``kv_views`` the tensors themselves (the pass's own
        concatenation is then their only copy), else as transformers fills one (a copy on creation)."""
        from transformers import DynamicCache

        if not self.options.kv_views:
            return DynamicCache(ddp_cache_data=layers)
        cache = DynamicCache(ddp_cache_data=[(k[..., :0, :], v[..., :0, :]) for k, v in layers])
        for layer, (k, v) in zip(cache.layers, layers):
            layer.keys, layer.values = k, v  # type: ignore[union-attr]  # transformers types layers as any cache layer; one built from (keys, values) pairs holds key/value layers
        return cache

    @staticmethod
    def stack_prefixes(entries: list[PrefixEntry | None], lens: list[int], width: int) -> list[tuple[Any, Any]]:
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

    # -- which prefix each row runs after ----------------------------------------------------------------

    def row_prefixes(self, basis: Sequence[list[int]]) -> list[PrefixEntry | None]:
        """Each row's cached prefix (None: the row runs whole); a prefix always leaves the row a token of its own."""
        rows: list[PrefixEntry | None] = [None] * len(basis)
        if not self.sharing_possible():
            return rows
        planned = self.planned  # one reference: arrange_batches may replace it meanwhile
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
            self.prefixes.obtain(root, self.compute_prefix, MIN_SHARED_PREFIX)
        fresh = self.compute_prefixes(self.prefixes.missing(keys, MIN_SHARED_PREFIX))
        for i, key in wanted.items():
            rows[i] = fresh.get(key) or self.prefixes.obtain(key, self.compute_prefix, MIN_SHARED_PREFIX)
        if not unplanned:
            return rows
        groups = prefix_groups(basis, unplanned)
        alone: list[int] = []
        for shared, members in groups:
            if len(members) >= 2 and shared >= MIN_SHARED_PREFIX:
                entry = self.prefixes.obtain(tuple(basis[members[0]][:shared]), self.compute_prefix, MIN_SHARED_PREFIX)
                for i in members:
                    rows[i] = entry
            else:
                alone += members
        # Rows alone in this batch (after the groups, whose prefixes they may share): the longest start
        # any cached prefix holds; failing that, the start every row of the batch shares (chat template,
        # common instruction words), so that no row widens the whole batch with its full length.
        batch_shared = min(common_prefix_length(basis), min(len(b) for b in basis) - 1)
        for i in alone:
            found = self.prefixes.longest_within(tuple(basis[i][:-1]), MIN_SHARED_PREFIX)
            if (found is None or len(found.tokens) < batch_shared) and batch_shared >= MIN_SHARED_PREFIX:
                found = self.prefixes.obtain(tuple(basis[i][:batch_shared]), self.compute_prefix, MIN_SHARED_PREFIX)
            rows[i] = found
        return rows

    # -- computing prefixes ---------------------------------------------------------------------------

    def compute_prefix(self, tokens: tuple[int, ...], start: PrefixEntry | None) -> PrefixEntry:
        """Key/value tensors of ``tokens``, continuing from a cached ``start`` when there is one."""
        import torch
        from transformers import DynamicCache

        m = self.model
        done = len(start.tokens) if start is not None else 0
        cache = self.cache_of(start.layers) if start is not None else DynamicCache()
        ids = torch.tensor([tokens[done:]], dtype=torch.long, device=m.device)
        pos = torch.arange(done, len(tokens), device=m.device).unsqueeze(0)
        headless = self.headless()
        self.observer.forward_pass("prefix", 1, len(tokens) - done, 0 if headless is not None else 1)
        kw: dict[str, object] = {m.cache_keyword: cache}
        if headless is not None:  # keys and values are all a prefix is for
            headless(input_ids=ids, position_ids=pos, use_cache=True, **kw)
        else:
            if m.has_logits_to_keep:
                kw["logits_to_keep"] = 1
            m.model(input_ids=ids, position_ids=pos, use_cache=True, **kw)
        self.positions += len(tokens) - done
        return PrefixEntry.of(tokens, [(layer.keys, layer.values) for layer in cache.layers])  # type: ignore[union-attr]  # transformers types layers as any cache layer; one built from (keys, values) pairs holds key/value layers

    def compute_prefixes(self, todo: list[tuple[tuple[int, ...], PrefixEntry | None]]) -> dict[tuple[int, ...], PrefixEntry]:
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
        for run in cut_least_padding(order, rest, self.options.batch_size, FORWARD_OVERHEAD_POSITIONS):
            if len(run) == 1:
                tokens = todo[run[0]][0]
                out[tokens] = self.prefixes.obtain(tokens, self.compute_prefix, MIN_SHARED_PREFIX)
            else:
                out.update(self.compute_prefix_batch([todo[i] for i in run]))
        return out

    def compute_prefix_batch(self, todo: list[tuple[tuple[int, ...], PrefixEntry | None]]) -> dict[tuple[int, ...], PrefixEntry]:
        """One forward pass for ``todo``; each row's entry cut out of the pass's key/value cache."""
        import torch

        seqs = [list(t) for t, _ in todo]
        starts = [s for _, s in todo]
        keep = 0 if self.headless() is not None else 1
        _, (cache, _, _) = self.forward_after(seqs, starts, keep, keep_cache=True, kind="prefix_batch")
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

    # -- padding ----------------------------------------------------------------------------------------

    def pad_left(self, seqs: list[list[int]]) -> tuple[Any, Any, Any]:
        """Left-padded ids, attention mask and position ids (positions count real tokens only)."""
        import torch

        m = self.model
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), m.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, s in enumerate(seqs):
            ids[row, width - len(s) :] = torch.tensor(s, dtype=torch.long)
            mask[row, width - len(s) :] = 1
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        return ids.to(m.device), mask.to(m.device), pos.to(m.device)

    def pad_right(self, seqs: list[list[int]]) -> tuple[Any, Any]:
        """Right-padded ids and attention mask (an encoder's input, a decoder's targets)."""
        import torch

        m = self.model
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), m.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for row, s in enumerate(seqs):
            ids[row, : len(s)] = torch.tensor(s, dtype=torch.long)
            mask[row, : len(s)] = 1
        return ids.to(m.device), mask.to(m.device)

    def decoder_start(self) -> int:
        """The token an encoder-decoder model's decoder starts from."""
        m = self.model
        start = getattr(m.model.generation_config, "decoder_start_token_id", None)
        if start is None:
            start = getattr(m.model.config, "decoder_start_token_id", None)
        if start is None:
            start = m.tokenizer.pad_token_id
        return int(start)
