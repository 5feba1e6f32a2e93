"""lm-eval's ``--gen_kwargs`` and ``--system_instruction``, as settings fields.

``--gen_kwargs max_gen_toks=32,until=["\\n\\n"]`` sets the most new tokens and the
stop sequences; greedy decoding is the paper's, so ``temperature=0`` and
``do_sample=false`` are accepted and anything else is refused.
``--system_instruction TEXT`` puts TEXT before every input (a system message to
chat models).
"""

from __future__ import annotations

import argparse
import ast
from typing import Any

from promptrobust.cli.errors import UserError

def _split_items(text: str) -> list[str]:
    """``a=1,until=["x", "y,z"]`` -> ["a=1", 'until=["x", "y,z"]'] (commas inside brackets or quotes stay)."""
    items, depth, quote, cur = [], 0, "", []
    for ch in text:
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = ""
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    if "".join(cur).strip():
        items.append("".join(cur))
    return [i.strip() for i in items if i.strip()]


def _literal(value: str) -> Any:
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value


def parse_gen_kwargs(text: str) -> dict[str, Any]:
    """``--gen_kwargs`` -> {"max_new_tokens": int, "stop": tuple[str, ...]} (only the keys given)."""
    out: dict[str, Any] = {}
    for item in _split_items(text):
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError(f"--gen_kwargs item {item!r} is not key=value (example: --gen_kwargs max_gen_toks=32,until=[\"\\n\"])")
        value = _literal(raw.strip())
        if key in ("max_gen_toks", "max_tokens", "max_new_tokens"):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UserError(f"--gen_kwargs {key}={raw}: give a whole number of new tokens >= 1")
            out["max_new_tokens"] = value
        elif key in ("until", "stop"):
            stops = [value] if isinstance(value, str) else value
            if not isinstance(stops, (list, tuple)) or not all(isinstance(s, str) and s for s in stops):
                raise UserError(f"--gen_kwargs {key}={raw}: give a string or a list of non-empty strings, e.g. until=[\"\\n\\n\"]")
            out["stop"] = tuple(stops)
        elif key == "temperature":
            if value not in (0, 0.0):
                raise UserError(f"--gen_kwargs temperature={raw}: pre decodes greedily (the paper's protocol); use temperature=0 or leave it out")
        elif key == "do_sample":
            if value not in (False, "false", "False"):
                raise UserError("--gen_kwargs do_sample: pre decodes greedily (the paper's protocol); use do_sample=false or leave it out")
        else:
            raise UserError(f"--gen_kwargs {key}: not supported (pre takes max_gen_toks, until, temperature=0, do_sample=false)")
    return out


def apply_generation(args: argparse.Namespace) -> dict[str, Any]:
    """Settings fields from --gen_kwargs and --system_instruction (``--max-tokens`` and max_gen_toks must agree)."""
    fields: dict[str, Any] = {}
    if getattr(args, "gen_kwargs", None):
        fields = parse_gen_kwargs(args.gen_kwargs)
        given = getattr(args, "max_tokens", None)
        if "max_new_tokens" in fields and given is not None and given != fields["max_new_tokens"]:
            raise UserError(f"--max-tokens {given} and --gen_kwargs max_gen_toks={fields['max_new_tokens']} disagree: give one")
    instruction = getattr(args, "system_instruction", None)
    if instruction is not None:
        if not instruction.strip():
            raise UserError("--system_instruction is empty: give the text, or drop the flag")
        fields["system_instruction"] = instruction
    return fields
