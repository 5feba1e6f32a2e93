"""The paper's Semantic statistic in every APDR grid (issue 40 items 3 and 4): a record that carries
its prompt set's statistic (``prompt_set_pdr``) enters every grid, its "all" columns, the
acceptable-only table and the model studies as the mean PDR over its set, marked; the worst prompt
of the set stays in the Semantic table. Rewrites get a verdict of their own in the acceptable-only
view. The joint attack's "adversarial prompt + adversarial samples" score keeps its interval.

The run is real: `pre run --attack semantic,stresstest` against a real HTTP server (the fake
OpenAI server) with the paper's prompt files of the fixture checkout."""

from __future__ import annotations

import math
from pathlib import Path

import orjson
import pytest

from promptrobust.cli.main import main
from promptrobust.engine.analysis.report import Report, build_report
from promptrobust.engine.analysis.report.acceptable import NEEDS_A_HUMAN
from promptrobust.engine.analysis.report.tables import SET_MEAN_MARK
from promptrobust.tasks import get_task
from promptrobust.testing.fake_openai import FakeOpenAIServer

FIX = Path(__file__).parent / "fixtures" / "promptbench" / "paper"
N = 10
LABELS = {s.fields["sentence"]: s.target for s in get_task("rotten_tomatoes").load(limit=N, seed=0)}
FLIP = {"positive": "negative", "negative": "positive"}


def _answer(text: str) -> str:
    """Right on every sample, except: the fixture's French semantic prompt always answers 'negative'
    (its set's worst prompt), and StressTest's "and false is not true" flips the first two samples."""
    sentence = text.rsplit("Sentence: ", 1)[-1].split("\nAnswer:", 1)[0]
    gold = LABELS.get(sentence, "negative")
    if "opinion of this review" in text:
        return "negative"
    if "and false is not true" in text and sentence in list(LABELS)[:2]:
        return FLIP[gold]
    return gold


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    root = tmp_path_factory.mktemp("semantic_grids")
    out = root / "runs"
    with FakeOpenAIServer(answer=_answer) as srv:
        assert main(["run", "--model", "openai:fake-model", "--model-args", f"base_url={srv.url}", "--mode", "choices",
                     "--limit", str(N), "--cache", str(root / "c.sqlite"), "--output-dir", str(out), "--no-progress",
                     "--promptbench", str(FIX), "--attack", "semantic,stresstest", "--top-k", "1"]) == 0
    (folder,) = list(out.iterdir())
    records = [orjson.loads(x) for x in (folder / "results.jsonl").read_bytes().splitlines()]
    return out, records


@pytest.fixture(scope="module")
def report(run: tuple[Path, list[dict]]) -> Report:
    return build_report([run[0]], figures=False)


def _set_record(records: list[dict]) -> dict:
    (rec,) = [r for r in records if r.get("prompt_set_pdr")]  # decided by the field, as the report does
    return rec


def _other(records: list[dict]) -> dict:
    (rec,) = [r for r in records if not r.get("prompt_set_pdr")]
    return rec


def _cell(report: Report, table: str, row: str, col: str) -> str:
    t = report.table(table)
    j = t.header.index(col)
    (line,) = [r for r in t.rows if r[0] == row]
    return line[j]


def test_the_run_has_a_set_whose_worst_and_mean_differ(run: tuple[Path, list[dict]]) -> None:
    rec = _set_record(run[1])
    stat = rec["prompt_set_pdr"]
    assert stat["prompts"] == 2 and rec["pdr"] > stat["mean"] > 0  # the worst of the set is not its mean
    assert _other(run[1])["pdr"] == pytest.approx(0.2)  # StressTest's drop: 2 of 10 samples flipped


