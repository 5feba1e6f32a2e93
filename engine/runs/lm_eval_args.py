"""lm-evaluation-harness's API model arguments, mapped to pre's settings or refused with the reason.

A command pasted from lm-eval (``--model local-completions --model_args model=M,base_url=URL,
num_concurrent=4,max_retries=3,tokenized_requests=False``) carries arguments that lm-eval's
``TemplateAPI`` takes. Each one it documents is, for a model on pre's openai backend:

- a pre setting: ``num_concurrent`` -> the scheduler's concurrency; ``max_retries`` (lm-eval
  counts attempts, the first included) -> the scheduler's retries after the first attempt;
  ``max_gen_toks`` -> the most new tokens; ``base_url`` and ``timeout`` stay backend arguments;
- accepted with a note where it changes nothing measured (``seed``: pre decodes greedily;
  ``max_length`` and the tokenizer's arguments: pre sends text and never truncates it, as lm-eval
  does with ``tokenized_requests=False``; ``batch_size``: prompts per HTTP request, where pre
  sends one, ``num_concurrent`` at a time);
- accepted silently where it states what pre does anyway (``tokenized_requests=False``,
  ``truncate=False``, ``verify_certificate=True``, ...);
- refused in one line saying why and what to do where it cannot apply (``tokenized_requests=True``:
  pre sends text; ``auth_token``: a key belongs in the environment; ``verify_certificate=False``).

Anything else passes through to the backend, which checks it.

And what lm-eval scores: its generate tasks stop at their few-shot delimiter when their YAML names
no ``until`` (``LM_EVAL_UNTIL``), where the paper's protocol stops at EOS only. A 3-shot base model
that is not stopped writes an invented next example after its answer, and the paper's last-word
parser then reads that example's label. So a command in lm-eval's spelling whose base model gets
plain prompts is stopped as lm-eval stops it, and says so (``lm_eval_stop``); pre's own spelling
keeps the paper's protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from promptrobust.engine.errors import PromptRobustError, SettingsError
from promptrobust.engine.measuring.settings import EvaluationSettings
from promptrobust.engine.runs.notes import Note
from promptrobust.engine.serving.registry import parse_model_args, registration_of, resolve_model
from promptrobust.tasks.base import Task
from promptrobust.tasks.own import resolve_task

__all__ = ["LM_EVAL_UNTIL", "SECRET_API_ARGUMENTS", "ApiModelArgs", "MappedSetting", "api_model_args", "argument_secrecy",
           "lm_eval_stop"]

#: lm-eval's stop sequences for a generate task whose YAML names none: its few-shot delimiter
#: (``TaskConfig.fewshot_delimiter``, "\n\n", which ``generation_kwargs`` defaults ``until`` to).
LM_EVAL_UNTIL: tuple[str, ...] = ("\n\n",)


@dataclass(frozen=True)
class MappedSetting:
    """An lm-eval model argument that is a pre setting."""

    setting: str
    """The settings field (``concurrency``, ``max_retries``: SchedulerSettings; ``max_new_tokens``: EvaluationSettings)."""
    value: int
    given: str
    """As the user wrote it (``num_concurrent=4``), for a message when a flag disagrees."""


@dataclass(frozen=True)
class ApiModelArgs:
    """A model's arguments after lm-eval's API arguments were taken out."""

    model_args: str
    """What the backend receives (``key=value,...``)."""
    settings: tuple[MappedSetting, ...] = ()
    notes: tuple[Note, ...] = ()
    """Arguments accepted that change nothing pre sends, each with why."""


def _served_over_http(model: str) -> bool:
    """Whether a model's answers come from a server over HTTP (its backend's ``http_api``), where
    lm-eval's API model arguments apply; False for a name the plan will refuse in its own words."""
    try:
        return registration_of(resolve_model(model)).http_api
    except PromptRobustError:
        return False


def api_model_args(model: str, model_args: str) -> ApiModelArgs:
    """``model_args`` with lm-eval's API arguments mapped (see the module docstring); unchanged
    for a model whose backend is not an HTTP API (the openai backend is)."""
    if not _served_over_http(model):
        return ApiModelArgs(model_args)
    kept: list[str] = []
    settings: list[MappedSetting] = []
    notes: list[Note] = []
    for item in (i.strip() for i in model_args.split(",")):
        key, _, raw = (part.strip() for part in item.partition("="))
        rule = _RULES.get(key)
        if rule is None:
            if item:
                kept.append(item)
            continue
        value = parse_model_args(item)[key]
        found = rule(key, value, raw)
        if isinstance(found, MappedSetting):
            settings.append(found)
        elif isinstance(found, Note):
            notes.append(found)
    return ApiModelArgs(",".join(kept), tuple(settings), tuple(notes))


# -- one rule per argument lm-eval's TemplateAPI documents ---------------------------------------

Rule = Callable[[str, Any, str], "MappedSetting | Note | None"]


