"""Reading the paper's own prompts from a promptbench checkout the user brings.

Nothing of promptbench ships with promptrobust: the user points at a clone of
github.com/microsoft/promptbench and this module reads, never executes, its
files (Python prompt files are parsed with ``ast``; only literal dicts are
taken; a file whose expressions nest deeper than ``MAX_EXPRESSION_DEPTH`` is
refused before it is parsed, since ``ast`` recurses once per level). Two
layouts are recognised:

* the paper's code (2023): ``prompts/zero_shot/{task,role}_oriented.py`` and
  ``prompts/three_shot/...`` (dicts ``TASK_ORIENTED_PROMPT_SET``,
  ``ROLE_ORIENTED_PROMPT_SET``), ``prompts/semantic_atk_prompts.py``
  (``SEMANTIC_ADV_PROMPT_SET``: dataset -> language -> prompts) and
  ``adv_prompts/*.md``;
* the package (``promptbench/prompts/``): ``task_oriented.py``,
  ``role_oriented.py`` (``TASK_ORIENTED_PROMPTS``...; one set for zero- and
  few-shot, each prompt ending in ``\\nQuestion:{content}\\nAnswer:``, which is
  dropped here because our tasks lay out the sample themselves),
  ``semantic_atk_prompts.py`` and ``prompts/adv_prompts/*.md``.

Slots: promptbench fills ``{}`` in math (question type), MMLU (subject) and
translation (source, target language) prompts; the package spells some
``{task}``, ``{soruce_lang}``, ``{target_lang}``. All become ``{}``, which our
tasks fill the same way (``DatasetTask.fill_slots``).

The adversarial-prompt files (one per model and shot setting, e.g.
``chatgpt_zeroshot.md``) hold per dataset (``# sst2``) and attack
(``## textfooler``) blocks of::

    Original prompt: <text>
    Attacked prompt: b"<text as a Python bytes literal>"
    Original acc: 78.00%, attacked acc: 67.30%, dropped acc: 10.70%

which become :class:`AdversarialPair` rows in the shape ``pre eval --prompts``
reads (``id``, ``clean``, ``adversarial``, ``attack`` plus extra columns).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import orjson

from promptrobust.tasks.base import PROMPT_TYPES, SEMANTIC_PROMPTS, Prompt
from promptrobust.tasks.errors import TaskError
from promptrobust.tasks.registry import canonical_name, prompt_dataset

Shot = Literal["zero", "few"]

#: promptbench's dataset keys (their prompt dicts and adversarial-prompt headings).
PB_DATASETS = ("sst2", "cola", "qqp", "mrpc", "mnli", "qnli", "rte", "wnli", "mmlu", "squad_v2",
               "iwslt", "un_multi", "math", "bool_logic", "valid_parentheses")
#: The semantic prompt set names its translation datasets differently.
_SEMANTIC_KEYS = {"iwslt": "translation_iwslt", "un_multi": "translation_un_multi"}
#: Semantic prompt languages (the speakers the prompts were written for) -> codes.
SEMANTIC_LANGUAGES = {"chinese": "zh", "french": "fr", "arabic": "ar", "spanish": "es", "japanese": "ja",
                      "korean": "ko", "english": "en", "russian": "ru", "german": "de"}
_DICT_NAMES = {
    "task": ("TASK_ORIENTED_PROMPT_SET", "TASK_ORIENTED_PROMPTS"),
    "role": ("ROLE_ORIENTED_PROMPT_SET", "ROLE_ORIENTED_PROMPTS"),
    SEMANTIC_PROMPTS: ("SEMANTIC_ADV_PROMPT_SET",),
}
_CONTENT = re.compile(r"[ \t]*\n?[ \t]*Question:[ \t]*\{content\}[ \t]*\n?[ \t]*Answer:[ \t]*")
_NAMED_SLOT = re.compile(r"\{(?:task|soruce_lang|source_lang|target_lang)\}")
_SCORE = re.compile(r"([A-Za-z][A-Za-z ]*?)\s*:\s*(-?\d+(?:\.\d+)?)\s*%")
_TYPES = PROMPT_TYPES


#: The deepest expression a promptbench file may hold: brackets, operators and chained calls each
#: count a level. Its real files need fewer than 10; ast.parse and literal_eval recurse once per
#: level and fail (RecursionError, MemoryError) in the thousands.
MAX_EXPRESSION_DEPTH = 100
#: Tokens that separate the parts of an expression (a chain of operators ends at them).
_SEPARATORS = {",", ":", ";", "=", ":="}
#: Keywords that nest an expression as operators do.
_OPERATOR_WORDS = {"not", "and", "or", "if", "else", "lambda", "await", "in", "is"}


class PromptbenchImportError(TaskError):
    """A promptbench checkout or file is missing, unreadable or not in promptbench's format."""


