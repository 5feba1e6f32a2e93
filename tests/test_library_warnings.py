"""Third-party warnings while pre works (issue 31 item 1): a deprecation that will break with a
future transformers is noted once in results.json, not printed over the progress line; tqdm's
notebook notices are silent; another library warning is said once in one line; the user's own
code, promptrobust's own warnings and the user's -W / PYTHONWARNINGS choices are untouched."""

from __future__ import annotations

import io
import sys
import threading
import warnings
from pathlib import Path

import pytest

from promptrobust.engine.progress import StreamReporter, library_warnings, reporting
from promptrobust.engine.progress.library_warnings import PASS, RECORD, SAY, SILENT, capture, classify, noted

TORCH_MODULE = "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py"
TQDM_AUTO = "/venv/lib/python3.11/site-packages/tqdm/auto.py"
SOMELIB = "/venv/lib/python3.11/site-packages/somelib/core.py"
#: transformers 5.24's words, as its deprecate_kwarg writes them (raised from torch's Module.__call__).
PAST_KEY_VALUES = ("`past_key_values` is deprecated and will be removed in version 5.40.0 for `{}.forward`. "
                   "Use `cache` instead.")


class _TqdmWarning(Warning):
    pass


_TqdmWarning.__name__ = "TqdmWarning"


@pytest.fixture(autouse=True)
def _fresh_notes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(library_warnings, "_noted", {})
    monkeypatch.setattr(sys, "warnoptions", [])
    monkeypatch.delenv("PRE_DEBUG", raising=False)


def _warn(message: str, category: type[Warning], filename: str) -> None:
    """A warning raised from ``filename``, as Python's default filters show it (no registry: every time)."""
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.warn_explicit(message, category, filename, 1)


def test_each_kind_of_warning_is_sorted_by_where_it_comes_from() -> None:
    action, note = classify(PAST_KEY_VALUES.format("LlamaModel"), FutureWarning, TORCH_MODULE)
    assert action == RECORD and note is not None and not note.said
    assert note.library == "transformers" and "past_key_values" in note.text and "5.40.0" in note.text
    assert "update promptrobust" in note.text and note.warning.startswith("`past_key_values` is deprecated")
    assert classify("IProgress not found. Please update jupyter and ipywidgets.", _TqdmWarning, TQDM_AUTO)[0] == SILENT
    action, note = classify("weights were tied\nsecond line", UserWarning, SOMELIB)
    assert action == SAY and note is not None and note.text == "somelib: weights were tied"
    assert classify("old api", DeprecationWarning, SOMELIB)[0] == RECORD
    # The user's code, the standard library and promptrobust itself (installed or a checkout) pass.
    assert classify("mine", UserWarning, "/home/me/notebook.py") == (PASS, None)
    assert classify("ours", UserWarning, "/venv/lib/python3.11/site-packages/promptrobust/engine/x.py") == (PASS, None)
    assert classify("ours", UserWarning, str(Path(library_warnings.__file__))) == (PASS, None)


def test_inside_a_run_a_deprecation_is_noted_once_and_nothing_reaches_the_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    out = io.StringIO()
    with reporting(StreamReporter(out, every=0)):
        for cls in ("LlamaModel", "LlamaForCausalLM", "Gemma3ForCausalLM"):
            _warn(PAST_KEY_VALUES.format(cls), FutureWarning, TORCH_MODULE)
        _warn("IProgress not found. Please update jupyter and ipywidgets.", _TqdmWarning, TQDM_AUTO)
    assert out.getvalue() == "" and capsys.readouterr().err == ""
    (note,) = noted()  # the same deprecation from three classes: one note
    assert note["library"] == "transformers" and note["said"] is False and note["category"] == "FutureWarning"


def test_another_library_warning_is_said_once_in_one_line_above_the_status_line() -> None:
    out = io.StringIO()
    with reporting(StreamReporter(out, every=0)):
        _warn("the tokenizer has no pad token\n  return forward_call(*args)", UserWarning, SOMELIB)
        _warn("the tokenizer has no pad token\n  return forward_call(*args)", UserWarning, SOMELIB)
    assert out.getvalue() == "pre: warning: somelib: the tokenizer has no pad token\n"
    assert [n["said"] for n in noted()] == [True]


#: A process that warns from the user's code and from a library inside a run, as a notebook cell would.
USER_AND_LIBRARY = f"""
import warnings
from promptrobust.engine.progress import StreamReporter, reporting
with reporting(StreamReporter(every=0)):
    warnings.warn_explicit("from my own code", UserWarning, "/home/me/analysis.py", 1)
    warnings.warn_explicit({PAST_KEY_VALUES.format("LlamaModel")!r}, FutureWarning, {TORCH_MODULE!r}, 1789)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a filter that raises acts before pre is asked
        try:
            warnings.warn_explicit("strict", UserWarning, {SOMELIB!r}, 2)
        except UserWarning:
            print("raised")
"""


@pytest.mark.parametrize("flags", [[], ["-W", "default"]])
def test_the_users_own_warnings_and_choices_win(flags: list[str]) -> None:
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "PRE_DEBUG")}
    done = subprocess.run([sys.executable, *flags, "-c", USER_AND_LIBRARY], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "raised"
    assert "analysis.py:1: UserWarning: from my own code" in done.stderr  # the user's own: as Python shows it
    deprecation_shown = "module.py:1789: FutureWarning: `past_key_values` is deprecated" in done.stderr
    assert deprecation_shown == bool(flags)  # -W (or PYTHONWARNINGS): the user decides, pre routes nothing


def test_the_router_stays_while_any_capture_is_open_and_leaves_with_the_last() -> None:
    original = warnings.showwarning
    outer = capture()
    outer.__enter__()
    installed = warnings.showwarning
    assert installed is not original
    done = threading.Event()

    def other_thread() -> None:
        with capture():  # a second API call on another thread
            assert warnings.showwarning is installed
        done.set()

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join(timeout=30)
    assert done.is_set() and warnings.showwarning is installed  # the outer capture still routes
    outer.__exit__(None, None, None)
    assert warnings.showwarning is original


def test_results_json_records_the_notes_in_the_one_layout() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    import orjson

    from promptrobust.engine.runs.run_folder import SCHEMA_PATH, ResultsDocument

    with reporting(StreamReporter(io.StringIO(), every=0)):
        _warn(PAST_KEY_VALUES.format("LlamaModel"), FutureWarning, TORCH_MODULE)
    document = ResultsDocument(command=["pre", "run"], models=[], dataset="sst2", measurement=None, configs={},
                               started="2026-01-01T00:00:00+00:00", wall_seconds=1.0).to_json()
    jsonschema.Draft202012Validator(orjson.loads(SCHEMA_PATH.read_bytes())).validate(document)
    (note,) = document["library_warnings"]
    assert note["library"] == "transformers" and "past_key_values" in note["text"]
