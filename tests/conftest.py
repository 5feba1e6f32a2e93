"""Test-wide settings."""

import os

import promptrobust  # noqa: F401,E402  (process defaults, before anything imports torch)
# The hub is unreachable here: fail fast instead of retrying for a minute.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
