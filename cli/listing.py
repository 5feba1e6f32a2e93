"""`pre list`: what models, backends, datasets, prompts and attacks exist, and the exact ``vllm serve``
command for a model (``engine.runs.catalog``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from promptrobust.cli.errors import UserError
from promptrobust.engine.runs.catalog import PROMPT_TYPES

if TYPE_CHECKING:
    from promptrobust.cli.flags import Subcommands

HELP = "list models, backends (and their model arguments), datasets, prompts or attacks, or how to serve a model with vLLM"


def add_parser(sub: Subcommands, formatter: type[argparse.HelpFormatter]) -> None:
    p = sub.add_parser(
        "list", help=HELP, description=HELP, formatter_class=formatter,
        epilog="examples:\n  pre list models\n  pre list backends\n  pre list prompts --dataset sst2 --prompt-type role\n"
        "  pre list prompts --dataset sst2 --promptbench ~/src/promptbench --shots 3\n"
        "  pre list prompts --task docs/examples/tickets/tickets.toml   # your own task's prompts (docs/your-task.md)\n"
        "  pre list serve --model gemma3-270m   # the exact vllm serve command for a model, and pre run against it\n",
    )
    p.add_argument("what", choices=["models", "backends", "datasets", "prompts", "attacks", "serve"])
    p.add_argument("--model", default=None, help="the model to serve (for `pre list serve`): a registry name, hf:ORG/NAME "
                                                 "or a local folder")
    p.add_argument("--port", type=int, default=8000, help="the server's port (for `pre list serve`)")
    p.add_argument("--dataset", default=None, help="dataset whose prompts to list (for `pre list prompts`)")
    p.add_argument("--task", default=None, metavar="FILE", help="your own task's file, whose prompts to list (docs/your-task.md)")
    p.add_argument("--prompt-type", "--type", dest="type", default=None, choices=list(PROMPT_TYPES), help="only prompts of this type")
    p.add_argument("--promptbench", default=None, metavar="CHECKOUT", help="list the paper's own prompts from a promptbench checkout")
    p.add_argument("--shots", type=int, default=0, help="with --promptbench: the few-shot prompt files when > 0 (the paper's layout keeps them apart)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from promptrobust.engine.runs import catalog

    if args.what == "models":
        _table([(m.name, m.backend, m.model, ",".join(m.tags), m.description) for m in catalog.models()],
               ("name", "backend", "model", "tags", "description"))
        print("\nAny other model: hf:ORG/NAME, vllm:ORG/NAME or a local folder, openai:MODEL --model-args base_url=URL; "
              "what each backend takes: `pre list backends`")
        print("Serve one with vLLM: pre list serve --model NAME (the exact vllm serve command, and pre run against it)")
    elif args.what == "backends":
        for i, b in enumerate(catalog.backends()):
            extra = f" (needs the [{b.extra}] extra)" if b.extra else ""
            print(("\n" if i else "") + f"{b.name}: {b.description}{extra}")
            _table([(a.name, a.takes, a.default) for a in b.arguments], ("--model-args", "takes", "default"))
        print("\nEvery model also takes backend=NAME (another backend serves it) and base_model=true|false "
              "(not instruction-tuned: the paper's few-shot rule).")
    elif args.what == "datasets":
        hub = catalog.have_hub()
        _table([(d.name, str(d.samples), d.metric, "/".join(d.labels) if d.labels else "(open)",
                 "offline" if d.offline else ("hub" if hub else "hub [needs extra]"), d.description) for d in catalog.datasets()],
               ("name", "samples", "metric", "labels", "data", "description"))
        print("\noffline: bundled with pre. hub: downloaded from the Hugging Face hub on first use, which needs the "
              "`datasets` package: pip install 'promptrobust[hub]'" + ("" if hub else " (not installed here)")
              + "; or read local files with --data-dir / --data-file.")
    elif args.what == "serve":
        if not args.model:
            raise UserError("`pre list serve` needs --model NAME (see `pre list models`)")
        if not 0 < args.port < 65536:
            raise UserError(f"--port {args.port}: give a port between 1 and 65535")
        cmd = catalog.serve_command(args.model, port=args.port)
        print(f"serve:  {cmd.serve}\n   or:  {cmd.module}\nthen:   {cmd.run}")
        for note in cmd.notes:
            print(f"\n- {note}")
    elif args.what == "prompts":
        if bool(args.dataset) == bool(args.task):
            raise UserError("`pre list prompts` needs --dataset NAME (see `pre list datasets`) or --task FILE (your own task)")
        prompts = catalog.prompts(args.dataset, task_file=args.task, prompt_type=args.type, promptbench=args.promptbench,
                                  shots=args.shots)
        _table([(p.id, p.type, p.language, p.text) for p in prompts], ("id", "type", "lang", "text"))
    else:
        rows = catalog.attacks()
        _table([(a.name, a.description, " ".join(f"{k}={v}" for k, v in a.options.items())) for a in rows],
               ("name", "description", "options (--attack-option KEY=VALUE)"))
        for a in rows:
            if a.needs:
                print(f"\n{a.name}: {a.needs}")
    return 0


def _table(rows: list[tuple[str, ...]], header: tuple[str, ...]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for row in [header, *rows]:
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip())