# --------------------------------------------------------------------------- where things are


@dataclass(frozen=True)
class PromptbenchLayout:
    """The prompt files found in one promptbench checkout."""

    root: Path
    #: "paper" (prompts/zero_shot, prompts/three_shot) or "package" (promptbench/prompts).
    kind: Literal["paper", "package"]
    prompts_dir: Path
    adv_dir: Path | None

    def prompt_file(self, prompt_type: str, shot: Shot) -> Path:
        if prompt_type == SEMANTIC_PROMPTS:
            return self.prompts_dir / "semantic_atk_prompts.py"
        name = f"{prompt_type}_oriented.py"
        if self.kind == "package":
            return self.prompts_dir / name
        return self.prompts_dir / ("zero_shot" if shot == "zero" else "three_shot") / name


def find_layout(checkout: str | Path) -> PromptbenchLayout:
    """The layout of a promptbench checkout (its root, its ``promptbench/`` package
    folder, or its ``prompts`` folder), with a one-line error when it is not one."""
    root = Path(checkout).expanduser()
    if not root.exists():
        raise PromptbenchImportError(
            f"promptbench checkout {root} does not exist; pass the folder of a clone of github.com/microsoft/promptbench"
        )
    if not root.is_dir():
        raise PromptbenchImportError(f"promptbench checkout {root} is a file; pass the folder of the clone")
    for d in (root / "promptbench" / "prompts", root / "prompts", root):
        if (d / "zero_shot" / "task_oriented.py").is_file():
            return PromptbenchLayout(root, "paper", d, _first_dir(d / "adv_prompts", d.parent / "adv_prompts"))
        if (d / "task_oriented.py").is_file():
            return PromptbenchLayout(root, "package", d, _first_dir(d / "adv_prompts", d.parent / "adv_prompts"))
    raise PromptbenchImportError(
        f"{root}: no promptbench prompt files (looked for prompts/zero_shot/task_oriented.py and "
        "promptbench/prompts/task_oriented.py); pass the root folder of a promptbench clone"
    )


def _first_dir(*candidates: Path) -> Path | None:
    return next((c for c in candidates if c.is_dir()), None)


def promptbench_key(dataset: str) -> str:
    """promptbench's name for one of our datasets (rotten_tomatoes -> sst2)."""
    return prompt_dataset(dataset)


# --------------------------------------------------------------------------- prompt files


def read_literal_dict(path: Path, names: Sequence[str]) -> dict[str, Any]:
    """The first top-level ``NAME = {...}`` of ``path`` among ``names`` (else the
    first literal dict), read with ``ast.literal_eval``: the file is never run."""
    if not path.is_file():
        raise PromptbenchImportError(f"{path}: file not found in the promptbench checkout; is the clone complete?")
    try:
        text = path.read_text(encoding="utf-8")
        check_expression_depth(text, str(path))
        tree = ast.parse(text, filename=str(path))
    except PromptbenchImportError:
        raise
    except (SyntaxError, UnicodeDecodeError, ValueError, tokenize.TokenError) as exc:
        raise PromptbenchImportError(f"{path}: not a readable Python file ({type(exc).__name__}); re-clone promptbench") from None
    found: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if isinstance(node.value, ast.Dict):
                try:
                    found.setdefault(node.targets[0].id, ast.literal_eval(node.value))
                except ValueError:
                    continue
    for name in names:
        if name in found:
            return found[name]
    if found:
        return next(iter(found.values()))
    raise PromptbenchImportError(f"{path}: no literal prompt dictionary (expected {' or '.join(names)})")


