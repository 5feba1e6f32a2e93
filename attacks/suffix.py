"""Where CheckList and StressTest put their text: after the prompt's last word.

promptbench inserts the text after the last word of the prompt as TextAttack
splits words (``insert_text_after_word_index(len(words) - 1, text)``): the
word, one space, the text, then whatever followed the word. TextAttack's
words of that era kept apostrophes glued to them, so a closing quote stays
with the word: "... or 'negative':" becomes "... or 'negative' d6ZQ3u0GBQ:".
"""

from __future__ import annotations

import ast
import random
import string
from pathlib import Path

from promptrobust.attacks.errors import AttackOptionError
from promptrobust.attacks.words import word_spans

#: Where a promptbench checkout keeps CheckList's fixed strings (the ``rand_seqs`` list of
#: ``CheckListTransformation._get_transformations``): the package's layout, then the paper's 2023 one.
PROMPTBENCH_CHECKLIST_FILES = ("promptbench/prompt_attack/transformations.py", "prompt_attack/transformations.py")

#: Characters that stay attached to the end of the last word (closing quotes).
_CLOSING = "'\u2019"


def insert_after_last_word(prompt: str, text: str) -> str:
    """``prompt`` with ``" " + text`` after its last word (and any closing
    apostrophe-quotes on it), before the final punctuation. A prompt with no
    word gets the text appended after a space."""
    spans = word_spans(prompt)
    if not spans:
        return prompt + " " + text
    end = spans[-1][1]
    while end < len(prompt) and prompt[end] in _CLOSING:
        end += 1
    return prompt[:end] + " " + text + prompt[end:]


def random_strings(count: int, length: int, seed: int) -> list[str]:
    """``count`` distinct random alphanumeric strings (deterministic in ``seed``)."""
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < count:
        s = "".join(rng.choice(alphabet) for _ in range(length))
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


#: promptbench's StressTest texts, with their spacing (each is joined to the
#: last word by one more space, so the prompt reads "...'negative'  and true is true :").
STRESS_SUFFIXES: tuple[str, ...] = (
    " and true is true ",
    " and false is not true ",
    " and true is true " * 5,
)


def promptbench_checklist_strings(checkout: str) -> tuple[str, ...]:
    """CheckList's fixed strings as a promptbench checkout holds them (50 in fcda538), read
    from the source without running it: the first list of string literals assigned to
    ``rand_seqs``. promptrobust does not ship the list; the user's checkout gives it."""
    root = Path(checkout).expanduser()
    path = next((root / f for f in PROMPTBENCH_CHECKLIST_FILES if (root / f).is_file()), root / PROMPTBENCH_CHECKLIST_FILES[0])
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError) as exc:
        raise AttackOptionError(f"checklist: cannot read promptbench's CheckList strings from {path} ({exc}); "
                                "give the root of a promptbench checkout", setting="attack_options") from None
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "rand_seqs" for t in node.targets)
                and isinstance(node.value, ast.List)):
            items = [e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if items and len(items) == len(node.value.elts):
                return tuple(items)
    raise AttackOptionError(f"checklist: {path} has no list of strings assigned to rand_seqs; give the root of a "
                            "promptbench checkout", setting="attack_options")
