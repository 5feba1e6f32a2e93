"""lm-evaluation-harness habits, accepted: its flag spellings and value forms, mapped to pre's.

- Underscore spellings (``--model_args``, ``--output_path``, ``--log_samples``, ``--num_fewshot``,
  ``--batch_size``, ...) are rewritten to pre's flags before parsing (``normalize_argv``).
- ``--limit 0.1``: a fraction of the dataset, resolved by the library where the data is loaded.
- ``--model hf --model_args pretrained=ORG/NAME`` (and the API types with ``model=``) become
  ``--model hf:ORG/NAME``; ``--device D`` means ``device=D`` in the model arguments.
- The API model arguments lm-eval documents (its ``TemplateAPI``: ``num_concurrent``,
  ``max_retries``, ``tokenized_requests``, ``max_length``, ...) are each mapped to pre's setting,
  accepted with a note where they change nothing pre sends, or refused in one line saying why
  (``API_ARGS``), for any model on the openai backend.
- ``--output_path out/results.json`` writes the results to that file and the run folders
  beside it, as lm-eval writes its results file and samples beside each other (``output_target``).
- ``--gen_kwargs max_gen_toks=32,until=["\\n\\n"]`` sets the most new tokens and the stop
  sequences; greedy decoding is the paper's, so ``temperature=0`` and ``do_sample=false`` are
  accepted and anything else is refused. Without ``until``, a command in lm-eval's spelling
  (``--model local-completions``, ``hf``, ...) whose model gets plain prompts stops where lm-eval's
  generate tasks stop (``engine.runs.lm_eval_args.lm_eval_stop``: said, and recorded as a deviation
  from the paper); pre's own ``--model`` spelling keeps the paper's EOS-only stop. ``--system_instruction TEXT`` goes before every input;
  ``--apply_chat_template`` sends chat messages (the run plan sets each backend's switch).
"""

from __future__ import annotations

import argparse
import ast
from dataclasses import dataclass, fields
from collections.abc import Callable, Sequence
from typing import Any

from promptrobust.cli.errors import UserError, flag_for

#: lm-evaluation-harness spelling -> pre's flag.
ALIASES: dict[str, str] = {
    "--model_args": "--model-args", "--output_path": "--output-dir", "--log_samples": "--log-samples",
    "--num_fewshot": "--shots", "--batch_size": "--batch-size", "--tasks": "--dataset", "--max_tokens": "--max-tokens",
    "--data_dir": "--data-dir", "--data_file": "--data-file", "--prompt_type": "--prompt-type",
    "--no_progress": "--no-progress", "--top_k": "--top-k", "--max_retries": "--max-retries",
    "--request_timeout": "--request-timeout", "--use_cache": "--cache", "--gen-kwargs": "--gen_kwargs",
    "--apply-chat-template": "--apply_chat_template", "--system-instruction": "--system_instruction",
}

@dataclass(frozen=True)
class LmEvalModel:
    """What one of lm-eval's ``--model`` types is in pre's spelling."""

    backend: str
    """pre's backend prefix (``--model BACKEND:NAME``)."""
    name_keys: tuple[str, ...]
    """The ``--model_args`` keys that name the model, the first given wins (``pretrained=``; API types: ``model=``)."""
    implied: str = ""
    """A model argument the type implies unless given (``api=chat`` for a chat-completions type)."""


_IN_PROCESS = ("pretrained",)
_API = ("model", "pretrained")  # lm-eval's API models take pretrained= too (model= wins)

#: lm-eval's --model (a backend type; the model itself is in --model_args) -> pre's spelling.
LM_EVAL_MODELS: dict[str, LmEvalModel] = {
    "hf": LmEvalModel("hf", _IN_PROCESS), "huggingface": LmEvalModel("hf", _IN_PROCESS),
    "vllm": LmEvalModel("vllm", _IN_PROCESS),
    "local-completions": LmEvalModel("openai", _API, "api=completions"),
    "local-chat-completions": LmEvalModel("openai", _API, "api=chat"),
    "openai-completions": LmEvalModel("openai", _API, "api=completions"),
    "openai-chat-completions": LmEvalModel("openai", _API, "api=chat"),
}


def normalize_argv(argv: Sequence[str]) -> list[str]:
    """Rewrite lm-eval spellings (``--model_args X`` and ``--model_args=X``) to pre's; stops at ``--``."""
    out: list[str] = []
    rest = False
    for word in argv:
        if rest or not word.startswith("--"):
            out.append(word)
            continue
        if word == "--":
            rest = True
            out.append(word)
            continue
        name, eq, value = word.partition("=")
        out.append(ALIASES.get(name, name) + eq + value)
    return out


def limit_value(text: str) -> int | float:
    """``--limit``: a number of samples (>= 1), or a fraction of the dataset in (0, 1) as lm-eval takes."""
    try:
        number = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of samples or a fraction such as 0.1") from None
    if number.is_integer():
        return int(number)  # 0 and negatives: the settings' one-line error names the fix
    if 0 < number < 1:
        return number
    raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of samples >= 1 or a fraction between 0 and 1")


def add_arguments(g: argparse._ArgumentGroup) -> None:
    """The lm-eval flags that have no pre spelling of their own."""
    g.add_argument("--gen_kwargs", default=None, metavar="KEY=VALUE,...",
                   help="lm-eval generation arguments: max_gen_toks (or max_tokens) and until (stop sequences, e.g. "
                        "until=[\"\\n\\n\"]); decoding is greedy (temperature=0, do_sample=false)")
    g.add_argument("--apply_chat_template", action="store_true",
                   help="send inputs as chat messages (hf/vllm: chat=true; openai: api=chat)")
    g.add_argument("--system_instruction", default=None, metavar="TEXT",
                   help="text before every input: a system message for chat input, a first paragraph otherwise")
    g.add_argument("--device", default=None, help="lm-eval's --device: the same as --model-args device=DEVICE (in-process backends)")


