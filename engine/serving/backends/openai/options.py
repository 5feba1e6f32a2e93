"""Every choice the openai backend takes, as one frozen, documented, validated value.

``OpenAIOptions`` holds where the endpoints are, how long a call may take, how a failing endpoint
is treated and how labels are scored. The backend takes it whole:
``OpenAIBackend(model, OpenAIOptions(base_urls=("http://127.0.0.1:8000/v1",)))``. Each field is
declared as a model argument (``model_args.model_arg``: what it takes, its numeric range), so
``--model-args``, their one-line errors, ``pre list backends`` and the constructor judge a value
once, in the same words. The API key is not an option: it is read from the environment variable
``api_key_env`` names, when the backend is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from promptrobust.engine.serving.backends.openai.answers import MAX_BODY_MB
from promptrobust.engine.serving.backends.openai.endpoints import COOLDOWN, EJECT_AFTER, MAX_OUTAGE
from promptrobust.engine.serving.backends.openai.scoring import EXACT_PATHS, SCORING_ARGS
from promptrobust.engine.serving.model_args import (
    Flag,
    ModelArgsError,
    Number,
    OneOf,
    Text,
    Urls,
    check_fields,
    model_arg,
    split_urls,
)

__all__ = ["OFFICIAL_BASE_URL", "OpenAIOptions"]

OFFICIAL_BASE_URL = "https://api.openai.com/v1"
_DAY = 86_400
_WEEK = 7 * _DAY


@dataclass(frozen=True)
class OpenAIOptions:
    """How the openai backend reaches its endpoints and scores labels. Defaults: OpenAI's own API."""

    base_urls: tuple[str, ...] = model_arg((OFFICIAL_BASE_URL,), Urls(), name="base_url", read=split_urls)
    """The endpoints' base URLs (``base_url=URL1|URL2`` spreads load over several serving the same weights)."""
    api_key_env: str = model_arg("OPENAI_API_KEY", Text())
    """The environment variable that holds the API key (the key itself never goes on a command line)."""
    api: Literal["chat", "completions", "auto"] = model_arg("auto", OneOf(("chat", "completions", "auto")))
    """``chat`` or ``completions`` endpoint; ``auto``: chat messages to chat, plain prompts to completions."""
    timeout: float = model_arg(60.0, Number(0, _DAY, above=True, unit="seconds"))
    """Seconds one whole call (connect, headers, body) may take."""
    max_connections: int = model_arg(256, Number(1, 65_536, whole=True))
    """Open HTTP connections at most, over all endpoints."""
    logprobs: bool | None = model_arg(None, Flag(optional=True))
    """Whether the server returns log-probabilities (label scoring); None: found out at start."""
    eject_after: int = model_arg(EJECT_AFTER, Number(1, 1_000_000, whole=True))
    """Consecutive failed calls that eject an endpoint (when there are several)."""
    cooldown: float = model_arg(COOLDOWN, Number(0, _DAY, unit="seconds"))
    """Seconds an ejected endpoint rests before one request probes it (doubling while it keeps failing)."""
    scoring: str = model_arg("auto", OneOf(SCORING_ARGS))
    """The label-scoring route; ``auto``: the best exact route the server allows, found at start (vLLM 0.26+,
    as its ``/version`` says: ``logprob_token_ids``, one request per sample, nothing probed)."""
    max_body_mb: float = model_arg(MAX_BODY_MB, Number(0, 1_048_576, above=True, unit="MiB"))
    """The largest answer body read (MiB); a bigger one is a broken or hostile server's."""
    max_outage: float = model_arg(MAX_OUTAGE, Number(0, _WEEK, unit="seconds"))
    """Seconds every endpoint may refuse connections before the waiting requests fail (vLLM on a small CPU
    restarts in about 6 minutes: give 600 there)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_urls", split_urls(self.base_urls))  # a list or "A|B" from Python: one form
        check_fields(self)
        if self.scoring == "echo" and self.api != "completions":
            raise ModelArgsError("scoring=echo scores plain prompts on the completions endpoint: add api=completions")
        if self.scoring in EXACT_PATHS and self.logprobs is False:
            raise ModelArgsError(f"scoring={self.scoring} reads log-probs: drop logprobs=false")

    @property
    def max_body_bytes(self) -> int:
        """``max_body_mb`` in bytes."""
        return int(self.max_body_mb * 1024 * 1024)
