"""The ``hf`` backend: a transformers model in this process, split by job.

* ``options``: ``HFOptions``, one frozen value for every loading choice, kernel and lever;
* ``loading``: the model, its tokenizer, its kernels and what identifies it;
* ``passes``: forward passes, each row after its own cached prefix;
* ``prefix``: prefix groups, the window's plan and the prefix key/value cache;
* ``scoring`` and ``generation``: what a request asks of the passes;
* ``kernels``: which kernel runs the fp32 Linear layers and the output layer;
* ``observer``: hooks for benchmarks and tests (pass counts, greedy margins);
* ``backend``: the ``HFBackend`` that composes them;
* here: ``REGISTRATION``, how the registry finds, checks and builds the backend (``hf:ID``, a bare
  Hugging Face id or folder, the embedded models).

Exact CPU levers (each leaves log-probabilities within float rounding and
greedy texts identical; ``tests/test_hf_levers.py``):

* the fp32 Linear kernel: oneDNN (weights packed once) or torch's default (MKL), whichever is
  faster on this CPU, decided at load (``kernels``; ``linear_kernel``); the output layer's
  kernel is decided on its own (``head_kernel``): a few rows against the whole vocabulary is a
  shape where MKL repacks the entire weight on every call, and oneDNN on a weight packed once
  is ~4x faster for Gemma 3's head on an Intel Xeon;
* prefix sharing: the requests of one candidate prompt start with the same
  tokens (chat template, instruction, few-shot block), often more than half
  of each input. Those tokens run once, their key/value tensors stay in a
  byte-bounded LRU keyed by the token prefix (``prefix``; ``prefix_cache_mb``)
  and every later batch of the candidate reuses them; each row of a batch may
  carry its own cached prefix;
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
"""

from promptrobust.engine.serving.backends.hf.backend import HFBackend, embedded_backend
from promptrobust.engine.serving.backends.hf.observer import GreedyMargins, HFObserver
from promptrobust.engine.serving.backends.hf.options import HFOptions
from promptrobust.engine.serving.registration import BackendRegistration, ModelSpec

__all__ = ["REGISTRATION", "GreedyMargins", "HFBackend", "HFObserver", "HFOptions", "embedded_backend"]


def _build(spec: ModelSpec, options: HFOptions) -> HFBackend:
    """An embedded model from the model store (converted on first use), else a hub id or a folder."""
    return embedded_backend(spec.model, options) if spec.embedded else HFBackend(spec.model, options)


REGISTRATION = BackendRegistration(
    name="hf",
    options=HFOptions,
    build=_build,
    description="a transformers model in this process (CPU or one GPU): hf:ORG/NAME, a local folder, the embedded models",
    extra="local",
    missing_extra_hint="; or serve the model elsewhere and name it openai:MODEL with the model argument base_url=URL",
    chat_switch=("chat", True),
    weights_from_hub=True,
    gradients=True,
)