def check_expression_depth(text: str, where: str) -> None:
    """Refuse Python source whose expressions nest deeper than ``MAX_EXPRESSION_DEPTH``, in one
    linear pass over its tokens, before ``ast`` sees it. The depth at a token is the sum, over the
    brackets open around it, of the operators and brackets since the last separator at each level:
    what the syntax tree's depth grows with (``1+1+...`` and ``((...))`` alike)."""
    chains = [0]  # per open bracket (and the statement level): nesting since the last separator there
    depth = 0  # sum(chains)
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.OP and tok.string in "([{":
            chains[-1] += 1  # a bracket nests in its level's chain, as an operator does
            depth += 1
            chains.append(0)
        elif tok.type == tokenize.OP and tok.string in ")]}":
            if len(chains) > 1:
                depth -= chains.pop()
        elif tok.type == tokenize.OP and tok.string in _SEPARATORS:
            depth -= chains[-1]
            chains[-1] = 0
        elif tok.type == tokenize.OP or (tok.type == tokenize.NAME and tok.string in _OPERATOR_WORDS):
            chains[-1] += 1
            depth += 1
        elif tok.type == tokenize.NEWLINE:
            chains, depth = [0], 0
        if depth > MAX_EXPRESSION_DEPTH:
            at = f"{where} line {tok.start[0]}" if "\n" in text.strip() else where
            raise PromptbenchImportError(f"{at}: an expression nests deeper than {MAX_EXPRESSION_DEPTH} levels; "
                                         "promptbench's prompt files hold flat literals: re-clone promptbench")


def normalize_prompt_text(text: str) -> str:
    """One promptbench prompt as our instruction: the package's ``Question:{content}
    Answer:`` tail dropped and its named slots written ``{}``, as the paper's code has them."""
    out = _CONTENT.sub("", text)  # a {content} elsewhere stays: tasks.placeholders refuses it
    return _NAMED_SLOT.sub("{}", out).strip()


def _dataset_entry(table: dict[str, Any], key: str, path: Path) -> Any:
    if key not in table:
        have = ", ".join(sorted(str(k) for k in table))
        raise PromptbenchImportError(f"{path}: no prompts for dataset {key!r} (it has: {have})")
    return table[key]


def _string_list(value: Any, where: str) -> list[str]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise PromptbenchImportError(f"{where}: expected a list of prompt strings")
    return [v for v in value if v.strip()]


def load_promptbench_prompts(
    checkout: str | Path,
    dataset: str,
    types: Iterable[str] = ("task", "role"),
    *,
    shot: Shot = "zero",
    languages: Iterable[str] | None = None,
) -> list[Prompt]:
    """The paper's prompts for ``dataset`` from a promptbench checkout, as our ``Prompt``s.

    ``types``: any of "task", "role", "semantic". ``shot``: the paper's zero-shot
    or three-shot prompt files (the package has one set for both). Ids are
    ``pb-<dataset>-<type>-NN`` (``pb-<dataset>-<type>-fs-NN`` for the paper's
    few-shot files, ``pb-<dataset>-semantic-<lang>-NN``); ``dataset`` is ours
    (``rotten_tomatoes`` reads SST-2's prompts, as our own sets do).
    """
    wanted = list(dict.fromkeys(types))
    bad = [t for t in wanted if t not in _TYPES]
    if bad or not wanted:
        raise PromptbenchImportError(f"unknown prompt type(s) {', '.join(bad) or '(none)'}; use task, role or semantic")
    if shot not in ("zero", "few"):
        raise PromptbenchImportError(f"shot must be 'zero' or 'few', got {shot!r}")
    name = canonical_name(dataset)
    key = promptbench_key(name)
    layout = find_layout(checkout)
    langs = set(languages) if languages is not None else None
    prompts: list[Prompt] = []
    for prompt_type in wanted:
        path = layout.prompt_file(prompt_type, shot)
        table = read_literal_dict(path, _DICT_NAMES[prompt_type])
        if prompt_type == SEMANTIC_PROMPTS:
            entry = _dataset_entry(table, _SEMANTIC_KEYS.get(key, key), path)
            if not isinstance(entry, dict):
                raise PromptbenchImportError(f"{path}: {key!r} must map languages to prompt lists")
            for lang_name, texts in entry.items():
                code = SEMANTIC_LANGUAGES.get(str(lang_name).lower(), str(lang_name).lower())
                if langs is not None and code not in langs:
                    continue
                for n, text in enumerate(_string_list(texts, f"{path} [{key}][{lang_name}]"), 1):
                    prompts.append(Prompt(f"pb-{key}-semantic-{code}-{n:02d}", name, SEMANTIC_PROMPTS,
                                          normalize_prompt_text(text), code))
        else:
            if langs is not None and "en" not in langs:
                continue
            texts = _string_list(_dataset_entry(table, key, path), f"{path} [{key}]")
            fs = "fs-" if layout.kind == "paper" and shot == "few" else ""
            for n, text in enumerate(texts, 1):
                prompts.append(Prompt(f"pb-{key}-{prompt_type}-{fs}{n:02d}", name, prompt_type,  # type: ignore[arg-type]
                                      normalize_prompt_text(text), "en"))
    return prompts


