"""The ``openai`` backend: a model behind OpenAI-compatible endpoints, split by job.

* ``endpoints``: the pool of base URLs (which one takes a call, health, ejection);
* ``answers``: reading and checking what a server sends (bounded bodies, the
  JSON's parts, impossible numbers);
* ``scoring``: the label-scoring routes (exact ones in ``scoring.ROUTES``, the
  top-20 approximation);
* ``token_ids``: the requests and answers of the exact route by token ids
  (vLLM 0.26+'s ``logprob_token_ids``, with its ``/tokenize``);
* ``errors``: the SDK's errors mapped to ours, secrets out of every message;
* ``backend``: the ``OpenAIBackend`` that composes them.
"""

from promptrobust.engine.serving.backends.openai.backend import OFFICIAL_BASE_URL, LogprobsUnsupported, OpenAIBackend

__all__ = ["OFFICIAL_BASE_URL", "LogprobsUnsupported", "OpenAIBackend"]
