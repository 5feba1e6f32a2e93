"""The command recorded in results.json hides what the backends declare secret, not what merely looks
like a secret by its name (issue 43 item 6: ``tokenized_requests=<redacted>``)."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from promptrobust.engine.runs.run_folder import REDACTED, redact_argv
from promptrobust.testing.fake_openai import FakeOpenAIServer

PASSWORD = "PwOfAlice-8472"
KEY = "QueryKey-5521-zz"


def test_model_arguments_are_judged_by_their_declaration() -> None:
    shown = redact_argv(["pre", "run", "--model", "openai:m", "--model-args",
                         f"base_url=http://alice:{PASSWORD}@h:8000/v1?api-key={KEY},tokenized_requests=False,"
                         "num_concurrent=4,max_connections=8,tokenizer_backend=None",
                         f"--model_args=api_key_env=MY_KEY,max_tokens=3", "--api-key", "sk-not-shown", "--token=abc"])
    text = " ".join(shown)
    assert PASSWORD not in text and KEY not in text and "sk-not-shown" not in text and "abc" not in text
    # declared and not secret: lm-eval's spelling and the backend's own arguments keep their values
    for kept in ("tokenized_requests=False", "num_concurrent=4", "max_connections=8", "tokenizer_backend=None",
                 "api_key_env=MY_KEY"):
        assert kept in text, text
    assert f"http://{REDACTED}@h:8000/v1?api-key={REDACTED}" in text
    assert f"max_tokens={REDACTED}" in text  # declared by no backend: judged by its name, as before


def test_an_argument_an_options_value_declares_secret_is_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    from promptrobust.engine.serving import registry
    from promptrobust.engine.serving.backends.base import Backend
    from promptrobust.engine.serving.model_args import Text, check_fields, model_arg
    from promptrobust.engine.serving.registration import BackendRegistration
    from promptrobust.engine.safe_io.redact import redact_text

    @dataclass(frozen=True)
    class VaultOptions:
        region: str = model_arg("eu", Text())
        passphrase: str | None = model_arg(None, Text(optional=True), secret=True)

        def __post_init__(self) -> None:
            check_fields(self)

    def build(spec: object, options: VaultOptions) -> Backend:
        raise AssertionError("not built here")

    vault = BackendRegistration(name="vault", options=VaultOptions, build=build, description="a test backend")
    monkeypatch.setitem(registry._REGISTERED, "vault", vault)
    monkeypatch.setattr(registry, "_LOADED", {})
    assert registry.model_argument_secrecy()["passphrase"] is True and registry.model_argument_secrecy()["region"] is False
    shown = " ".join(redact_argv(["pre", "run", "--model", "vault:x", "--model-args", "region=us,passphrase=open-sesame-991"]))
    assert "region=us" in shown and f"passphrase={REDACTED}" in shown and "open-sesame-991" not in shown
    # the value itself is remembered once the options are made: no message, log or stored setting shows it
    registry.check_values(registry.resolve_model("vault:x", {"passphrase": "open-sesame-991"}))
    assert "open-sesame-991" not in redact_text("config: passphrase is open-sesame-991")
    with pytest.raises(registry.ModelArgsError) as err:  # a bad secret is never repeated, not even a piece
        registry.check_values(registry.resolve_model("vault:x", {"passphrase": 12345678}))
    assert "12345678" not in str(err.value) and "passphrase" in str(err.value)


def test_a_pasted_lm_eval_command_records_its_arguments_and_no_credential(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from promptrobust.cli.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FakeOpenAIServer() as srv:
        url = srv.url.replace("http://", f"http://alice:{PASSWORD}@")
        command = (f"--model local-completions --tasks rotten_tomatoes --model_args model=fake-model,base_url={url}/completions,"
                   "num_concurrent=2,tokenized_requests=False --limit 4 --prompt sst2-task-01 --mode choices "
                   "--output_path out --no-progress --no-cache")
        assert main(["run", *shlex.split(command)]) == 0
    capsys.readouterr()
    (folder,) = (tmp_path / "out").iterdir()
    recorded = " ".join(json.loads((folder / "results.json").read_text(encoding="utf-8"))["command"])
    assert "tokenized_requests=False" in recorded and "num_concurrent=2" in recorded, recorded
    assert "model=fake-model" in recorded and f"{REDACTED}@127.0.0.1" in recorded
    assert all(PASSWORD not in p.read_text(encoding="utf-8", errors="replace") for p in folder.rglob("*") if p.is_file())
