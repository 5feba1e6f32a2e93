"""Sample selection as the paper takes it (`first` N rows) or a seeded draw, from the CLI,
the Python API and sweeps; recorded in the settings of every result."""

from __future__ import annotations

import textwrap
from pathlib import Path

import orjson
import pytest

from promptrobust.cli.main import main
from promptrobust.engine.measuring.settings import EvaluationSettings
from promptrobust.engine.errors import SettingsError
from promptrobust.testing.fake_openai import FakeOpenAIServer

ROWS = 40


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    # Our own rows, sorted by label (as many label files are): the first rows are all one label.
    path = tmp_path / "reviews.jsonl"
    lines = [orjson.dumps({"sentence": f"review number {i} was {'great' if i < ROWS // 2 else 'dull'}", "label": int(i < ROWS // 2)})
             for i in range(ROWS)]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _sentences(srv: FakeOpenAIServer) -> list[int]:
    """Row numbers of the samples the server was asked about (each sample's last line)."""
    seen = []
    for path, body in srv.bodies:
        if path != "/v1/chat/completions":
            continue
        text = body["messages"][-1]["content"]
        for word in text.split():
            if word.isdigit():
                seen.append(int(word))
    return sorted(set(seen))


@pytest.mark.parametrize("selection", ["first", "seeded"])
def test_cli_sample_selection_picks_rows_and_is_recorded(tmp_path: Path, data_file: Path, selection: str) -> None:
    with FakeOpenAIServer() as srv:
        code = main(["run", "--model", "openai:fake-model", "--model-args", f"base_url={srv.url}", "--dataset", "sst2",
                     "--data-file", str(data_file), "--limit", "6", "--mode", "choices", "--sample-selection", selection,
                     "--prompt-text", "Is this review positive or negative?", "--no-progress",
                     "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(tmp_path / "runs")])
        rows = _sentences(srv)
    assert code == 0
    (folder,) = (tmp_path / "runs").iterdir()
    results = orjson.loads((folder / "results.json").read_bytes())
    assert results["configs"]["measurement"]["sample_selection"] == selection
    if selection == "first":
        assert rows == [0, 1, 2, 3, 4, 5]
    else:
        assert len(rows) == 6 and rows != [0, 1, 2, 3, 4, 5]


def test_api_sample_selection(tmp_path: Path, data_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import promptrobust as pr
    from promptrobust.tasks.base import Prompt

    monkeypatch.setenv("PRE_CACHE_DIR", str(tmp_path))
    with FakeOpenAIServer() as srv:
        result = pr.evaluate(model="openai:fake-model", model_args={"base_url": srv.url}, dataset="sst2",
                             data_file=str(data_file), limit=4, mode="choices", sample_selection="first",
                             prompts=[Prompt("mine", "sst2", "task", "Is this review positive or negative?")])
        rows = _sentences(srv)
    assert rows == [0, 1, 2, 3]
    assert result.settings["sample_selection"] == "first"


def _sample_lines(srv: FakeOpenAIServer) -> set[str]:
    return {line for path, body in srv.bodies if path == "/v1/chat/completions"
            for line in body["messages"][-1]["content"].splitlines() if line.startswith("Sentence: ")}


def test_sweep_sample_selection_takes_the_rows_a_run_takes(tmp_path: Path) -> None:
    with FakeOpenAIServer() as srv:
        config = tmp_path / "grid.toml"
        config.write_text(textwrap.dedent(f"""
            [sweep]
            name = "sel"
            output_dir = "{tmp_path / 'sweeps'}"
            limit = 5
            mode = "choices"
            top_k = 1
            budget = 2
            sample_selection = "first"
            cache = "{tmp_path / 's.sqlite'}"

            [grid]
            models = ["openai:fake-model"]
            datasets = ["rotten_tomatoes"]
            attacks = ["checklist"]

            [models."openai:fake-model"]
            model_args = "base_url={srv.url}"
        """))
        assert main(["sweep", str(config), "--quiet"]) == 0
        from_sweep = _sample_lines(srv)
        srv.bodies.clear()
        for selection in ("first", "seeded"):
            assert main(["run", "--model", "openai:fake-model", "--model-args", f"base_url={srv.url}", "--limit", "5",
                         "--mode", "choices", "--sample-selection", selection, "--no-progress",
                         "--cache", str(tmp_path / f"{selection}.sqlite"), "--output-dir", str(tmp_path / "runs")]) == 0
            if selection == "first":
                from_run = _sample_lines(srv)
                srv.bodies.clear()
        seeded = _sample_lines(srv)
    assert len(from_sweep) == 5 and from_sweep == from_run != seeded
    records = [orjson.loads(x) for x in (tmp_path / "sweeps" / "sel" / "results.jsonl").read_bytes().splitlines()]
    assert records and all(r["sample_selection"] == "first" for r in records)


def test_bad_selection_is_one_line() -> None:
    with pytest.raises(SettingsError, match="sample_selection must be 'seeded' or 'first'"):
        EvaluationSettings(sample_selection="last")
