"""`pre`: measure how robust an LLM is to adversarial prompts.

Every command lives in a module of its own (arguments -> settings -> plan -> run -> write ->
print); this one builds the parser, installs the progress display, and turns user errors into
one line on stderr and exit code 2 (``cli/errors.py``).
"""

from __future__ import annotations

import argparse
import os
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from typing import NoReturn

from promptrobust.cli.errors import EXIT_USAGE, fail, one_line, quiet_asyncio_teardown, terminate_as_interrupt, user_error_types

DESCRIPTION = """\
pre measures how robust a large language model is to adversarial prompts
(the PromptRobust benchmark): it scores prompts on a dataset, attacks them,
and reports the performance drop rate (PDR = 1 - attacked / clean).

Every model answer is cached in one SQLite file, so nothing is computed twice.

examples:
  pre run --limit 100 --mode choices --attack stresstest --top-k 1   # offline: embedded Gemma 3 270M, Rotten Tomatoes
  pre run                                   # the paper's protocol (generate mode), offline, on the same data
  pre run --dataset sst2 --limit 200        # hub data: pip install 'promptrobust[hub]'
  pre run --model openai:gpt-4o-mini --concurrency 64 --rpm 500 --dataset sst2
  pre run --model hf:Qwen/Qwen2.5-0.5B-Instruct --model-args dtype=bfloat16 --batch-size 32
  pre list models                           # also: datasets, attacks, prompts --dataset sst2

lm-evaluation-harness spellings work too: --model_args, --num_fewshot,
--output_path, --log_samples, --batch_size, --gen_kwargs, --limit 0.1.
"""


#: Each command and the module that builds its parser and runs it, in the order `pre --help` lists them.
COMMAND_MODULES: dict[str, str] = {
    "run": "promptrobust.cli.run",
    "list": "promptrobust.cli.listing",
    "sweep": "promptrobust.cli.sweep",
    "report": "promptrobust.cli.report",
    "eval": "promptrobust.cli.eval_cmd",
    "transfer": "promptrobust.cli.transfer",
    "defend": "promptrobust.cli.defend",
    "attention": "promptrobust.cli.attention_cmd",
    "bench": "promptrobust.cli.bench",
    "cache": "promptrobust.cli.cache_cmd",
}
#: Commands whose module may be absent from an install (everything but run and list).
OPTIONAL_COMMANDS = tuple(m for name, m in COMMAND_MODULES.items() if name not in ("run", "list"))


class _Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Raw epilogs with examples; defaults shown, except None/False (their help says what absence means)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        default = action.default
        hidden = default is None or default is False or default == "" or default is argparse.SUPPRESS or default == []
        if hidden or "%(default)" in (action.help or "") or "default:" in (action.help or ""):  # said already
            return action.help or ""
        return super()._get_help_string(action) or ""


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose mistakes (a bad value, a missing or unknown flag) are one line
    like every other bad input, not the usage block and then the line; subcommands inherit it."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"pre: error: {message} (see `{self.prog} --help`)\n")


