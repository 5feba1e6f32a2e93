"""A sweep with `holdout` ranks and attacks on the searched part and re-scores on the rest."""

from __future__ import annotations

import asyncio
from pathlib import Path

from promptrobust.engine.runs.session import Session
from promptrobust.engine.measuring.settings import AttackSettings
from promptrobust.engine.runs.sweep.runner import run_sweep
from promptrobust.testing.backends import CountingBackend
from tests.sweep_helpers import hashed_answer, records, small_config


def test_sweep_with_holdout(tmp_path: Path) -> None:
    cfg = small_config(tmp_path, models=("openai:a",),
                       attack=AttackSettings(attacks=("checklist",), top_k=1, budget=6, holdout=0.5),
                       evaluation=small_config(tmp_path).evaluation.with_(limit=12))

    async def go() -> None:
        session = Session(cache=None, settings=cfg.scheduler,
                          backend_factory=lambda spec: CountingBackend(answer=hashed_answer, name=spec.name))
        try:
            progress = await run_sweep(cfg, session=session)
        finally:
            await session.close()
        assert not progress.failed, progress.failed

    asyncio.run(go())
    rows = [r for r in records(cfg.folder) if r["status"] == "attacked"]
    assert rows
    for r in rows:
        assert r["samples"] == 6 and r["held_out"]["samples"] == 6 and r["held_out"]["fraction"] == 0.5
        # the clean score the attack started from is the ranking's, on the same 6 searched samples
        assert r["clean_score"] == r["extra"]["clean_scores"][r["prompt_id"]]
