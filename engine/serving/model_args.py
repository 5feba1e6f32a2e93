"""``--model-args`` -> a backend's options value: parsing, the declared checks, and bounded echoes.

A backend declares its model arguments once, as the fields of one frozen options value
(``HFOptions``, ``OpenAIOptions``, ``VLLMOptions``, ``RandomOptions``, or a plugin's own): each
field made by ``model_arg(default, check, ...)`` says which values it takes (a ``Check``, with its
numeric range), whether it holds a secret, and, where the argument's name or form differs from
the field's, how it is read (``base_url=A|B`` -> ``base_urls=("A", "B")``). Everything else is
derived from that value, here: the names ``--model-args`` accepts (``argument_names``), the
one-line errors with exit code 2 (``options_from_args``; the options' own ``__post_init__``
runs the same checks through ``check_fields``, so a value is judged once, in the same words), what
``pre list backends`` shows (``argument_rows``) and which arguments redaction hides
(``secret_arguments``).

An error echoes at most ``SHOWN_CHARS`` characters of a value or a name (``shown``): a 120 KB
``--model-args`` value is not repeated whole.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import Field, dataclass, field, fields
from typing import Any, TypeVar
from urllib.parse import urlsplit

from promptrobust.engine.errors import SettingsError
from promptrobust.engine.safe_io.redact import redact_text, redact_url, register_secret

__all__ = [
    "SHOWN_CHARS", "ArgumentRow", "Check", "Flag", "ModelArg", "ModelArgsError", "Number", "OneOf", "Text", "Urls",
    "argument_names", "argument_rows", "check_fields", "model_arg", "options_from_args", "options_problem",
    "parse_model_args", "secret_arguments", "shown", "split_urls",
]

O = TypeVar("O")

#: The most characters of one value (or name) an error repeats.
SHOWN_CHARS = 60
#: The most unknown argument names an error lists.
_SHOWN_NAMES = 5
_METADATA_KEY = "promptrobust.model_arg"


class ModelArgsError(SettingsError):
    """A malformed model-arguments string, an argument the backend does not take, or a value out of its
    range (``setting`` is ``model_args``: the CLI names ``--model-args``)."""

    setting = "model_args"

    def __init__(self, message: str = "", *, setting: str | None = "model_args") -> None:
        super().__init__(message, setting=setting)


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)``, cut to ``limit`` characters with the full length said (an error repeats no more)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def _name(text: str) -> str:
    """An argument name as an error shows it: whole when short, else cut like ``shown``."""
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}... ({len(text):,} characters)"


# -- parsing ---------------------------------------------------------------------------------


def parse_model_args(text: str | None) -> dict[str, object]:
    """``"dtype=bfloat16,batch_size=8,chat=false"`` -> typed dict (``true``/``false``, ``none``, numbers)."""
    out: dict[str, object] = {}
    if not text:
        return out
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "=" not in part:
            raise ModelArgsError(f"model argument {shown(part)} is not key=value (example: dtype=bfloat16,batch_size=8)")
        key, value = (s.strip() for s in part.split("=", 1))
        if key in out:  # the last one silently winning would run against a server the user did not mean
            raise ModelArgsError(redact_text(
                f"model argument {_name(key)} is given twice ({_name(key)}={shown(out[key])} and {_name(key)}={shown(value)}); "
                "give it once" + (" (several endpoints: base_url=URL1|URL2)" if key == "base_url" else "")))
        out[key] = _typed(value)
    return out


def _typed(value: str) -> Any:
    low = value.lower()
    if low in ("true", "yes"):
        return True
    if low in ("false", "no"):
        return False
    if low in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


# -- checks: what a value may be ---------------------------------------------------------------


class Check(ABC):
    """What one model argument takes. ``problem`` says what the value must be, or None when it is fine."""

    @abstractmethod
    def takes(self) -> str:
        """What the argument takes, as an error and ``pre list backends`` say it ("a whole number from 1 to 64")."""

    @abstractmethod
    def accepts(self, value: object) -> bool:
        """Whether ``value`` (typed, as ``parse_model_args`` makes it) is one the argument takes."""

    def problem(self, value: object) -> str | None:
        return None if self.accepts(value) else self.takes()

    def show(self, value: object) -> str:
        """``value`` as an error repeats it (bounded; a check of values that may hold credentials hides them)."""
        return shown(value)


def _number_text(x: float) -> str:
    if isinstance(x, int):
        return f"{x:,}"
    return f"{int(x):,}" if x.is_integer() and abs(x) < 1e15 else f"{x:g}"


@dataclass(frozen=True)
class Number(Check):
    """A finite number within ``[low, high]`` (``low`` excluded when ``above``): never a boolean, NaN or
    infinity; a whole number when ``whole``; ``None`` too when ``optional``."""

    low: float
    high: float
    whole: bool = False
    above: bool = False
    optional: bool = False
    unit: str = ""
    """What the number counts ("seconds", "MiB"), for the message."""

    def takes(self) -> str:
        kind = ("a whole number" if self.whole else "a number") + (f" of {self.unit}" if self.unit else "")
        low, high = _number_text(self.low), _number_text(self.high)
        bounds = f"> {low} and <= {high}" if self.above else f"from {low} to {high}"
        return f"{kind} {bounds}" + (", or none" if self.optional else "")

    def accepts(self, value: object) -> bool:
        if value is None:
            return self.optional
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.whole and not isinstance(value, int):
            return False
        if isinstance(value, float) and not math.isfinite(value):
            return False
        return (value > self.low if self.above else value >= self.low) and value <= self.high


@dataclass(frozen=True)
class OneOf(Check):
    """One of a few words."""

    values: tuple[str, ...]
    optional: bool = False

    def takes(self) -> str:
        return "one of " + ", ".join(self.values) + (", or unset" if self.optional else "")

    def accepts(self, value: object) -> bool:
        return (value is None and self.optional) or (isinstance(value, str) and value in self.values)


@dataclass(frozen=True)
class Flag(Check):
    """``true`` or ``false`` (``none`` too when ``optional``: decided by the backend)."""

    optional: bool = False

    def takes(self) -> str:
        return "true, false or unset" if self.optional else "true or false"

    def accepts(self, value: object) -> bool:
        return isinstance(value, bool) or (value is None and self.optional)


@dataclass(frozen=True)
class Text(Check):
    """A non-empty text (``None`` too when ``optional``)."""

    optional: bool = False

    def takes(self) -> str:
        return "a non-empty text" + (", or unset" if self.optional else "")

    def accepts(self, value: object) -> bool:
        return (value is None and self.optional) or (isinstance(value, str) and bool(value.strip()))


@dataclass(frozen=True)
class Urls(Check):
    """One or more ``http(s)://HOST[:PORT]/PATH`` URLs (a model argument joins several with ``|``)."""

    def takes(self) -> str:
        return "http(s)://HOST[:PORT]/v1 (several: URL1|URL2)"

    def show(self, value: object) -> str:
        """The URLs without their user-info or key-like query values (``safe_io.redact``)."""
        return shown("|".join(redact_url(u) for u in split_urls(value)))

    def accepts(self, value: object) -> bool:
        return self.problem(value) is None

    def problem(self, value: object) -> str | None:
        urls = split_urls(value) if isinstance(value, str) else value
        if not isinstance(urls, (tuple, list)) or not urls:
            return self.takes()
        for url in urls:
            if not isinstance(url, str):
                return self.takes()
            try:
                parts = urlsplit(url.strip())
            except ValueError:  # an unclosed IPv6 bracket
                return self.takes()
            try:
                parts.port  # noqa: B018 - raises on a port that is not a number
            except ValueError:
                return f"{self.takes()}: this one has a bad port"
            if parts.scheme not in ("http", "https") or not parts.hostname:
                return self.takes()
        return None