def test_every_grid_cell_of_a_set_record_is_its_set_mean_marked(run: tuple[Path, list[dict]], report: Report) -> None:
    rec = _set_record(run[1])
    stat = rec["prompt_set_pdr"]
    lo, hi = stat["ci95"]
    expected = f"{stat['mean']:.2f} [{lo:.2f}, {hi:.2f}] {SET_MEAN_MARK}"  # one record: its own interval, marked
    attack, dataset, model = rec["attack"], rec["dataset"], rec["model"]
    assert _cell(report, "apdr_attack_x_dataset", attack, dataset) == expected
    assert _cell(report, "apdr_attack_x_dataset", attack, "all") == expected
    assert _cell(report, "apdr_model_x_attack", model, attack) == expected
    by_attack = report.table("apdr_attack_x_dataset")
    (long,) = [r for r in by_attack.long if r["attack"] == attack and r["dataset"] == dataset]
    assert long["mean"] == pytest.approx(stat["mean"]) and long["set_means"] == 1
    assert [long["ci_low"], long["ci_high"]] == pytest.approx(stat["ci95"])
    # the other attack's cells are unmarked
    assert SET_MEAN_MARK not in _cell(report, "apdr_attack_x_dataset", _other(run[1])["attack"], dataset)


def test_all_columns_average_the_set_mean_never_the_worst(run: tuple[Path, list[dict]], report: Report) -> None:
    rec, other = _set_record(run[1]), _other(run[1])
    mean = (rec["prompt_set_pdr"]["mean"] + other["pdr"]) / 2
    worst_mean = (rec["pdr"] + other["pdr"]) / 2
    assert not math.isclose(mean, worst_mean)
    for table, row in (("apdr_model_x_dataset", rec["model"]), ("apdr_prompt_type_x_dataset", None),
                       ("apdr_model_x_attack", rec["model"])):
        t = report.table(table)
        (long,) = [r for r in t.long if list(r.values())[1] == "all" and (row is None or list(r.values())[0] == row)]
        assert long["mean"] == pytest.approx(mean), table
        assert long["set_means"] == 1
        (line,) = t.rows
        assert line[-1].startswith(f"{mean:.2f} ± ") and line[-1].endswith(SET_MEAN_MARK)
        assert long["ci_low"] is not None and long["ci_low"] <= mean <= long["ci_high"]  # pooled: still an interval


def test_the_worst_of_the_set_stays_in_its_own_table(run: tuple[Path, list[dict]], report: Report) -> None:
    rec = _set_record(run[1])
    (line,) = report.table("semantic_worst_and_mean").rows
    assert line[4].startswith(f"{rec['pdr']:.3f} [") and line[5].startswith(f"{rec['prompt_set_pdr']['mean']:.3f} [")


def test_notes_say_what_the_mark_means_only_where_a_set_is(report: Report) -> None:
    t = report.table("apdr_attack_x_dataset")
    assert SET_MEAN_MARK in t.note and "mean PDR over its prompt set" in t.note
    assert "mean PDR over its prompt set" in t.statistic
    doc = report.latex(None)
    assert r"\dag{}" in doc and "[U+2020]" not in doc  # the mark is set as a dagger, never as a code point
    v010 = build_report([Path(__file__).parent / "fixtures" / "run_folders" / "v010" / "runs"], figures=False)
    for table in v010.tables:
        assert "Semantic" not in table.note and "Semantic" not in table.statistic, table.name


def test_rewrites_have_a_verdict_of_their_own_in_the_acceptable_view(run: tuple[Path, list[dict]],
                                                                     report: Report) -> None:
    rec = _set_record(run[1])
    t = report.table("apdr_acceptable")
    (line,) = [r for r in t.rows if r[0] == rec["attack"]]
    row = dict(zip(t.header, line))
    assert row["APDR all"].startswith(f"{rec['prompt_set_pdr']['mean']:.2f}") and row["APDR all"].endswith(SET_MEAN_MARK)
    assert row["APDR acceptable"] == NEEDS_A_HUMAN and row["needs a human"] == "1" and row["not checked"] == "0"
    assert "needs a human" in t.note
    left_out = report.table("not_acceptable")
    (why,) = [r for r in left_out.rows if r[0] == rec["attack"]]
    assert why[5].startswith(NEEDS_A_HUMAN)