def build_parser(commands: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The `pre` parser with the parsers of ``commands`` (all of them when None).

    Building every command imports every command module (the engine's settings, the attack
    catalogue): a second or more on each call. `pre report ...` needs none of that, so main()
    builds the named command alone, and all of them only for `pre --help` or a name it does not know
    (`_commands_for`)."""
    from promptrobust import __version__

    parser = _Parser(prog="pre", description=DESCRIPTION, formatter_class=_Formatter)
    parser.add_argument("--version", action="version", version=f"pre (promptrobust) {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES if commands is None else commands:
        module_name = COMMAND_MODULES[name]
        if importlib.util.find_spec(module_name) is None:
            continue  # a command whose module is not part of this install
        importlib.import_module(module_name).add_parser(sub, _Formatter)
    return parser


def _commands_for(args: Sequence[str]) -> list[str] | None:
    """The commands whose parsers `pre ARGS` needs: the one it names, none for `pre --version`,
    all (None) for `pre`, `pre --help` or a command it does not know (argparse lists them)."""
    if args and args[0] in COMMAND_MODULES:
        return [args[0]]
    return [] if list(args) == ["--version"] else None


def main(argv: Sequence[str] | None = None) -> int:
    from promptrobust.cli.lm_eval import normalize_argv

    args_list = normalize_argv(sys.argv[1:] if argv is None else argv)  # lm-eval spellings accepted
    parser = build_parser(_commands_for(args_list))
    if not args_list:
        parser.print_help()
        return 0
    try:
        args, unknown = parser.parse_known_args(args_list)
    except SystemExit as exc:  # argparse already printed its one line
        return int(exc.code or 0) and EXIT_USAGE
    if unknown:  # said by the command whose flags they are not
        where = " ".join(["pre", *([args.command] if getattr(args, "command", None) else [])])
        return fail(f"unrecognized arguments: {' '.join(unknown)} (see `{where} --help`)")
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_USAGE
    args.argv = ["pre", *args_list]  # recorded (secrets redacted) in results.json
    from promptrobust.engine.safe_io import SafeStream

    errors = user_error_types()
    if not os.environ.get("PRE_DEBUG"):
        quiet_asyncio_teardown()
    # A log of both streams (`pre run ... > run.log 2>&1`) keeps the order things were said in:
    # stdout written to a file is block-buffered, so the tables would land after the last line.
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if callable(reconfigure) and not sys.stdout.isatty():
        try:
            reconfigure(line_buffering=True)
        except (ValueError, OSError):
            pass
    # Prompts, model answers and names printed by any command reach the terminal without
    # escape sequences, control characters or bidi overrides (the files keep the exact text).
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = SafeStream(streams[0]), SafeStream(streams[1], keep_own=True)
    try:
        return _run_handler(args, errors)
    finally:
        sys.stdout, sys.stderr = streams


def _run_handler(args: argparse.Namespace, errors: tuple[type[BaseException], ...]) -> int:
    from promptrobust.cli.progress import reporter_for
    from promptrobust.engine.progress import reporting

    with terminate_as_interrupt() as signals:
        try:
            # The reporter stops (its line erased) before anything below is printed.
            with reporting(reporter_for(bool(getattr(args, "no_progress", False)))):
                return int(args.handler(args) or 0)
        except errors as exc:
            return fail(one_line(exc))
        except KeyboardInterrupt as exc:
            kept = getattr(exc, "pre_message", None)  # a command that keeps partial results says what and how to resume
            import shlex

            again = shlex.join(args.argv)
            default = (f"no run folder was written, and with --no-cache no answer was kept: running it again starts over: "
                       f"{again}" if getattr(args, "no_cache", False) else
                       f"no run folder was written; finished answers are in the cache, so this resumes: {again}")
            print(f"pre: {signals.verb}; {kept or default}", file=sys.stderr)
            return signals.exit_code
        except MemoryError:
            # What reads data turns this into one line naming the file (exit 2); anywhere else it is
            # still one line, the environment's refusal (exit 1), never a traceback.
            from promptrobust.engine.safe_io import EXIT_ENVIRONMENT

            print("pre: error: the machine ran out of memory; use fewer samples (--limit), a smaller model or batch "
                  "(--batch-size), or run where more memory is free", file=sys.stderr)
            return EXIT_ENVIRONMENT
        except BrokenPipeError:
            # `pre list models | head`: the reader left; nothing is wrong and nothing more to say.
            # The interpreter flushes stdout at exit: point its descriptor at /dev/null first.
            if sys.__stdout__ is not None:  # None when Python runs without a console (pythonw)
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.__stdout__.fileno())
            return 0
        except Exception as exc:  # noqa: BLE001 - only the environment's refusals are caught; the rest re-raised
            # A full disk, a read-only folder: the environment, not a bug (exit 1, one line, no traceback).
            from promptrobust.engine.safe_io import EXIT_ENVIRONMENT, as_output_error, describe_os_error

            refused = as_output_error(exc, getattr(exc, "filename", None))
            if refused is not None:
                print(f"pre: error: {refused}", file=sys.stderr)
                return EXIT_ENVIRONMENT
            if isinstance(exc, OSError):  # a vanished folder, a name taken: the right advice for each
                return fail(describe_os_error(exc))
            raise


if __name__ == "__main__":
    sys.exit(main())
