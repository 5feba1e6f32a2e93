"""Adversarial prompts beside their clean originals: a word-level diff (difflib) as HTML.

Words the attack removed or changed are wrapped in <del>, words it added or
changed in <ins>; every piece of text is escaped (``output_safety.html_text``).
Used by the report page and the per-sample pages.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

from promptrobust.engine.safe_io.output_safety import html_text as escape

_TOKEN = re.compile(r"\S+|\s+")

#: difflib's matching is quadratic in the worst case. The common start and end are found in
#: linear time; the differing middle is matched word by word only while it has at most this
#: many token pairs (a few hundred words on each side). Beyond that it is shown as replaced
#: whole, with a note: a 20k-word prompt takes milliseconds, not minutes.
DIFF_PAIRS = 1_000_000
CAPPED_NOTE = "(word diff capped: the changed middle is too long to match word by word; shown as replaced whole)"
#: Characters of each prompt shown on the page (the records keep the whole prompt).
SHOWN_CHARS = 100_000


def word_diff(clean: str, adversarial: str) -> tuple[str, str]:
    """Escaped HTML of both prompts with removed words in <del> and added words in <ins>.

    Linear outside the differing middle; see ``DIFF_PAIRS`` for the cap (noted in the cell).
    A prompt longer than ``SHOWN_CHARS`` is shown cut, with a note saying how much is left out."""
    cut_a, cut_b = max(0, len(clean) - SHOWN_CHARS), max(0, len(adversarial) - SHOWN_CHARS)
    left_html, right_html = _word_diff(clean[:SHOWN_CHARS], adversarial[:SHOWN_CHARS])
    if cut_a:
        left_html += f'<br><i class="note">({cut_a:,} more characters not shown)</i>'
    if cut_b:
        right_html += f'<br><i class="note">({cut_b:,} more characters not shown)</i>'
    return left_html, right_html


def _word_diff(clean: str, adversarial: str) -> tuple[str, str]:
    a, b = _TOKEN.findall(clean), _TOKEN.findall(adversarial)
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    end = 0
    while end < min(len(a), len(b)) - start and a[len(a) - 1 - end] == b[len(b) - 1 - end]:
        end += 1
    mid_a, mid_b = a[start : len(a) - end], b[start : len(b) - end]
    left: list[str] = [escape("".join(a[:start]))]
    right: list[str] = [escape("".join(b[:start]))]
    if len(mid_a) * len(mid_b) > DIFF_PAIRS:
        left.append(_mark("del", mid_a))
        right.append(_mark("ins", mid_b))
        tail_a, tail_b = escape("".join(a[len(a) - end :])), escape("".join(b[len(b) - end :]))
        note = f'<br><i class="note">{escape(CAPPED_NOTE)}</i>'
        return "".join(left) + tail_a, "".join(right) + tail_b + note
    for op, i1, i2, j1, j2 in _opcodes(mid_a, mid_b, start):
        if op == "equal":
            left.append(escape("".join(a[i1:i2])))
            right.append(escape("".join(b[j1:j2])))
            continue
        if op in ("delete", "replace"):
            left.append(_mark("del", a[i1:i2]))
        if op in ("insert", "replace"):
            right.append(_mark("ins", b[j1:j2]))
    left.append(escape("".join(a[len(a) - end :])))
    right.append(escape("".join(b[len(b) - end :])))
    return "".join(left), "".join(right)


def _opcodes(a: Sequence[str], b: Sequence[str], offset: int) -> list[tuple[str, int, int, int, int]]:
    """difflib's opcodes of the middles, shifted to positions in the whole token lists."""
    ops = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    return [(op, i1 + offset, i2 + offset, j1 + offset, j2 + offset) for op, i1, i2, j1, j2 in ops]


def _mark(tag: str, tokens: Sequence[str]) -> str:
    """Wrap each word (not the whitespace between) so highlights stay word-shaped."""
    return "".join(escape(t) if t.isspace() else f"<{tag}>{escape(t)}</{tag}>" for t in tokens)
