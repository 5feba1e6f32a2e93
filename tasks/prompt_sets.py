"""Prompt sets: TOML files of instructions, one per dataset.

Built in: ``tasks/prompts/<dataset>.toml`` (types "task" and "role") and
``tasks/prompts/semantic/<dataset>.toml`` (type "semantic"). Users add files
in the same format::

    [[prompt]]
    id = "sst2-task-01"     # unique, stable
    type = "task"           # task | role | semantic
    language = "en"         # optional, default "en"
    text = "..."
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import cast

from promptrobust.engine.safe_io.bounded_toml import TomlNestingError, load_toml
from promptrobust.tasks.base import PROMPT_TYPES, SEMANTIC_PROMPTS, Prompt, PromptType, Task
from promptrobust.tasks.errors import PromptFileError, UnknownPromptError
from promptrobust.tasks.registry import canonical_name, prompt_dataset

PROMPT_DIR = Path(__file__).parent / "prompts"
_KEYS = {"id", "type", "language", "text"}


def builtin_files(dataset: str) -> dict[str, Path]:
    """``{"en": path, "semantic": path}`` for the dataset's built-in files (may not exist)."""
    base = prompt_dataset(dataset)
    return {"en": PROMPT_DIR / f"{base}.toml", SEMANTIC_PROMPTS: PROMPT_DIR / SEMANTIC_PROMPTS / f"{base}.toml"}


@lru_cache(maxsize=128)
def _parse_file(path: str, mtime_ns: int) -> tuple[tuple[str, PromptType, str, str], ...]:
    """(id, type, language, text) per [[prompt]] table, validated."""
    p = Path(path)
    try:
        data = load_toml(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise PromptFileError(f"{p}: invalid TOML ({exc}); fix the syntax") from exc
    except TomlNestingError as exc:
        raise PromptFileError(f"{p}: {exc}; flatten the file") from None
    except UnicodeDecodeError as exc:
        raise PromptFileError(f"{p}: not UTF-8 text; save the file as UTF-8") from exc
    tables = data.get("prompt")
    if not isinstance(tables, list) or not tables:
        raise PromptFileError(f"{p}: no [[prompt]] tables; add at least one [[prompt]] with id, type and text")
    out: list[tuple[str, PromptType, str, str]] = []
    for n, t in enumerate(tables, 1):
        where = f"{p}: prompt #{n}"
        if not isinstance(t, dict):
            raise PromptFileError(f"{where} is not a table; write it as [[prompt]]")
        for key in ("id", "type", "text"):
            if key not in t:
                raise PromptFileError(f"{where}: missing field {key!r}; add {key} = \"...\"")
            if not isinstance(t[key], str) or not t[key].strip():
                raise PromptFileError(f"{where}: field {key!r} must be a non-empty string")
        unknown = set(t) - _KEYS
        if unknown:
            raise PromptFileError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(_KEYS))}")
        if t["type"] not in PROMPT_TYPES:
            raise PromptFileError(f"{where} ({t['id']}): field 'type' is {t['type']!r}; use one of {', '.join(PROMPT_TYPES)}")
        lang = t.get("language", "en")
        if not isinstance(lang, str) or not lang.strip():
            raise PromptFileError(f"{where} ({t['id']}): field 'language' must be a non-empty string")
        out.append((t["id"], cast(PromptType, t["type"]), lang, t["text"]))  # checked against PROMPT_TYPES above
    return tuple(out)


def read_prompt_file(path: str | Path, dataset: str) -> list[Prompt]:
    """The prompts of one file, attributed to ``dataset``."""
    p = Path(path)
    if not p.is_file():
        raise PromptFileError(f"{p}: prompt file not found; check the path")
    rows = _parse_file(str(p.resolve()), p.stat().st_mtime_ns)
    return [Prompt(id=i, dataset=dataset, type=ty, text=tx, language=lg) for i, ty, lg, tx in rows]


def load_prompts(
    dataset: str | Task,
    *,
    types: Iterable[str] | None = None,
    languages: Iterable[str] | None = None,
    extra_files: Sequence[str | Path] = (),
) -> list[Prompt]:
    """The dataset's prompts (built-in files first, then ``extra_files``), filtered
    by ``types`` and ``languages``. Ids must be unique across all files read.
    ``dataset`` is a name or a task; a user's own task serves the prompts it brings."""
    own = dataset.own_prompts() if isinstance(dataset, Task) else None
    name = dataset.name if isinstance(dataset, Task) else dataset
    if own is None:
        name = canonical_name(name)
    wanted = set(types) if types is not None else set(PROMPT_TYPES)
    bad = wanted - set(PROMPT_TYPES)
    if bad:
        raise ValueError(f"unknown prompt type(s) {', '.join(sorted(bad))}; use {', '.join(PROMPT_TYPES)}")
    paths: list[Path] = []
    if own is None:
        files = builtin_files(name)
        if wanted & {"task", "role"}:
            paths.append(files["en"])
        if SEMANTIC_PROMPTS in wanted:
            paths.append(files[SEMANTIC_PROMPTS])
        present = [p for p in paths if p.is_file()]
        if not present and not extra_files:
            expected = " or ".join(str(p) for p in paths)
            raise PromptFileError(f"no prompt file for {name}: expected {expected}; add one or pass a prompt file")
        paths = present
    prompts: list[Prompt] = list(own or ())
    origin: dict[str, Path | str] = {p.id: f"task {name}" for p in prompts}
    for path in [*paths, *(Path(f) for f in extra_files)]:
        for pr in read_prompt_file(path, name):
            if pr.id in origin:
                raise PromptFileError(f"{path}: duplicate prompt id {pr.id!r} (also in {origin[pr.id]}); ids must be unique")
            origin[pr.id] = path
            prompts.append(pr)
    langs = set(languages) if languages is not None else None
    return [p for p in prompts if p.type in wanted and (langs is None or p.language in langs)]


def get_prompt(dataset: str | Task, prompt_id: str, *, extra_files: Sequence[str | Path] = ()) -> Prompt:
    """One prompt by id."""
    prompts = load_prompts(dataset, extra_files=extra_files)
    for p in prompts:
        if p.id == prompt_id:
            return p
    sample = ", ".join(p.id for p in prompts[:3])
    name = dataset.name if isinstance(dataset, Task) else canonical_name(dataset)
    raise UnknownPromptError(
        f"unknown prompt id {prompt_id!r} for {name} ({len(prompts)} prompts, e.g. {sample}); "
        "list them with `pre list prompts`"
    )
