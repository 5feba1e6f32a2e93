"""How a sample of a user's task is laid out: a template with one ``{column}``
slot per input column.

The template is parsed once into literal text and slots; rendering copies a
sample's values into the slots as they are, so braces, quotes and newlines in
the data stay exactly what they are (nothing here calls ``str.format``). In the
template itself ``{{`` and ``}}`` write a literal brace.

Without a template every input column gets a line of its own,
``<display>: <value>``, the layout of the built-in tasks ("Sentence: ...").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Slot:
    """Where the value of input column ``column`` goes."""

    column: str


@dataclass(frozen=True)
class InputTemplate:
    """A parsed template: literal text and slots, in order."""

    parts: tuple[str | Slot, ...]

    @classmethod
    def lines(cls, columns: Sequence[tuple[str, str]]) -> "InputTemplate":
        """The default layout: ``<display>: {column}``, one line per (column, display)."""
        parts: list[str | Slot] = []
        for i, (column, display) in enumerate(columns):
            parts += [("\n" if i else "") + display + ": ", Slot(column)]
        return cls(tuple(parts))

    @classmethod
    def parse(cls, text: str, columns: Sequence[str], fail: Callable[[str], Exception]) -> "InputTemplate":
        """Parse ``text``; every slot must name one of ``columns`` and every column must
        have a slot. ``fail(message)`` builds the error (it names the file and key)."""
        parts: list[str | Slot] = []
        literal: list[str] = []
        i = 0
        while i < len(text):
            ch = text[i]
            if text.startswith("{{", i) or text.startswith("}}", i):
                literal.append(ch)
                i += 2
                continue
            if ch == "}":
                raise fail(f"a lone '}}' at character {i + 1}; write '}}}}' for a literal brace")
            if ch != "{":
                literal.append(ch)
                i += 1
                continue
            end = text.find("}", i + 1)
            inner = text[i + 1 : end] if end != -1 else ""
            if end == -1 or "{" in inner:
                raise fail(f"a '{{' at character {i + 1} is not closed; write {{column}} for an input, '{{{{' for a literal brace")
            name = inner.strip()
            if name not in columns:
                raise fail(f"{{{inner}}} names no input column; use one of {', '.join('{' + c + '}' for c in columns)}")
            if literal:
                parts.append("".join(literal))
                literal = []
            parts.append(Slot(name))
            i = end + 1
        if literal:
            parts.append("".join(literal))
        shown = {p.column for p in parts if isinstance(p, Slot)}
        missing = [c for c in columns if c not in shown]
        if missing:
            raise fail(
                f"the template never shows input column {missing[0]!r}; put {{{missing[0]}}} where it goes "
                "(or drop it from input)"
            )
        return cls(tuple(parts))

    def render(self, values: Mapping[str, str]) -> str:
        """The sample's block: the literal text with each slot's value copied in."""
        return "".join(values[p.column] if isinstance(p, Slot) else p for p in self.parts)

    def canonical(self) -> list[str | dict[str, str]]:
        """The parts as plain data, for the definition hash."""
        return [{"column": p.column} if isinstance(p, Slot) else p for p in self.parts]
