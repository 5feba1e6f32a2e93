"""The ``openai`` backend: a model behind OpenAI-compatible endpoints, split by job.

* ``options``: ``OpenAIOptions``, one frozen value for every choice (its model arguments);
* ``endpoints``: the pool of base URLs (which one takes a call, health, ejection);
* ``answers``: reading and checking what a server sends (bounded bodies, the
  JSON's parts, impossible numbers);
* ``scoring``: the label-scoring routes (exact ones in ``scoring.ROUTES``, the
  top-20 approximation);
* ``token_ids``: the requests and answers of the exact route by token ids
  (vLLM 0.26+'s ``logprob_token_ids``, with its ``/tokenize``);
* ``errors``: the SDK's errors mapped to ours, secrets out of every message;
* ``backend``: the ``OpenAIBackend`` that composes them;
* here: ``REGISTRATION``, how the registry finds, checks and builds the backend (``openai:MODEL``).
"""

from promptrobust.engine.serving.backends.openai.backend import OFFICIAL_BASE_URL, LogprobsUnsupported, OpenAIBackend
from promptrobust.engine.serving.backends.openai.options import OpenAIOptions
from promptrobust.engine.serving.registration import BackendRegistration, ModelSpec

__all__ = ["OFFICIAL_BASE_URL", "REGISTRATION", "LogprobsUnsupported", "OpenAIBackend", "OpenAIOptions"]


def _build(spec: ModelSpec, options: OpenAIOptions) -> OpenAIBackend:
    return OpenAIBackend(spec.model, options)


def _check_ready(spec: ModelSpec, options: OpenAIOptions) -> None:
    """Building the backend reads the API key (refused at once for OpenAI's own API without one); nothing is sent."""
    OpenAIBackend(spec.model, options)


REGISTRATION = BackendRegistration(
    name="openai",
    options=OpenAIOptions,
    build=_build,
    description="any OpenAI-compatible server (OpenAI, vLLM serve, llama.cpp server, ...): openai:MODEL",
    check_ready=_check_ready,
    chat_switch=("api", "chat"),
    http_api=True,
)
