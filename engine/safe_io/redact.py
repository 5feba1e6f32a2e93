"""Credentials out of everything we store or print.

A base URL may carry a password (``http://user:pass@host/v1``) or a key in its
query (``?api-key=...``, Azure style); a server may echo an ``Authorization``
header of any scheme (``Bearer``, ``Basic``, ``Digest``, ``Token``, ...). These
functions remove them before a URL or a message reaches ``config.json``, a
record, an error line or a log:

* ``redact_url``: user-info dropped, key-like query parameters' values
  replaced with ``***`` (other parameters such as ``api-version`` kept);
* ``redact_text``: every URL inside a text redacted, and every credential after
  an ``Authorization:`` header name or an auth scheme word replaced with ``***``;
* ``scrub``: the same over a JSON-like value (dicts, lists, strings), with the
  values of secret-named keys (``api_key``, ``password``, ...) starred out.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["is_secret_name", "redact_text", "redact_url", "scrub"]

STARS = "***"
#: Query parameter or field names that hold a credential.
_SECRET_NAME = re.compile(
    r"(^|[-_.])(api[-_]?key|key|token|access[-_]?token|secret|client[-_]?secret|password|passwd|pwd|auth|"
    r"authorization|sig|signature|credential|credentials|session)($|[-_.])|^x-api-key$",
    re.IGNORECASE,
)
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>`]+")
#: ``Authorization: <scheme> <credentials>`` (and Proxy-Authorization), any scheme.
_AUTH_HEADER = re.compile(r"((?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?)([A-Za-z][\w.-]*\s+)?([^\s,;\"'}]+)",
                          re.IGNORECASE)
#: A scheme word followed by something that looks like a credential (8+ characters with a
#: digit, one of + / = or a capital after the first letter), wherever a server echoes it.
_AUTH_SCHEME = re.compile(
    r"\b(Bearer|Basic|Digest|Token|Negotiate|NTLM|ApiKey|AWS4-HMAC-SHA256)(\s+)"
    r"(?=[A-Za-z0-9+/=._~:-]{8,})(?=[A-Za-z0-9+/=._~:-]*(?:[0-9+/=]|(?<=.)[A-Z]))([A-Za-z0-9+/=._~:-]+)"
)
#: Field names whose value is a credential (exactly these, so ``sort_key`` stays).
_SECRET_FIELDS = frozenset({"api_key", "apikey", "api-key", "password", "passwd", "secret", "client_secret",
                            "token", "access_token", "authorization", "proxy-authorization", "x-api-key"})


def is_secret_name(name: str) -> bool:
    """Whether a field or query parameter named ``name`` holds a credential."""
    return bool(_SECRET_NAME.search(name.strip()))


def redact_url(url: str) -> str:
    """``url`` without user-info and with key-like query values starred (safe to store and print)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:  # an unparsable port or host: keep only what cannot hold a secret
        head, _, rest = url.partition("://")
        host_part = rest.split("/", 1)[0].rsplit("@", 1)[-1]
        tail = rest.split("/", 1)[1].split("?", 1)[0] if "/" in rest else ""
        return f"{head}://{host_part}" + (f"/{tail}" if tail else "")
    if ":" in host:  # IPv6
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port else host
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, STARS if is_secret_name(k) else v) for k, v in pairs], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def redact_text(text: str) -> str:
    """``text`` with credentials in URLs and authorization headers/schemes starred out."""
    text = _URL.sub(lambda m: redact_url(m.group(0)), text)
    text = _AUTH_HEADER.sub(lambda m: f"{m.group(1)}{m.group(2) or ''}{STARS}", text)
    return _AUTH_SCHEME.sub(lambda m: f"{m.group(1)}{m.group(2)}{STARS}", text)


def scrub(value: Any) -> Any:
    """A JSON-like value with every credential removed: URLs and authorization headers in
    strings (``redact_text``), and the values of credential fields (``api_key``, ``password``, ...)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: (STARS if isinstance(k, str) and k.lower() in _SECRET_FIELDS and v not in (None, "") else scrub(v))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub(v) for v in value]
    return value
