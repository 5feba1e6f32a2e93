"""`pre attention`: word importance of a clean and an adversarial prompt on one sample.

Gradient-based (norm of the loss gradient w.r.t. each word's input embeddings)
and deletion-based (loss change when the word is removed) importance, for
transformers models (the hf backend): decoder-only and encoder-decoder.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import orjson

from promptrobust.cli.errors import UserError

NAME = "attention"
HELP = "show which prompt words a model relies on: clean vs adversarial prompt on one sample (hf models)"

EPILOG = """\
examples:
  pre attention --clean "Determine the sentiment of this review." \\
                --adversarial "Determine the sentimnet of this reveiw." --output attention/
  pre attention --record runs/20250101-120000_smollm2-135m-instruct_rotten_tomatoes --output attention/
  pre attention --model hf:google/flan-t5-large --dataset sst2 --sample-index 3 --clean ... --adversarial ...

--record takes the record with the largest PDR (whose prompt changed) from the
run folder's results.jsonl, with its model, dataset and shots. The output folder
receives gradient.png, deletion.png, attention.html (a fragment for reports)
and attention.json (every score).
"""


def add_parser(sub: Any, formatter: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser(NAME, help=HELP, description=HELP, epilog=EPILOG, formatter_class=formatter)
    p.add_argument("--model", default=None, help="hf model: registry name, HF id/folder or hf:ID (default: the record's, else smollm2-135m-instruct)")
    p.add_argument("--model-args", default="", help="chat=true|false to override the chat template choice")
    p.add_argument("--dataset", default=None, help="dataset name (default: the record's, else rotten_tomatoes)")
    p.add_argument("--data-dir", default=None, help="read the dataset from local files in this folder")
    p.add_argument("--data-file", default=None, help="read the dataset from this local file")
    p.add_argument("--clean", default=None, help="the clean prompt")
    p.add_argument("--adversarial", default=None, help="the adversarial prompt")
    p.add_argument("--record", default=None, metavar="RUN_DIR", help="take both prompts from the worst record of this run folder")
    p.add_argument("--sample-index", type=int, default=0, help="which evaluation sample (0-based, in the seed's order)")
    p.add_argument("--seed", type=int, default=None, help="seed of the sample selection (default: the record's, else 0)")
    p.add_argument("--shots", type=int, default=None, help="few-shot examples (default: the record's, else 0)")
    p.add_argument("--method", default="both", choices=["both", "gradient", "deletion"], help="which importance to compute")
    p.add_argument("--device", default="cpu", help="torch device")
    p.add_argument("--output", required=True, metavar="DIR", help="folder for the PNGs, HTML fragment and JSON")
    p.set_defaults(handler=handle)


def worst_record(run_dir: str) -> Any:
    """The record with the largest PDR whose adversarial prompt differs from the clean one."""
    from promptrobust.engine.analysis import AnalysisInputError, load_source_records

    try:
        sources = load_source_records([run_dir])
    except AnalysisInputError as exc:
        raise UserError(str(exc)) from None
    changed = [s.record for s in sources if s.record.adversarial_prompt != s.record.clean_prompt]
    if not changed:
        raise UserError(f"no record in {run_dir} changed its prompt; pass --clean and --adversarial instead")
    return max(changed, key=lambda r: r.pdr)


def handle(args: argparse.Namespace) -> int:
    record = None
    if args.record:
        if args.clean or args.adversarial:
            raise UserError("use either --record or --clean/--adversarial, not both")
        record = worst_record(args.record)
        clean, adversarial = record.clean_prompt, record.adversarial_prompt
    else:
        if not (args.clean and args.adversarial):
            raise UserError("pass --clean and --adversarial prompts, or --record RUN_DIR")
        clean, adversarial = args.clean, args.adversarial
    if args.sample_index < 0:
        raise UserError(f"--sample-index must be 0 or more (got {args.sample_index})")
    model_name = args.model or (record.model if record else "smollm2-135m-instruct")
    dataset = args.dataset or (record.dataset if record else "rotten_tomatoes")
    seed = args.seed if args.seed is not None else (record.seed if record else 0)
    shots = args.shots if args.shots is not None else (record.shots if record else 0)
    methods = ("gradient", "deletion") if args.method == "both" else (args.method,)
    _check_hf(model_name, args.model_args)

    from promptrobust.engine.analysis.attention import (
        AttentionError,
        render_html,
        render_png,
        word_importance,
    )
    from promptrobust.engine.session import few_shot
    from promptrobust.tasks.registry import get_task

    task = get_task(dataset)
    samples = task.load(seed=seed, data_dir=args.data_dir, data_file=args.data_file)
    if args.sample_index >= len(samples):
        raise UserError(f"--sample-index {args.sample_index} is out of range: {task.name} has {len(samples)} samples")
    sample = samples[args.sample_index]
    examples = few_shot(task, shots, seed=seed, data_dir=args.data_dir)
    target = _answer_word(task, sample)
    model, tok, chat = _load(model_name, args.model_args, args.device)
    print(f"pre: {model_name} on {task.name} sample {sample.id} (answer {target!r}, {'chat' if chat else 'completion'})", file=sys.stderr)
    try:
        rows = [
            (label, word_importance(model, tok, prompt, render=lambda p: task.render(p, sample, examples), target=target, chat=chat, methods=methods))
            for label, prompt in (("clean", clean), ("adversarial", adversarial))
        ]
    except AttentionError as exc:
        raise UserError(str(exc)) from None
    out = Path(args.output)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create --output {out} ({exc.strerror}); pass a writable folder") from None
    title = f"{model_name} / {task.name} sample {sample.id}"
    fragments = []
    for method in methods:
        path = render_png(rows, method, out / f"{method}.png", title=f"{title}: {method} importance")
        fragments.append(f"<h4>{method} importance</h4>\n" + render_html(rows, method))
        print(f"pre: wrote {path}", file=sys.stderr)
    (out / "attention.html").write_text("\n".join(fragments), encoding="utf-8")
    (out / "attention.json").write_bytes(
        orjson.dumps(
            {
                "model": model_name, "dataset": task.name, "sample_id": sample.id, "sample_index": args.sample_index,
                "seed": seed, "shots": shots, "chat": chat, "target": target,
                "rows": {label: imp.to_dict() for label, imp in rows},
            },
            option=orjson.OPT_INDENT_2,
        )
    )
    _print(rows, methods)
    return 0


def _answer_word(task: Any, sample: Any) -> str:
    target = sample.target
    if isinstance(target, (list, tuple)):
        target = target[0] if target else ""
    word = task.verbalizers.get(target, target) if task.verbalizers else target
    if not str(word).strip():
        raise UserError(f"sample {sample.id} has no answer to score; pick another --sample-index")
    return str(word)


def _check_hf(model_name: str, model_args: str) -> None:
    from promptrobust.engine.registry import parse_model_args, resolve_model

    spec = resolve_model(model_name, parse_model_args(model_args))
    if spec.backend != "hf":
        raise UserError(f"pre attention needs gradients, so an hf model (transformers); {model_name} uses the {spec.backend} backend")


def _load(model_name: str, model_args: str, device: str) -> tuple[Any, Any, bool]:
    from promptrobust.engine.analysis.attention import AttentionError, load_model
    from promptrobust.engine.registry import parse_model_args, resolve_model

    spec = resolve_model(model_name, parse_model_args(model_args))
    if spec.backend != "hf":
        raise UserError(f"pre attention needs gradients, so an hf model (transformers); {model_name} uses the {spec.backend} backend")
    chat = spec.args.get("chat")
    ref: str | Path = spec.model
    if spec.embedded:
        from promptrobust.engine.model_store import ensure_embedded

        emb = ensure_embedded(spec.model)
        ref = emb.path
        chat = emb.is_chat if chat is None else chat
    try:
        model, tok = load_model(ref, device=device)
    except AttentionError as exc:
        raise UserError(str(exc)) from None
    if chat is None:
        chat = bool(getattr(tok, "chat_template", None))
    return model, tok, bool(chat)


def _print(rows: list[tuple[str, Any]], methods: tuple[str, ...]) -> None:
    for label, imp in rows:
        print(f"{label}: p({imp.target}) = {math.exp(-imp.loss):.4f}")
        header = "  ".join(f"{m:>10}" for m in methods)
        print(f"  {'word':<20} {header}")
        for i, word in enumerate(imp.words):
            vals = "  ".join(f"{imp.scores(m)[i]:>10.4f}" for m in methods)
            print(f"  {word:<20} {vals}")
