"""Test-wide settings."""

import os

# Before anything imports torch: OpenMP threads that spin-wait make forward
# passes many times slower on a small shared CPU (see cli/main.py).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# The hub is unreachable here: fail fast instead of retrying for a minute.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
