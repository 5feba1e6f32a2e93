"""Every `pre ...` example in the README and in every `--help` parses, and the offline ones run.

An example that stops working (a renamed flag, a prompt id that does not exist, a
dataset that needs the hub) fails here. Offline `pre run` examples run on the fake
OpenAI-compatible server at --limit 2 (the embedded model stands in for nothing the
example checks: its flags, dataset, prompts and attacks are what is exercised), with
--top-k 1 and a small --budget; `pre list` and `pre sweep --dry-run` run as written.
Examples with placeholders (RUN_DIR, grid.toml, a promptbench checkout) or remote models
are parsed only.
"""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import orjson
import pytest

from promptrobust.cli.lm_eval import normalize_argv
from promptrobust.cli.main import build_parser, main
from promptrobust.engine.measuring.settings import DEFAULT_DATASET
from promptrobust.engine.runs.catalog import is_offline
from promptrobust.tasks.registry import get_task
from promptrobust.testing.fake_openai import FakeOpenAIServer
from tests.sweep_helpers import hashed_text_answer

ROOT = Path(__file__).resolve().parents[1]
EMBEDDED = {"gemma3-270m", "smollm2-135m-instruct"}


def _lines(text: str) -> list[str]:
    """Lines with backslash continuations joined."""
    out, cur = [], ""
    for line in text.splitlines():
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        out.append(cur + line)
        cur = ""
    return out


def _commands_in(text: str, *, indented: bool = False) -> list[str]:
    """`pre ...` commands of a text (in --help: the indented example lines, not prose)."""
    found = []
    for line in _lines(text):
        if indented and not re.match(r"^\s{2,}pre ", line):
            continue
        for part in line.split("&&"):
            part = part.strip()
            if part.startswith("pre "):
                part = re.split(r"\s+#\s", part, maxsplit=1)[0].strip()
                found.append(part)
    return found


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```(?:bash|sh|console)?\n(.*?)```", text, re.S)
    return [c for block in blocks for c in _commands_in(block)]


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    out = [parser]
    for action in parser._actions:  # noqa: SLF001 - argparse keeps subparsers here
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            for sub in dict.fromkeys(action.choices.values()):
                out += _parsers(sub)
    return out


def help_commands() -> list[str]:
    return [c for p in _parsers(build_parser()) for c in _commands_in(p.format_help(), indented=True)]


EXAMPLES = sorted(set(readme_commands()) | set(help_commands()))


def test_the_examples_were_found() -> None:
    readme, helps = readme_commands(), help_commands()
    assert "pre run --limit 100 --mode choices --attack stresstest --top-k 1" in readme  # the first command
    assert len(readme) >= 15 and len(helps) >= 30


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_parses_and_each_flag_reaches_its_setting(example: str) -> None:
    words = normalize_argv(shlex.split(example)[1:])
    try:
        args = build_parser().parse_args(words)
    except SystemExit as exc:  # argparse printed why
        pytest.fail(f"{example!r} does not parse (exit {exc.code})")
    assert args.command == words[0]
    assert flags_not_taken(words, args) == []


def flags_not_taken(words: list[str], args: argparse.Namespace) -> list[str]:
    """The flags of a command line whose value did not land where the command reads it (empty: all did)."""
    sub = _subparser(build_parser(), words)
    actions = {o: a for a in sub._actions for o in a.option_strings}  # noqa: SLF001
    missed = []
    for word, value in zip(words, [*words[1:], None]):
        name, eq, inline = word.partition("=")
        action = actions.get(name) if word.startswith("--") else None
        if action is None or action.dest == "help":
            continue
        got = getattr(args, action.dest, None)
        if action.nargs == 0:  # --flag: a switch
            ok = got == action.const
        else:
            text = inline if eq else value
            typed = action.type(text) if callable(action.type) and text is not None else text
            ok = typed in got if isinstance(got, list) else typed == got
        if not ok:
            missed.append(word)
    return missed


def _subparser(parser: argparse.ArgumentParser, words: list[str]) -> argparse.ArgumentParser:
    """The (sub)parser that handles ``words`` (`pre sweep ...` -> the sweep parser)."""
    for action in parser._actions:  # noqa: SLF001
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            name = next((w for w in words if w in action.choices), None)
            if name is not None:
                return _subparser(action.choices[name], words[words.index(name) + 1:])
    return parser


def _parsed(example: str) -> argparse.Namespace:
    return build_parser().parse_args(normalize_argv(shlex.split(example)[1:]))


