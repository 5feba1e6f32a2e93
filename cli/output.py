"""Run folders: the writer lives in ``engine.run_folder`` (one writer for the CLI,
sweeps and the API); this module keeps the old import path working."""

from __future__ import annotations

from promptrobust.engine.runs.run_folder import OWNER_FILE, RunFolder, remove_stale_partials

__all__ = ["OWNER_FILE", "RunFolder", "remove_stale_partials"]