def split_urls(value: object) -> tuple[str, ...]:
    """``"URL1|URL2"`` -> ``("URL1", "URL2")`` (a sequence is kept, each URL stripped)."""
    items = str(value).split("|") if isinstance(value, str) else list(value) if isinstance(value, (tuple, list)) else [value]
    return tuple(str(u).strip() for u in items if str(u).strip())


# -- declaring an options value's fields -------------------------------------------------------


@dataclass(frozen=True)
class ModelArg:
    """How one field of an options value is given as a model argument."""

    check: Check
    secret: bool = False
    """A credential: never shown (results' recorded command, errors)."""
    name: str | None = None
    """The argument's name where it is not the field's (``base_url`` for ``base_urls``)."""
    read: Callable[[object], object] | None = None
    """The field's value from the typed argument (``split_urls``); None: taken as given."""


def model_arg(default: object, check: Check, *, secret: bool = False, name: str | None = None,
              read: Callable[[object], object] | None = None) -> Any:
    """A dataclass field that is a model argument: its default, its check, and how it is read."""
    return field(default=default, metadata={_METADATA_KEY: ModelArg(check, secret, name, read)})


def _declared(kind: type) -> dict[str, tuple[Field[Any], ModelArg]]:
    """Argument name -> (field, declaration), in field order; fields named in the class's
    ``not_model_arguments`` are left out (an options value that reuses another's fields)."""
    left_out = set(getattr(kind, "not_model_arguments", ()))
    out: dict[str, tuple[Field[Any], ModelArg]] = {}
    for f in fields(kind):
        declaration = f.metadata.get(_METADATA_KEY)
        if isinstance(declaration, ModelArg) and f.name not in left_out:
            out[declaration.name or f.name] = (f, declaration)
    return out


