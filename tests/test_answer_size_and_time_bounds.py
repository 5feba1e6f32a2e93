"""Issue 20: an answer is bounded in size and in time, and both bounds are transient failures.
Issue 32: and in depth; an answer nested beyond any real one is one line at once, not retried.

A raw socket server on 127.0.0.1 plays the hostile server: a 200 MB body
(with and without a Content-Length), headers sent one byte at a time, a model
list nested 200,000 levels deep; the fake OpenAI server sends nested answers.
The limits in the tests are small so the tests stay fast; the code path is
the one the defaults take.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from promptrobust.engine.serving.backends.base import BadAnswerError, TransientBackendError
from promptrobust.engine.serving.backends.openai import OpenAIBackend, OpenAIOptions
from promptrobust.engine.serving.backends.openai.answers import MAX_BODY_MB, MAX_JSON_DEPTH, BodyTooLarge, json_depth
from promptrobust.engine.serving.cache import ScoreCache
from promptrobust.engine.serving.retry import RetryPolicy, call_with_retries
from promptrobust.engine.serving.scheduler import Scheduler
from promptrobust.engine.serving.types import Request, request_key
from promptrobust.testing.fake_openai import FakeOpenAIServer, FaultPlan

MODELS = json.dumps({"object": "list", "data": [{"id": "fake-model", "object": "model"}]}).encode()
GOOD = json.dumps({"choices": [{"index": 0, "text": "positive", "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 3, "completion_tokens": 1}}).encode()
BIG = 200 * 1024 * 1024


class RawServer:
    """HTTP/1.1 by hand: GET /models answers normally; each POST is handled by ``post(conn)``
    (a list, consumed in order; the last one repeats). Counts the body bytes it managed to send."""

    def __init__(self, posts: list[Callable[[socket.socket], None]], models: bytes = MODELS) -> None:
        self.posts = posts
        self.models = models
        self.sent = 0
        self.stop = threading.Event()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(30)
            try:
                head = b""
                while b"\r\n\r\n" not in head:
                    part = conn.recv(65536)
                    if not part:
                        return
                    head += part
                lines = head.split(b"\r\n")
                length = next((int(ln.split(b":")[1]) for ln in lines if ln.lower().startswith(b"content-length")), 0)
                body = head.split(b"\r\n\r\n", 1)[1]
                while len(body) < length:
                    body += conn.recv(65536)
                if lines[0].startswith(b"GET"):
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                                 + f"Content-Length: {len(self.models)}\r\n\r\n".encode() + self.models)
                    return
                post = self.posts.pop(0) if len(self.posts) > 1 else self.posts[0]
                post(conn)
            except OSError:
                pass  # the client hung up: that is what the tests want

    def huge(self, *, with_length: bool) -> Callable[[socket.socket], None]:
        def send(conn: socket.socket) -> None:
            length = f"Content-Length: {BIG}\r\n" if with_length else ""
            conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{length}Connection: close\r\n\r\n".encode())
            chunk = b'{"choices": [{"text": "' + b"a" * (1 << 20)
            while self.sent < BIG and not self.stop.is_set():
                conn.sendall(chunk)
                self.sent += len(chunk)
        return send

    def dripping(self, seconds_per_byte: float, give_up_after: float) -> Callable[[socket.socket], None]:
        """Headers one byte at a time; after ``give_up_after`` seconds the rest at once (so a client
        without a total deadline gets an answer and the test fails, instead of hanging)."""
        def send(conn: socket.socket) -> None:
            answer = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                      + b"X-Padding: " + b"p" * 200 + b"\r\n"
                      + f"Content-Length: {len(GOOD)}\r\n\r\n".encode() + GOOD)
            started = time.monotonic()
            for i in range(len(answer)):
                if time.monotonic() - started > give_up_after or self.stop.is_set():
                    conn.sendall(answer[i:])
                    return
                conn.sendall(answer[i : i + 1])
                time.sleep(seconds_per_byte)
        return send

    @staticmethod
    def good(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                     + f"Content-Length: {len(GOOD)}\r\n\r\n".encode() + GOOD)

    def __enter__(self) -> RawServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.sock.close()
        self.thread.join(timeout=5)


@pytest.fixture(autouse=True)
def _no_key(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    yield


REQ = Request("generate", prompt="Sentence:\na great film")


def test_the_default_body_limit_is_a_few_mib():
    assert 1 <= MAX_BODY_MB <= 16
    assert OpenAIBackend("m", OpenAIOptions(base_urls=["http://127.0.0.1:9/v1"])).max_body_bytes == int(MAX_BODY_MB * 2**20)
    with pytest.raises(ValueError, match="max_body_mb"):
        OpenAIBackend("m", OpenAIOptions(base_urls=["http://127.0.0.1:9/v1"], max_body_mb=0))


@pytest.mark.parametrize("with_length", [True, False])
async def test_a_200_mb_body_is_refused_as_transient_after_reading_at_most_the_limit(with_length):
    with RawServer([]) as srv:
        srv.posts = [srv.huge(with_length=with_length), srv.good]
        # scoring fixed: no start-up path detection takes the test server's scripted answers
        b = OpenAIBackend("fake-model", OpenAIOptions(base_urls=[srv.url], api="completions", max_body_mb=1, timeout=60, scoring="top_logprobs"))
        await b.start()
        with pytest.raises(BodyTooLarge, match="body over the 1 MiB limit|MiB over the 1 MiB limit") as err:
            await b.complete(REQ)
        assert isinstance(err.value, TransientBackendError) and "\n" not in str(err.value)
        assert "max_body_mb" in str(err.value)
        # The client hung up long before 200 MB (what got out is the limit plus socket buffers).
        time.sleep(0.2)
        assert srv.sent < 64 * 2**20
        assert (await b.complete(REQ)).text == "positive"  # the next answer is read normally
        await b.close()


async def test_headers_a_byte_at_a_time_are_cut_off_by_the_total_deadline_and_retried():
    with RawServer([]) as srv:
        # 0.05 s a byte keeps every single read far below the 2 s read timeout; the whole
        # answer would take about 20 s, so only a deadline over the whole request stops it.
        srv.posts = [srv.dripping(0.05, give_up_after=30.0), srv.good]
        b = OpenAIBackend("fake-model", OpenAIOptions(base_urls=[srv.url], api="completions", timeout=2.0, scoring="top_logprobs"))
        await b.start()
        errors: list[str] = []
        fast = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.02, jitter=0.0)
        out = await call_with_retries(lambda: b.complete(REQ), fast, on_retry=lambda a, e, d: errors.append(str(e)))
        assert out.text == "positive"
        assert len(errors) == 1 and "timed out after 2s" in errors[0] and "deadline" in errors[0]
        await b.close()


def test_max_body_mb_is_a_model_argument():
    from promptrobust.engine.serving.registry import build_backend, parse_model_args, resolve_model

    spec = resolve_model("openai:fake-model", parse_model_args("base_url=http://127.0.0.1:9/v1,max_body_mb=32"))
    assert build_backend(spec).max_body_bytes == 32 * 2**20


# -- issue 32 item 3: answers parsed with bounded depth -------------------------------------------------

NESTED = b"[" * 200_000 + b"]" * 200_000  # 400 KB, far under the size limit


def test_the_depth_of_an_answer_is_read_without_parsing_it():
    assert json_depth(b'{"choices": [{"text": "[[[{{ \\" ]]", "logprobs": {"content": [{"top_logprobs": []}]}}]}') == 7
    assert json_depth(NESTED) == 200_000 and json_depth(b'"just text"') == 0 and json_depth(b"") == 0
    assert json_depth(b'"' + b'\\"[' * 500_000) == 0  # one endless string of escaped quotes: text, and linear to read
    assert MAX_JSON_DEPTH >= 16  # room above every real answer (about 7 levels)


async def test_a_deeply_nested_answer_is_one_line_at_once_never_a_traceback():
    with FakeOpenAIServer(model="fake-model") as srv:
        b = OpenAIBackend("fake-model", OpenAIOptions(base_urls=[srv.url], api="completions", scoring="top_logprobs"))
        await b.start()
        srv.script("nested_json")
        with pytest.raises(BadAnswerError) as err:
            await b.complete(REQ)
        message = str(err.value)
        assert "\n" not in message and "nested 200000 levels deep" in message and srv.url in message
        assert not isinstance(err.value, TransientBackendError)
        assert (await b.complete(REQ)).text == "positive"  # the next answer is read normally
        await b.close()


async def test_a_server_that_sends_nested_answers_fails_the_request_once_without_retries(tmp_path):
    cache = ScoreCache(tmp_path / "c.sqlite")
    with FakeOpenAIServer(model="fake-model", faults=FaultPlan({"nested_json": 1.0})) as srv:
        b = OpenAIBackend("fake-model", OpenAIOptions(base_urls=[srv.url], api="completions", scoring="top_logprobs", logprobs=True))
        async with Scheduler(b, cache=cache) as sched:  # the default 7 retries
            with pytest.raises(BadAnswerError, match="nested"):
                await sched.submit(REQ)
            assert sched.stats.retries == 0
        assert srv.count("/v1/completions") == 1
    assert cache.get_many([request_key(b.identity, REQ)]) == {}
    cache.close()


def test_pre_run_against_a_server_of_nested_answers_exits_2_with_one_line(tmp_path, capsys):
    from promptrobust.cli.main import main

    with FakeOpenAIServer(model="fake-model", faults=FaultPlan({"nested_json": 1.0})) as srv:
        code = main(["run", "--model", "openai:fake-model", "--model-args", f"base_url={srv.url}", "--limit", "4",
                     "--no-cache", "--output-dir", str(tmp_path / "runs"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "nested 200000 levels deep" in err[0]
    assert "Traceback" not in err[0] and "RecursionError" not in err[0]


async def test_a_nested_model_list_is_no_reason_to_stop(caplog):
    with RawServer([], models=NESTED) as srv:
        srv.posts = [srv.good]
        b = OpenAIBackend("fake-model", OpenAIOptions(base_urls=[srv.url], api="completions", scoring="top_logprobs"))
        with caplog.at_level(logging.WARNING):
            await b.start()
        assert "nested 200000 levels deep" in caplog.text and "carrying on" in caplog.text
        assert (await b.complete(REQ)).text == "positive"
        await b.close()
