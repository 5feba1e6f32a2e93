"""Saying that an attack used a substitute resource (the record says it too).

Attacks do not import the engine: they log on the ``promptrobust.fallback``
logger, and ``engine.progress`` forwards each message to the run's reporter,
which shows it on the terminal once per run. ``key`` identifies the fallback
(the same key is said once).
"""

from __future__ import annotations

import logging

LOGGER = logging.getLogger("promptrobust.fallback")


def announce(key: str, message: str) -> None:
    """Report a fallback: what was used instead, why, and how to get the real resource."""
    LOGGER.info(message, extra={"fallback_key": key})


def word_vectors(label: str, reason: str) -> None:
    why = f" ({reason})" if reason and reason != "embedding=glove" else ""
    if reason == "embedding=glove":
        announce("word_embedding", f"word vectors: {label}, chosen with --attack-option embedding=glove")
        return
    announce(
        "word_embedding",
        f"word vectors: {label} instead of TextAttack's counter-fitted paragramcf{why}; for the real ones run once "
        "online (downloaded to ~/.cache/textattack) or pass --attack-option embedding=PATH_TO_PARAGRAMCF",
    )


def sentence_encoder(label: str) -> None:
    announce(
        "sentence_encoder",
        f"sentence encoder: {label} instead of the recipes' TF Hub Universal Sentence Encoder v3; for that one "
        "pass --attack-option sentence_encoder=tfhub (needs tensorflow and tensorflow-hub, online once)",
    )
