"""A user's task from a TOML task file or from the flags' form, through one
constructor: both become a plain table of the task file's keys, and
``definition_from_table`` turns a table into a ``TaskDefinition``. So a task
means the same whichever way it was given. (YAML task files would be one more
parser in front of the same table; they are not read yet.)

A task file::

    name = "tickets"
    data = "tickets.csv"              # a file, a folder of split files, or "hf:PATH"
    input = "body"                    # or ["subject", "body"], or [{column = "body", display = "Ticket"}]
    label = "queue"
    metric = "accuracy"               # or macro_f1; free text: target = COLUMN, metric = exact_match | squad_f1 | bleu
    template = "Ticket: {body}"       # optional; braces in the data stay braces
    prompts = ["Route the ticket: billing, technical or other.", ...]   # or tables, or a prompts file
    protected = ["refund"]

    [labels]                          # label value = answer word
    billing = "billing"
    tech = "technical"
    other = "other"

    [few_shot]                        # optional: split = "train", or file = "examples.csv"; count = 3

Relative paths are read from the task file's folder (the flags' form: from the
current folder).
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from promptrobust.engine.safe_io.bounded_toml import TomlNestingError, load_toml
from promptrobust.tasks.base import Prompt
from promptrobust.tasks.common import ANSWER_CUE
from promptrobust.tasks.errors import PromptFileError, TaskDefinitionError
from promptrobust.tasks.own.definition import (
    DEFAULT_FEW_SHOT_COUNT, DEFAULT_MAX_TOKENS, HUB_PREFIX, KEYS, DataSource, FewShot, InputColumn, Origin,
    TaskDefinition, display_name, label_text,
)
from promptrobust.tasks.own.task import OwnTask, build_task
from promptrobust.tasks.prompt_sets import read_prompt_file

#: What a task file is named: TOML is read; a YAML file is recognised (and refused in one line).
TOML_SUFFIXES = (".toml",)
YAML_SUFFIXES = (".yaml", ".yml")
TASK_FILE_SUFFIXES = TOML_SUFFIXES + YAML_SUFFIXES
#: The keys of one prompt table and of the few_shot table.
_PROMPT_KEYS = ("id", "type", "text", "language")
_FEW_SHOT_KEYS = ("split", "file", "count")
#: The flags' form: task-file key -> the parameter of ``task_from_columns`` (the CLI's flags).
FLAG_PARAMETERS: tuple[tuple[str, str], ...] = (
    ("name", "task_name"), ("data", "data_file"), ("config", "dataset_config"), ("split", "split"), ("input", "input_columns"),
    ("label", "label_column"), ("labels", "labels"), ("target", "target_column"), ("metric", "metric"),
    ("template", "template"), ("few_shot", "few_shot_file"), ("prompts", "prompts"), ("protected", "protected"),
    ("id", "id_column"), ("max_tokens", "max_tokens"), ("answer_cue", "answer_cue"), ("description", "description"),
)


def is_task_file(text: str) -> bool:
    """Whether ``text`` names a task file (by its suffix), rather than a dataset."""
    return Path(text).suffix.lower() in TASK_FILE_SUFFIXES


def load_task_file(path: str | Path) -> OwnTask:
    """The ``Task`` a task file defines."""
    return build_task(read_task_file(path))


def read_task_file(path: str | Path) -> TaskDefinition:
    """The ``TaskDefinition`` of a TOML task file."""
    p = Path(path)
    if p.suffix.lower() in YAML_SUFFIXES:
        raise TaskDefinitionError(f"{p}: YAML task files are not read yet; write it as TOML (the keys are the same)",
                                  setting="task")
    if p.suffix.lower() not in TOML_SUFFIXES:
        raise TaskDefinitionError(f"{p}: a task file is TOML (.toml); rename it or convert it", setting="task")
    if not p.is_file():
        raise TaskDefinitionError(f"{p}: task file not found; check the path", setting="task")
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TaskDefinitionError(f"{p}: not UTF-8 text (byte {exc.start}); save the task file as UTF-8") from None
    return definition_from_table(_parse_toml(p, text), origin=Origin(task_file=str(p)), base_dir=p.resolve().parent)


def _parse_toml(p: Path, text: str) -> dict[str, object]:
    try:
        return load_toml(text)
    except tomllib.TOMLDecodeError as exc:
        raise TaskDefinitionError(f"{p}: invalid TOML ({exc}); fix the syntax") from None
    except TomlNestingError as exc:
        raise TaskDefinitionError(f"{p}: {exc}; flatten the file", setting="task") from None


def task_from_columns(
    *,
    data_file: str | Path,
    input_columns: str | Sequence[str],
    label_column: str | None = None,
    labels: str | Mapping[str, str] | None = None,
    target_column: str | None = None,
    metric: str | None = None,
    task_name: str | None = None,
    split: str | None = None,
    dataset_config: str | None = None,
    template: str | None = None,
    few_shot_file: str | None = None,
    prompts: Sequence[str] = (),
    protected: Sequence[str] = (),
    id_column: str | None = None,
    names: Mapping[str, str] | None = None,
) -> OwnTask:
    """The flags' form of a task (``--data-file F --input-column C --label-column L --labels v=word,...``;
    ``data_file`` may be ``hf:PATH``): the same definition, and task, as a task file with these keys
    (``FLAG_PARAMETERS``: which parameter is which key). ``task_name`` defaults to the data file's
    stem (the hub path's last part). ``names``: how messages name the parameters (the command
    line passes its flags, ``{"input_columns": "--input-column", ...}``); default: as they are."""
    location = str(data_file)
    spellings = tuple((parameter, names[parameter]) for _, parameter in FLAG_PARAMETERS if names and parameter in names)
    table: dict[str, object] = {
        "name": task_name if task_name is not None else default_name(location),
        "data": location,
        "input": [input_columns] if isinstance(input_columns, str) else list(input_columns),
    }
    shown = dict(spellings).get("labels", "labels")
    optional = {"label": label_column, "labels": parse_labels(labels, shown) if isinstance(labels, str) else labels,
                "target": target_column, "metric": metric, "split": split, "config": dataset_config, "template": template,
                "few_shot": few_shot_file, "id": id_column}
    table.update({k: v for k, v in optional.items() if v is not None})
    if prompts:
        table["prompts"] = list(prompts)
    if protected:
        table["protected"] = list(protected)
    origin = Origin(parameters=FLAG_PARAMETERS, spellings=spellings)
    return build_task(definition_from_table(table, origin=origin, base_dir=Path.cwd()))


def default_name(location: str) -> str:
    """A task name from where its data is: the file's stem or the hub path's last part,
    characters a file name cannot hold replaced by '_'."""
    stem = location[len(HUB_PREFIX):].rstrip("/").rsplit("/", 1)[-1] if location.startswith(HUB_PREFIX) else Path(location).stem
    cleaned = "".join(ch if ch.isalnum() or ch in "_.-" else "_" for ch in stem).strip("._-")
    return cleaned or "task"


def parse_labels(text: str, name: str = "labels") -> dict[str, str]:
    """``"billing=billing,tech=technical"`` -> ``{"billing": "billing", "tech": "technical"}``
    (``name``: how messages name the setting)."""
    out: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        value, sep, word = item.partition("=")
        if not sep or not value.strip() or not word.strip() or "=" in word:
            raise TaskDefinitionError(
                f"{name}: {item.strip()!r} is not VALUE=WORD; write labels as "
                "value=word,value=word (e.g. billing=billing,tech=technical)"
                + ("; a label value holding '=' needs a task file ([labels] table)" if "=" in word else ""),
                setting="labels",
            )
        if value.strip() in out:
            raise TaskDefinitionError(f"{name}: label value {value.strip()!r} is mapped twice; map each value once",
                                      setting="labels")
        out[value.strip()] = word.strip()
    return out


# -- the one constructor -------------------------------------------------------------------


def definition_from_table(table: Mapping[str, Any], *, origin: Origin, base_dir: Path) -> TaskDefinition:
    """A ``TaskDefinition`` from the task file's keys (a TOML table, or the flags' form as one)."""
    err = origin.error
    unknown = [k for k in table if k not in KEYS]
    if unknown:
        near = difflib.get_close_matches(str(unknown[0]), KEYS, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise err(str(unknown[0]), f"unknown key{hint}; the keys are {', '.join(KEYS)}")
    for key in ("name", "data", "input"):
        if key not in table:
            raise err(key, f"missing; a task needs {key}" + (" (a path, or hf:PATH)" if key == "data" else ""))
    name = _text(table, "name", origin)
    data = _text(table, "data", origin)
    location = data if data.startswith(HUB_PREFIX) else str(_path(data, base_dir))
    labels = table.get("labels")
    return TaskDefinition(
        name=name,
        data=DataSource(location, _opt_text(table, "config", origin), _opt_text(table, "split", origin)),
        input=_input_columns(table["input"], origin),
        label=_opt_text(table, "label", origin),
        labels=_labels(labels, origin) if labels is not None else (),
        target=_opt_text(table, "target", origin),
        metric=_opt_text(table, "metric", origin),
        template=_opt_text(table, "template", origin, strip=False),
        answer_cue=_opt_text(table, "answer_cue", origin) or ANSWER_CUE,
        few_shot=_few_shot(table.get("few_shot"), origin, base_dir),
        prompts=_prompts(table.get("prompts"), name, origin, base_dir),
        protected=tuple(_text_list(table.get("protected", []), "protected", origin)),
        id_column=_opt_text(table, "id", origin),
        max_tokens=_whole(table.get("max_tokens", DEFAULT_MAX_TOKENS), "max_tokens", origin),
        description=_opt_text(table, "description", origin) or "",
        origin=origin,
    )


def _path(text: str, base_dir: Path) -> Path:
    p = Path(text).expanduser()
    return p if p.is_absolute() else base_dir / p


def _text(table: Mapping[str, Any], key: str, origin: Origin) -> str:
    value = table[key]
    if not isinstance(value, str) or not value.strip():
        raise origin.error(key, f"must be non-empty text (got {value!r})")
    return value.strip()


def _opt_text(table: Mapping[str, Any], key: str, origin: Origin, *, strip: bool = True) -> str | None:
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise origin.error(key, f"must be non-empty text (got {value!r})")
    return value.strip() if strip else value


def _whole(value: Any, key: str, origin: Origin) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise origin.error(key, f"must be a whole number (got {value!r})")
    return value


def _text_list(value: Any, key: str, origin: Origin) -> list[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(v, str) and v.strip() for v in items):
        raise origin.error(key, f"must be a list of non-empty strings (got {value!r})")
    return [v.strip() for v in items]


def _input_columns(value: Any, origin: Origin) -> tuple[InputColumn, ...]:
    """``"text"``, ``["subject", "body"]`` or tables ``{column = "body", display = "Ticket"}``."""
    items = [value] if isinstance(value, (str, dict)) else value
    if not isinstance(items, list) or not items:
        raise origin.error("input", "must be a column name or a list of them (e.g. input = [\"subject\", \"body\"])")
    out = []
    for item in items:
        if isinstance(item, str) and item.strip():
            out.append(InputColumn(item.strip(), display_name(item.strip())))
        elif isinstance(item, dict):
            extra = set(item) - {"column", "display"}
            column = item.get("column")
            if extra or not isinstance(column, str) or not column.strip():
                raise origin.error("input", f"a table here is {{column = \"NAME\", display = \"Shown as\"}} (got {item!r})")
            display = item.get("display", display_name(column.strip()))
            if not isinstance(display, str):
                raise origin.error("input", f"column {column!r}: display must be text")
            out.append(InputColumn(column.strip(), display.strip()))
        else:
            raise origin.error("input", f"{item!r} is not a column name")
    return tuple(out)


def _labels(value: Any, origin: Origin) -> tuple[tuple[str, str], ...]:
    """A table label value -> answer word (a non-text key reads as text)."""
    if not isinstance(value, Mapping) or not value:
        raise origin.error("labels", "must be a table of label value = answer word (e.g. [labels] tech = \"technical\")")
    out = []
    for raw, word in value.items():
        if not isinstance(word, str):
            raise origin.error("labels", f"label {raw!r}: the answer word must be text (got {word!r})")
        out.append((label_text(raw), word.strip()))
    return tuple(out)


def _few_shot(value: Any, origin: Origin, base_dir: Path) -> FewShot | None:
    """``"examples.csv"`` (a file) or a table with split or file, and count."""
    if value is None:
        return None
    if isinstance(value, str):
        value = {"file": value}
    if not isinstance(value, Mapping):
        raise origin.error("few_shot", "must be a file of examples or a table with split or file, and count")
    extra = [k for k in value if k not in _FEW_SHOT_KEYS]
    if extra:
        raise origin.error("few_shot", f"unknown key {extra[0]!r}; use {', '.join(_FEW_SHOT_KEYS)}")
    split, file = value.get("split"), value.get("file")
    for key, v in (("split", split), ("file", file)):
        if v is not None and (not isinstance(v, str) or not v.strip()):
            raise origin.error("few_shot", f"{key} must be non-empty text (got {v!r})")
    count = value.get("count", DEFAULT_FEW_SHOT_COUNT)
    return FewShot(split=split, file=str(_path(file, base_dir)) if file else None, count=count)


def _prompts(value: Any, name: str, origin: Origin, base_dir: Path) -> tuple[Prompt, ...]:
    """A list of instruction strings (ids ``<name>-01``..., type task), of tables with id, type,
    text (and language), or the path of a prompts file (``[[prompt]]`` tables, as ``pre eval`` reads)."""
    if value is None:
        return ()
    if isinstance(value, str):
        path = _path(value, base_dir)
        try:
            return tuple(read_prompt_file(path, name))
        except PromptFileError as exc:
            raise origin.error("prompts", str(exc)) from None
    if not isinstance(value, list) or not value:
        raise origin.error("prompts", "must be a list of instructions, a list of tables with id, type and text, or a prompts file")
    out = []
    for n, item in enumerate(value, 1):
        if isinstance(item, str):
            out.append(Prompt(id=f"{name}-{n:02d}", dataset=name, type="task", text=item))
            continue
        if not isinstance(item, Mapping):
            raise origin.error("prompts", f"prompt #{n} is neither an instruction nor a table with id, type and text")
        extra = [k for k in item if k not in _PROMPT_KEYS]
        missing = [k for k in ("id", "text") if k not in item]
        if extra or missing:
            what = f"unknown field {extra[0]!r}" if extra else f"missing field {missing[0]!r}"
            raise origin.error("prompts", f"prompt #{n}: {what}; a prompt table has {', '.join(_PROMPT_KEYS)}")
        fields = {k: item.get(k) for k in _PROMPT_KEYS}
        if not all(isinstance(v, str) for v in fields.values() if v is not None):
            raise origin.error("prompts", f"prompt #{n}: id, type, text and language must be text")
        out.append(Prompt(id=str(fields["id"]).strip(), dataset=name, type=fields["type"] or "task",
                          text=str(fields["text"]), language=fields["language"] or "en"))
    return tuple(out)
