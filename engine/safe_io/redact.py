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

A credential also travels in forms no pattern recognises: a server that echoes
a Basic header shows ``base64(user:password)``, or a piece of it; a proxy may
show the password percent-encoded. So the secrets this process holds are
remembered (``register_secret``: an API key; ``register_url_credentials``: the
user-info of a base URL, also learnt from every URL ``redact_url`` sees) in
every form (plain, percent-decoded and -encoded, base64 of ``user:password``
and of the password at each of base64's three alignments, standard and
URL-safe), and ``redact_text`` stars out each form and any piece of 8 or more
characters of one, together with the rest of the word it sits in (a base64
value's last group or a slice's first characters decode to part of the secret:
the whole value goes). Once a secret is known, every log record of the process is
redacted too (its message formatted and passed through ``redact_text``).
"""

from __future__ import annotations

import base64
import logging
import re
import threading
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

__all__ = ["FRAGMENT", "is_secret_name", "redact_text", "redact_url", "register_secret", "register_url_credentials",
           "scrub"]

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
#: Shortest piece of a known secret's form that is starred out wherever it appears.
FRAGMENT = 8
#: Shorter forms are replaced only where they appear whole (and not at all under this length).
_SHORTEST_FORM = 4
#: Characters of a credential's written forms (base64, URL-safe base64, percent-encoding): a known piece is
#: starred with every such character around it, so no edge of the value is left to decode.
_CREDENTIAL_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_-.~%")
#: Field names whose value is a credential (exactly these, so ``sort_key`` stays).
_SECRET_FIELDS = frozenset({"api_key", "apikey", "api-key", "password", "passwd", "secret", "client_secret",
                            "token", "access_token", "authorization", "proxy-authorization", "x-api-key"})


def is_secret_name(name: str) -> bool:
    """Whether a field or query parameter named ``name`` holds a credential."""
    return bool(_SECRET_NAME.search(name.strip()))


class _Known:
    """The secrets this process holds, in every form, and the pieces of them that give them away."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.forms: frozenset[str] = frozenset()  # replaced wherever they appear whole
        self.long: tuple[str, ...] = ()  # forms of FRAGMENT+ characters: any piece of them is starred too
        self.grams: frozenset[str] = frozenset()  # every FRAGMENT-character piece of ``long``

    def add(self, forms: set[str]) -> None:
        forms = {f for f in forms if len(f) >= _SHORTEST_FORM}
        with self.lock:
            if forms <= self.forms:
                return
            self.forms = self.forms | forms
            self.long = tuple(sorted({f for f in self.forms if len(f) >= FRAGMENT}, key=len, reverse=True))
            self.grams = frozenset(f[i : i + FRAGMENT] for f in self.long for i in range(len(f) - FRAGMENT + 1))
        _redact_log_records()

    def scrub(self, text: str) -> str:
        forms, long, grams = self.forms, self.long, self.grams  # one consistent snapshot
        if not forms:
            return text
        spans: list[tuple[int, int]] = []
        for form in forms:  # every whole form, wherever it appears
            at = text.find(form)
            while at >= 0:
                spans.append((at, at + len(form)))
                at = text.find(form, at + 1)
        i = 0
        while grams and i <= len(text) - FRAGMENT:  # every piece of 8+ characters of a long form
            piece = text[i : i + FRAGMENT]
            if piece in grams:
                n = FRAGMENT
                holders = [f for f in long if piece in f]
                while i + n < len(text) and any(text[i : i + n + 1] in f for f in holders):
                    n += 1
                spans.append((i, i + n))
                i += n
            else:
                i += 1
        if not spans:
            return text
        # Each span grows to the whole credential-looking word around it: a value's edges (the last base64
        # group, a slice's first characters) still decode to part of the secret, so the whole value goes.
        grown = []
        for start, end in spans:
            while start > 0 and text[start - 1] in _CREDENTIAL_CHARS:
                start -= 1
            while end < len(text) and text[end] in _CREDENTIAL_CHARS:
                end += 1
            grown.append((start, end))
        out, last = [], 0
        for start, end in sorted(grown):
            if start < last:  # overlaps the span before: already starred
                last = max(last, end)
                continue
            out += [text[last:start], STARS]
            last = end
        return "".join(out) + text[last:]


_KNOWN = _Known()


def register_secret(value: str) -> None:
    """Remember a credential (an API key, a token): it, its percent-encoded form and its base64
    forms are starred out of every text ``redact_text`` sees from now on, as is any piece of 8+ characters."""
    value = value.strip()
    if len(value) >= _SHORTEST_FORM:
        _KNOWN.add(_forms(value))


def register_url_credentials(url: str) -> None:
    """Remember the user-info of ``url`` (if it has one) as a secret, in every form it may be shown:
    the password plain, percent-decoded and -encoded; ``user:password`` likewise; and base64 of each,
    which is what a Basic ``Authorization`` header carries."""
    try:
        parts = urlsplit(url)
        user, password = parts.username, parts.password
    except ValueError:  # an unparsable port or host: read the user-info by hand
        netloc = url.partition("://")[2].split("/", 1)[0]
        info = netloc.rpartition("@")[0] if "@" in netloc else ""
        user, _, password = info.partition(":")
        password = password or None
    if not password:
        return
    forms: set[str] = set()
    for pw in {password, unquote(password)}:
        forms |= _forms(pw)
        for name in {user or "", unquote(user or "")}:
            forms |= _forms(f"{name}:{pw}")
    _KNOWN.add(forms)


def _forms(secret: str) -> set[str]:
    """``secret`` as text may show it: plain, percent-decoded, percent-encoded, and base64 (standard and
    URL-safe, without padding) of it at each of the three alignments base64 may meet it in a longer text."""
    forms = {secret, unquote(secret), quote(secret, safe=""), quote(unquote(secret), safe="")}
    for plain in {secret, unquote(secret)}:
        raw = plain.encode("utf-8")
        for shift in range(3):
            encoded = base64.b64encode(raw[shift:]).decode("ascii").rstrip("=")
            # the last character of an unpadded encoding mixes in bits that follow: only whole groups are sure
            whole = encoded[: len(encoded) - len(encoded) % 4]
            forms |= {whole, whole.replace("+", "-").replace("/", "_")}
    return {f for f in forms if f}


def _redact_log_records() -> None:
    """From now on every log record's message is redacted when it is made (installed once)."""
    factory = logging.getLogRecordFactory()
    if getattr(factory, "redacting", False):
        return

    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string stays the logging module's to report
            return record
        redacted = redact_text(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return record

    make.redacting = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(make)


def redact_url(url: str) -> str:
    """``url`` without user-info and with key-like query values starred (safe to store and print).
    Its user-info, if any, is remembered as a secret (``register_url_credentials``)."""
    register_url_credentials(url)
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
    """``text`` with credentials in URLs and authorization headers/schemes starred out, and every
    known secret in any of its forms, or any piece of 8+ characters of one."""
    text = _URL.sub(lambda m: redact_url(m.group(0)), text)
    text = _AUTH_HEADER.sub(lambda m: f"{m.group(1)}{m.group(2) or ''}{STARS}", text)
    text = _AUTH_SCHEME.sub(lambda m: f"{m.group(1)}{m.group(2)}{STARS}", text)
    return _KNOWN.scrub(text)


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
