"""The [hub] extra's `datasets` range (>=2.19,<4): the paper's script datasets load through
`load_hf_rows` with trust given to them alone; datasets 4, which dropped scripts, is refused
in one line. A local loading script stands in for the hub's (offline machine).

Runs where the [hub] extra is installed (scripts/test.sh installs it); tested on datasets 3.6.0.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

datasets = pytest.importorskip("datasets")

from promptrobust.tasks import hf_data
from promptrobust.tasks.errors import TaskDataError

SCRIPT = textwrap.dedent('''
    import datasets

    class Pairs(datasets.GeneratorBasedBuilder):
        BUILDER_CONFIGS = [datasets.BuilderConfig(name="pairs-en-de")]

        def _info(self):
            return datasets.DatasetInfo(features=datasets.Features({"translation": datasets.Translation(languages=["en", "de"])}))

        def _split_generators(self, dl_manager):
            return [datasets.SplitGenerator(name=datasets.Split.TEST, gen_kwargs={})]

        def _generate_examples(self):
            rows = [("the cat sleeps", "die Katze schläft"), ("good morning", "guten Morgen"), ("thank you", "danke")]
            for i, (en, de) in enumerate(rows):
                yield i, {"translation": {"en": en, "de": de}}
''')


@pytest.fixture
def script_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    folder = tmp_path / "pairs"
    folder.mkdir()
    (folder / "pairs.py").write_text(SCRIPT)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(hf_data, "SCRIPT_DATASETS", hf_data.SCRIPT_DATASETS | {str(folder)})
    return str(folder)


def test_the_installed_datasets_is_in_the_hub_extras_range() -> None:
    import tomllib

    from packaging.requirements import Requirement

    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    (req,) = [Requirement(r) for r in pyproject["project"]["optional-dependencies"]["hub"]]
    assert req.name == "datasets" and req.specifier.contains(datasets.__version__)
    assert not req.specifier.contains("4.0.0") and req.specifier.contains("2.19.0")


def test_a_script_dataset_loads_through_load_hf_rows(script_dataset: str) -> None:
    rows = hf_data.load_hf_rows(script_dataset, "pairs-en-de", "test")
    assert [r["translation"]["en"] for r in rows] == ["the cat sleeps", "good morning", "thank you"]
    assert hf_data.load_hf_rows(script_dataset, "pairs-en-de", "test", take=2)[1]["translation"]["de"] == "guten Morgen"


def test_a_paper_script_dataset_under_datasets_4_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(datasets, "__version__", "4.0.0")
    with pytest.raises(TaskDataError, match=r"datasets 4.0.0 cannot load.*promptrobust\[hub\]") as info:
        hf_data.load_hf_rows("IWSLT/iwslt2017", "iwslt2017-en-de", "test")
    assert "\n" not in str(info.value)
