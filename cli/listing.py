"""`pre list`: what models, datasets, prompts and attacks exist."""

from __future__ import annotations

import argparse
from typing import Any

from promptrobust.cli.errors import UserError

HELP = "list models, datasets, prompts or attacks"


def add_parser(sub: Any, formatter: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser(
        "list",
        help=HELP,
        description=HELP,
        formatter_class=formatter,
        epilog="examples:\n  pre list models\n  pre list prompts --dataset sst2 --prompt-type role\n"
        "  pre list prompts --dataset sst2 --promptbench ~/src/promptbench --shots 3\n",
    )
    p.add_argument("what", choices=["models", "datasets", "prompts", "attacks"])
    p.add_argument("--dataset", default=None, help="dataset whose prompts to list (for `pre list prompts`)")
    p.add_argument("--prompt-type", "--type", dest="type", default=None, choices=["task", "role", "semantic"], help="only prompts of this type")
    p.add_argument("--promptbench", default=None, metavar="CHECKOUT", help="list the paper's own prompts from a promptbench checkout")
    p.add_argument("--shots", type=int, default=0, help="with --promptbench: the few-shot prompt files when > 0 (the paper's layout keeps them apart)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    {"models": _models, "datasets": _datasets, "prompts": _prompts, "attacks": _attacks}[args.what](args)
    return 0


def _table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for row in [header, *rows]:
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip())


def _models(args: argparse.Namespace) -> None:
    from promptrobust.engine.serving.registry import REGISTRY

    rows = []
    for spec in REGISTRY.values():
        tags = ",".join(t for t, on in (("embedded", spec.embedded), ("paper", spec.paper), ("base", spec.base_model)) if on)
        rows.append((spec.name, spec.backend, spec.model if not spec.embedded else "(bundled)", tags, spec.description))
    from promptrobust.engine.serving.backends.random_model import RANDOM_CONFIGS

    for name, cfg in RANDOM_CONFIGS.items():
        rows.append((f"random:{name}", "hf", "(random weights)", "bench", f"{name} architecture, random weights: benchmarks only"))
    _table(rows, ("name", "backend", "model", "tags", "description"))
    print("\nAny other model: hf:ORG/NAME, vllm:ORG/NAME or a local folder, openai:MODEL --model-args base_url=URL")


def _datasets(args: argparse.Namespace) -> None:
    from promptrobust.tasks import task_info

    import importlib.util

    from promptrobust.tasks.registry import get_task

    have_hub = importlib.util.find_spec("datasets") is not None
    rows = []
    for t in task_info():
        data = "offline" if is_offline(get_task(t.name)) else ("hub" if have_hub else "hub [needs extra]")
        rows.append((t.name, str(t.sample_size), t.metric, "/".join(t.labels) if t.labels else "(open)", data, t.description))
    _table(rows, ("name", "samples", "metric", "labels", "data", "description"))
    print(
        "\noffline: bundled with pre. hub: downloaded from the Hugging Face hub on first use, which needs the "
        "`datasets` package: pip install 'promptrobust[hub]'"
        + ("" if have_hub else " (not installed here)")
        + "; or read local files with --data-dir / --data-file."
    )


def is_offline(task: Any) -> bool:
    """Whether a dataset's evaluation samples come with pre (no hub download, no `datasets` package)."""
    source = getattr(task, "source", None)
    if source is None or not getattr(source, "hf_eval", ()):
        return True
    return getattr(task, "math_source", None) == "generate"  # DeepMind Mathematics: generated locally


def _prompts(args: argparse.Namespace) -> None:
    from promptrobust.tasks.prompt_sets import load_prompts
    from promptrobust.tasks.registry import get_task

    if not args.dataset:
        raise UserError("`pre list prompts` needs --dataset NAME (see `pre list datasets`)")
    task = get_task(args.dataset)
    if args.promptbench:
        from promptrobust.tasks.promptbench_import import load_promptbench_prompts

        types = [args.type] if args.type else ["task", "role", "semantic"]
        prompts = load_promptbench_prompts(args.promptbench, task.name, types=types, shot="few" if args.shots > 0 else "zero")
    else:
        prompts = load_prompts(task.name, types=[args.type] if args.type else None)
    _table([(p.id, p.type, p.language, p.text) for p in prompts], ("id", "type", "lang", "text"))


def _attacks(args: argparse.Namespace) -> None:
    try:
        from promptrobust.attacks.registry import list_attacks
    except ImportError:
        print("no attacks are installed")
        return
    from promptrobust.attacks.registry import attack_options

    rows = []
    for name, description in list_attacks():
        opts = attack_options(name, cli_only=True)
        rows.append((name, description, " ".join(f"{k}={v}" for k, v in opts.items())))
    _table(rows, ("name", "description", "options (--attack-option KEY=VALUE)"))
    from promptrobust.attacks.registry import attack_requirements

    for name, needs in attack_requirements():
        print(f"\n{name}: {needs}")
