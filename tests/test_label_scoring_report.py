"""Reports never pool exact label scores with the HTTP top-20 approximation."""

from __future__ import annotations

from pathlib import Path

import orjson

from promptrobust.cli.main import main
from promptrobust.engine.serving.backends.openai.scoring import DESCRIPTIONS
from promptrobust.engine.measuring.records import AttackRecord


def _write_run(folder: Path, label_scoring: str, pdr: float) -> None:
    folder.mkdir(parents=True)
    record = AttackRecord(
        model="openai:m", dataset="sst2", prompt_id="p1", attack="checklist", clean_prompt="Is it positive?",
        clean_score=0.8, adversarial_prompt="Is it positive? xyz", adversarial_score=0.8 * (1 - pdr), pdr=pdr,
        backend="openai", mode="choices", parser=None, samples=10, metric="accuracy", label_scoring=label_scoring,
        clean_sample_scores=[1.0] * 8 + [0.0] * 2, adversarial_sample_scores=[1.0] * round(10 * 0.8 * (1 - pdr)) + [0.0] * (10 - round(10 * 0.8 * (1 - pdr))),
    )
    (folder / "results.jsonl").write_bytes(orjson.dumps(record.to_dict()) + b"\n")


def test_exact_and_approximate_label_scores_are_separate_sections(tmp_path: Path) -> None:
    _write_run(tmp_path / "exact", DESCRIPTIONS["echo"], 0.25)
    _write_run(tmp_path / "approx", DESCRIPTIONS["top_logprobs"], 0.5)
    out = tmp_path / "report"
    assert main(["report", str(tmp_path / "exact"), str(tmp_path / "approx"), "--format", "md,csv",
                 "--quiet", "--output-dir", str(out)]) == 0
    text = (out / "report.md").read_text()
    assert "labels approximated (top-20 log-probs)" in text
    # two attack sections, never one pooled APDR
    assert text.count("## Attacks (each attack's own search): mode choices") == 2
    assert any("approx" in p.name for p in out.glob("*.csv"))
