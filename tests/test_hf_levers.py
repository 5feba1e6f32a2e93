"""Every speed lever of the hf backend is exact on the embedded SmolLM2.

Baseline: each request alone (batch 1), torch's default Linear kernel, no
prefix sharing, no prefix cache. Each lever on its own, then all of them,
must give choice log-probabilities within 1e-4 and identical greedy texts.
The prefix cache also has to stay within its byte budget.
"""

from __future__ import annotations

import asyncio

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from promptrobust.engine.serving.backends.hf import HFBackend, HFObserver, HFOptions, embedded_backend
from promptrobust.engine.serving.backends.hf.kernels import choose_kernel, install, onednn_available, output_layer, packed_weights
from promptrobust.engine.serving.backends.hf.prefix import PrefixCache, PrefixEntry, prefix_groups
from promptrobust.engine.serving.model_store import ModelNotInstalled
from promptrobust.engine.serving.types import ChatMessage, Decoding, Request

pytestmark = pytest.mark.slow  # loads the real model

INSTRUCTIONS = [
    "Read the review and say whether its sentiment is positive or negative. Answer with one word only.\nReview: ",
    "Decide if the following movie review is favourable. Reply positive or negative, nothing else.\nReview: ",
    "Classify this film review as positive or negative and briefly explain why in a few words.\nReview: ",
]
REVIEWS = [
    "Great.",
    "A dull, lifeless film that never finds its footing.",
    "Charming and funny.",
    "I walked out after an hour; the plot made no sense at all and the acting was wooden.",
    "The cast is wonderful and the ending made me cry.",
    "Too long.",
]
LABELS = ("positive", "negative")


def run(coro):
    return asyncio.run(coro)


def scoring(instr: str, review: str, choices=LABELS) -> Request:
    return Request("score_choices", messages=(ChatMessage("user", instr + review),), choices=choices)


def generating(instr: str, review: str) -> Request:
    return Request("generate", messages=(ChatMessage("user", instr + review),), decoding=Decoding(max_tokens=20))


REQUESTS = (
    [scoring(i, r) for i in INSTRUCTIONS for r in REVIEWS]
    + [scoring(INSTRUCTIONS[0], r, ("very positive", "rather negative")) for r in REVIEWS[:3]]
    + [generating(i, r) for i in INSTRUCTIONS for r in REVIEWS]
)


@pytest.fixture(scope="module")
def smol() -> HFBackend:
    try:
        backend = embedded_backend("smollm2-135m-instruct", HFOptions(batch_size=8, linear_kernel="default"))
    except ModelNotInstalled as e:
        pytest.skip(str(e))
    run(backend.start())
    return backend


def configure(b: HFBackend, *, kernel: str = "default", head: str | None = None, share: bool = False,
              cache_mb: float = 0.0, length_order: bool = False, drop: bool = False, no_head: bool = False,
              short_tail: bool = False, kv_views: bool = False, logsumexp: bool = False) -> None:
    install(b.model, kernel, head)
    b.with_options(share_prefix=share, prefix_cache_mb=cache_mb, length_order=length_order, drop_finished=drop,
                  prefix_without_head=no_head, short_tail_batches=short_tail, kv_views=kv_views, label_logsumexp=logsumexp)
    b.prefixes = PrefixCache(int(cache_mb * 2**20))  # an empty one for every setting


class Passes(HFObserver):
    """The (kind, logit columns kept) of every forward pass the backend runs."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []

    def forward_pass(self, kind: str, rows: int, columns: int, keep: int) -> None:  # type: ignore[override]
        self.seen.append((kind, keep))


def answers(b: HFBackend, reqs: list[Request], *, alone: bool = False) -> list:
    """Each request's answer: log-probs or text; batched as ``arrange_batches`` plans, or one at a time."""
    plan = [[i] for i in range(len(reqs))] if alone else b.arrange_batches(reqs, b.batch_size)
    out: list = [None] * len(reqs)
    for batch in plan:
        for i, c in zip(batch, run(b.complete_batch([reqs[i] for i in batch]))):
            out[i] = c.choice_logprobs if c.choice_logprobs is not None else c.text
    return out


@pytest.fixture(scope="module")
def baseline(smol: HFBackend) -> list:
    configure(smol)
    return answers(smol, REQUESTS, alone=True)


