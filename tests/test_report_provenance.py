"""A report says which software made the numbers it shows: each run folder's promptrobust release,
the commit of the checkout it ran from, and whether that checkout had uncommitted changes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from promptrobust.engine.analysis.report.build import meta_and_notes
from promptrobust.engine.analysis.report.load import load_runs

FIXTURE = Path(__file__).parent / "fixtures" / "run_folders" / "v010" / "runs"


def _with_versions(folder: Path, versions: dict[str, object] | None) -> None:
    summary = folder / "results.json"
    data = json.loads(summary.read_text())
    if versions is None:
        data.pop("versions", None)
    else:
        data["versions"] = versions
    summary.write_text(json.dumps(data))


def test_the_report_names_the_versions_its_runs_were_made_with(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for name in ("20261124-094006_hf-fake-source_rotten_tomatoes", "20261124-094006_hf-fake-source_rotten_tomatoes-2",
                 "20261124-094007_eval_hf-fake-source_rotten_tomatoes"):
        shutil.copytree(FIXTURE / name, runs / name)
    _with_versions(runs / "20261124-094006_hf-fake-source_rotten_tomatoes",
                   {"promptrobust": "0.3.0", "git_commit": "a" * 40, "git_dirty": True})
    _with_versions(runs / "20261124-094006_hf-fake-source_rotten_tomatoes-2",
                   {"promptrobust": "0.3.0", "git_commit": None, "git_dirty": None})  # an installed copy
    _with_versions(runs / "20261124-094007_eval_hf-fake-source_rotten_tomatoes", None)  # written before versions

    data = load_runs([runs])
    assert data.made_with == ["promptrobust 0.3.0", "promptrobust 0.3.0 at aaaaaaaaaa with uncommitted changes"]
    meta, _ = meta_and_notes(data, [])
    assert "made with: promptrobust 0.3.0, promptrobust 0.3.0 at aaaaaaaaaa with uncommitted changes" in meta


def test_folders_that_say_nothing_of_their_versions_add_no_line(tmp_path: Path) -> None:
    data = load_runs([FIXTURE])
    assert data.made_with == []
    meta, _ = meta_and_notes(data, [])
    assert not any(line.startswith("made with") for line in meta)
