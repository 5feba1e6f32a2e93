"""What a user sees in a terminal (issue 31 items 1 and 4): the progress line is erased before
the command's last words, so `pre: results in ...` (or the Ctrl-C message) is the last line on
the screen and nothing is drawn after it; the README's first command shows no warning text.

Commands run in a pseudo-terminal (``promptrobust.testing.run_in_terminal``); what they drew in
place is replayed into the screen it leaves (``render``)."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path

import pytest

from promptrobust.testing import FakeOpenAIServer, render, run_in_terminal
from tests.sweep_helpers import hashed_text_answer

FIXTURES = Path(__file__).parent / "fixtures" / "terminal"
ERASE_ONLY = re.compile(r"^(\r|\n|\x1b\[2?K)*$")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRE_PROGRESS") and k not in ("PYTHONWARNINGS", "PRE_DEBUG")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(__file__).parents[1]), env.get("PYTHONPATH", "")) if p)
    return env


def _pre(*args: str) -> list[str]:
    return [sys.executable, "-m", "promptrobust.cli.main", *args]


def test_render_replays_what_is_drawn_in_place() -> None:
    raw = b"pre: phase\r\n\r\x1b[2Krequests 1/4\r\x1b[2Krequests 2/4\r\x1b[2Ktable\r\nlast\r\n\r\x1b[2Krequests 4/4\r\x1b[2K"
    assert render(raw) == ["pre: phase", "table", "last"]
    assert render(b"abcdef\rxy\x1b[K\n\x1b[1mbold\x1b[0m") == ["xy", "bold"]
    assert render(b"0123456789ab\r\x1b[2Kz", columns=10) == ["0123456789", "z"]  # wraps; \r returns on its row


@pytest.fixture()
def server():  # noqa: ANN201
    with FakeOpenAIServer(answer=hashed_text_answer, latency=0.05) as srv:
        yield srv


def test_the_results_path_is_the_last_line_and_nothing_is_drawn_after_it(tmp_path: Path, server) -> None:  # noqa: ANN001
    seen = run_in_terminal(_pre("run", "--model", "openai:fake-model", "--model-args", f"base_url={server.url}",
                                "--limit", "4", "--mode", "choices", "--attack", "stresstest", "--top-k", "1",
                                "--concurrency", "2", "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(tmp_path / "runs")),
                           env=_env(), timeout=300)
    assert seen.returncode == 0, seen.lines[-20:]
    assert b"req/s" in seen.raw  # the progress line was drawn while it ran
    (folder,) = (tmp_path / "runs").iterdir()
    assert seen.lines[-1] == f"pre: results in {folder}"
    assert ERASE_ONLY.match(seen.after_last_line()), repr(seen.after_last_line())
    assert not [line for line in seen.lines if "req/s" in line]  # no progress line left on the screen


def test_after_ctrl_c_the_interrupt_message_is_the_last_line(tmp_path: Path) -> None:
    with FakeOpenAIServer(answer=hashed_text_answer, latency=0.5) as slow:  # interrupted once answers came
        seen = run_in_terminal(_pre("run", "--model", "openai:fake-model", "--model-args", f"base_url={slow.url}",
                                    "--limit", "50", "--mode", "choices", "--concurrency", "1",
                                    "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(tmp_path / "runs")),
                               env=_env(), timeout=300, interrupt_when=lambda received: re.search(rb"requests [1-9]", received) is not None)
    assert seen.returncode == 130, seen.lines[-20:]
    assert seen.lines[-1].startswith("pre: interrupted; "), seen.lines[-5:]
    assert ERASE_ONLY.match(seen.after_last_line()), repr(seen.after_last_line())


def _warning_text(lines: list[str]) -> list[str]:
    return [line for line in lines if re.search(r"Warning\b|warnings\.warn|forward_call\(", line)]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs the [local] extra")
def test_the_readme_first_command_in_a_terminal_shows_no_warning_and_ends_with_the_results_path(tmp_path: Path) -> None:
    # The README's first command, on SmolLM2 and 10 samples to stay quick (the recording under
    # tests/fixtures/terminal is the command as written, on Gemma 3 270M).
    seen = run_in_terminal(_pre("run", "--model", "smollm2-135m-instruct", "--limit", "10", "--mode", "choices",
                                "--attack", "stresstest", "--top-k", "1",
                                "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(tmp_path / "runs")),
                           env=_env(), timeout=540)
    assert seen.returncode == 0, seen.lines[-20:]
    assert not _warning_text(seen.lines), _warning_text(seen.lines)
    (folder,) = (tmp_path / "runs").iterdir()
    assert seen.lines[-1] == f"pre: results in {folder}"
    assert ERASE_ONLY.match(seen.after_last_line())
    import orjson

    for note in orjson.loads((folder / "results.json").read_bytes())["library_warnings"]:
        assert note["said"] or note["category"] in ("FutureWarning", "DeprecationWarning", "PendingDeprecationWarning")


#: The README's first command recorded from an empty model store with a fresh `pip install -e '.[local]'`
#: (scripts/record_terminal.py --empty-model-store --python VENV): in a terminal 120 and 80 columns wide.
RECORDINGS = [("first-command", 120), ("first-command-80", 80)]


def _drawn(raw: bytes) -> list[str]:
    """Every status line drawn in place (the text after each erase, up to the next return or newline)."""
    text = raw.decode("utf-8", errors="replace")
    return [re.split(r"[\r\n]", part, maxsplit=1)[0] for part in text.split("\r\x1b[2K")[1:]]


@pytest.mark.parametrize("name, columns", RECORDINGS)
def test_the_committed_recordings_of_the_readme_first_command(name: str, columns: int) -> None:
    from promptrobust.engine.progress import cell_width

    raw = (FIXTURES / f"{name}.raw").read_bytes()
    shown = (FIXTURES / f"{name}.txt").read_text().splitlines()
    assert render(raw, columns=columns) == shown  # the text is the screen the bytes leave
    assert shown[0].startswith("$ pre run --limit 100 --mode choices --attack stresstest --top-k 1")
    assert not _warning_text(shown)
    assert shown[-1].startswith("pre: results in runs/")
    assert b"Warning" not in raw
    status = [line for line in _drawn(raw) if "elapsed" in line]
    assert status and all(cell_width(line) <= columns - 1 for line in status), max(status, key=len)  # every one fits
    converting = [line for line in status if line.startswith("converted ")]
    assert any(re.search(r"ETA \d\d:\d\d \| \d\d:\d\d elapsed", line) for line in converting), converting[:3]
    assert any("requests" in line and re.search(r"ETA \d\d:\d\d", line) for line in status)
    # what a fresh [local] install prints: no sentence encoder (the [attacks] extra), no word attack proposed
    assert not any("USE angular similarity" in line for line in shown)
    (hint,) = [line for line in shown if line.startswith("next: ")]
    assert "textfooler" not in hint and "bertattack" not in hint


def test_the_committed_log_of_the_readme_first_command_ends_with_the_results_path() -> None:
    """Issue 42 item 4: in a log the status line came after `pre: results in ...`."""
    lines = (FIXTURES / "first-command-log.txt").read_text().splitlines()
    assert lines[0].startswith("$ pre run --limit 100 --mode choices --attack stresstest --top-k 1")
    assert lines[-1].startswith("pre: results in runs/")
    assert any(line.startswith("pre: converting gemma3-270m") for line in lines)
    counts = [i for i, line in enumerate(lines) if re.match(r"pre: requests (\d+)/\1 ", line)]
    table = next(i for i, line in enumerate(lines) if line.startswith("prompt  "))
    assert counts and counts[-1] < table  # the run's last counts come before its results
    assert not _warning_text(lines)
