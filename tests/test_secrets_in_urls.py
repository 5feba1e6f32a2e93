"""Issue 20: credentials in base URLs and echoed Authorization headers never reach a file or a message."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest

from promptrobust.engine.serving.backends.openai import OpenAIBackend, OpenAIOptions
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
    b = OpenAIBackend("m", OpenAIOptions(base_urls=["http://127.0.0.1:9/v1"]))
    basic = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    message = b._redact(f"bad header Authorization: Basic {basic} for http://alice:{PASSWORD}@x/v1?key={KEY}")
    assert basic not in message and PASSWORD not in message and KEY not in message
    with pytest.raises(ValueError) as err:
        OpenAIBackend("m", OpenAIOptions(base_urls=[f"http://alice:{PASSWORD}@127.0.0.1:notaport/v1?api-key={KEY}"]))
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


# -- issue 32 item 4: a password in a base URL, in every form it can take --------------------------------

USER, SECRET_PW = "alice", "PASSWORD-xyz-98765"
BASIC = base64.b64encode(f"{USER}:{SECRET_PW}".encode()).decode()  # what httpx sends for user-info


def every_form(user: str, password: str) -> list[str]:
    """Each way the password may show: plain, percent-encoded, the Basic credential, and every 8-character
    piece of the Basic credential and of the password's base64 at each alignment (as the issue's leak was)."""
    from urllib.parse import quote

    basic = base64.b64encode(f"{user}:{password}".encode()).decode()
    aligned = [base64.b64encode(f"{pad}{password}".encode()).decode() for pad in ("", "x", "xy")]
    pieces = [s[i : i + 8] for s in [basic.rstrip("="), *(a[4:-4] for a in aligned)] for i in range(len(s) - 7)]
    return [password, quote(password, safe=""), basic, *pieces]


def assert_clean(text: str | bytes, user: str = USER, password: str = SECRET_PW) -> None:
    raw = text.encode() if isinstance(text, str) else text
    leaks = [form for form in every_form(user, password) if form.encode() in raw]
    assert not leaks, leaks


def test_the_issues_basic_header_leak_is_starred_in_every_form():
    from urllib.parse import quote

    from promptrobust.engine.safe_io.redact import register_url_credentials

    register_url_credentials(f"http://{USER}:{SECRET_PW}@host.example/v1")
    leak = f"raw header Basic {BASIC} key={BASIC[3:]}"  # the issue's echo: pY2U6UEFTU1dPUkQteHl6LTk4NzY1
    assert BASIC[3:].startswith("pY2U6UEFTU1dPUkQteHl6LTk4NzY1")
    assert_clean(redact_text(leak))
    for form in every_form(USER, SECRET_PW):
        out = redact_text(f"the server said: {form} (HTTP 401)")
        assert form not in out and out.startswith("the server said: ") and out.endswith(" (HTTP 401)")
    assert_clean(redact_text(f"percent-encoded: {quote(SECRET_PW, safe='')}, url-safe: {BASIC.replace('+', '-')}"))
    prose = "a review of 12 words about password managers: no piece of 8 characters of a secret"
    assert redact_text(prose) == prose


def test_a_percent_encoded_password_is_known_in_both_spellings():
    from promptrobust.engine.safe_io.redact import register_url_credentials

    password = "p@ss/Word-771:x"
    register_url_credentials(f"https://bob:{'p%40ss%2FWord-771%3Ax'}@10.1.2.3:8443/v1")
    sent = base64.b64encode(f"bob:{password}".encode()).decode()  # the client decodes the user-info
    for text in (password, "p%40ss%2FWord-771%3Ax", sent, sent[5:17]):
        assert "Word-771" not in redact_text(text) and sent[5:17] not in redact_text(text)


def test_log_records_are_redacted_once_a_secret_is_known(caplog):
    import logging

    from promptrobust.engine.safe_io.redact import register_url_credentials

    register_url_credentials(f"http://{USER}:{SECRET_PW}@host.example/v1")
    with caplog.at_level(logging.WARNING):
        logging.getLogger("some.library").warning("upstream echoed %s and %s", f"Basic {BASIC}", BASIC[3:])
    assert "upstream echoed" in caplog.text
    assert_clean(caplog.text)


def _files(*roots: Path) -> list[Path]:
    return [p for root in roots if root.exists() for p in root.rglob("*") if p.is_file()]


def test_a_server_echoing_the_basic_header_leaks_no_password_into_any_output(tmp_path):
    """Issue 32 D: base_url with user-info, a server that echoes the Authorization header in its 401:
    the password is in no message, log, errors.jsonl, result or cache, in any form."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PRE_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("OPENAI_API_KEY", None)
    with FakeOpenAIServer(model="fake-model", echo_auth=True) as srv:
        url = srv.url.replace("http://", f"http://{USER}:{SECRET_PW}@")
        run = _pre("run", "--model", "openai:fake-model", "--model-args", f"base_url={url}", "--dataset", "rotten_tomatoes",
                   "--limit", "4", "--prompt", "sst2-task-01", "--attack", "checklist", "--top-k", "1", "--budget", "2",
                   "--output-dir", str(tmp_path / "out"), "--no-progress", env=env)
        config = tmp_path / "sweep.toml"
        config.write_text(f'[sweep]\nname = "s"\noutput_dir = "{tmp_path / "sweeps"}"\nlimit = 4\ntop_k = 1\nbudget = 2\n'
                          f'cache = "{tmp_path / "cache" / "sweep.sqlite"}"\n[grid]\nmodels = ["openai:fake-model"]\n'
                          f'datasets = ["rotten_tomatoes"]\nattacks = ["checklist"]\n'
                          f'[models."openai:fake-model"]\nmodel_args = "base_url={url}"\n')
        sweep = _pre("sweep", str(config), env=env)
        echoed = srv.count("/v1/chat/completions") + srv.count("/v1/completions")
    assert echoed >= 2  # the server did echo the header, to both commands
    assert run.returncode == 2 and "HTTP 401" in run.stderr
    assert sweep.returncode != 0 and "HTTP 401" in sweep.stderr + sweep.stdout
    errors = [p for p in _files(tmp_path / "sweeps") if p.name == "errors.jsonl"]
    assert errors and "HTTP 401" in errors[0].read_text()  # the failure is recorded, without the password
    for text in (run.stdout, run.stderr, sweep.stdout, sweep.stderr):
        assert_clean(text)
    written = _files(tmp_path / "out", tmp_path / "sweeps", tmp_path / "cache")
    assert any(p.name in ("results.json", "config.json") for p in written)
    for p in written:
        assert_clean(p.read_bytes())


# -- issue 41 item 9: the whole header value, not the pieces a fragment match leaves -----------------------

def test_an_echoed_basic_header_is_masked_whole_leaving_no_piece_of_user_or_password():
    """base_url=http://alice:PWSECRET456@... and a server echoing the Basic header and a slice of it: the
    8-character pieces of the credential used to be starred, leaving its edges (``pY2U6***NTY=``: ``NTY=``
    is the password's last two characters, ``Y2U6`` part of the user name)."""
    from promptrobust.engine.safe_io.redact import register_url_credentials

    register_url_credentials("http://alice:PWSECRET456@10.0.0.9:8000/v1")
    basic = base64.b64encode(b"alice:PWSECRET456").decode()
    echoed = f"unauthorized: raw header Basic {basic} key={basic[3:]} (HTTP 401)"
    out = redact_text(echoed)
    pieces = {basic[i: i + 4] for i in range(len(basic) - 3)}
    assert not [p for p in pieces if p in out], out
    assert out.startswith("unauthorized: raw header ") and out.endswith(" (HTTP 401)")
