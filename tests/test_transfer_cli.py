"""`pre transfer` on a fixture source run, with a fake target model at the
backend boundary (scheduler, cache, evaluator and task are real)."""

from __future__ import annotations

import argparse
import csv
import shutil

import orjson
import pytest

from promptrobust.cli import transfer
from tests.fixtures.analysis.fake_model import (
    REVIEWS,
    SOURCE_RUN,
    patch_backend,
    rt_samples,
)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="pre")
    sub = parser.add_subparsers(dest="command")
    transfer.add_parser(sub, argparse.HelpFormatter)
    return parser.parse_args(["transfer", "--data-file", str(REVIEWS), "--no-progress", *argv])


def only_run(out_dir):
    runs = [p for p in out_dir.iterdir() if not p.name.startswith(".")]
    assert len(runs) == 1, runs
    return runs[0]


def test_transfer_pdr_matches_hand_computation(tmp_path, monkeypatch, capsys):
    samples = rt_samples(8, seed=0)
    positives = sum(s.target == "positive" for s in samples)
    assert positives == 3
    built = patch_backend(monkeypatch, samples)
    args = parse(["--source", str(SOURCE_RUN), "--model", "hf:fake-target", "--cache", str(tmp_path / "c.sqlite"),
                  "--output-dir", str(tmp_path / "out")])
    assert args.handler(args) == 0
    assert len(built) == 1

    run = only_run(tmp_path / "out")
    rows = [orjson.loads(line) for line in (run / "results.jsonl").read_bytes().splitlines()]
    by_attack = {r["attack"]: r for r in rows}
    assert set(by_attack) == {"textbugger", "textfooler", "checklist"}
    triggered = positives / 8  # the fake model answers "positive" to every sample
    for name in ("textbugger", "textfooler"):
        r = by_attack[name]
        assert r["model"] == "hf:fake-target"
        assert r["clean_score"] == 1.0
        assert r["adversarial_score"] == pytest.approx(triggered)
        assert r["pdr"] == pytest.approx(1 - positives / 8)
        assert r["samples"] == 8 and r["seed"] == 0
        assert r["settings"]["source_model"] == "fake-source"
        assert r["settings"]["source_pdr"] == 0.5
        assert r["mode"] == "choices" and r["shots"] == 0  # the source records' own settings
        assert r["mcnemar_p"] == pytest.approx(0.0625) and r["pdr_ci95"][0] <= r["pdr"] <= r["pdr_ci95"][1]
    assert by_attack["checklist"]["pdr"] == 0.0

    # APDR per (source -> target, attack): one record each here, so std 0.
    with open(run / "transfer.csv", newline="") as fh:
        table = {row["attack"]: row for row in csv.DictReader(fh)}
    assert float(table["textbugger"]["pdr_mean"]) == pytest.approx(1 - positives / 8)
    assert table["textbugger"]["pdr_std"] == ""  # one record: no spread
    assert table["checklist"]["source_model"] == "fake-source"
    assert table["checklist"]["target_model"] == "hf:fake-target"
    assert "fake-source" in (run / "transfer.md").read_text()
    assert (run / "results.parquet").is_file()
    out = capsys.readouterr().out
    assert "APDR fake-source -> hf:fake-target [textbugger]" in out


def test_transfer_apdr_is_mean_and_std_over_records(tmp_path, monkeypatch):
    # Two source runs: the same textbugger pair plus a harmless one -> PDRs {x, 0}.
    samples = rt_samples(8, seed=0)
    positives = sum(s.target == "positive" for s in samples)
    patch_backend(monkeypatch, samples)
    second = tmp_path / "src2"
    shutil.copytree(SOURCE_RUN, second)
    rows = [orjson.loads(x) for x in (second / "results.jsonl").read_bytes().splitlines()]
    rows[0]["adversarial_prompt"] = rows[0]["clean_prompt"] + " ok"
    (second / "results.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    args = parse(["--source", str(SOURCE_RUN), str(second), "--attack", "textbugger", "--model", "hf:fake-target",
                  "--no-cache", "--output-dir", str(tmp_path / "out"), "--all-records"])
    assert args.handler(args) == 0
    run = only_run(tmp_path / "out")
    with open(run / "transfer.csv", newline="") as fh:
        (row,) = list(csv.DictReader(fh))
    x = 1 - positives / 8
    assert int(row["n"]) == 2
    assert float(row["pdr_mean"]) == pytest.approx(x / 2)
    assert float(row["pdr_std"]) == pytest.approx(x / 2**0.5)  # sample std (ddof=1) of {x, 0}, as pre report


