"""Short reprs (issue 31 item 5): result objects print one line (model, dataset, counts, the
headline number), never every per-sample score."""

from __future__ import annotations

from pathlib import Path

from promptrobust.engine.analysis.defense import DefenseResult
from promptrobust.engine.analysis.prompt_eval import PromptEvalResult
from promptrobust.engine.analysis.report import build_report
from promptrobust.engine.analysis.transfer import TransferResult
from promptrobust.engine.measuring.protocol import ProtocolResult
from promptrobust.engine.measuring.records import AttackRecord
from promptrobust.engine.measuring.workbench import CleanScore
from promptrobust.engine.runs.session import EvaluationResult
from promptrobust.tasks.base import Prompt

SCORES = [1.0, 0.0] * 500  # 1000 samples: none of them may reach a repr


def record(pdr: float | None = 0.25, **kw: object) -> AttackRecord:
    return AttackRecord(model="gemma3-270m", dataset="sst2", prompt_id="sst2-task-01", attack="deepwordbug",
                        clean_prompt="Classify.", clean_score=0.8, adversarial_prompt="Clasify.",
                        adversarial_score=None if pdr is None else 0.8 * (1 - pdr), pdr=pdr, samples=1000, mode="choices",
                        clean_sample_scores=SCORES, adversarial_sample_scores=SCORES, **kw)  # type: ignore[arg-type]


def _short(text: str) -> str:
    assert "\n" not in text and len(text) < 260 and "1.0, 0.0" not in text, text
    return text


def test_attack_record() -> None:
    assert _short(repr(record())) == (
        "AttackRecord(kind='attack', model='gemma3-270m', dataset='sst2', attack='deepwordbug', prompt_id='sst2-task-01', "
        "status='attacked', clean=0.8, adversarial=0.6, pdr=0.25, samples=1000)")
    failed = AttackRecord(model="m", dataset="sst2", prompt_id="p", attack="a", clean_prompt="x", clean_score=0.5,
                          status="failed", error="backend timed out " * 20)
    assert "status='failed'" in _short(repr(failed)) and "error='backend timed out" in repr(failed)


def test_evaluation_and_protocol_results() -> None:
    prompt = Prompt("sst2-task-01", "sst2", "task", "Classify.")
    clean = [CleanScore(prompt, 0.75, (0.6, 0.9), False, tuple(SCORES)), CleanScore(prompt, 0.25, (0.1, 0.4), True, tuple(SCORES))]
    ev = EvaluationResult(model="gemma3-270m", dataset="sst2", settings={"mode": "choices", "samples": 1000, "shots": 0},
                          clean=clean, evaluations=[])
    assert _short(repr(ev)) == ("EvaluationResult(model='gemma3-270m', dataset='sst2', prompts=2, samples=1000, "
                                "mode='choices', mean_score=0.500)")
    assert "sample_scores" not in _short(repr(clean[0]))
    skipped = record(status="skipped_clean_zero", pdr=None)
    protocol = ProtocolResult(settings={"model": "gemma3-270m", "dataset": "sst2"}, clean=clean,
                              records=[record(0.25), record(0.5), skipped])
    assert _short(repr(protocol)) == ("ProtocolResult(model='gemma3-270m', dataset='sst2', prompts=2, "
                                      "3 records (2 attacked, 1 skipped), APDR 0.375)")


def test_analysis_results() -> None:
    given = [CleanScore(Prompt(id="p1", dataset="sst2", type="given", text="Classify."), 0.5, (0.4, 0.6), False, (1.0, 0.0))]
    pe = PromptEvalResult(settings={"model": "m", "dataset": "sst2"}, chance_rate=0.5, clean=given,
                          records=[record(0.1, kind="pair")])
    assert _short(repr(pe)) == "PromptEvalResult(model='m', dataset='sst2', prompts=1, mean_score=0.500, 1 record (1 attacked), APDR 0.100)"
    tr = TransferResult(target_model="t", records=[record(0.2, kind="transfer", source_model="s")], apdr=[])
    assert _short(repr(tr)) == "TransferResult(target_model='t', sources=['s'], 1 record (1 attacked), APDR 0.200)"
    de = DefenseResult(defense="spellcheck", records=[record(0.1, kind="defense", settings={"undefended_pdr": 0.4})], summary=[])
    assert _short(repr(de)) == ("DefenseResult(defense='spellcheck', 1 record (1 attacked), APDR 0.100; "
                                "without the defense 0.400)")


def test_report() -> None:
    report = build_report([Path(__file__).parent / "fixtures" / "report" / "sweep"], figures=False)
    assert _short(repr(report)) == ("Report(5 run folder(s), 16 record(s) (16 attacked, 0 skipped, 0 failed); "
                                    "3 sections, 13 tables, 0 figures)")  # +1: APDR over all vs acceptable adversarial prompts
