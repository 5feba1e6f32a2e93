"""Attack names are written in attacks/recipes.py only: every other module asks a recipe
what it is (``attacks.base.Recipe``: ``edits_words``, ``prompt_set``, ``extras``,
``worst_case_candidates``, ...) or looks a name up in ``attacks.registry``.

The rule, on the product's Python files (engine/, cli/, tasks/, attacks/, promptrobust/;
bench/, scripts/ and tests/ drive the product by name, as a user does): no string
constant equal to a registered attack name (case-insensitive), except

* in ``attacks/recipes.py``, where the names are declared;
* text: docstrings and other bare string statements, the pieces of f-strings, and the
  ``help``/``description``/``epilog`` of argparse calls, which may name attacks for a reader;
* the prompt type ``semantic`` in ``tasks/base.py``, which owns the prompt types: the
  Semantic attack's candidates are the task's prompts of that type, a word two concepts
  share (everywhere else it is ``tasks.base.SEMANTIC_PROMPTS``).

A name compared, listed, used as a key or a default anywhere else is a branch on the
attack's name: the test fails naming the file and line.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

from promptrobust.attacks.registry import list_attacks

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("engine", "cli", "tasks", "attacks", "promptrobust")
DECLARED_IN = Path("attacks/recipes.py")
#: file -> the names it may write, and why.
ALLOWED = {Path("tasks/base.py"): {"semantic"}}  # the prompt type's owner (tasks.base.SEMANTIC_PROMPTS)
TEXT_KEYWORDS = {"help", "description", "epilog"}


def _text_nodes(tree: ast.AST) -> set[int]:
    """ids of string constants that are text for a reader, not values the code uses."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            out.add(id(node.value))  # docstrings and attribute docstrings
        elif isinstance(node, ast.JoinedStr):  # its literal pieces; the code in its {...} is code
            out.update(id(v) for v in node.values if isinstance(v, ast.Constant))
        elif isinstance(node, ast.keyword) and node.arg in TEXT_KEYWORDS:
            out.update(id(v) for v in ast.walk(node.value) if isinstance(v, ast.Constant))
    return out


def attack_name_literals(root: Path, names: set[str]) -> list[str]:
    """``path:line: 'name'`` for every string constant equal to an attack name outside its declaration."""
    found = []
    for top in PRODUCT:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root)
            if rel == DECLARED_IN or any(p.is_symlink() for p in [path, *path.parents] if root in p.parents):
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            text = _text_nodes(tree)
            allowed = ALLOWED.get(rel, set())
            for node in ast.walk(tree):
                if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in text
                        and node.value.strip().lower() in names - allowed):
                    found.append(f"{rel}:{node.lineno}: {node.value!r}")
    return found


def registered() -> set[str]:
    return {name for name, _ in list_attacks()}


def test_attack_names_are_written_only_in_the_recipes() -> None:
    assert registered() >= {"textbugger", "checklist", "semantic"}, "the names come from the registry"
    assert attack_name_literals(ROOT, registered()) == []


def test_the_rule_fails_on_a_name_planted_in_a_copy(tmp_path: Path) -> None:
    for top in PRODUCT:
        shutil.copytree(ROOT / top, tmp_path / top, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "data"))
    names = registered()
    assert attack_name_literals(tmp_path, names) == []
    estimate = tmp_path / "engine" / "runs" / "sweep" / "estimate.py"
    lines = estimate.read_text().splitlines()
    planted = len(lines) + 2
    estimate.write_text("\n".join([*lines, "", 'PER_WORD = {"TextFooler": 50}', ""]))
    base = tmp_path / "tasks" / "base.py"
    base.write_text(base.read_text() + '\nDEFAULT = "stresstest"\n')
    # text for a reader is not a branch: a docstring, an f-string, argparse help
    cli_file = tmp_path / "cli" / "listing.py"
    cli_file.write_text(cli_file.read_text() + '\n\ndef _x(p, name):\n    """Like checklist."""\n'
                        '    p.add_argument("--a", help="checklist")\n    return f"{name}checklist{name or \'bertattack\'}"\n')
    in_fstring_code = len(cli_file.read_text().splitlines())
    recipes = tmp_path / "attacks" / "recipes.py"
    recipes.write_text(recipes.read_text() + '\nALSO = "deepwordbug"\n')
    found = attack_name_literals(tmp_path, names)
    assert found == [f"engine/runs/sweep/estimate.py:{planted}: 'TextFooler'",
                     f"cli/listing.py:{in_fstring_code}: 'bertattack'",
                     f"tasks/base.py:{len(base.read_text().splitlines())}: 'stresstest'"], found