def assert_same(got: list, want: list) -> None:
    for g, w in zip(got, want):
        if isinstance(w, str):
            assert g == w
        else:
            assert g == pytest.approx(w, abs=1e-4)


def test_baseline_is_meaningful(baseline: list) -> None:
    texts = [a for a in baseline if isinstance(a, str)]
    assert all(texts) and len(set(texts)) > 3
    assert len({len(t) for t in texts}) > 3  # answers of different lengths: rows finish at different steps


def test_batching_alone_is_exact(smol: HFBackend, baseline: list) -> None:
    configure(smol)
    assert_same(answers(smol, REQUESTS), baseline)


@pytest.mark.skipif(not onednn_available(), reason="torch without oneDNN")
def test_onednn_kernel_is_exact(smol: HFBackend, baseline: list) -> None:
    configure(smol, kernel="onednn")
    assert_same(answers(smol, REQUESTS, alone=True), baseline)
    configure(smol, kernel="onednn")
    assert_same(answers(smol, REQUESTS), baseline)


def test_prefix_cache_miss_then_hit_is_exact(smol: HFBackend, baseline: list) -> None:
    configure(smol, share=True, cache_mb=64)
    first = answers(smol, REQUESTS)
    misses, hits = smol.prefixes.stats.misses, smol.prefixes.stats.hits
    assert misses >= len(INSTRUCTIONS)
    second = answers(smol, REQUESTS)  # every prefix is cached now
    assert smol.prefixes.stats.misses == misses and smol.prefixes.stats.hits > hits
    assert_same(first, baseline)
    assert_same(second, baseline)


def test_per_batch_prefix_without_cache_is_exact(smol: HFBackend, baseline: list) -> None:
    configure(smol, share=True, cache_mb=0)
    assert_same(answers(smol, REQUESTS), baseline)
    assert not smol.prefixes.entries


def test_rows_with_different_cached_prefixes_in_one_batch(smol: HFBackend, baseline: list) -> None:
    configure(smol, share=True, cache_mb=64)
    answers(smol, REQUESTS)  # fill the cache
    mixed = [0, 6, 12, 1, 7, 13, 5, 17]  # three instructions mixed in one batch
    got = run(smol.complete_batch([REQUESTS[i] for i in mixed]))
    assert_same([c.choice_logprobs for c in got], [baseline[i] for i in mixed])


def test_length_order_is_exact(smol: HFBackend, baseline: list) -> None:
    configure(smol, share=True, cache_mb=64, length_order=True)
    plan = smol.arrange_batches(REQUESTS, smol.batch_size)
    assert sorted(i for b in plan for i in b) == list(range(len(REQUESTS)))
    assert_same(answers(smol, REQUESTS), baseline)


def test_dropping_finished_rows_is_exact(smol: HFBackend, baseline: list) -> None:
    configure(smol, drop=True)
    before = smol.positions
    assert_same(answers(smol, REQUESTS), baseline)
    dropped = smol.positions - before
    configure(smol, drop=False)
    before = smol.positions
    answers(smol, REQUESTS)
    assert dropped < smol.positions - before  # finished rows cost nothing more


@pytest.mark.skipif(not onednn_available(), reason="torch without oneDNN")
def test_all_levers_together_are_exact(smol: HFBackend, baseline: list) -> None:
    configure(smol, kernel="onednn", share=True, cache_mb=64, length_order=True, drop=True, no_head=True,
              short_tail=True, kv_views=True, logsumexp=True)
    assert_same(answers(smol, REQUESTS), baseline)
    assert_same(answers(smol, REQUESTS), baseline)  # all prefixes cached now
    # the same with the other layers on torch's default kernel and the output layer on its own packed oneDNN
    configure(smol, kernel="default", head="onednn", share=True, cache_mb=64, length_order=True, drop=True,
              no_head=True, short_tail=True, kv_views=True, logsumexp=True)
    assert_same(answers(smol, REQUESTS), baseline)


@pytest.mark.skipif(not onednn_available(), reason="torch without oneDNN")
def test_the_output_layer_on_its_own_kernel_is_exact(smol: HFBackend, baseline: list) -> None:
    configure(smol, kernel="default", head="onednn")
    head = output_layer(smol.model)
    on_their_own = [m for m in smol.model.modules() if "forward" in m.__dict__]
    assert on_their_own == [head] and head.forward.packed is not None  # only the head moved, packed once
    assert_same(answers(smol, REQUESTS, alone=True), baseline)
    assert_same(answers(smol, REQUESTS), baseline)
    packed = head.forward.packed
    install(smol.model, "default", "onednn")
    assert head.forward.packed is packed  # an unchanged weight is not packed again
    with torch.no_grad():
        head.weight.mul_(1.0)  # written in place: the packed copy may be stale, so it is packed again
    install(smol.model, "default", "onednn")
    assert head.forward.packed is not packed
    configure(smol)
    assert not [m for m in smol.model.modules() if "forward" in m.__dict__]