def argument_names(kind: type) -> tuple[str, ...]:
    """The model arguments an options value takes, in its fields' order."""
    return tuple(_declared(kind))


def secret_arguments(kind: type) -> frozenset[str]:
    """The model arguments an options value declares secret."""
    return frozenset(name for name, (_, d) in _declared(kind).items() if d.secret)


@dataclass(frozen=True)
class ArgumentRow:
    """One model argument as ``pre list backends`` shows it."""

    name: str
    takes: str
    default: str
    secret: bool


def argument_rows(kind: type) -> list[ArgumentRow]:
    """Each model argument of an options value: its name, what it takes, its default."""
    rows = []
    for name, (f, d) in _declared(kind).items():
        default = "|".join(f.default) if isinstance(f.default, tuple) else f.default
        shown_default = "unset" if default is None else str(default).lower() if isinstance(default, bool) else str(default)
        rows.append(ArgumentRow(name, d.check.takes(), "(secret)" if d.secret else shown_default, d.secret))
    return rows


def _message(name: str, given: object, declaration: ModelArg, what: str) -> str:
    value = "..." if declaration.secret else declaration.check.show(given)  # a secret is never repeated, not even cut
    return f"model argument {_name(name)}={value}: {_name(name)} must be {what}"


def options_problem(kind: type, args: Mapping[str, object]) -> str | None:
    """The first bad value among ``args`` that ``kind`` declares, as one line naming the fix, or None
    (names ``kind`` does not take are not looked at)."""
    declared = _declared(kind)
    for name, given in args.items():
        if name not in declared:
            continue
        _, d = declared[name]
        value = d.read(given) if d.read is not None and given is not None else given
        what = d.check.problem(value)
        if what:
            return _message(name, given, d, what)
    return None


def check_fields(options: object) -> None:
    """Every declared field of an options value checked (its ``__post_init__`` calls this): the first
    bad one raises ``ModelArgsError``, in the words ``options_from_args`` uses. A secret's value is
    remembered (``safe_io.redact.register_secret``), so no log, error, record or stored setting shows it."""
    for name, (f, d) in _declared(type(options)).items():
        value = getattr(options, f.name)
        if d.secret and isinstance(value, str):
            register_secret(value)
        what = d.check.problem(value)
        if what:
            raise ModelArgsError(_message(name, value, d, what))


def options_from_args(kind: type[O], args: Mapping[str, object], backend: str) -> O:
    """The options value ``args`` (typed, as ``parse_model_args`` makes them) give; an argument
    ``kind`` does not take, or a bad value, is one ``ModelArgsError`` line."""
    declared = _declared(kind)
    unknown = sorted(set(args) - set(declared))
    if unknown:
        names = ", ".join(_name(n) for n in unknown[:_SHOWN_NAMES]) + (
            f" and {len(unknown) - _SHOWN_NAMES:,} more" if len(unknown) > _SHOWN_NAMES else "")
        raise ModelArgsError(f"model argument(s) {names} not understood by the {backend} backend; "
                             f"it takes {', '.join(sorted(declared))}")
    problem = options_problem(kind, args)
    if problem:
        raise ModelArgsError(problem)
    values = {}
    for name, given in args.items():
        f, d = declared[name]
        values[f.name] = d.read(given) if d.read is not None and given is not None else given
    return kind(**values)
