"""`pre eval --prompts FILE`: prompt files in every format, and PDR of pairs
(fake model at the backend boundary, everything else real)."""

from __future__ import annotations

import argparse

import orjson
import pytest

from promptrobust.cli import eval_cmd
from promptrobust.cli.errors import UserError
from tests.fixtures.analysis.fake_model import REVIEWS, patch_backend, rt_samples

CLEAN = "Determine the sentiment of this review: positive or negative."
TYPO = "Determine the sentimnet of this review: positive or negative."


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="pre")
    sub = parser.add_subparsers(dest="command")
    eval_cmd.add_parser(sub, argparse.HelpFormatter)
    return parser.parse_args(["eval", "--data-file", str(REVIEWS), *argv])


def test_read_prompt_file_formats(tmp_path):
    (tmp_path / "a.txt").write_text("# comment\nfirst prompt\n\nsecond prompt\n")
    assert [(i.id, i.prompt) for i in eval_cmd.read_prompt_file(tmp_path / "a.txt")] == [
        ("p2", "first prompt"), ("p4", "second prompt")]
    (tmp_path / "b.jsonl").write_text('{"id": "x", "clean": "c", "adversarial": "a", "attack": "tb"}\n\n')
    (item,) = eval_cmd.read_prompt_file(tmp_path / "b.jsonl")
    assert (item.id, item.clean, item.adversarial, item.attack, item.is_pair) == ("x", "c", "a", "tb", True)
    (tmp_path / "c.csv").write_text('Prompt\n"Say, is it good?"\nplain\n')
    assert [i.prompt for i in eval_cmd.read_prompt_file(tmp_path / "c.csv")] == ["Say, is it good?", "plain"]
    (tmp_path / "d.json").write_text('["one", {"text": "two"}]')
    assert [i.prompt for i in eval_cmd.read_prompt_file(tmp_path / "d.json")] == ["one", "two"]


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("e.jsonl", '{"clean": "c"}\n', "needs both"),
        ("e.jsonl", "{not json\n", "line 1 is not valid JSON"),
        ("e.csv", "foo,bar\n1,2\n", "header row"),
        ("e.txt", "\n\n", "holds no prompts"),
        ("e.jsonl", '{"prompt": "a"}\n{"clean": "c", "adversarial": "d"}\n', "mixes single prompts"),
        ("e.jsonl", '{"id": "k", "prompt": "a"}\n{"id": "k", "prompt": "b"}\n', "appears more than once"),
    ],
)
def test_bad_prompt_files_raise_user_errors(tmp_path, name, content, message):
    (tmp_path / name).write_text(content)
    with pytest.raises(UserError, match=message):
        eval_cmd.read_prompt_file(tmp_path / name)


def test_eval_pairs_reports_pdr(tmp_path, monkeypatch, capsys):
    samples = rt_samples(8)
    assert sum(s.target == "positive" for s in samples) == 3
    patch_backend(monkeypatch, samples)
    f = tmp_path / "pairs.jsonl"
    f.write_bytes(
        orjson.dumps({"id": "typo", "clean": CLEAN, "adversarial": TYPO, "attack": "textbugger"}) + b"\n"
        + orjson.dumps({"id": "same", "clean": CLEAN, "adversarial": CLEAN + " Thanks."}) + b"\n"
    )
    args = parse(["--prompts", str(f), "--model", "hf:fake", "--no-cache", "--output-dir", str(tmp_path / "out"), "--limit", "8"])
    assert args.handler(args) == 0
    (run,) = [p for p in (tmp_path / "out").iterdir() if not p.name.startswith(".")]
    rows = {r["prompt_id"]: r for r in map(orjson.loads, (run / "results.jsonl").read_bytes().splitlines())}
    # clean: all 8 right; typo: the fake answers "positive" to all -> 3/8 right.
    assert rows["typo"]["clean_score"] == 1.0
    assert rows["typo"]["adversarial_score"] == pytest.approx(3 / 8)
    assert rows["typo"]["pdr"] == pytest.approx(5 / 8)
    assert rows["typo"]["attack"] == "textbugger"
    assert rows["same"]["pdr"] == 0.0 and rows["same"]["attack"] == "given"
    summary = orjson.loads((run / "results.json").read_bytes())
    assert summary["samples"] == 8 and summary["dataset"] == "rotten_tomatoes"
    assert "0.6250" in capsys.readouterr().out


def test_eval_single_prompts(tmp_path, monkeypatch):
    samples = rt_samples(8)
    patch_backend(monkeypatch, samples)
    f = tmp_path / "prompts.txt"
    f.write_text(CLEAN + "\n" + TYPO + "\n")
    args = parse(["--prompts", str(f), "--model", "hf:fake", "--no-cache", "--output-dir", str(tmp_path / "out")])
    assert args.handler(args) == 0
    (run,) = [p for p in (tmp_path / "out").iterdir() if not p.name.startswith(".")]
    summary = orjson.loads((run / "results.json").read_bytes())
    assert [round(r["score"], 4) for r in summary["prompts"]] == [1.0, 0.375]
    assert summary["mean_score"] == pytest.approx((1 + 0.375) / 2)
    assert (run / "results.csv").read_text().startswith("id,score,prompt")


def test_eval_bad_limit_and_missing_file(tmp_path):
    with pytest.raises(UserError, match="--limit must be at least 1"):
        eval_cmd.handle(parse(["--prompts", "x.txt", "--limit", "0"]))
    with pytest.raises(UserError, match="does not exist"):
        eval_cmd.handle(parse(["--prompts", str(tmp_path / "missing.txt")]))