@pytest.mark.skipif(not onednn_available(), reason="torch without oneDNN")
def test_the_output_layers_kernel_is_chosen_on_its_own(smol: HFBackend) -> None:
    model = smol.model
    asked = choose_kernel("default", model, "cpu", "float32", head_request="onednn")
    assert (asked.kernel, asked.head, asked.head_reason) == ("default", "onednn", "asked for")
    kept = choose_kernel("onednn", model, "cpu", "float32", head_request="default")
    assert (kept.kernel, kept.head) == ("onednn", "default")
    timed = choose_kernel("default", model, "cpu", "float32")  # auto: timed on the output layer itself
    assert timed.head_speedup > 0 and timed.head in ("onednn", "default") and "output layer" in timed.head_reason
    assert (timed.head == "onednn") == (timed.head_speedup >= 1.10)
    # off the CPU's fp32 path nothing is timed: the head follows the other layers
    assert choose_kernel("auto", model, "cpu", "bfloat16").head == "default"
    with pytest.raises(ValueError, match="head_kernel=onednn applies to float32 on CPU"):
        choose_kernel("auto", model, "cpu", "bfloat16", head_request="onednn")
    with pytest.raises(ValueError, match="head_kernel 'fast'"):
        choose_kernel("auto", model, "cpu", "float32", head_request="fast")
    with pytest.raises(ValueError, match="head_kernel"):
        HFOptions(head_kernel="fast")


