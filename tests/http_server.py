"""The fake OpenAI-compatible server, re-exported for the tests.

The code lives in ``engine/benchmarks/fake_openai.py`` so `pre bench api` can
start it from an installed package; tests keep importing it from here.
"""

from engine.benchmarks.fake_openai import (
    POSITIVE_WORDS,
    Action,
    FakeOpenAIServer,
    sentiment_answer,
)

__all__ = ["POSITIVE_WORDS", "Action", "FakeOpenAIServer", "sentiment_answer"]
