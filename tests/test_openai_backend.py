"""OpenAIBackend against a real HTTP server on 127.0.0.1 (promptrobust.testing.FakeOpenAIServer)."""

from __future__ import annotations

import asyncio
import math
import logging
import random
import socket

import pytest

from promptrobust.engine.serving.backends.base import BackendError, BackendUnavailable, TransientBackendError
from promptrobust.engine.serving.backends.openai import LogprobsUnsupported, OpenAIBackend, OpenAIOptions
from promptrobust.engine.serving.backends.openai.answers import answer_text
from promptrobust.engine.serving.backends.openai.backend import PROBE_ANSWERS
from promptrobust.engine.serving.backends.openai.endpoints import clean_url
from promptrobust.engine.serving.retry import RetryPolicy, call_with_retries
from promptrobust.engine.serving.types import ChatMessage, Decoding, Request
from promptrobust.testing.fake_openai import FakeOpenAIServer

SECRET = "sk-test-Abc123SECRETxyz789"
FAST = RetryPolicy(max_attempts=6, base_delay=0.01, max_delay=0.05, jitter=0.0)


@pytest.fixture
def server():
    with FakeOpenAIServer(model="fake-model") as srv:
        yield srv


@pytest.fixture(autouse=True)
def _no_ambient_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("PRE_TEST_KEY", raising=False)


async def started(url: str | list[str], **kw) -> OpenAIBackend:
    urls = [url] if isinstance(url, str) else url
    b = OpenAIBackend("fake-model", OpenAIOptions(base_urls=urls, **kw))
    await b.start()
    return b


def chat(text: str) -> tuple[ChatMessage, ...]:
    return (ChatMessage("system", "Classify the sentiment."), ChatMessage("user", f"Sentence:\n{text}"))


class Sleeps:
    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, s: float) -> None:
        self.waits.append(s)


# -- retries against real failures ------------------------------------------------

async def test_429_with_retry_after_is_retried_and_honoured(server):
    b = await started(server.url)
    server.script("429:2")
    sleeps = Sleeps()
    req = Request("generate", messages=chat("a good film"))
    policy = RetryPolicy(base_delay=0.01, max_delay=5.0, jitter=0.0)
    out = await call_with_retries(lambda: b.complete(req), policy, sleep=sleeps, rng=random.Random(0))
    assert out.text == "positive"
    assert sleeps.waits == [2.0]  # Retry-After is a floor even though backoff is 0.01 s
    assert server.count("/v1/chat/completions") == 2
    await b.close()


async def test_retry_after_as_http_date_is_parsed(server):
    b = await started(server.url)
    server.script("503:date:30")
    with pytest.raises(TransientBackendError) as err:
        await b.complete(Request("generate", prompt="x"))
    assert err.value.status == 503
    assert 25.0 <= err.value.retry_after <= 31.0
    await b.close()


async def test_500_slow_and_dropped_connection_are_all_retried(server):
    b = await started(server.url, timeout=0.3)
    server.script("500", "slow:2", "drop", "502")
    errors: list[str] = []
    req = Request("generate", prompt="Sentence:\nwhat a great day")
    out = await call_with_retries(
        lambda: b.complete(req), FAST, on_retry=lambda a, e, d: errors.append(str(e)),
    )
    assert out.text == "positive"
    assert server.count("/v1/completions") == 5  # 4 failures + the success, nothing more
    assert "HTTP 500" in errors[0]
    assert "timed out after 0.3s" in errors[1]
    assert "RemoteProtocolError" in errors[2] or "disconnected" in errors[2]
    assert "HTTP 502" in errors[3]
    await b.close()


async def test_retries_give_up_after_max_attempts(server):
    b = await started(server.url)
    server.script(*["500"] * 10)
    with pytest.raises(TransientBackendError, match="HTTP 500"):
        await call_with_retries(lambda: b.complete(Request("generate", prompt="x")),
                                RetryPolicy(max_attempts=3, base_delay=0, jitter=0))
    assert server.count("/v1/completions") == 3
    await b.close()


@pytest.mark.parametrize("status", [400, 404, 422])
async def test_client_errors_are_permanent_and_not_retried(server, status):
    b = await started(server.url)
    server.script(str(status))
    with pytest.raises(BackendError, match=f"HTTP {status}") as err:
        await call_with_retries(lambda: b.complete(Request("generate", prompt="x")), FAST)
    assert not isinstance(err.value, TransientBackendError)
    assert server.count("/v1/completions") == 1
    await b.close()