def test_prefix_cache_respects_its_memory_bound(smol: HFBackend) -> None:
    configure(smol, share=True, cache_mb=64)
    run(smol.complete_batch([scoring(INSTRUCTIONS[0], r) for r in REVIEWS]))
    (entry,) = smol.prefixes.entries.values()
    assert entry.nbytes > 0
    budget = int(entry.nbytes * 2.5)  # room for two prefixes of this size
    smol.prefixes = PrefixCache(budget)
    for k in range(6):
        instr = f"Instruction variant {k}: " + INSTRUCTIONS[0]
        run(smol.complete_batch([scoring(instr, r) for r in REVIEWS]))
        assert smol.prefixes.bytes <= budget
        assert smol.prefixes.bytes == sum(e.nbytes for e in smol.prefixes.entries.values())
    assert len(smol.prefixes.entries) == 2 and smol.prefixes.stats.evictions >= 3
    # a prefix larger than the whole budget is used but never stored
    smol.prefixes = PrefixCache(entry.nbytes // 2)
    out = run(smol.complete_batch([scoring(INSTRUCTIONS[0], r) for r in REVIEWS]))
    assert len(out) == len(REVIEWS) and not smol.prefixes.entries and smol.prefixes.bytes == 0


def test_prefix_groups_split_at_the_candidate() -> None:
    a = [1, 2, 3, 4, 5]
    b = [1, 2, 3, 9, 9]
    seqs = [a + [10, 11], a + [12], a + [13, 14, 15], b + [10], b + [20, 21], [7, 7]]
    groups = prefix_groups(seqs)
    assert sorted((n, sorted(rows)) for n, rows in groups) == [(0, [5]), (5, [0, 1, 2]), (5, [3, 4])]
    # a prefix never swallows a whole sequence; repeats of one sequence are one sequence
    assert prefix_groups([[1, 2, 3], [1, 2, 3, 4]]) == [(2, [0, 1])]
    assert prefix_groups([a + [10], a + [10], a + [11], a + [11]]) == [(5, [0, 1, 2, 3])]
    assert prefix_groups([a, a]) == [(0, [0, 1])]


def test_prefix_cache_rejects_a_negative_budget() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        PrefixCache(-1)


def test_a_cached_prefix_serves_any_input_sharing_its_start() -> None:
    cache = PrefixCache(10**6)
    calls: list[tuple[int, int]] = []

    def compute(tokens, start):  # noqa: ANN001, ANN202
        done = len(start.tokens) if start is not None else 0
        calls.append((done, len(tokens)))
        kv = torch.arange(len(tokens), dtype=torch.float32).reshape(1, 1, -1, 1)
        return PrefixEntry(tokens, [(kv, kv.clone())], kv.numel() * 8)

    first = tuple(range(40))
    cache.obtain(first, compute, 8)
    # another candidate: same first 30 tokens, then its own 10: computed from the 30 cached ones
    other = tuple(range(30)) + tuple(range(100, 110))
    cache.obtain(other, compute, 8)
    assert calls == [(0, 40), (30, 40)]
    # a lone row gets the longest shared start, sliced, never stored
    got = cache.longest_within(tuple(range(35)) + (999,), 8)
    assert got is not None and got.tokens == tuple(range(35)) and got.layers[0][0].shape[2] == 35
    assert len(cache.entries) == 2
    assert cache.longest_within((500, 501) + tuple(range(20)), 8) is None  # nothing shared at the start


@pytest.mark.skipif(not onednn_available(), reason="torch without oneDNN")
def test_packed_onednn_weights_give_the_unpacked_outputs(smol: HFBackend) -> None:
    configure(smol, kernel="onednn")
    assert packed_weights(smol.model)
    ids = torch.tensor([smol.encode_input(REQUESTS[k]) for k in (0, 6)])
    with torch.inference_mode():
        packed = smol.model(input_ids=ids).logits
        for m in smol.model.modules():
            if "forward" in m.__dict__:
                m.forward.packed = None  # the same oneDNN call on the plain weight
        plain = smol.model(input_ids=ids).logits
    assert not packed_weights(smol.model)
    assert torch.allclose(packed, plain, atol=1e-5)
    configure(smol)


def _padding(b: HFBackend, reqs: list[Request], plan: list[list[int]]) -> int:
    """Padded tail positions of a plan (the prefix each request runs after, as planned)."""
    tails = []
    for batch in plan:
        lens = []
        for i in batch:
            ids = b.encode_input(reqs[i])
            lens.append(len(ids) - b.planned_prefixes.get(tuple(ids), 0))
        tails.append(max(lens) * len(lens) - sum(lens))
    return sum(tails)


def test_length_order_mixes_candidates_by_what_follows_their_prefix(smol: HFBackend, baseline: list) -> None:
    scored = [r for r in REQUESTS if r.kind == "score_choices"][: len(INSTRUCTIONS) * len(REVIEWS)]
    configure(smol, share=True, cache_mb=64, length_order=True)
    plan = smol.arrange_batches(scored, 6)
    # the three candidates' copies of one review run side by side, after three different prefixes
    assert any(len({scored[i].input_text().split("Review: ")[0] for i in batch}) == 3 for batch in plan)
    ordered = _padding(smol, scored, plan)
    configure(smol, share=True, cache_mb=64, length_order=False)
    by_candidate = smol.arrange_batches(scored, 6)
    configure(smol, share=True, cache_mb=64, length_order=True)
    smol.arrange_batches(scored, 6)  # the planned prefixes again, for the count
    assert ordered < _padding(smol, scored, by_candidate)
    got: list = [None] * len(scored)
    for batch in plan:
        for i, c in zip(batch, run(smol.complete_batch([scored[i] for i in batch]))):
            got[i] = c.choice_logprobs
    assert_same(got, baseline[: len(scored)])


def test_new_prefixes_of_one_batch_run_in_one_pass_and_stay_exact(smol: HFBackend, baseline: list) -> None:
    configure(smol, share=True, cache_mb=64, length_order=True)
    mixed = [0, 6, 12, 1, 7, 13]  # three instructions, none cached yet
    reqs = [REQUESTS[i] for i in mixed]
    smol.arrange_batches(reqs, 8)
    smol.observer = passes = Passes()
    try:
        got = run(smol.complete_batch(reqs))
    finally:
        smol.observer = None
    single_passes = [kind for kind, _ in passes.seen if kind == "prefix"]
    # one pass for the start they share (the chat template), one pass for the three instructions after it
    assert len(single_passes) == 1 and smol.prefixes.stats.misses == 4
    assert_same([c.choice_logprobs for c in got], [baseline[i] for i in mixed])
    again = run(smol.complete_batch(reqs))  # the stored entries (cut out of the batch's cache) serve later batches
    assert smol.prefixes.stats.misses == 4
    assert_same([c.choice_logprobs for c in again], [baseline[i] for i in mixed])



def _head_calls(b: HFBackend) -> list[int]:
    """Rows the output layer computed, one entry per call (a hook on the model's lm_head)."""
    calls: list[int] = []
    b.model.lm_head.register_forward_hook(lambda _m, args, _out: calls.append(args[0].shape[0] * args[0].shape[1]))
    return calls


def test_prefix_passes_without_the_output_layer_are_exact(smol: HFBackend, baseline: list) -> None:
    configure(smol, share=True, cache_mb=64, length_order=True, no_head=True)
    heads = _head_calls(smol)
    smol.observer = passes = Passes()  # the logits each pass keeps (0: a prefix pass, the decoder alone)
    try:
        got = answers(smol, REQUESTS[:18])  # label scoring: three candidates' prefixes computed, then the rows
    finally:
        smol.observer = None
        smol.model.lm_head._forward_hooks.clear()
    keeps = [keep for _, keep in passes.seen]
    assert smol.prefixes.stats.misses >= len(INSTRUCTIONS)
    # the head ran once per pass of requests' rows, never for a prefix
    assert heads and len(heads) == sum(1 for k in keeps if k > 0)
    configure(smol, share=True, cache_mb=64, length_order=True)
    heads = _head_calls(smol)
    try:
        answers(smol, REQUESTS[:18])
    finally:
        smol.model.lm_head._forward_hooks.clear()
    assert len(heads) >= smol.prefixes.stats.misses  # without the lever, every prefix pass pays the head too
    assert_same(got, baseline[:18])
    configure(smol, share=True, cache_mb=64, length_order=True, no_head=True, drop=True)
    assert_same(answers(smol, REQUESTS), baseline)  # generation too


def test_short_tail_batches_are_exact_and_hold_more_rows(smol: HFBackend, baseline: list) -> None:
    configure(smol, share=True, cache_mb=64, length_order=True, short_tail=True)
    plan = smol.arrange_batches(REQUESTS, smol.batch_size)
    assert sorted(i for b in plan for i in b) == list(range(len(REQUESTS)))
    assert max(len(b) for b in plan) > smol.batch_size  # rows after a shared prefix: more per pass
    longest = max(len(smol.encode_input(r)) for r in REQUESTS)
    for batch in plan:  # never more padded positions than batch_size whole inputs
        tails = [len(smol.encode_input(REQUESTS[i])) - smol.planned_prefixes.get(tuple(smol.encode_input(REQUESTS[i])), 0)
                 for i in batch]
        assert len(batch) == 1 or len(batch) * max(tails) <= smol.batch_size * longest
    heads = _head_calls(smol)
    try:
        assert_same(answers(smol, REQUESTS), baseline)
    finally:
        smol.model.lm_head._forward_hooks.clear()
    assert max(heads) > smol.batch_size  # a planned wide batch ran as one pass, not cut back to batch_size
    configure(smol, share=True, cache_mb=64, length_order=True, short_tail=False)
    assert max(len(b) for b in smol.arrange_batches(REQUESTS, smol.batch_size)) <= smol.batch_size


def test_cached_prefixes_enter_a_pass_as_views_and_stay_exact(smol: HFBackend, baseline: list) -> None:
    configure(smol, share=True, cache_mb=64, length_order=True, kv_views=True)
    first = answers(smol, REQUESTS)
    entry = next(iter(smol.prefixes.entries.values()))
    cache = smol.passes.cache_of(entry.layers)
    k0, v0 = entry.layers[0]
    assert cache.layers[0].keys.data_ptr() == k0.data_ptr() and cache.layers[0].values.data_ptr() == v0.data_ptr()
    stored = [k.clone() for k, _ in entry.layers]
    second = answers(smol, REQUESTS)  # every prefix cached now: entered as views, and left unchanged by the passes
    assert all(torch.equal(a, k) for a, (k, _) in zip(stored, entry.layers))
    assert_same(first, baseline)
    assert_same(second, baseline)


def test_label_logprobs_from_the_logsumexp_are_exact(smol: HFBackend, baseline: list) -> None:
    configure(smol, logsumexp=True)
    assert_same(answers(smol, REQUESTS), baseline)
    assert_same(answers(smol, REQUESTS, alone=True), baseline)
    # two-token labels take the general path and stay exact
    assert all(len(smol.choice_ids(c)) > 1 for c in ("very positive", "rather negative"))
