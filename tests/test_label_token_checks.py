"""Issue 41, items 2-4 and the /tokenize weak point: exact label scores only from token ids that can be exact.

Against the fake server playing vLLM (its toy tokenizer made to behave like real ones: no byte fallback,
a normaliser that drops format characters, or hostile answers) and the in-process hf backend on a tiny
model with a word-level tokenizer: a label whose tokens are nothing, two labels with the same tokens, a
position whose labels add up to more than probability 1, and /tokenize answers no tokenizer gives are
refused in one line, never scored or cached.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from promptrobust.engine.serving.backends.base import BackendError, BadAnswerError, RequestFailedError
from promptrobust.engine.serving.backends.openai import OpenAIBackend, OpenAIOptions
from promptrobust.engine.serving.cache import ScoreCache
from promptrobust.engine.serving.scheduler import Scheduler
from promptrobust.engine.serving.scheduler_settings import SchedulerSettings
from promptrobust.engine.serving.types import Completion, Request
from promptrobust.testing import FakeOpenAIServer

PROMPT = "Review, in one word: a great film\nAnswer:"


async def _score(url: str, choices: tuple[str, ...], **kwargs: object) -> Completion:
    backend = OpenAIBackend("fake-model", OpenAIOptions(base_urls=(url,), api="completions", **kwargs))  # type: ignore[arg-type]
    await backend.start()
    try:
        return await backend.complete(Request("score_choices", prompt=PROMPT, choices=choices))
    finally:
        await backend.close()


async def _through_cache(url: str, choices: tuple[str, ...], cache_path: Path) -> tuple[BaseException | None, int]:
    """One label-scoring request through a scheduler with a real cache: (the error, rows cached)."""
    backend = OpenAIBackend("fake-model", OpenAIOptions(base_urls=(url,), api="completions", logprobs=True))
    cache = ScoreCache(cache_path)
    failure: BaseException | None = None
    async with Scheduler(backend, settings=SchedulerSettings(max_retries=1), cache=cache) as scheduler:
        try:
            await scheduler.submit(Request("score_choices", prompt=PROMPT, choices=choices))
        except BackendError as exc:
            failure = exc
    rows = cache.count()
    cache.close()
    return failure, rows


# -- item 2: a label whose continuation is no tokens --------------------------------------------------

def test_a_label_that_tokenises_to_nothing_is_refused_and_never_cached(tmp_path: Path) -> None:
    zero_width = "\u200b"  # the server's normaliser drops it: the label adds no token to the input
    with FakeOpenAIServer(vllm=True, strips_format_chars=True) as srv:
        with pytest.raises(BackendError) as err:
            asyncio.run(_score(srv.url, (" positive", zero_width)))
        failure, rows = asyncio.run(_through_cache(srv.url, (" positive", zero_width), tmp_path / "c.sqlite"))
    message = str(err.value)
    assert "no tokens" in message and "\\u200b" in message and "\n" not in message
    assert isinstance(failure, BackendError) and not isinstance(failure, RequestFailedError)  # not retried
    assert rows == 0  # never cached


# -- item 3: two labels, one token-id sequence ---------------------------------------------------------

def test_distinct_labels_with_identical_token_ids_are_refused_on_the_token_id_route() -> None:
    with FakeOpenAIServer(vllm=True, byte_fallback=False) as srv:  # each non-ASCII word is [UNK]
        with pytest.raises(BackendError) as err:
            asyncio.run(_score(srv.url, (" café", " naïve", " plain")))
    message = str(err.value)
    assert "' café'" in message and "' naïve'" in message and "same token ids" in message
    assert "generate" in message  # the way out


def _tiny_word_level_model(folder: Path) -> Path:
    """A 2-layer random Llama with a word-level tokenizer (no byte fallback: unknown words are [UNK])."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = ["[PAD]", "[UNK]", "<s>", "</s>", "review", ":", "a", "great", "film", "answer", "positive", "negative"]
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="[PAD]", unk_token="[UNK]",
                                               bos_token="<s>", eos_token="</s>")
    tok.save_pretrained(str(folder))
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
                                   pad_token_id=0, bos_token_id=2, eos_token_id=3)
    transformers.LlamaForCausalLM(cfg).save_pretrained(str(folder))
    return folder


@pytest.mark.parametrize("choices, named", [(("café", "naïve", "positive"), ("'café'", "'naïve'")),
                                            (("positive", ""), ("''",))])
def test_the_hf_backend_refuses_labels_it_cannot_tell_apart(tmp_path: Path, choices: tuple[str, ...],
                                                            named: tuple[str, ...]) -> None:
    from promptrobust.engine.serving.backends.hf import HFBackend, HFOptions

    backend = HFBackend(str(_tiny_word_level_model(tmp_path / "tiny")), HFOptions(batch_size=2))
    asyncio.run(backend.start())
    try:
        with pytest.raises(BackendError) as err:
            asyncio.run(backend.complete_batch([Request("score_choices", prompt="review : a great film answer :",
                                                        choices=choices)]))
        fine = asyncio.run(backend.complete_batch([Request("score_choices", prompt="review : a great film answer :",
                                                           choices=("positive", "negative"))]))
    finally:
        asyncio.run(backend.close())
    assert all(n in str(err.value) for n in named) and "\n" not in str(err.value)
    assert fine[0].choice_logprobs is not None and len(set(fine[0].choice_logprobs)) == 2


# -- item 4: probabilities that add up to more than 1 at one position ----------------------------------

def test_labels_whose_probabilities_add_up_to_more_than_one_are_refused(tmp_path: Path) -> None:
    with FakeOpenAIServer(vllm=True, tamper=("excess_mass",)) as srv:  # every label at -0.001: mass ~3
        with pytest.raises(BadAnswerError) as err:
            asyncio.run(_score(srv.url, (" positive", " negative", " neutral")))
        failure, rows = asyncio.run(_through_cache(srv.url, (" positive", " negative", " neutral"),
                                                   tmp_path / "c.sqlite"))
    assert "probabilit" in str(err.value) and "1.001" in str(err.value)  # the tolerance, stated
    assert isinstance(failure, BadAnswerError) and rows == 0


def test_the_top_20_route_refuses_alternatives_that_add_up_to_more_than_one() -> None:
    from promptrobust.engine.serving.backends.openai import answers

    with pytest.raises(BadAnswerError, match="add up to"):
        answers.check_top_logprobs([("a", -0.001), ("b", -0.001), ("c", -0.5)], "http://x/v1")
    answers.check_top_logprobs([("a", math.log(0.7)), ("b", math.log(0.2)), ("c", math.log(0.1))], "http://x/v1")


# -- weak point: /tokenize answers no tokenizer gives ----------------------------------------------------

@pytest.mark.parametrize("tamper, said", [("extra_ids", "tokens for"), ("huge_ids", "token id"),
                                          ("unstable_ids", "two ways")])
def test_tokenize_answers_no_tokenizer_gives_are_refused(tamper: str, said: str) -> None:
    with FakeOpenAIServer(vllm=True, tamper=(tamper,)) as srv:
        with pytest.raises(BadAnswerError) as err:
            asyncio.run(_score(srv.url, (" positive", " negative"), scoring="logprob_token_ids"))
    assert said in str(err.value) and "\n" not in str(err.value)