def _runnable_offline(example: str) -> bool:
    words = shlex.split(example)
    if "..." in example or any(w.isupper() and len(w) > 1 for w in words):  # placeholders
        return False
    try:
        args = _parsed(example)
    except SystemExit:  # test_every_example_parses names it
        return False
    if args.command == "list":
        return not getattr(args, "promptbench", None)  # a user's checkout is not here
    if args.command == "sweep":
        if getattr(args, "preset", None):
            return bool(args.dry_run)
        return bool(args.dry_run and args.config and Path(ROOT / args.config).is_file())
    if args.command != "run":
        return False
    if args.model not in EMBEDDED or getattr(args, "promptbench", None):
        return False
    if getattr(args, "meaning_nli", None) and not (ROOT / args.meaning_nli).is_dir():  # an NLI model from the hub
        return False
    if args.task or args.input_columns:  # your own task: its file (or data) must be in the checkout
        return bool(args.task) and (ROOT / args.task).is_file()
    return all(is_offline(get_task(d)) for d in _datasets(args))


def _datasets(args: argparse.Namespace) -> list[str]:
    """The datasets a parsed `pre run` measures (none named: the default one)."""
    return (args.dataset or DEFAULT_DATASET).split(",")


def _names(args: argparse.Namespace) -> list[str]:
    """The task names its run folders' results.json say: your own task's, or the datasets'."""
    if args.task:
        from promptrobust.tasks import load_task_file

        return [load_task_file(ROOT / args.task).name]
    return sorted(get_task(d).name for d in _datasets(args))


OFFLINE = [e for e in EXAMPLES if _runnable_offline(e)]


def test_a_fair_share_of_examples_runs_offline() -> None:
    runs = [e for e in OFFLINE if e.startswith("pre run")]
    assert len(runs) >= 6, OFFLINE
    assert any("--attack" in e for e in runs) and any(e.startswith("pre list") for e in OFFLINE)


@pytest.fixture(scope="module")
def server():
    with FakeOpenAIServer(answer=hashed_text_answer) as srv:
        yield srv


@pytest.mark.parametrize("example", OFFLINE)
def test_every_offline_example_runs_and_writes_what_it_says(example: str, server: FakeOpenAIServer, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(ROOT)  # README paths (bench/sweeps/...) are relative to the checkout
    assert_ran(example, run_offline_example(example, server, tmp_path, capsys), tmp_path)


def assert_ran(example: str, out: str, tmp_path: Path) -> None:
    """What an offline example must leave: a run folder per dataset scored on the 2 samples asked
    for (with one record per attack under --attack), a listing, or a dry run's job list."""
    args = _parsed(example)
    if args.command == "list":
        assert len(out.strip().splitlines()) >= 2, out  # a header and at least one row
    elif args.command == "sweep":
        assert " jobs -> " in out.splitlines()[0], out
    else:
        folders = sorted((tmp_path / "runs").iterdir())
        results = [orjson.loads((f / "results.json").read_bytes()) for f in folders]
        assert sorted(r["dataset"] for r in results) == _names(args)
        assert all(r["samples"]["evaluated"] == 2 for r in results)
        if args.attack:
            assert all(r["results"]["records"]["total"] >= 1 for r in results)


def run_offline_example(example: str, server: FakeOpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """Run an offline example with its model swapped for the fake server, at --limit 2; its stdout."""
    words = shlex.split(example)[1:]
    args = _parsed(example)
    if args.command == "run":
        kept, skip = [], False
        for w in words:  # the example's model is swapped for the fake server
            if skip:
                skip = False
                continue
            if w in ("--model", "--model-args"):
                skip = True
                continue
            kept.append(w)
        words = kept + ["--model", "openai:fake-model", "--model-args", f"base_url={server.url}", "--limit", "2",
                        "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(tmp_path / "runs"), "--no-progress"]
        if args.attack:
            words += ["--top-k", "1", "--budget", "4"]
    code = main(words)
    out, err = capsys.readouterr()
    if code == 1 and args.command == "run" and args.attack:
        # An attack that cannot run offline (BertAttack's masked LM) is a failed record, said as such.
        failed = [line for line in err.splitlines() if line.startswith("pre: error: ")]
        assert failed and all("bertattack" in line for line in failed), err
        return out
    assert code == 0, err
    return out


def test_help_list_readme_and_attention_name_the_same_default_model(capsys: pytest.CaptureFixture[str]) -> None:
    import inspect

    from promptrobust.engine.analysis.attention import compare_prompts
    from promptrobust.engine.serving.registry import DEFAULT_MODEL, REGISTRY

    assert main(["list", "models"]) == 0
    listing = [line for line in capsys.readouterr().out.splitlines() if "default" in line]
    assert len(listing) == 1 and listing[0].startswith(DEFAULT_MODEL)
    assert inspect.signature(compare_prompts).parameters["model"].default == DEFAULT_MODEL
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"`{DEFAULT_MODEL}` (default" in readme
    described = REGISTRY[DEFAULT_MODEL].description.split(",")[0].split(" base")[0]  # "Gemma 3 270M"
    for p in _parsers(build_parser()):
        text = p.format_help()
        for line in text.splitlines():
            if "embedded" in line.lower() and "pre run" in line:
                assert described in line, line  # an example that names the embedded model names the default
