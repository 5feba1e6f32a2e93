"""lm-evaluation-harness habits, accepted: its flag spellings and value forms, mapped to pre's.

- Underscore spellings (``--model_args``, ``--output_path``, ``--log_samples``,
  ``--num_fewshot``, ``--batch_size``, ...) are rewritten to pre's flags before
  parsing (``normalize_argv``), so every command takes both.
- ``--limit`` takes a fraction (``0.1``: a tenth of the dataset's samples) as
  lm-eval does; ``resolve_limit`` turns it into a count once the dataset is known.
- ``--gen_kwargs`` and ``--system_instruction`` become settings fields in
  ``cli/gen_kwargs.py``; ``--model hf --model_args pretrained=X``, ``--device``,
  ``--apply_chat_template`` and the one batch size are ``cli/lm_eval_model.py``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence


#: lm-evaluation-harness spelling -> pre's flag.
ALIASES: dict[str, str] = {
    "--model_args": "--model-args",
    "--output_path": "--output-dir",
    "--log_samples": "--log-samples",
    "--num_fewshot": "--shots",
    "--batch_size": "--batch-size",
    "--tasks": "--dataset",
    "--max_tokens": "--max-tokens",
    "--data_dir": "--data-dir",
    "--data_file": "--data-file",
    "--prompt_type": "--prompt-type",
    "--no_progress": "--no-progress",
    "--top_k": "--top-k",
    "--max_retries": "--max-retries",
    "--request_timeout": "--request-timeout",
    "--use_cache": "--cache",
    "--gen-kwargs": "--gen_kwargs",
    "--apply-chat-template": "--apply_chat_template",
    "--system-instruction": "--system_instruction",
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


def resolve_limit(args: argparse.Namespace, dataset: str) -> int | None:
    """The number of samples a fractional ``--limit`` means for ``dataset`` (at least 1)."""
    limit = getattr(args, "limit", None)
    if not isinstance(limit, float):
        return limit
    from promptrobust.tasks.registry import get_task

    task = get_task(dataset)
    size = len(task.load(limit=None, seed=args.seed, data_dir=getattr(args, "data_dir", None),
                         data_file=getattr(args, "data_file", None)))
    return max(1, round(limit * size))


def add_lm_eval_arguments(g: argparse._ArgumentGroup) -> None:
    """The lm-eval flags that have no pre spelling of their own."""
    g.add_argument("--gen_kwargs", default=None, metavar="KEY=VALUE,...",
                   help="lm-eval generation arguments: max_gen_toks (or max_tokens) and until (stop sequences, e.g. "
                        "until=[\"\\n\\n\"]); decoding is greedy (temperature=0, do_sample=false)")
    g.add_argument("--apply_chat_template", action="store_true",
                   help="send inputs as chat messages (hf/vllm: chat=true; openai: api=chat)")
    g.add_argument("--system_instruction", default=None, metavar="TEXT",
                   help="text before every input: a system message for chat input, a first paragraph otherwise")
    g.add_argument("--device", default=None, help="lm-eval's --device: the same as --model-args device=DEVICE (in-process backends)")
