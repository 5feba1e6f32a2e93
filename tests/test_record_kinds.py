"""Every record says what it measured (issue 19): a kind on every record, one
settings value as the grouping key, old run folders still read, and reports
that never pool kinds."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from promptrobust.cli.main import main
from promptrobust.engine.analysis.report import build_report
from promptrobust.engine.measuring.statistics import summarize_pdrs
from promptrobust.engine.measuring.records import AttackRecord, infer_kind, read_jsonl
from promptrobust.engine.measuring.settings import MeasurementSettings
from tests.fixtures.run_folders.make_v010 import make

V010 = Path(__file__).parent / "fixtures" / "run_folders" / "v010" / "runs"


def records_by_folder(runs: Path) -> dict[str, list[dict]]:
    """{command: rows} for the five runs make() writes (named by what the folder name says)."""
    out: dict[str, list[dict]] = {}
    for folder in sorted(p for p in runs.iterdir() if p.is_dir() and not p.name.startswith(".")):
        rows = read_jsonl(folder / "results.jsonl") if (folder / "results.jsonl").exists() else []
        command = next((c for c in ("eval", "transfer", "defend") if f"_{c}_" in folder.name), "run")
        if command == "run" and rows:
            command = "attack"
        out[command] = rows
    return out


def test_kinds_of_old_records_are_inferred_from_what_they_hold() -> None:
    found = records_by_folder(V010)
    assert all("kind" not in r for rows in found.values() for r in rows)  # 0.1.0 wrote no kind
    kinds = {cmd: {AttackRecord.from_dict(r).kind for r in rows} for cmd, rows in found.items() if rows}
    assert kinds == {"attack": {"attack"}, "eval": {"pair"}, "transfer": {"transfer"}, "defend": {"defense"}}
    transfer = AttackRecord.from_dict(found["transfer"][0])
    assert transfer.source_model == "hf:fake-source" and transfer.model == "hf:fake-target"
    assert AttackRecord.from_dict(found["defend"][0]).defense == "spellcheck"


@pytest.mark.parametrize(("row", "kind"), [
    ({"kind": "transfer"}, "transfer"),
    ({"settings": {"analysis": "eval"}, "adversarial_given": True}, "pair"),
    ({"settings": {"undefended_prompt": "x", "source_model": "m"}, "adversarial_given": True}, "defense"),
    ({"settings": {"source_model": "m"}, "adversarial_given": True}, "transfer"),
    ({"adversarial_given": True}, "pair"),
    ({"settings": {"recipe": "greedy"}}, "attack"),
    ({}, "attack"),
])
def test_the_inference_rule(row: dict, kind: str) -> None:
    assert infer_kind(row) == kind


def test_a_record_with_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="kind must be one of"):
        AttackRecord(model="m", dataset="d", prompt_id="p", attack="a", clean_prompt="c", clean_score=1.0, kind="guess")


def test_settings_value_only_gives_a_budget_to_a_search() -> None:
    row = {"mode": "generate", "parser": "last_word", "max_new_tokens": 20, "samples": 8, "seed": 0, "budget": None,
           "shots": 0, "metric": "accuracy", "attack_options": {"mlm": "/m"}}
    attack = MeasurementSettings.of(row).for_kind("attack")
    pair = MeasurementSettings.of(row).for_kind("pair")
    assert "budget unlimited" in attack.label() and "mlm=/m" in attack.label()
    assert "budget" not in pair.label() and "budget" not in pair.to_dict()
    assert MeasurementSettings.of({**row, "mode": "choices"}).parser is None  # generate-only fields blank in choices
    assert attack != MeasurementSettings.of({**row, "seed": 1}).for_kind("attack")  # seed is part of the key


def _comparable(report) -> dict[str, list[dict]]:
    """Every table's long rows without what differs between two runs of the same commands
    (folder names, so the order of rows tied on them, wall time)."""
    drop = {"source", "wall_seconds"}
    return {t.name: sorted(repr(sorted((k, v) for k, v in row.items() if k not in drop)) for row in t.long)
            for t in report.tables}


def test_old_run_folders_report_identically_to_the_current_writer(tmp_path: Path) -> None:
    """The committed 0.1.0 folders and the same commands run now give the same report."""
    make(tmp_path)
    old = build_report([V010], figures=False)
    new = build_report([tmp_path / "runs"], figures=False)
    assert [(s.kind, s.setting) for s in old.sections] == [(s.kind, s.setting) for s in new.sections]
    old_tables, new_tables = _comparable(old), _comparable(new)
    # Records now also carry each adversarial prompt's substitutions and sentence similarity,
    # which 0.1.0 did not record: that table is the one addition; every other table is equal.
    assert set(new_tables) - set(old_tables) == {"adversarial_prompts_meaning"}
    new_tables.pop("adversarial_prompts_meaning")
    # ...and the meaning verdict (issue 30), which 0.1.0 did not record either: the acceptable-only
    # APDR differs (old records are "not checked"), the APDR over all adversarial prompts does not.
    old_all, new_all = (sorted(repr(sorted((k, v) for k, v in row.items() if k.startswith("all_")))
                               for row in r.table("apdr_acceptable").long) for r in (old, new))
    assert old_all == new_all
    for name in ("apdr_acceptable", "not_acceptable"):
        old_tables.pop(name, None), new_tables.pop(name, None)
    assert old_tables == new_tables
    # The same content; the current writer's folders also say which software made them (0.1.0's did not).
    assert old.meta == [line for line in new.meta if not line.startswith("made with: promptrobust ")]
    assert any(line.startswith("made with: promptrobust ") for line in new.meta)


def test_one_runs_folder_of_every_kind_reports_the_attack_apdr_of_attack_records_alone(tmp_path: Path) -> None:
    """The issue's check: pre run --attack, pre eval --prompts PAIRS, pre transfer and pre defend
    write into one runs/ folder; pre report gives the attack APDR of the attack records alone."""
    make(tmp_path)
    runs = tmp_path / "runs"
    found = records_by_folder(runs)
    assert {r["kind"] for r in found["attack"]} == {"attack"}
    assert {r["kind"] for r in found["eval"]} == {"pair"}
    assert {(r["kind"], r["source_model"]) for r in found["transfer"]} == {("transfer", "hf:fake-source")}
    assert {(r["kind"], r["defense"]) for r in found["defend"]} == {("defense", "spellcheck")}

    report_dir = tmp_path / "report"
    assert main(["report", str(runs), "--output-dir", str(report_dir), "--format", "md,csv", "--quiet"]) == 0
    report = build_report([runs], figures=False)
    attack_only = [r for r in found["attack"] if r["status"] == "attacked"]
    by_attack = {(row["attack"], row["dataset"]): row for row in report.table("apdr_attack_x_dataset").long}
    for attack in ("deepwordbug", "checklist"):
        expected = summarize_pdrs([r for r in attack_only if r["attack"] == attack])
        cell = by_attack[(attack, "rotten_tomatoes")]
        assert (cell["mean"], cell["count"]) == (pytest.approx(expected.mean), expected.n)
    # The given pairs have PDR 0.625; the attacks 0: pooled, deepwordbug would not be 0.
    assert by_attack[("deepwordbug", "all")]["mean"] == pytest.approx(0.0)
    models = {row["model"] for row in report.table("apdr_model_x_dataset").long}
    assert models == {"hf:fake-source"}  # the transfer target is not an attacked model
    cost = {row["attack"]: row["records"] for row in report.table("cost_by_attack").long}
    assert cost == {"deepwordbug": 2, "checklist": 2}
    # Pairs, transfers and defenses only in their own sections.
    kinds = {s.kind: [t.name for t in s.tables] for s in report.sections}
    assert set(kinds) == {"clean", "attack", "pair", "transfer", "defense"}
    assert kinds["pair"] == ["pairs_apdr"]
    assert kinds["transfer"] == ["transfer_source_x_target", "transfer_by_attack"]
    assert kinds["defense"] == ["defense_with_without"]
    pair = report.table("pairs_apdr").long[0]
    assert (pair["mean"], pair["count"]) == (pytest.approx(0.625), 2)
    matrix = report.table("transfer_source_x_target").long
    assert {(r["source model"], r["target model"]) for r in matrix} == {("hf:fake-source", "hf:fake-target"), ("hf:fake-source", "all")}
    md = (report_dir / "report.md").read_text(encoding="utf-8")
    pair_section = md.split("## Given pairs")[1].split("\n## ")[0]
    assert "budget" not in pair_section.split("\n")[0]  # no budget printed for pairs: no search ran
    # Clean tables: every prompt with its interval and flag, and what the means average.
    clean = report.table("clean_prompts")
    assert all(row["ci95"] is not None and row["at_chance"] in (True, False) for row in clean.long)
    assert "every distinct prompt listed" in report.table("clean_model_x_dataset").note
