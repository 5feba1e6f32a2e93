"""Reports that survive any number a record can hold (issue 32, E and item 5): 1e308, -inf,
NaN, a PDR that contradicts its scores, an unknown kind: left out with a note (said once on
stderr), valid but extreme PDRs drawn clipped, never a crash; a NaN line is not a "torn write"."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from promptrobust.cli.main import main
from promptrobust.engine.analysis.report import build_report
from promptrobust.engine.analysis.report.checks import pdr_problem
from promptrobust.engine.analysis.report.plots import CLIPPED_NOTE
from promptrobust.engine.measuring.records import read_jsonl


def rec(i: int, pdr: float, clean: float = 0.8, **kw: Any) -> dict[str, Any]:
    """An attacked record whose scores agree with its PDR unless ``adversarial_score`` is given."""
    base = {
        "model": "m", "backend": "hf", "dataset": "sst2", "prompt_id": f"p{i}", "prompt_type": "task", "shots": 0,
        "attack": "checklist", "clean_prompt": f"Classify review {i}.", "clean_score": clean,
        "adversarial_prompt": f"Classify review {i} xyz.", "adversarial_score": clean * (1 - pdr) if math.isfinite(pdr) else 0.5,
        "pdr": pdr, "status": "attacked", "mode": "choices", "samples": 10, "seed": 0, "metric": "accuracy",
        "pdr_ci95": [pdr - 0.1, pdr + 0.1] if math.isfinite(pdr) else None,
    }
    return {**base, **kw}


def write(folder: Path, rows: list[dict[str, Any]], summary: dict[str, Any] | None = None) -> Path:
    folder.mkdir(parents=True)
    # Python's json writes NaN and Infinity (orjson refuses to): the file holds them as written.
    (folder / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    if summary is not None:
        (folder / "results.json").write_text(json.dumps(summary), encoding="utf-8")
    return folder


@pytest.fixture()
def hostile(tmp_path: Path) -> Path:
    rows = [
        rec(0, 0.25), rec(1, 0.5),                             # sound: these two make the APDR
        rec(2, 1e308), rec(3, -math.inf), rec(4, math.nan),    # impossible numbers
        rec(5, 0.9, adversarial_score=0.6),                    # contradicts 1 - 0.6/0.8 = 0.25
        rec(6, 0.3, kind="mystery"),                           # a kind this version does not know
        rec(7, 0.2, clean_sample_scores=[1, "x", 0], adversarial_sample_scores=[0, 0, 0]),  # unusable sample scores
        rec(8, 0.1, pdr_ci95=[math.nan, 1], mcnemar_p=math.inf, cost={"wall_seconds": 1e308}),
    ]
    summary = {"model": "m", "dataset": "sst2", "mode": "choices", "samples": 10, "shots": 0, "seed": 0,
               "clean": [{"prompt_id": "big", "score": 1e308}, {"prompt_id": "nan", "score": math.nan},
                         {"prompt_id": "ok", "score": 0.7}]}
    return write(tmp_path / "runs" / "a", rows, summary)


def test_impossible_numbers_are_left_out_with_a_note_and_never_crash_any_format(hostile: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "rep"
    assert main(["report", str(hostile.parent), "--output-dir", str(out), "--quiet"]) == 0  # every format, figures included
    err = capsys.readouterr().err.splitlines()
    warnings = [line for line in err if line.startswith("pre: warning: report:")]
    assert len(warnings) == 5  # one line per kind of problem, however many records have it
    assert not any("torn write" in line for line in err)  # the NaN line was read, not skipped as torn
    assert any("'mystery' (1)" in w for w in warnings)
    assert any("4 record(s) hold a PDR that cannot be right" in w for w in warnings)
    assert any("2 clean score(s)" in w for w in warnings) and any("per-sample scores" in w for w in warnings)
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "4 record(s) hold a PDR that cannot be right" in md and "'mystery' (1)" in md  # said in the report too
    assert {"report.html", "report.tex", "apdr_by_attack.svg", "apdr_by_model.pdf"} <= {p.name for p in out.iterdir()}


def test_only_sound_records_are_averaged_and_the_rest_are_listed_with_their_reason(hostile: Path) -> None:
    report = build_report([hostile.parent], figures=False)
    cell = report.table("apdr_attack_x_dataset").long[0]
    assert cell["count"] == 4 and cell["mean"] == pytest.approx((0.25 + 0.5 + 0.2 + 0.1) / 4)
    assert math.isfinite(cell["std"]) and cell["ci_low"] is None  # no per-sample scores left: no interval
    excluded = {r["prompt_id"]: r for r in report.table("records_not_averaged").long}
    assert sorted(excluded) == ["p2", "p3", "p4", "p5", "p6"]
    assert {r["status"] for r in excluded.values()} == {"invalid"}
    assert "above 1" in excluded["p2"]["reason"] and "not a finite number" in excluded["p3"]["reason"]
    assert "nan" in excluded["p4"]["reason"] and "contradicts its scores 0.8 -> 0.6" in excluded["p5"]["reason"]
    assert excluded["p6"]["reason"] == "unknown record kind 'mystery'"
    assert report.table("records_not_averaged").title == "Records not averaged (skipped, failed or invalid)"
    assert "9 record(s) (4 attacked, 0 skipped, 0 failed, 5 invalid)" in report.meta[0]
    assert [s.kind for s in report.sections] == ["clean", "attack"]  # the unknown kind is no section, nor an attack
    clean = {r["prompt_id"] for r in report.table("clean_prompts").long}
    assert "ok" in clean and not {"big", "nan"} & clean and not {"p2", "p3", "p4", "p5", "p6"} & clean
    cost = report.table("cost_by_attack").long[0]
    assert cost["wall_seconds"] is None  # 1e308 seconds read as missing, not summed into an overflow


def test_a_valid_but_extreme_pdr_is_drawn_clipped_with_a_note(tmp_path: Path) -> None:
    # clean 0.1, adversarial 0.6: PDR -5 is right (the attack helped a lot) and stays in the averages
    write(tmp_path / "runs" / "a", [rec(0, 0.25), rec(1, -5.0, clean=0.1, attack="stresstest")])
    report = build_report([tmp_path / "runs"])
    cells = {(r["attack"], r["dataset"]): r for r in report.table("apdr_attack_x_dataset").long}
    assert cells[("stresstest", "all")]["mean"] == pytest.approx(-5.0)
    bars = next(f for f in report.figures if f.name == "apdr_by_attack").drawing
    ax = bars.axes[0]
    assert CLIPPED_NOTE in ax.get_title()
    assert ax.get_ylim()[0] >= -1.2  # the other bar stays readable
    assert "-5.00" in [t.get_text() for t in ax.texts]  # the label gives the value
    heat = next(f for f in report.figures if f.name == "heatmap_attack_x_dataset").drawing
    assert CLIPPED_NOTE in heat.axes[0].get_title()
    for f in report.figures:
        assert f.png[:8] == b"\x89PNG\r\n\x1a\n" and f.pdf[:5] == b"%PDF-"


def test_pdr_problem_rules() -> None:
    assert pdr_problem(0.25, 0.8, 0.6) is None
    assert pdr_problem(0.2501, 0.8001, 0.6) is None  # scores written with 4 decimals still agree
    assert pdr_problem(-0.25, 0.8, 1.0) is None  # the attack helped
    assert "contradicts" in str(pdr_problem(0.9, 0.8, 0.6))
    assert "above 1" in str(pdr_problem(1.5, None, None))
    assert "not a finite number" in str(pdr_problem(math.nan, 0.8, 0.6))
    assert "below" in str(pdr_problem(-1e7, None, None))
    assert "clean score 0" in str(pdr_problem(0.0, 0.0, 0.0))
    assert "clean score" in str(pdr_problem(0.5, math.inf, 0.1))
    assert pdr_problem(0.3, None, None) is None  # an older record with its PDR alone


def test_jsonl_lines_are_called_what_they_are(tmp_path: Path, capsys) -> None:
    path = tmp_path / "results.jsonl"
    path.write_bytes(b'{"a": 1}\n{"pdr": NaN}\n{"b": oops}\n{"c": 3}\n{"d": 4, "tor')
    assert read_jsonl(path) == [{"a": 1}, {"c": 3}]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3
    assert "line 2 holds NaN or Infinity, which JSON does not allow" in err[0]
    assert "line 3 is not valid JSON (cut short by a crash, or edited)" in err[1]
    assert "line 5 is not complete JSON (torn write?)" in err[2]
    rows = read_jsonl(path, non_finite=True)
    assert len(rows) == 3 and math.isnan(rows[1]["pdr"])


def test_an_older_record_with_its_pdr_alone_is_reported(tmp_path: Path) -> None:
    row = rec(0, 0.4)
    del row["clean_score"], row["adversarial_score"]
    write(tmp_path / "runs" / "a", [row])
    report = build_report([tmp_path / "runs"])
    assert report.table("apdr_attack_x_dataset").long[0]["mean"] == pytest.approx(0.4)
    assert "score – &rarr; –" in report.html() and report.latex()


_WEIRD = [math.nan, math.inf, -math.inf, 1e308, -1e308, 10**400, -1, 2, "0.3", "x", None, True, [], {}, [1, 2],
          [math.nan, 1], 1e-320]
_FIELDS = ["pdr", "clean_score", "adversarial_score", "pdr_ci95", "clean_ci95", "mcnemar_p", "chance_rate", "samples",
           "seed", "shots", "budget", "clean_sample_scores", "adversarial_sample_scores", "kind", "status", "prompt_id",
           "attack", "mode", "metric", "stop", "attack_options", "substitutions", "clean_scores"]


def test_any_value_in_any_field_gives_a_report_or_a_one_line_error(tmp_path_factory: pytest.TempPathFactory) -> None:
    """A property test over hand-edited files: every format is written, or a PromptRobustError says why."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from promptrobust.engine.errors import PromptRobustError

    nested = {"held_out": lambda v: {"pdr": v, "pdr_ci95": v, "samples": v}, "final_similarity": lambda v: {"angular": v},
              "cost": lambda v: {"wall_seconds": v, "model_requests": v}, "settings": lambda v: {"undefended_pdr": v}}
    edit = st.tuples(st.sampled_from(_FIELDS + list(nested)), st.sampled_from(_WEIRD))
    records = st.lists(st.tuples(st.sampled_from([0.1, 0.3, -0.2]), st.lists(edit, max_size=4)), min_size=1, max_size=5)

    @settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(records, st.sampled_from(_WEIRD))
    def check(specs: list[tuple[float, list[tuple[str, Any]]]], clean_value: Any) -> None:
        root = tmp_path_factory.mktemp("fuzz")
        rows = []
        for i, (pdr, edits) in enumerate(specs):
            row = rec(i, pdr)
            for key, value in edits:
                row[key] = nested[key](value) if key in nested else value
            rows.append(row)
        try:
            write(root / "runs" / "a", rows, {"model": "m", "dataset": "sst2", "mode": "choices",
                                              "clean": [{"prompt_id": "c", "score": clean_value, "ci95": clean_value}]})
        except (ValueError, OverflowError):
            return  # Python's json cannot write this value either
        try:
            report = build_report([root / "runs"])
            report.write(root / "out", ["md", "csv", "html", "latex", "png", "svg"])
        except PromptRobustError as exc:
            assert "\n" not in str(exc)
        else:
            assert repr(report).startswith("Report(")

    check()