# --------------------------------------------------------------------------- adversarial prompts


@dataclass(frozen=True)
class AdversarialPair:
    """One published (clean, attacked) prompt pair and the scores the paper reports."""

    id: str
    #: The model the attack ran on (from the file name, e.g. "chatgpt").
    model: str
    #: "zero" or "few" (from the file name), "" when the name does not say.
    shot: str
    #: promptbench's dataset key (e.g. "sst2").
    dataset: str
    attack: str
    clean: str
    adversarial: str
    #: Reported scores on the 0..1 scale (None when the file gives none).
    clean_score: float | None
    attacked_score: float | None
    dropped: float | None
    source: str
    #: The file's heading when the pair's content shows another attack
    #: (``ContentCheck``) and ``attack`` was corrected; "" otherwise.
    labelled_attack: str = ""

    def to_row(self) -> dict[str, Any]:
        """A row of a ``pre eval --prompts`` pairs file (extra columns for grouping)."""
        return {
            "id": self.id, "clean": self.clean, "adversarial": self.adversarial, "attack": self.attack,
            "dataset": self.dataset, "source_model": self.model,
            "shots": 3 if self.shot == "few" else 0 if self.shot == "zero" else None,
            "reported_clean": self.clean_score, "reported_attacked": self.attacked_score,
            "reported_dropped": self.dropped, "source": self.source,
            **({"labelled_attack": self.labelled_attack} if self.labelled_attack else {}),
        }


def _decode_attacked(raw: str, where: str) -> str:
    value = raw.strip()
    if value[:2] in ('b"', "b'") or (value[:1] in ('"', "'") and value[-1:] == value[:1] and len(value) > 1):
        try:
            check_expression_depth(value, where)
            lit = ast.literal_eval(value)
        except PromptbenchImportError:
            raise
        except (ValueError, SyntaxError, tokenize.TokenError) as exc:
            raise PromptbenchImportError(f"{where}: the attacked prompt is not a valid quoted literal") from exc
        if isinstance(lit, bytes):
            try:
                return lit.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise PromptbenchImportError(f"{where}: the attacked prompt is not UTF-8 bytes") from exc
        return str(lit)
    return value


def _scores(line: str) -> tuple[float | None, float | None, float | None]:
    values = [float(v) / 100.0 for _, v in _SCORE.findall(line)]
    values += [None] * (3 - len(values))  # type: ignore[list-item]
    return values[0], values[1], values[2]


def _model_and_shot(stem: str) -> tuple[str, str]:
    low = stem.lower()
    for suffix, shot in (("_zeroshot", "zero"), ("_fewshot", "few"), ("_zero_shot", "zero"), ("_few_shot", "few")):
        if low.endswith(suffix):
            return low[: -len(suffix)], shot
    return low, ""


