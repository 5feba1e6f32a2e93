"""Test-wide settings."""

import os

import promptrobust  # noqa: F401,E402  (process defaults, before anything imports torch)
# The hub is unreachable here: fail fast instead of retrying for a minute.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from collections.abc import Iterator  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _secrets_of_this_test_only() -> Iterator[None]:
    """Each test sees only the secrets it registers: redaction remembers secrets for the whole process,
    so a test's key (say one of zeros) would star another test's numbers when both run in one worker."""
    from promptrobust.engine.safe_io import redact

    known = redact._KNOWN  # noqa: SLF001
    with known.lock:
        saved = (known.forms, known.long, known.grams)
    yield
    with known.lock:
        known.forms, known.long, known.grams = saved