def _whole(key: str, value: Any, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise SettingsError(f"model argument {key}={value}: give a whole number >= {least}", setting="model_args")
    return value


def _setting(setting: str, least: int = 1, offset: int = 0) -> Rule:
    """An argument that is a pre setting (``offset``: added to the value)."""
    return lambda key, value, raw: MappedSetting(setting, _whole(key, value, least) + offset, f"{key}={raw}")


def _states(expected: Any, refusal: str) -> Rule:
    """An argument whose ``expected`` value is what pre does anyway; any other value is refused."""

    def rule(key: str, value: Any, raw: str) -> None:
        if value != expected and str(value).lower() != str(expected).lower():
            raise SettingsError(f"model argument {key}={raw} cannot apply: {refusal}", setting="model_args")

    return rule


def _ignored(why: str) -> Rule:
    """An argument accepted although it changes nothing pre sends: said, with why."""
    return lambda key, value, raw: _unchanged(key, raw, why)


def _unchanged(key: str, raw: str, why: str) -> Note:
    return Note(f"model argument {key}={raw} changes nothing here: {why}", setting="model_args")


def _tokenizer_backend(key: str, value: Any, raw: str) -> Note | None:
    """``None`` is lm-eval's own "no tokenizer": what pre does; any other backend is noted."""
    if value is None or str(value).lower() == "none":
        return None
    return _unchanged(key, raw, _NO_TOKENIZER)


def _refused(why: str) -> Rule:
    def rule(key: str, value: Any, raw: str) -> None:  # the value is not repeated: it may be a secret
        raise SettingsError(f"model argument {key} cannot apply: {why}", setting="model_args")

    return rule


def _batch_size(key: str, value: Any, raw: str) -> Note | None:
    """lm-eval's prompts per HTTP request: how answers travel, not what they are."""
    if value in (1, "auto"):
        return None  # one prompt per request: what pre sends
    _whole(key, value, 1)
    return Note(f"model argument {key}={raw} changes nothing measured: pre sends one prompt per request, "
                "num_concurrent (--concurrency) of them at once; every answer is the same", setting="model_args")


_NO_TOKENIZER = "pre sends an API model text and needs no local tokenizer"
_TEXT = "pre sends text, never token ids"

_RULES: dict[str, Rule] = {
    "num_concurrent": _setting("concurrency"),
    # lm-eval stops after max_retries attempts, the first included; pre counts retries after the first.
    "max_retries": _setting("max_retries", least=1, offset=-1),
    "max_gen_toks": _setting("max_new_tokens"),
    "batch_size": _batch_size,
    "tokenized_requests": _states(False, f"{_TEXT}; use tokenized_requests=False (what pre does)"),
    "tokenizer_backend": _tokenizer_backend,
    "tokenizer": _ignored(_NO_TOKENIZER),
    "use_fast_tokenizer": _ignored(_NO_TOKENIZER),
    "trust_remote_code": _ignored(_NO_TOKENIZER),
    "revision": _ignored(f"{_NO_TOKENIZER}; the server decides the model's revision"),
    "max_length": _ignored("pre sends every input whole and never truncates it, as lm-eval does with "
                           "tokenized_requests=False; an input longer than the server's context fails its request"),
    "seed": _ignored("pre decodes greedily (temperature 0, the paper's protocol), so there is nothing to seed; "
                     "--seed orders the samples"),
    "max_images": _ignored("pre sends text only"),
    "truncate": _states(False, "pre never truncates an input; use truncate=False"),
    "add_bos_token": _states(False, f"{_TEXT}; the server adds what its template says"),
    "custom_prefix_token_id": _refused(_TEXT),
    "verify_certificate": _states(True, "pre always verifies TLS certificates; for a private certificate "
                                        "authority set SSL_CERT_FILE=PATH in the environment"),
    "ca_cert_path": _refused("set SSL_CERT_FILE=PATH in the environment instead (pre's HTTP client reads it)"),
    "auth_token": _refused("a key on the command line lands in shell history and process lists; export it as "
                           "OPENAI_API_KEY, or name the variable that holds it with api_key_env=NAME"),
    "header": _refused("pre sends no extra HTTP headers; a key comes from the environment (OPENAI_API_KEY, or api_key_env=NAME)"),
    "eos_string": _refused('give stop sequences with --gen_kwargs until=["..."]'),
}
#: lm-eval's API model arguments that carry a credential (refused, and never shown in a recorded command).
SECRET_API_ARGUMENTS = frozenset({"auth_token", "header"})


def argument_secrecy() -> dict[str, bool]:
    """lm-eval's API model arguments -> whether one holds a secret (what a recorded command hides)."""
    return {name: name in SECRET_API_ARGUMENTS for name in _RULES}


# -- what lm-eval's generate tasks stop at -----------------------------------------------------------

def lm_eval_stop(evaluation: EvaluationSettings, targets: Sequence[str | Task]) -> tuple[EvaluationSettings, Note | None]:
    """``evaluation`` for a command in lm-eval's spelling whose model gets plain prompts (a base model):
    in generate mode with no stop sequences given, tasks that stop at EOS only (the label tasks: the paper's
    rule) stop at ``LM_EVAL_UNTIL`` as lm-eval's do, with a note saying so (``stop_origin`` records it);
    tasks with their own stop (a newline: translation, SQuAD) keep it, as lm-eval's YAML brings its own.
    A run mixing both is refused in one line: one stop setting cannot be both."""
    if evaluation.mode != "generate" or evaluation.stop is not None:
        return evaluation, None
    tasks = [t if isinstance(t, Task) else resolve_task(t) for t in targets]
    eos_only = [t.name for t in tasks if not t.stop]
    if not eos_only:
        return evaluation, None
    if len(eos_only) != len(tasks):
        own = next(t.name for t in tasks if t.stop)
        raise SettingsError(
            f"stop: lm-eval's generate tasks stop at {LM_EVAL_UNTIL[0]!r} unless they bring their own, but {own} stops "
            f"at its own and {eos_only[0]} at EOS only (the paper's rule): give the stop sequences, or run them apart",
            setting="stop")
    shown = ", ".join(repr(s) for s in LM_EVAL_UNTIL)
    note = Note(f"answers stop at {shown} as lm-eval's generate tasks stop (at their few-shot delimiter): this "
                "command is in lm-eval's spelling with plain prompts. A deviation from the paper, which stops at EOS "
                "only, recorded in results.json; pre's own model spelling keeps the paper's rule, and stop sequences "
                "of your own replace it", setting="stop")
    return evaluation.with_(stop=LM_EVAL_UNTIL, stop_origin="lm-eval"), note