class AdversarialPairs(list):
    """A list of :class:`AdversarialPair` plus ``skipped``: one line per incomplete
    block of the files (the published files have a few), so nothing is dropped
    silently; and ``relabelled``: one line per block whose pairs' content shows
    another attack than its heading (``ContentCheck``)."""

    def __init__(self, pairs: Iterable[AdversarialPair] = (), skipped: Iterable[str] = (),
                 relabelled: Iterable[str] = ()) -> None:
        super().__init__(pairs)
        self.skipped: list[str] = list(skipped)
        self.relabelled: list[str] = list(relabelled)


class ContentCheck(Protocol):
    """Tells an insertion attack's prompts by their content (``attacks.registry.INSERTION_ATTACKS``):
    the archive's heading of a block is checked against it."""

    def shown_by(self, clean: str, adversarial: str) -> str | None:
        """The attack whose insertion alone turns ``clean`` into ``adversarial``, or None."""
        ...

    def inserts(self, name: str) -> str | None:
        """What the attack inserts, or None when it is not an insertion attack."""
        ...


def parse_adversarial_file(path: str | Path, content: ContentCheck | None = None) -> AdversarialPairs:
    """Every (clean, attacked) pair of one promptbench adversarial-prompt ``.md`` file. With ``content``,
    a pair whose content shows an insertion attack other than its block's heading is relabelled, and
    a pair under an insertion attack's heading that changes words is left out (``relabelled`` says so)."""
    p = Path(path)
    if not p.is_file():
        raise PromptbenchImportError(f"{p}: adversarial-prompt file not found; check the path")
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise PromptbenchImportError(f"{p}: not UTF-8 text; is this a promptbench adv_prompts .md file?") from exc
    model, shot = _model_and_shot(p.stem)
    dataset, attack = "", ""
    titled = False
    clean: list[str] | None = None
    adversarial: str | None = None
    counts: dict[tuple[str, str], int] = {}
    orphan = False
    out = AdversarialPairs()
    moved: dict[tuple[str, str, str], int] = {}
    for n, line in enumerate(lines, 1):
        where = f"{p.name} line {n}"
        if line.startswith("# "):
            head = line[2:].strip().lower()
            if not titled and head not in PB_DATASETS:
                titled = True  # the file's title (e.g. "chatgpt_zeroshot")
                continue
            titled, dataset, attack, clean, adversarial = True, head, "", None, None
        elif line.startswith("## "):
            head = line[3:].strip().lower()
            # "10 prompts" ranks the clean prompts; "translation" is the semantic attack's scores
            attack = "" if head.endswith("prompts") or head == "translation" else head
            clean, adversarial = None, None
        elif not attack:
            continue
        elif line.startswith("Original prompt:"):
            clean, adversarial, orphan = [line[len("Original prompt:"):].strip()], None, False
        elif line.startswith("Attacked prompt:"):
            if clean is None:
                out.skipped.append(f"{where}: attacked prompt without an original prompt (skipped)")
                orphan = True
                continue
            adversarial = _decode_attacked(line[len("Attacked prompt:"):], f"{p} line {n}")
        elif line.lower().startswith("original ") and "%" in line:
            if clean is None or adversarial is None:
                if not orphan:  # an orphan attacked prompt was reported already
                    out.skipped.append(f"{where}: scores without both prompts before them (skipped)")
                clean, adversarial, orphan = None, None, False
                continue
            if not dataset:
                raise PromptbenchImportError(f"{p} line {n}: a prompt pair before any '# <dataset>' heading; "
                                             "not promptbench's adversarial-prompt format")
            key = (dataset, attack)
            counts[key] = counts.get(key, 0) + 1
            c, a, d = _scores(line)
            tag = f"{model}-{shot}shot" if shot else model
            clean_text, adv_text = "\n".join(clean).strip(), adversarial.strip()
            shown = content.shown_by(clean_text, adv_text) if content is not None else None
            relabel = shown if shown is not None and shown != attack else None
            if relabel is not None:
                moved[(dataset, attack, relabel)] = moved.get((dataset, attack, relabel), 0) + 1
            elif shown is None and content is not None and content.inserts(attack) is not None:
                # a sentence-level block whose pair changes words: some word attack's, which one is unknown
                moved[(dataset, attack, "")] = moved.get((dataset, attack, ""), 0) + 1
                clean, adversarial = None, None
                continue
            out.append(AdversarialPair(
                id=f"pb-{tag}-{dataset}-{attack}-{counts[key]:02d}", model=model, shot=shot, dataset=dataset,
                attack=relabel if relabel is not None else attack, clean=clean_text, adversarial=adv_text, clean_score=c,
                attacked_score=a, dropped=d, source=p.name, labelled_attack=attack if relabel is not None else "",
            ))
            clean, adversarial = None, None
        elif clean is not None and adversarial is None and line.strip():
            clean.append(line)  # an original prompt that spans lines
    for (ds, heading, shown), n in moved.items():
        assert content is not None  # nothing moves without it
        if shown:
            out.relabelled.append(f"{p.name}: {ds} '## {heading}' block: {n} pair(s) hold {shown} prompts "
                                  f"({content.inserts(shown)} inserted, nothing else changed); relabelled {shown}")
        else:
            out.relabelled.append(f"{p.name}: {ds} '## {heading}' block: {n} pair(s) change words instead of inserting "
                                  f"{content.inserts(heading)} (another attack's prompts, which one the file does not say); left out")
    return out


