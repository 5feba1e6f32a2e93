"""The OpenAI SDK's errors turned into ours, in one place, each one line without secrets.

The scheduler supplies retries, so the SDK's own are off and every failure is
mapped here:

* 429, 408, 409, 5xx, timeouts, refused or dropped connections ->
  ``TransientBackendError`` (with the server's Retry-After, when given);
* 401 and 403 -> ``BackendError`` naming the key's environment variable;
* other 4xx -> ``BackendError``;
* the SDK's own checks of an answer (rare: we read bodies ourselves) -> transient.

Every text taken from a server or an exception goes through ``Redactor``
first: other ``sk-...`` strings, echoed keys, and (``safe_io.redact``)
credentials in URLs and Authorization headers, and the secrets the backend
registered (its API key, its base URLs' user-info) in any form, or any piece
of 8 or more characters of one.
"""

from __future__ import annotations

import re

from promptrobust.engine.safe_io.redact import redact_text
from promptrobust.engine.serving.backends.base import BackendError, TransientBackendError
from promptrobust.engine.serving.retry import parse_retry_after

__all__ = ["PLACEHOLDER_KEY", "Redactor", "detail", "map_error", "rejects_logprobs"]

#: The key sent to servers that need none (local servers).
PLACEHOLDER_KEY = "EMPTY"
#: Longest message kept from a server's text.
_MESSAGE_LIMIT = 300


class Redactor:
    """One line, no secrets: what every message built from a server's or an exception's text goes through."""

    def __call__(self, text: str) -> str:
        """``text`` without the registered secrets (the key, any piece of it of 8+ characters, with or without
        its ``sk-`` prefix), other sk-... strings, echoed keys and credentials; one line of at most 300 characters."""
        # URLs, Authorization headers, the registered secrets in any form (before the patterns below cut them up)
        text = redact_text(text)
        text = re.sub(r"sk-[A-Za-z0-9_*.\-]+", "sk-***", text)
        text = re.sub(r"(api key provided:\s*)\S+", r"\1***", text, flags=re.IGNORECASE)
        text = re.sub(r"(Bearer\s+)\S+", r"\1***", text)
        text = " ".join(text.split())
        return text if len(text) <= _MESSAGE_LIMIT else text[: _MESSAGE_LIMIT - 3] + "..."

    def reason(self, exc: BaseException) -> str:
        """What went wrong under an SDK error: its cause when it has one (a refused connection, say)."""
        cause = exc.__cause__ or exc.__context__
        if cause is not None and str(cause):
            return self(f"{type(cause).__name__}: {cause}")
        return self(f"{type(exc).__name__}: {exc}")


def detail(exc: BaseException) -> str:
    """The server's own message in an error answer (its ``error.message``), else the exception's text."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str):
            return err
    return str(getattr(exc, "message", "") or exc)


def rejects_logprobs(exc: BaseException) -> bool:
    """An error answer that refuses the logprobs option itself (retrying cannot help)."""
    import openai

    if not isinstance(exc, openai.APIStatusError) or exc.status_code == 429:
        return False
    return exc.status_code < 600 and "logprob" in detail(exc).lower()


def map_error(exc: Exception, shown: str, *, timeout: float, api_key_env: str, redact: Redactor) -> Exception:
    """Our error for an SDK error of a call to the endpoint ``shown`` (see the module docstring)."""
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return TransientBackendError(f"request to {shown} timed out after {timeout:g}s")
    if isinstance(exc, openai.APIConnectionError):
        return TransientBackendError(f"connection to {shown} failed: {redact.reason(exc)}")
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        message = f"HTTP {status} from {shown}: {redact(detail(exc))}"
        if status in (408, 409, 429) or status >= 500:
            return TransientBackendError(message, retry_after=parse_retry_after(exc.response.headers), status=status)
        if status in (401, 403):
            return BackendError(f"{message} (check the key in {api_key_env})")
        return BackendError(message)
    # The SDK's own checks of an answer (we read bodies ourselves, so rare): retry it.
    return TransientBackendError(f"malformed answer from {shown}: {redact(str(exc))}")
