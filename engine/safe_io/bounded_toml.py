"""TOML read with its nesting bounded, as the JSON readers bound theirs.

``tomllib`` parses arrays and inline tables recursively: a file nesting them 500 deep is a
``RecursionError`` and a traceback; dotted keys (``a.a.a... = 1``) nest tables without
recursion, but whatever walks the result later (a message showing the value, a writer) may
recurse. ``load_toml`` counts the brackets before parsing (strings and comments removed, so a
bracket in a prompt's text does not count), parses, and walks the result without recursion:
anything deeper than ``MAX_TOML_DEPTH`` is a ``TomlNestingError`` with one line, which every
TOML reader (task files, prompts files, sweep files, price tables) turns into its own error
naming the file. A real file nests 2 to 5 levels.
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

from promptrobust.engine.errors import PromptRobustError

MAX_TOML_DEPTH = 32

#: Strings (multi-line first) and comments: their brackets are text, not structure.
_STRING_OR_COMMENT = re.compile(
    r'"""(?:[^"\\]|\\.|"(?!""))*"""'  # multi-line basic string
    r"|'''[\s\S]*?'''"  # multi-line literal string
    r'|"(?:[^"\\\n]|\\.)*"'  # basic string
    r"|'[^'\n]*'"  # literal string
    r"|#[^\n]*"  # comment
)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


class TomlNestingError(PromptRobustError, ValueError):
    """A TOML text nests deeper than ``MAX_TOML_DEPTH``; the caller names the file."""


def bracket_depth(text: str) -> int:
    """How deep arrays and inline tables nest in a TOML text (a table header counts its own
    brackets), without parsing it."""
    depth = deepest = 0
    for ch in _NOT_BRACKET.sub("", _STRING_OR_COMMENT.sub("", text)):
        depth += 1 if ch in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def value_depth(value: object) -> int:
    """How deep tables and arrays nest in a parsed value, walked without recursion."""
    deepest = 0
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth + 1)
        if depth + 1 > MAX_TOML_DEPTH:
            return depth + 1
        stack.extend((child, depth + 1) for child in children)
    return deepest


def load_toml(text: str) -> dict[str, Any]:
    """``tomllib.loads(text)``, refused (``TomlNestingError``) when it nests deeper than
    ``MAX_TOML_DEPTH``; a syntax error is ``tomllib.TOMLDecodeError`` as before."""
    depth = bracket_depth(text)
    if depth <= MAX_TOML_DEPTH:
        try:
            data = tomllib.loads(text)
        except RecursionError:  # the count above bounds what tomllib recurses on; this is a backstop
            data = None
        if data is not None and value_depth(data) <= MAX_TOML_DEPTH:
            return data
        nested = f"more than {MAX_TOML_DEPTH} levels deep"  # dotted keys, or the backstop
    else:
        nested = f"{depth} levels deep"
    raise TomlNestingError(f"arrays or tables nested {nested} (a real file nests a few; at most {MAX_TOML_DEPTH} are read)")