def adversarial_files(path_or_checkout: str | Path) -> list[Path]:
    """The ``.md`` files to read: the file itself, a folder's ``*.md``, or a checkout's ``adv_prompts``."""
    p = Path(path_or_checkout).expanduser()
    if p.is_file():
        return [p]
    if not p.exists():
        raise PromptbenchImportError(
            f"{p} does not exist; pass a promptbench checkout, its adv_prompts folder or one of its .md files"
        )
    folder = p if any(p.glob("*_*shot.md")) else find_layout(p).adv_dir
    if folder is None:
        raise PromptbenchImportError(f"{p}: no adv_prompts folder in this promptbench checkout")
    files = sorted(f for f in folder.glob("*.md") if f.stem.lower() != "readme")
    if not files:
        raise PromptbenchImportError(f"{folder}: no adversarial-prompt .md files")
    return files


def load_adversarial_prompts(
    path_or_checkout: str | Path,
    model: str | None = None,
    dataset: str | None = None,
    *,
    shot: Shot | None = None,
    content: ContentCheck | None = None,
) -> AdversarialPairs:
    """The authors' published adversarial prompts, optionally only those found on
    ``model`` (e.g. "chatgpt", "t5", "vicuna"), for ``dataset`` (ours; rotten_tomatoes
    reads SST-2's) and of one ``shot`` setting. Filters that match nothing raise
    an error naming what is there. ``content``: check each block's heading against
    its pairs' content (``parse_adversarial_file``)."""
    pairs: list[AdversarialPair] = []
    skipped: list[str] = []
    relabelled: list[str] = []
    for f in adversarial_files(path_or_checkout):
        parsed = parse_adversarial_file(f, content)
        pairs.extend(parsed)
        skipped.extend(parsed.skipped)
        relabelled.extend(parsed.relabelled)
    if model is not None:
        chosen = [pr for pr in pairs if pr.model == model.strip().lower()]
        if not chosen:
            have = ", ".join(sorted({pr.model for pr in pairs})) or "none"
            raise PromptbenchImportError(f"no adversarial prompts for model {model!r}; the files have: {have}")
        pairs = chosen
    if shot is not None:
        pairs = [pr for pr in pairs if pr.shot == shot]
    if dataset is not None:
        key = promptbench_key(dataset)
        chosen = [pr for pr in pairs if pr.dataset == key]
        if not chosen:
            have = ", ".join(sorted({pr.dataset for pr in pairs})) or "none"
            raise PromptbenchImportError(f"no adversarial prompts for dataset {dataset!r} ({key}); the files have: {have}")
        pairs = chosen
    if not pairs:
        raise PromptbenchImportError(f"{path_or_checkout}: no adversarial prompt pairs match")
    return AdversarialPairs(pairs, skipped, relabelled)


def write_pairs_jsonl(pairs: Sequence[AdversarialPair], path: str | Path) -> Path:
    """Write ``pairs`` as a JSON Lines file that ``pre eval --prompts`` reads."""
    out = Path(path)
    out.write_bytes(b"".join(orjson.dumps(pr.to_row()) + b"\n" for pr in pairs))
    return out
