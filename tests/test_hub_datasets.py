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


# -- the hub switched off or out of reach (issue 42 item 5) ---------------------------------------


@pytest.fixture
def closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once closed: connections are refused


@pytest.fixture
def empty_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets-cache"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)


def test_an_unreachable_hub_is_one_line_without_retries(closed_port: int, empty_caches: None, monkeypatch, capsys) -> None:  # noqa: ANN001
    """Offline, an lm-eval command with a hub task printed ~50 s of huggingface_hub's raw
    `Retrying in 1s [Retry 1/5]` lines and a 529-character error: now the hub is looked at once,
    and the load goes to the local cache only, failing in one line."""
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port}")
    assert hf_data.hub_reachable()[0] is False
    with pytest.raises(TaskDataError) as info:
        hf_data.load_hf_rows("nyu-mll/glue", "sst2", "validation")
    message = str(info.value)
    assert "\n" not in message and len(message) < 400, message
    assert f"the Hugging Face hub cannot be reached from here (127.0.0.1: " in message and "local cache" in message
    err = capsys.readouterr().err
    assert "Retry" not in err and "thrown while requesting" not in err, err


def test_a_switched_off_hub_says_which_variable_switched_it_off(empty_caches: None, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    assert hf_data.hub_reachable() == (False, "is switched off here (HF_DATASETS_OFFLINE is set)")
    with pytest.raises(TaskDataError, match=r"hub is switched off here \(HF_DATASETS_OFFLINE is set\)"):
        hf_data.load_hf_rows("nyu-mll/glue", "sst2", "validation")


def test_a_hub_that_answers_is_reachable(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
            monkeypatch.delenv(name, raising=False)
        assert hf_data.hub_reachable() == (True, "")


def test_what_the_hub_libraries_log_while_loading_is_said_once_per_kind(tmp_path: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    folder = tmp_path / "noisy"
    folder.mkdir()
    # datasets read its cache folder's variable at import: a script of its own (a constant naming this
    # test's folder; its hash leaves comments out) is never answered from an earlier run's cache
    (folder / "noisy.py").write_text(f"RUN = {str(tmp_path)!r}\n" + SCRIPT.replace(
        "    def _generate_examples(self):\n",
        "    def _generate_examples(self):\n"
        "        import logging\n"
        "        for n in range(1, 4):\n"
        "            logging.getLogger('huggingface_hub.utils._http').warning(f'Retrying in {n}s [Retry {n}/5].')\n"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(hf_data, "SCRIPT_DATASETS", hf_data.SCRIPT_DATASETS | {str(folder)})
    assert len(hf_data.load_hf_rows(str(folder), "pairs-en-de", "test")) == 3
    err = capsys.readouterr().err
    assert err.count("pre: warning: huggingface_hub: requests to the Hugging Face hub failed and were retried") == 1, err
    assert "Retrying in" not in err
