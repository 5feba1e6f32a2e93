"""Issue 41, item 5: deeply nested TOML is one line, on every TOML reader.

A task file nesting arrays 500+ levels was a ``RecursionError`` (3,004 lines of traceback), and
so were the prompts file a task names and sweep files. Each reader now bounds the depth as the
JSON readers do: one line naming the file, exit code 2 on the command line; brackets inside
strings and comments do not count, and dotted keys count as the tables they make.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from promptrobust.cli.main import main
from promptrobust.engine.errors import PromptRobustError
from promptrobust.tasks import load_task_file

DEEP = 600
MAX_TOML_DEPTH = 32  # engine.safe_io.bounded_toml's (imported in the test of that module)
CSV = "ticket_id,body,queue\nT1,charged twice,BIL\nT2,app crashes,TEC\n"
TASK = """\
name = "tickets"
data = "tickets.csv"
input = {input}
label = "queue"
{extra}
[labels]
BIL = "billing"
TEC = "technical"
"""


def deep_array(depth: int) -> str:
    return "[" * depth + '"body"' + "]" * depth


def one_line(action: object, *needles: str) -> str:
    with pytest.raises(PromptRobustError) as info:
        action()  # type: ignore[operator]
    message = str(info.value)
    assert "\n" not in message and len(message) < 400, message
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    return message


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "tickets.csv").write_text(CSV)
    return tmp_path


def test_a_task_file_nested_deep_is_one_line(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = folder / "deep.toml"
    path.write_text(TASK.format(input=deep_array(DEEP), extra=""))
    one_line(lambda: load_task_file(path), "deep.toml", f"{DEEP} levels deep")
    code = main(["run", "--task", str(path), "--output-dir", str(folder / "runs"), "--no-cache", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "deep.toml" in err, err


def test_dotted_keys_nested_deep_are_one_line(folder: Path) -> None:
    path = folder / "dotted.toml"
    path.write_text(TASK.format(input='"body"', extra="description." + ".".join(["a"] * DEEP) + ' = "x"\n'))
    one_line(lambda: load_task_file(path), "dotted.toml", f"more than {MAX_TOML_DEPTH} levels deep")


def test_the_prompts_file_a_task_names_is_bounded_too(folder: Path) -> None:
    (folder / "prompts.toml").write_text(f'[[prompt]]\nid = "p1"\ntype = "task"\ntext = "Route it."\nlanguage = {deep_array(DEEP)}\n')
    path = folder / "task.toml"
    path.write_text(TASK.format(input='"body"', extra='prompts = "prompts.toml"\n'))
    one_line(lambda: load_task_file(path), "prompts.toml", f"{DEEP} levels deep")


def test_a_sweep_file_nested_deep_is_one_line(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = folder / "sweep.toml"
    path.write_text(f'[grid]\nmodels = {deep_array(DEEP)}\ndatasets = ["sst2"]\nattacks = ["checklist"]\n')
    code = main(["sweep", str(path), "--dry-run"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "sweep.toml" in err and f"{DEEP} levels deep" in err, err


def test_a_price_table_nested_deep_is_one_line(folder: Path) -> None:
    from promptrobust.engine.runs.sweep.estimate import load_prices

    path = folder / "prices.toml"
    path.write_text(f'[prices."m"]\ninput = {deep_array(DEEP)}\noutput = 1.0\n')
    one_line(lambda: load_prices(path), "prices.toml", f"{DEEP} levels deep")


def test_brackets_in_strings_and_comments_do_not_count() -> None:
    from promptrobust.engine.safe_io import bounded_toml
    from promptrobust.engine.safe_io.bounded_toml import bracket_depth, load_toml

    assert bounded_toml.MAX_TOML_DEPTH == MAX_TOML_DEPTH
    text = ('a = "' + "[" * 100 + '"\n' + "b = '" + "{" * 100 + "'\n" + 'c = """\n' + "[" * 100 + '\n"""\n'
            + "# " + "[" * 100 + "\n" + "[t]\nd = [[1], [2]]\n")
    assert bracket_depth(text) == 2
    assert load_toml(text)["t"]["d"] == [[1], [2]]