def model_and_args(args: argparse.Namespace, *, say: Callable[[str], None] = lambda message: None) -> tuple[str, str]:
    """``--model``/``--model-args`` after lm-eval's forms: ``--model hf --model_args pretrained=X``,
    ``--device D`` (= ``device=D`` in the model arguments) and, for a model on the openai backend,
    lm-eval's API model arguments (``API_ARGS``): those that are pre flags set the flags on ``args``
    (``num_concurrent`` -> ``--concurrency``), notes about the others go to ``say``."""
    from promptrobust.engine.runs.lm_eval_args import api_model_args

    model, model_args = _lm_eval_model(args.model, args.model_args or "")
    mapped = api_model_args(model, model_args)
    for found in mapped.settings:
        _set_flag(args, found.setting, found.value, found.given)
    for note in mapped.notes:
        say(note.text)
    model_args = mapped.model_args
    device = getattr(args, "device", None)
    if device:
        items = [i for i in model_args.split(",") if i.strip()]
        given = [i.partition("=")[2].strip() for i in items if i.partition("=")[0].strip() == "device"]
        if given and given[0] != device:
            raise UserError(f"--device {device} and --model-args device={given[0]} disagree: give one")
        if not given:
            items.append(f"device={device}")
        model_args = ",".join(items)
    return model, model_args


def plain_prompts_in_lm_eval_spelling(args: argparse.Namespace) -> bool:
    """Whether the command names its model as lm-eval does (``--model local-completions``, ``hf``, ``vllm``,
    ...) and sends it plain prompts (a completions type, or an in-process type without
    ``--apply_chat_template``): a base model evaluated the lm-eval way."""
    kind = getattr(args, "model", None)
    if not isinstance(kind, str) or kind not in LM_EVAL_MODELS or getattr(args, "apply_chat_template", False):
        return False
    return "chat" not in kind and "chat=true" not in (getattr(args, "model_args", "") or "").replace(" ", "").lower()


def _set_flag(args: argparse.Namespace, setting: str, value: int, given: str) -> None:
    """A setting an lm-eval model argument gives, on ``args``; a flag given otherwise must agree
    (a flag at its settings field's default counts as not given)."""
    from promptrobust import EvaluationSettings, SchedulerSettings  # not at import: normalize_argv runs on every call

    default = next(f.default for kind in (SchedulerSettings, EvaluationSettings) for f in fields(kind) if f.name == setting)
    current = getattr(args, setting, None)
    if current not in (None, default) and current != value:
        raise UserError(f"{flag_for(setting)} {current} and --model_args {given} disagree: give one")
    setattr(args, setting, value)


def _lm_eval_model(model: str, model_args: str) -> tuple[str, str]:
    """lm-eval's ``--model hf --model_args pretrained=ORG/NAME,dtype=...`` -> pre's
    ``--model hf:ORG/NAME --model-args dtype=...`` (``model=`` for the API types; ``api`` follows
    the chat/completions choice). Anything else is returned unchanged."""
    kind = LM_EVAL_MODELS.get(model)
    if kind is None:
        return model, model_args
    items = [i.strip() for i in model_args.split(",") if i.strip()]
    keyed = {key: [i for i in items if i.partition("=")[0].strip() == key] for key in kind.name_keys}
    named = next((found for found in keyed.values() if found), [])
    if not named:
        raise UserError(f"--model {model} needs --model_args {kind.name_keys[0]}=NAME (lm-eval style), "
                        f"or write --model {kind.backend}:NAME")
    rest = [_base_url(i) for i in items if i.partition("=")[0].strip() not in kind.name_keys]
    implied_key = kind.implied.partition("=")[0]
    if kind.implied and not any(i.partition("=")[0].strip() == implied_key for i in rest):
        rest.append(kind.implied)
    return f"{kind.backend}:{named[0].partition('=')[2].strip()}", ",".join(rest)


def _base_url(item: str) -> str:
    """lm-eval gives the endpoint (``.../v1/completions``); pre takes the API root (``.../v1``)."""
    key, _, value = item.partition("=")
    if key.strip() != "base_url":
        return item
    for suffix in ("/chat/completions", "/completions"):
        if value.rstrip("/").endswith(suffix):
            return f"base_url={value.rstrip('/')[: -len(suffix)]}"
    return item


def generation_fields(args: argparse.Namespace) -> dict[str, object]:
    """``EvaluationSettings`` fields from --gen_kwargs and --system_instruction (``--max-tokens`` and
    max_gen_toks must agree)."""
    fields: dict[str, object] = {}
    if getattr(args, "gen_kwargs", None):
        fields = parse_gen_kwargs(args.gen_kwargs)
        given = getattr(args, "max_new_tokens", None)
        if "max_new_tokens" in fields and given is not None and given != fields["max_new_tokens"]:
            raise UserError(f"--max-tokens {given} and --gen_kwargs max_gen_toks={fields['max_new_tokens']} disagree: give one")
    instruction = getattr(args, "system_instruction", None)
    if instruction is not None:
        if not instruction.strip():
            raise UserError("--system_instruction is empty: give the text, or drop the flag")
        fields["system_instruction"] = instruction
    return fields


def parse_gen_kwargs(text: str) -> dict[str, object]:
    """``--gen_kwargs`` -> {"max_new_tokens": int, "stop": tuple[str, ...]} (only the keys given)."""
    out: dict[str, object] = {}
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