def test_transfer_bad_input_is_a_user_error(tmp_path):
    from promptrobust.engine.errors import PromptRobustError

    with pytest.raises(PromptRobustError, match="does not exist"):
        transfer.handle(parse(["--source", str(tmp_path / "nope"), "--model", "hf:x"]))
    with pytest.raises(PromptRobustError, match="no results.jsonl"):
        transfer.handle(parse(["--source", str(tmp_path), "--model", "hf:x"]))
    with pytest.raises(PromptRobustError, match="needs a target model") as caught:
        transfer.handle(parse(["--source", str(SOURCE_RUN)]))
    assert caught.value.setting == "model"  # the CLI names --model
    with pytest.raises(PromptRobustError, match="no source record is on dataset"):
        transfer.handle(parse(["--source", str(SOURCE_RUN), "--model", "hf:x", "--dataset", "sst2"]))


def test_transfer_takes_the_most_vulnerable_prompt_per_group_by_default(tmp_path, monkeypatch, capsys):
    """The paper's selection: per source model, dataset, attack and prompt type, the adversarial prompt
    with the highest source PDR; --all-records re-scores every one; results.json and each record say which."""
    samples = rt_samples(8, seed=0)
    patch_backend(monkeypatch, samples)
    second = tmp_path / "src2"
    shutil.copytree(SOURCE_RUN, second)
    rows = [orjson.loads(x) for x in (second / "results.jsonl").read_bytes().splitlines()]
    source_pdr = rows[0]["pdr"]
    rows[0]["adversarial_prompt"] = rows[0]["clean_prompt"] + " ok"
    rows[0]["pdr"] = source_pdr + 0.25  # more vulnerable on the source than the first run's prompt
    rows.append({**rows[0], "adversarial_prompt": rows[0]["clean_prompt"] + " fine", "pdr": 0.9, "prompt_type": "role",
                 "prompt_id": "sst2-role-01", "run_key": ""})  # another prompt type: a group of its own
    (second / "results.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    for extra, out in (([], "paper"), (["--all-records"], "all")):
        args = parse(["--source", str(SOURCE_RUN), str(second), "--attack", "textbugger", "--model", "hf:fake-target",
                      "--no-cache", "--output-dir", str(tmp_path / out), *extra])
        assert args.handler(args) == 0
    paper, every = only_run(tmp_path / "paper"), only_run(tmp_path / "all")
    chosen = [orjson.loads(x) for x in (paper / "results.jsonl").read_bytes().splitlines()]
    assert sorted(r["settings"]["source_pdr"] for r in chosen) == [pytest.approx(source_pdr + 0.25), 0.9]
    assert {r["prompt_type"] for r in chosen} == {"task", "role"}
    assert all(r["settings"]["selection"] == "most_vulnerable" for r in chosen)
    assert orjson.loads((paper / "results.json").read_bytes())["configs"]["sources"]["selection"] == "most_vulnerable"
    assert len((every / "results.jsonl").read_bytes().splitlines()) == 3
    assert orjson.loads((every / "results.json").read_bytes())["configs"]["sources"]["selection"] == "all"
    err = capsys.readouterr().err
    assert err.count("transfer selection most_vulnerable: 2 of 3 source record(s)") == 1
    from promptrobust.engine.analysis.report import build_report

    notes = [n for s in build_report([paper], figures=False).sections for n in s.notes]
    assert any(n.startswith("transfer selection: most_vulnerable") for n in notes)
