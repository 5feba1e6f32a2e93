"""The import directions the README draws, checked on source files (AST, so
function-level imports count too). Used by tests/test_architecture.py, which
also plants a violation in a temporary copy to show the check can fail."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

#: Repository folder -> the package it installs as (pyproject's package-dir).
PACKAGES = {"promptrobust": "promptrobust", "engine": "promptrobust.engine", "tasks": "promptrobust.tasks",
            "attacks": "promptrobust.attacks", "cli": "promptrobust.cli"}

#: The layers, lowest first: (name, module prefixes). docs/architecture.md draws them.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("promptrobust.engine.errors", "promptrobust.engine.progress", "promptrobust.engine.safe_io",
                    "promptrobust.extras")),
    ("serving", ("promptrobust.engine.serving",)),
    ("tasks", ("promptrobust.tasks",)),
    ("attacks", ("promptrobust.attacks",)),
    ("measuring", ("promptrobust.engine.measuring",)),
    ("runs", ("promptrobust.engine.runs",)),
    ("analysis", ("promptrobust.engine.analysis",)),
    ("cli", ("promptrobust.cli",)),
    ("testing", ("promptrobust.testing",)),
)

#: What each layer may import (besides itself). Nothing in the product imports the test doubles.
MAY_IMPORT: dict[str, frozenset[str]] = {
    "foundation": frozenset(),
    "serving": frozenset({"foundation"}),
    "tasks": frozenset({"foundation"}),
    "attacks": frozenset({"foundation"}),
    "measuring": frozenset({"foundation", "serving", "tasks", "attacks"}),
    "runs": frozenset({"foundation", "serving", "tasks", "attacks", "measuring"}),
    "analysis": frozenset({"foundation", "serving", "tasks", "attacks", "measuring", "runs"}),
    "cli": frozenset({"foundation", "serving", "tasks", "attacks", "measuring", "runs", "analysis"}),
    "testing": frozenset({"foundation", "serving", "tasks", "attacks", "measuring", "runs", "analysis"}),
}

#: (importer, imported) pairs allowed for a stated reason.
KNOWN_EXCEPTIONS: set[tuple[str, str]] = set()

#: The library surface the CLI may import (issue 29: at most 12 modules): a command is arguments ->
#: settings -> plan -> run -> write -> print, so it needs the settings values, the plans and what
#: runs them, the error base (every library error a user can fix subclasses it), the catalog of what
#: exists, the progress events and safe terminal output. Anything else it needs belongs behind one of these.
CLI_SURFACE = frozenset({
    "promptrobust",  # the public API: the version and the settings values its flags derive from
    "promptrobust.engine.errors",  # the error base and SettingsError
    "promptrobust.engine.progress",  # progress events, drawn on the terminal
    "promptrobust.engine.safe_io",  # terminal-safe streams, redaction, the environment's refusals
    "promptrobust.engine.runs.task_choice",  # TaskChoice: a user's own task; its flags derive from it
    "promptrobust.engine.runs.plan",  # pre run's plan
    "promptrobust.engine.runs.lm_eval_args",  # lm-eval's API model arguments, mapped or refused
    "promptrobust.engine.runs.executor",  # running a plan (any command's: the one executor)
    "promptrobust.engine.runs.catalog",  # models, datasets, prompts, attacks (pre list), the defaults
    "promptrobust.engine.runs.sweep.plan",  # pre sweep's plan, its dry run and merges (records and caches)
    "promptrobust.engine.analysis.commands",  # pre eval, transfer, defend, attention: plan and run
    "promptrobust.engine.analysis.report",  # pre report, and the one line on what an adversarial prompt changed
})


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    path: str
    line: int


def _under(name: str, prefixes: tuple[str, ...] | str) -> bool:
    prefixes = (prefixes,) if isinstance(prefixes, str) else prefixes
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def module_name(root: Path, path: Path) -> str:
    rel = path.relative_to(root)
    package = PACKAGES[rel.parts[0]]
    parts = [*package.split("."), *rel.parts[1:-1]]
    if path.stem != "__init__":
        parts.append(path.stem)
    return ".".join(parts)


def _walk(tree: ast.AST, *, annotations: bool = True) -> list[ast.AST]:
    """Every node; without ``annotations``, not the bodies of ``if TYPE_CHECKING:`` (imports for
    annotations only, never run). Layers and circles count those too: a circle hidden under
    ``TYPE_CHECKING`` is still two modules that need each other."""
    out: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        if not annotations and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo += node.orelse
            continue
        todo += list(ast.iter_child_nodes(node))
    return out


def edges(root: Path) -> list[Edge]:
    """Every import of a promptrobust module by a promptrobust module under ``root``."""
    out: list[Edge] = []
    for folder in PACKAGES:
        for path in sorted((root / folder).rglob("*.py")):
            name = module_name(root, path)
            is_package = path.stem == "__init__"
            for node in _walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                targets: list[str] = []
                if isinstance(node, ast.Import):
                    targets = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    base = node.module or ""
                    if node.level:
                        anchor = name.split(".") if is_package else name.split(".")[:-1]
                        anchor = anchor[: len(anchor) - (node.level - 1)]
                        base = ".".join([*anchor, *([base] if base else [])])
                    targets = [base] + [f"{base}.{a.name}" for a in node.names]
                for t in targets:
                    if _under(t, "promptrobust"):
                        out.append(Edge(name, t, str(path.relative_to(root)), node.lineno))
    return out


def layer_of(module: str) -> str | None:
    """The layer a promptrobust module belongs to (None: the package's lazy front, ``promptrobust``)."""
    for name, prefixes in LAYERS:
        if _under(module, prefixes):
            return name
    return None


def violations(root: Path) -> list[str]:
    """Broken import directions under ``root``, one line each (empty: all rules hold)."""
    found: list[str] = []
    for e in edges(root):
        if any(e.importer == i and _under(e.imported, m) for i, m in KNOWN_EXCEPTIONS):
            continue
        importer, imported = layer_of(e.importer), layer_of(e.imported)
        if importer is None or imported is None or importer == imported or imported in MAY_IMPORT[importer]:
            continue
        found.append(f"{e.path}:{e.line}: {e.importer} imports {e.imported} ({importer} may not import {imported})")
    return sorted(set(found))


def imported_modules(root: Path, folder: str) -> list[Edge]:
    """Every import under ``root/folder`` of a promptrobust module, one edge per imported name,
    resolved to the module that holds it (``from pkg import mod`` -> ``pkg.mod``; ``from mod import
    name`` -> ``mod``, never the bare ``pkg``); ``if TYPE_CHECKING:`` imports (annotations) are not
    counted: the CLI's surface is what it runs."""
    modules = {module_name(root, p) for top in PACKAGES for p in (root / top).rglob("*.py")}

    def holder(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    out: list[Edge] = []
    for path in sorted((root / folder).rglob("*.py")):
        name = module_name(root, path)
        for node in _walk(ast.parse(path.read_text(encoding="utf-8"), str(path)), annotations=False):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".") if path.stem == "__init__" else name.split(".")[:-1]
                    base = ".".join([*anchor[: len(anchor) - (node.level - 1)], *([base] if base else [])])
                targets = [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            out += [Edge(name, holder(t), str(path.relative_to(root)), node.lineno) for t in targets if _under(t, "promptrobust")]
    return out


def cli_library_imports(root: Path) -> dict[str, set[str]]:
    """Library modules (outside the CLI) the CLI imports -> the CLI files importing them."""
    found: dict[str, set[str]] = {}
    for e in imported_modules(root, "cli"):
        if not _under(e.imported, "promptrobust.cli"):
            found.setdefault(e.imported, set()).add(e.path)
    return found


def cli_surface_violations(root: Path) -> list[str]:
    """CLI imports outside ``CLI_SURFACE``, one line each."""
    found = []
    for e in imported_modules(root, "cli"):
        if _under(e.imported, "promptrobust.cli") or e.imported in CLI_SURFACE:
            continue
        found.append(f"{e.path}:{e.line}: {e.importer} imports {e.imported}, which is not the CLI's library surface")
    return sorted(set(found))


def late_imports(root: Path, folder: str) -> list[str]:
    """Imports of promptrobust modules made inside a function under ``root/folder``
    (``path:line: module``): these hide circles and are kept for optional heavy
    dependencies only, which are never promptrobust's own modules."""
    found: list[str] = []
    for path in sorted((root / folder).rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                if isinstance(node, ast.ImportFrom) and (node.level or _under(node.module or "", "promptrobust")):
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {'.' * node.level}{node.module or ''}")
                elif isinstance(node, ast.Import):
                    found += [f"{path.relative_to(root)}:{node.lineno}: {a.name}" for a in node.names if _under(a.name, "promptrobust")]
    return sorted(set(found))


def module_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the promptrobust modules it imports (anywhere in it); ``from pkg import name``
    points at ``pkg.name`` when that is a module, else at ``pkg``; a package's ``__init__``
    reached only as the parent of a submodule import is not an edge."""
    modules = {module_name(root, p) for folder in PACKAGES for p in (root / folder).rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for e in edges(root):
        target = e.imported
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != e.importer:
            graph[e.importer].add(target)
    # `from pkg.sub import x` also lists `pkg.sub` itself: keep only the most specific module per statement
    return graph


def cycles(root: Path) -> list[list[str]]:
    """Strongly connected groups of more than one module (import circles)."""
    graph = module_graph(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    import sys

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 5000))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)