async def test_server_rpm_limit_answers_429_with_retry_after():
    with FakeOpenAIServer(model="fake-model", rpm=3, window=60) as srv:
        b = await started(srv.url)
        for _ in range(3):
            await b.complete(Request("generate", prompt="x"))
        with pytest.raises(TransientBackendError) as err:
            await b.complete(Request("generate", prompt="x"))
        assert err.value.status == 429 and 55 <= err.value.retry_after <= 60
        await b.close()


# -- start(), keys and errors ---------------------------------------------------------

def test_missing_key_for_official_api_is_a_clear_unavailable():
    with pytest.raises(BackendUnavailable, match="set OPENAI_API_KEY") as err:
        OpenAIBackend("gpt-4o-mini")
    assert "\n" not in str(err.value)


async def test_local_server_needs_no_key(server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server.reset_counts()
    b = await started(server.url)
    answer = await b.complete(Request("generate", prompt="x"))
    await b.close()
    assert answer.text and server.count("/v1/completions") + server.count("/v1/chat/completions") >= 1


async def test_key_is_sent_but_never_leaks(monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    with FakeOpenAIServer(model="fake-model", api_key="sk-right-key-0000000000") as srv:
        monkeypatch.setenv("PRE_TEST_KEY", SECRET)
        b = OpenAIBackend("fake-model", OpenAIOptions(base_urls=[srv.url], api_key_env="PRE_TEST_KEY"))
        assert SECRET not in repr(b) and SECRET not in str(b.identity)
        with pytest.raises(BackendUnavailable, match="rejected the API key") as err:
            await b.start()
        assert "PRE_TEST_KEY" in str(err.value)
        # The server echoes a fragment of the wrong key on every request, like OpenAI does.
        with pytest.raises(BackendError) as err2:
            await b.complete(Request("generate", prompt="x"))
        await b.close()
        for text in (str(err.value), str(err2.value), repr(err2.value), caplog.text):
            assert SECRET not in text and SECRET[:8] not in text and SECRET[-4:] not in text
        assert "HTTP 401" in str(err2.value)

        monkeypatch.setenv("PRE_TEST_KEY", "sk-right-key-0000000000")
        good = await started(srv.url, api_key_env="PRE_TEST_KEY")
        assert (await good.complete(Request("generate", prompt="Sentence:\ngood"))).text == "positive"
        await good.close()


@pytest.mark.parametrize("echo", [
    SECRET,  # the whole key
    SECRET.removeprefix("sk-"),  # its value without the prefix
    SECRET.removeprefix("sk-")[2:12],  # a 10-character piece from its middle
    SECRET[-9:],  # its last 9 characters
    f"Bearer {SECRET}",
])
def test_the_key_and_any_long_piece_of_it_are_scrubbed(monkeypatch, echo):
    monkeypatch.setenv("PRE_TEST_KEY", SECRET)
    b = OpenAIBackend("fake-model", OpenAIOptions(base_urls=["http://127.0.0.1:9/v1"], api_key_env="PRE_TEST_KEY"))
    out = b._redact(f"upstream said: key '{echo}' is not valid\n(see docs)")
    assert "***" in out and "\n" not in out and "upstream said" in out
    body = SECRET.removeprefix("sk-")
    assert not any(body[i : i + 8] in out for i in range(len(body) - 7))
    assert b._redact("no secret in this short text: Abc, 123") == "no secret in this short text: Abc, 123"


async def test_unreachable_endpoint_is_unavailable():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens here now
    b = OpenAIBackend("fake-model", OpenAIOptions(base_urls=[f"http://user:pw@127.0.0.1:{port}/v1"]))
    with pytest.raises(BackendUnavailable, match="is the server running") as err:
        await b.start()
    msg = str(err.value)
    assert f"cannot reach http://127.0.0.1:{port}/v1" in msg and "pw" not in msg and "\n" not in msg
    await b.close()


async def test_model_not_served_is_unavailable(server):
    b = OpenAIBackend("other-model", OpenAIOptions(base_urls=[server.url]))
    with pytest.raises(BackendUnavailable, match=r"not served .*it serves: fake-model"):
        await b.start()
    await b.close()


@pytest.mark.parametrize(
    "kw,msg",
    [({"api": "rest"}, "api must be"), ({"timeout": 0}, "timeout"), ({"base_urls": ["ftp://x"]}, "http"),
     ({"max_connections": 0}, "max_connections")],
)
def test_bad_arguments_raise_clear_errors(kw, msg):
    with pytest.raises(ValueError, match=msg):
        OpenAIBackend("m", OpenAIOptions(**({"base_urls": ["http://127.0.0.1:1/v1"]} | kw)))


def test_identity_is_model_and_first_url_without_credentials():
    b = OpenAIBackend("m", OpenAIOptions(base_urls=["http://u:p@10.0.0.1:8000/v1/?k=v", "http://10.0.0.2:8000/v1"]))
    ident = b.identity
    assert ident.backend == "openai" and ident.name == "m"
    assert ident.extra == (("base_url", "http://10.0.0.1:8000/v1"),)
    assert clean_url("https://a:b@h.example/v1?api-key=zz#f") == "https://h.example/v1"


# -- requests ---------------------------------------------------------------------------

async def test_generate_sends_greedy_settings_and_stop(server):
    b = await started(server.url)
    d = Decoding(max_tokens=3, stop=("\n",))
    out = await b.complete(Request("generate", messages=chat("I loved it"), decoding=d))
    assert out.text == "positive" and out.completion_tokens == 1 and out.prompt_tokens > 0
    path, body = server.bodies[-1]
    assert path == "/v1/chat/completions"
    assert body["temperature"] == 0.0 and body["max_tokens"] == 3 and body["stop"] == ["\n"]
    assert body["messages"][0] == {"role": "system", "content": "Classify the sentiment."}
    await b.close()


async def test_api_modes_route_prompts_and_messages(server):
    b = await started(server.url, api="chat")
    await b.complete(Request("generate", prompt="Sentence:\ngood"))
    assert server.bodies[-1][0] == "/v1/chat/completions"
    assert server.bodies[-1][1]["messages"] == [{"role": "user", "content": "Sentence:\ngood"}]
    await b.close()
    c = await started(server.url, api="completions")
    assert not c.is_chat
    with pytest.raises(BackendError, match="use api=chat"):
        await c.complete(Request("generate", messages=chat("good")))
    await c.close()


@pytest.mark.parametrize("use_chat", [True, False])
async def test_score_choices_from_logprobs_picks_the_right_label(server, use_chat):
    b = await started(server.url)
    texts = {"a good film": 0, "a dull film": 1, "great acting": 0, "boring and long": 1}
    for text, want in texts.items():
        req = (Request("score_choices", messages=chat(text), choices=("positive", "negative")) if use_chat
               else Request("score_choices", prompt=f"Sentence:\n{text}", choices=("positive", "negative")))
        out = await b.complete(req)
        assert out.note is None and out.text is None
        lp = out.choice_logprobs
        assert lp is not None and len(lp) == 2
        assert max(range(2), key=lambda i: lp[i]) == want
        assert lp[want] == pytest.approx(math.log(0.85))  # "x", " x", "X" summed
    _, body = server.bodies[-1]
    assert body["max_tokens"] == 1
    if use_chat:
        assert body["logprobs"] is True and body["top_logprobs"] == 20
    else:
        assert body["logprobs"] == 20
    await b.close()


async def test_server_without_logprobs_is_found_out_once_and_never_scored_by_generation(caplog):
    caplog.set_level(logging.WARNING)
    with FakeOpenAIServer(model="fake-model", logprobs=False) as srv:
        b = await started(srv.url)
        assert b.supports_choice_scoring  # not decided yet
        probe = b.capability_probe()
        assert probe is not None and probe.kind == "score_choices"
        with pytest.raises(LogprobsUnsupported, match="use --mode generate"):
            await b.complete(probe)
        assert not b.supports_choice_scoring and b.capability_probe() is None
        assert srv.count("/v1/chat/completions") == PROBE_ANSWERS  # several answers decide, not one
        assert caplog.text.count("returns no log-probabilities") == 1
        # Decided: later scoring requests are refused at once, never answered with generated text.
        req = Request("score_choices", messages=chat("a good film"), choices=("positive", "negative"))
        with pytest.raises(LogprobsUnsupported):
            await b.complete(req)
        assert srv.count("/v1/chat/completions") == PROBE_ANSWERS
        assert (await b.complete(Request("generate", messages=chat("a good film")))).text == "positive"
        await b.close()

        strict = await started(srv.url, logprobs=True)
        assert strict.capability_probe() is None and strict.supports_choice_scoring
        with pytest.raises(TransientBackendError, match="no log-probabilities although they were asked for"):
            await strict.complete(req)
        await strict.close()


async def test_one_answer_without_logprobs_does_not_decide_anything(server):
    b = await started(server.url)
    server.script("no_logprobs", "no_logprobs")
    out = await b.complete(b.capability_probe())
    assert out.choice_logprobs is not None and b.supports_choice_scoring
    # Decided for logprobs: from now on an answer without them is garbage, retried.
    server.script("no_logprobs")
    req = Request("score_choices", prompt="Sentence:\nso good", choices=("positive", "negative"))
    with pytest.raises(TransientBackendError, match="no log-probabilities"):
        await b.complete(req)
    assert (await call_with_retries(lambda: b.complete(req), FAST)).choice_logprobs is not None
    await b.close()


async def test_server_refusing_logprobs_is_decided_at_once_instead_of_retried():
    with FakeOpenAIServer(model="fake-model", logprobs_error=500) as srv:
        b = await started(srv.url, api="completions")
        at_start = srv.count("/v1/completions")  # the start-up check of exact label scoring (refused too)
        with pytest.raises(LogprobsUnsupported):
            await call_with_retries(lambda: b.complete(b.capability_probe()), FAST)
        assert srv.count("/v1/completions") == at_start + 1  # one refusal, no retry storm
        assert not b.supports_choice_scoring
        await b.close()


async def test_logprobs_false_never_asks_for_them(server):
    b = await started(server.url, logprobs=False)
    assert not b.supports_choice_scoring and b.capability_probe() is None
    with pytest.raises(LogprobsUnsupported, match="logprobs=false"):
        await b.complete(Request("score_choices", prompt="Sentence:\ngood", choices=("positive", "negative")))
    assert server.count("/v1/completions") == 0
    await b.close()


# -- garbage answers are transient failures ------------------------------------------------

GARBAGE = {
    "malformed": "cut-off or invalid JSON",
    "html": "HTML page",
    "empty": "empty body",
    "no_choices": "no choices",
    "empty_choices": "empty choices",
    "truncated": "connection to",
    "reset": "connection to",
}


@pytest.mark.parametrize("kind", [*GARBAGE, "no_content"])
@pytest.mark.parametrize("use_chat", [True, False])
async def test_a_garbage_answer_is_a_transient_error_and_the_retry_answers(server, kind, use_chat):
    b = await started(server.url)
    req = (Request("generate", messages=chat("a great film")) if use_chat
           else Request("generate", prompt="Sentence:\na great film"))
    server.script(kind)
    with pytest.raises(TransientBackendError) as err:
        await b.complete(req)
    message = str(err.value)
    assert "\n" not in message and "Traceback" not in message
    assert (GARBAGE.get(kind) or ("no message content" if use_chat else "no text")) in message
    server.script(kind)
    assert (await call_with_retries(lambda: b.complete(req), FAST)).text == "positive"
    await b.close()


@pytest.mark.parametrize("kind", [*GARBAGE, "no_logprobs"])
async def test_a_garbage_scoring_answer_is_transient_once_logprobs_are_known(server, kind):
    b = await started(server.url)
    await b.complete(b.capability_probe())
    req = Request("score_choices", messages=chat("a great film"), choices=("positive", "negative"))
    server.script(kind)
    with pytest.raises(TransientBackendError):
        await b.complete(req)
    server.script(kind, kind)
    out = await call_with_retries(lambda: b.complete(req), FAST)
    assert out.choice_logprobs[0] > out.choice_logprobs[1]
    await b.close()


def test_content_missing_but_a_refusal_given_is_the_models_answer():
    choice = {"message": {"role": "assistant", "content": None, "refusal": "I cannot help with that."}}
    assert answer_text(choice, True, "http://x/v1") == "I cannot help with that."
    assert answer_text({"message": {"content": ""}}, True, "http://x/v1") == ""  # empty text is an answer


async def test_two_base_urls_share_the_load():
    with FakeOpenAIServer(model="fake-model") as a, FakeOpenAIServer(model="fake-model", latency=0.02) as c:
        b = await started([a.url, c.url])
        a.reset_counts(), c.reset_counts()
        outs = await asyncio.gather(*(b.complete(Request("generate", prompt=f"Sentence:\ngood {i}"))
                                      for i in range(40)))
        assert all(o.text == "positive" for o in outs)
        assert a.count() + c.count() == 40
        assert a.count() >= 10 and c.count() >= 10
        assert sum(b.endpoint_counts.values()) == 40
        assert b.identity.extra == (("base_url", a.url),)
        await b.close()


async def test_scheduler_with_limits_against_rate_limited_server():
    """End to end: the lead's Scheduler + our limiter/retries vs a server enforcing its own rpm."""
    from promptrobust.engine.serving.scheduler import Scheduler
    from promptrobust.engine.serving.scheduler_settings import SchedulerSettings

    with FakeOpenAIServer(model="fake-model", rpm=10, window=0.5) as srv:
        b = OpenAIBackend("fake-model", OpenAIOptions(base_urls=[srv.url]))
        sched = Scheduler(b, settings=SchedulerSettings(concurrency=8), retry_policy=RetryPolicy(max_attempts=20, base_delay=0.02, max_delay=0.2))
        async with sched:
            reqs = [Request("score_choices", prompt=f"Sentence:\n{'good' if i % 2 else 'bad'} movie {i}",
                            choices=("positive", "negative")) for i in range(30)]
            outs = await sched.submit_many(reqs)
        picks = [max(range(2), key=lambda k: o.choice_logprobs[k]) for o in outs]
        assert picks == [0 if i % 2 else 1 for i in range(30)]
        assert srv.count("/v1/completions") > 30  # some were refused with 429 and retried
        assert sched.stats.retries == srv.count("/v1/completions") - 30


async def test_the_logprobs_probe_is_cached_and_a_rerun_sends_nothing(tmp_path):
    from promptrobust.engine.serving.cache import ScoreCache
    from promptrobust.engine.serving.scheduler import Scheduler

    cache = ScoreCache(tmp_path / "c.sqlite")
    with FakeOpenAIServer(model="fake-model") as srv:
        first = OpenAIBackend("fake-model", OpenAIOptions(base_urls=[srv.url]))
        async with Scheduler(first, cache=cache):
            assert first.supports_choice_scoring and first.capability_probe() is None  # decided at start
        assert srv.count("/v1/chat/completions") == 1
        again = OpenAIBackend("fake-model", OpenAIOptions(base_urls=[srv.url]))
        async with Scheduler(again, cache=cache) as sched:
            assert again.capability_probe() is None and sched.stats.probes == 1
        assert srv.count("/v1/chat/completions") == 1  # the cached answer decided it
    with FakeOpenAIServer(model="fake-model", logprobs=False) as srv:
        none = OpenAIBackend("fake-model", OpenAIOptions(base_urls=[srv.url]))
        async with Scheduler(none, cache=cache, retry_policy=FAST) as sched:
            assert not none.supports_choice_scoring  # decided at start; the run goes on
            assert (await sched.submit(Request("generate", messages=chat("good")))).text == "positive"
    cache.close()


async def test_a_choices_evaluation_without_logprobs_generates_says_so_and_caches_under_generate_keys(tmp_path, caplog):
    from promptrobust.engine.serving.cache import ScoreCache
    from promptrobust.engine.errors import SettingsError
    from promptrobust.engine.measuring.evaluator import Evaluator
    from promptrobust.engine.measuring.mode import decide_mode
    from promptrobust.engine.serving.scheduler import Scheduler
    from promptrobust.engine.serving.types import request_key
    from promptrobust.tasks.registry import get_task

    caplog.set_level(logging.WARNING)
    task = get_task("rotten_tomatoes")
    samples = task.load(limit=6)
    cache = ScoreCache(tmp_path / "c.sqlite")
    with FakeOpenAIServer(model="fake-model", logprobs=False) as srv:
        b = OpenAIBackend("fake-model", OpenAIOptions(base_urls=[srv.url]))
        async with Scheduler(b, cache=cache, retry_policy=FAST) as sched:
            mode = decide_mode("choices", task, b)  # the plan decides, once, on the started backend
            assert mode == "generate"
            with pytest.raises(SettingsError, match="cannot score label log-probs"):
                Evaluator(sched, task, samples, mode="choices")  # the evaluator decides nothing: it refuses
            ev = Evaluator(sched, task, samples, mode=mode)
            assert ev.mode == "generate"  # and so every record written from it
            result = await ev.evaluate("Is this review positive or negative?")
    assert "evaluating with --mode generate" in caplog.text
    assert result.samples == 6
    requests = [ev.build_request("Is this review positive or negative?", s) for s in samples]
    assert {r.kind for r in requests} == {"generate"}
    keys = [request_key(b.identity, r) for r in requests]
    assert set(cache.get_many(keys)) == set(keys)  # cached under the generate requests' own keys
    assert all(c.text is not None and c.choice_logprobs is None for c in cache.get_many(keys).values())
    cache.close()