def test_a_person_can_judge_each_rewrite_and_the_acceptable_view_then_speaks_about_semantic(
        run: tuple[Path, list[dict]], report: Report, tmp_path: Path) -> None:
    """The review sheet lists each rewrite of the set (the check cannot judge one); a person who keeps
    every rewrite but the worst makes the set acceptable through the rewrites kept, whose mean PDR comes
    from the record's prompt scores; one who judges every rewrite changed makes it changed."""
    import csv
    import io

    rec = _set_record(run[1])
    sheet = list(csv.DictReader(io.StringIO(report.review_sheet.decode("utf-8"))))
    rewrites = [r for r in sheet if r["attacks"] == rec["attack"]]
    assert sorted(r["adversarial_prompt"] for r in rewrites) == sorted(x[1] for x in rec["prompt_scores"])
    assert {r["check"] for r in rewrites} == {NEEDS_A_HUMAN}
    assert rewrites[0]["adversarial_prompt"] == rec["adversarial_prompt"]  # the most damaging first: the worst
    pdrs = {x[1]: 1 - x[2] / rec["clean_score"] for x in rec["prompt_scores"]}
    for verdicts, expected in (({rec["adversarial_prompt"]: "changed"}, "kept"), ({}, "changed")):
        for row in sheet:
            row["person"] = verdicts.get(row["adversarial_prompt"], "kept" if verdicts else "changed")
        filled = tmp_path / f"filled-{expected}.csv"
        with filled.open("w", encoding="utf-8", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(sheet[0]))
            writer.writeheader()
            writer.writerows(sheet)
        judged = build_report([run[0]], figures=False, meaning_verdicts=filled)
        (long,) = [r for r in judged.table("apdr_acceptable").long if r["attack"] == rec["attack"]]
        assert long["by_a_person"] == 1 and long["needs_a_human"] == 0
        if expected == "kept":
            kept = [v for text, v in pdrs.items() if text != rec["adversarial_prompt"]]
            assert long["acceptable_count"] == 1 and long["acceptable_mean"] == pytest.approx(sum(kept) / len(kept))
            assert long["acceptable_mean"] < rec["prompt_set_pdr"]["mean"]  # the worst rewrite left out
        else:
            assert long["acceptable_count"] == 0 and long["changed"] == 1
            (why,) = [r for r in judged.table("not_acceptable").rows if r[0] == rec["attack"]]
            assert why[5] == f"changed by a person: 0 of {len(pdrs)} rewrites kept, {len(pdrs)} changed"


def test_a_set_mean_enters_a_pooled_interval_through_replicates_of_its_own_interval() -> None:
    """The inner level of a set mean in the APDR bootstrap: normal draws with the s.d. its own 95%
    interval implies, the same draws wherever it is summarised."""
    import numpy as np

    from promptrobust.engine.measuring.statistics import interval_replicates, summarize_pdrs

    reps = interval_replicates(0.25, [0.05, 0.45])
    assert np.array_equal(reps, interval_replicates(0.25, [0.05, 0.45]))  # seeded by the numbers
    assert abs(float(np.mean(reps)) - 0.25) < 0.01 and abs(float(np.std(reps)) - 0.4 / 3.92) < 0.01
    fixed = {"status": "attacked", "pdr": 0.25, "clean_prompt": "a"}
    other = {"status": "attacked", "pdr": 0.35, "clean_prompt": "b"}
    narrow = summarize_pdrs([fixed, other]).ci95
    wide = summarize_pdrs([{**fixed, "pdr_replicates": reps}, other]).ci95
    assert narrow is not None and wide is not None and wide[1] - wide[0] > narrow[1] - narrow[0]
