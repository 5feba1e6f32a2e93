"""Issue 20: credentials in base URLs and echoed Authorization headers never reach a file or a message."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest

from promptrobust.engine.serving.backends.openai import OpenAIBackend
from promptrobust.engine.safe_io.redact import redact_text, redact_url, scrub
from promptrobust.testing.fake_openai import FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[1]
PASSWORD = "hunter2Pass"
KEY = "QK7zSECRETq0"


@pytest.mark.parametrize("url, shown", [
    (f"http://alice:{PASSWORD}@10.0.0.1:8000/v1", "http://10.0.0.1:8000/v1"),
    (f"https://h.example/openai?api-key={KEY}&api-version=2024-06-01",
     "https://h.example/openai?api-key=***&api-version=2024-06-01"),
    (f"https://h/v1?token={KEY}&sig={KEY}&code=7", "https://h/v1?token=***&sig=***&code=7"),
    (f"http://bob:{PASSWORD}@127.0.0.1:notaport/v1?access_token={KEY}", "http://127.0.0.1:notaport/v1"),
])
def test_a_url_loses_user_info_and_key_like_parameters(url, shown):
    assert redact_url(url) == shown
    assert redact_text(f"cannot reach {url} now") == f"cannot reach {shown} now"


@pytest.mark.parametrize("scheme", ["Bearer", "Basic", "Digest", "Token", "ApiKey"])
def test_every_authorization_scheme_is_redacted(scheme):
    basic = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    for text in (f"Authorization: {scheme} {basic}", f'{{"authorization": "{scheme} {basic}"}}',
                 f"the server said: got {scheme} {basic} which is wrong"):
        out = redact_text(text)
        assert basic not in out and "***" in out
    assert redact_text("Basic sentiment classification") == "Basic sentiment classification"  # prose stays


def test_scrub_stars_credential_fields_but_keeps_names_that_only_look_alike():
    data = {"model_args": f"base_url=http://u:{PASSWORD}@h/v1", "api_key": KEY, "sort_key": "pdr",
            "api_key_env": "OPENAI_API_KEY", "nested": [{"password": PASSWORD}]}
    out = scrub(data)
    assert PASSWORD not in str(out) and KEY not in str(out)
    assert out["sort_key"] == "pdr" and out["api_key_env"] == "OPENAI_API_KEY"


def test_the_backend_redacts_an_echoed_basic_header_and_url(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    b = OpenAIBackend("m", base_urls=["http://127.0.0.1:9/v1"])
    basic = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    message = b._redact(f"bad header Authorization: Basic {basic} for http://alice:{PASSWORD}@x/v1?key={KEY}")
    assert basic not in message and PASSWORD not in message and KEY not in message
    with pytest.raises(ValueError) as err:
        OpenAIBackend("m", base_urls=[f"http://alice:{PASSWORD}@127.0.0.1:notaport/v1?api-key={KEY}"])
    assert PASSWORD not in str(err.value) and KEY not in str(err.value)


def _pre(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "promptrobust.cli.main", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_pre_run_stores_and_prints_no_credential_from_the_base_url(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PRE_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("OPENAI_API_KEY", None)
    with FakeOpenAIServer(model="fake-model") as srv:
        url = srv.url.replace("http://", f"http://alice:{PASSWORD}@")
        done = _pre("run", "--model", "openai:fake-model", "--model-args", f"base_url={url}",
                    "--dataset", "rotten_tomatoes", "--limit", "4", "--prompt", "sst2-task-01", "--attack", "checklist",
                    "--top-k", "1", "--budget", "2", "--output-dir", str(tmp_path / "out"), "--no-progress", env=env)
        assert done.returncode == 0, done.stderr
        bad = _pre("run", "--model", "openai:fake-model", "--model-args",
                   f"base_url=http://alice:{PASSWORD}@127.0.0.1:notaport/v1?api-key={KEY}",
                   "--dataset", "rotten_tomatoes", "--limit", "4", "--output-dir", str(tmp_path / "out2"), env=env)
    assert bad.returncode == 2 and "bad port" in bad.stderr
    for text in (done.stdout, done.stderr, bad.stdout, bad.stderr):
        assert PASSWORD not in text and KEY not in text
    written = [p for p in (tmp_path / "out").rglob("*") if p.is_file()] + list((tmp_path / "cache").rglob("*"))
    assert any(p.name == "config.json" for p in written)
    for p in written:
        raw = p.read_bytes()
        assert PASSWORD.encode() not in raw and KEY.encode() not in raw, p
