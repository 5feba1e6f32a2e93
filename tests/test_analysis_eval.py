"""Scoring prompt files and clean/adversarial pairs (engine.analysis.prompt_eval)
and `pre eval`: a fake model at the backend boundary, everything else real
(scheduler, evaluator, task, statistics, run folder)."""

from __future__ import annotations

import argparse
import asyncio

import orjson
import pytest

from promptrobust.cli import eval_cmd
from promptrobust.engine.analysis.prompt_eval import PromptFileError, PromptItem, evaluate_prompts, read_prompt_file
from promptrobust.engine.errors import PromptRobustError
from promptrobust.engine.runs.session import Session
from promptrobust.engine.measuring.settings import EvaluationSettings
from tests.fixtures.analysis.fake_model import REVIEWS, factory, patch_backend, rt_samples

CLEAN = "Determine the sentiment of this review: positive or negative."
TYPO = "Determine the sentimnet of this review: positive or negative."
ZZQ = "Determine the sentiment of this review zzq: positive or negative."


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="pre")
    sub = parser.add_subparsers(dest="command")
    eval_cmd.add_parser(sub, argparse.HelpFormatter)
    return parser.parse_args(["eval", "--data-file", str(REVIEWS), "--no-progress", *argv])


def only_run(out_dir):
    (run,) = [p for p in out_dir.iterdir() if not p.name.startswith(".")]
    return run


def test_read_prompt_file_formats(tmp_path):
    (tmp_path / "a.txt").write_text("# comment\nfirst prompt\n\nsecond prompt\n")
    assert [(i.id, i.prompt) for i in read_prompt_file(tmp_path / "a.txt")] == [("p2", "first prompt"), ("p4", "second prompt")]
    (tmp_path / "b.jsonl").write_text('{"id": "x", "clean": "c", "adversarial": "a", "attack": "tb", "source_model": "t5", "shots": 3}\n\n')
    (item,) = read_prompt_file(tmp_path / "b.jsonl")
    assert (item.id, item.clean, item.adversarial, item.attack, item.is_pair) == ("x", "c", "a", "tb", True)
    assert item.extra == {"source_model": "t5", "source_shots": 3}  # a record field's name: where the pair came from
    (tmp_path / "c.csv").write_text('Prompt,shots\n"Say, is it good?",3\nplain,0\n')
    items = read_prompt_file(tmp_path / "c.csv")
    assert [i.prompt for i in items] == ["Say, is it good?", "plain"]
    assert items[0].extra == {"source_shots": 3}  # whole numbers group with a JSONL file's
    (tmp_path / "d.json").write_text('["one", {"text": "two", "prompt_type": "role"}]')
    assert [(i.prompt, i.prompt_type) for i in read_prompt_file(tmp_path / "d.json")] == [("one", "given"), ("two", "role")]


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
def test_bad_prompt_files_raise_one_line_errors(tmp_path, name, content, message):
    (tmp_path / name).write_text(content)
    with pytest.raises(PromptFileError, match=message):
        read_prompt_file(tmp_path / name)


def run_library(items, **kwargs):
    built, build = factory(rt_samples(8))

    async def go():
        async with Session(use_cache=False, backend_factory=build) as session:
            return await evaluate_prompts(
                session, items, model="hf:fake", settings=EvaluationSettings(data_file=str(REVIEWS), limit=8), **kwargs
            )

    return asyncio.run(go())


def test_pairs_carry_pdr_interval_mcnemar_and_extra_columns():
    items = [
        PromptItem(id="typo", clean=CLEAN, adversarial=TYPO, attack="textbugger", extra={"source_model": "t5"}),
        PromptItem(id="same", clean=CLEAN, adversarial=CLEAN + " Thanks."),
    ]
    result = run_library(items)
    typo, same = result.records
    # The fake answers every sample right, unless the instruction has a trigger word:
    # then "positive" for all, i.e. 3 of the 8 reviews right.
    assert (typo.clean_score, typo.adversarial_score, typo.pdr) == (1.0, 3 / 8, pytest.approx(5 / 8))
    assert typo.clean_sample_scores == [1.0] * 8 and sum(typo.adversarial_sample_scores) == 3
    # 5 discordant samples, all one way: exact McNemar p = 2 * 0.5**5.
    assert typo.mcnemar_p == pytest.approx(0.0625)
    lo, hi = typo.pdr_ci95
    assert lo <= 5 / 8 <= hi and hi <= 1.0
    assert typo.clean_ci95[0] < 1.0 == typo.clean_ci95[1]
    assert typo.extra == {"source_model": "t5"} and typo.settings == {"analysis": "eval"}
    assert typo.mode == "generate" and typo.shots == 0 and typo.samples == 8  # the paper's protocol by default
    assert typo.chance_rate == pytest.approx(5 / 8) and not typo.at_chance
    assert same.pdr == 0.0 and same.mcnemar_p == 1.0 and same.attack == "given"
    # one clean prompt shared by both pairs is scored (and listed) once
    assert [c.prompt.id for c in result.clean] == ["typo"]
    assert {a["attack"]: a["n"] for a in result.apdr} == {"textbugger": 1, "given": 1}


def test_a_clean_score_of_zero_is_skipped_not_averaged():
    back = "Answer backwards: positive or negative."
    items = [PromptItem(id="zero", clean=back, adversarial=TYPO, attack="x"), PromptItem(id="ok", clean=CLEAN, adversarial=TYPO, attack="x")]
    result = run_library(items)
    zero, ok = result.records
    assert (zero.status, zero.pdr, zero.pdr_ci95) == ("skipped_clean_zero", None, None)
    (apdr,) = result.apdr
    assert (apdr["n"], apdr["skipped"], apdr["pdr_mean"]) == (1, 1, pytest.approx(5 / 8))


def test_single_prompts_scores_with_intervals_and_chance_flag():
    result = run_library([CLEAN, TYPO])
    assert [c.score for c in result.clean] == [1.0, 0.375]
    assert not result.records
    assert result.clean[1].at_chance  # 3/8 right: its interval holds the majority rate 5/8
    assert not result.clean[0].at_chance
    doc = result.to_dict()  # the one results.json layout
    assert {c["prompt_id"]: c["score"] for c in doc["results"]["clean"]} == {"p1": 1.0, "p2": 0.375}
    assert doc["results"]["records"]["total"] == 0 and doc["models"][0]["name"] == "hf:fake"


def test_dataset_and_prompt_type_columns_filter_rows():
    items = [
        PromptItem(id="a", clean=CLEAN, adversarial=TYPO, dataset="qqp", prompt_type="task"),
        PromptItem(id="b", clean=CLEAN, adversarial=TYPO, dataset="rotten_tomatoes", prompt_type="role"),
        PromptItem(id="c", clean=CLEAN, adversarial=ZZQ, dataset="rotten_tomatoes", prompt_type="task"),
    ]
    result = run_library(items, prompt_type="task")
    assert [r.prompt_id for r in result.records] == ["c"]
    assert any("other datasets (qqp)" in n for n in result.notes)
    # promptbench's sst2 pairs apply to rotten_tomatoes, which uses sst2's prompts
    result = run_library([PromptItem(id="s", clean=CLEAN, adversarial=TYPO, dataset="sst2")])
    assert [r.prompt_id for r in result.records] == ["s"] and not result.notes


def test_pairs_written_by_the_promptbench_importer_are_read(tmp_path):
    from promptrobust.tasks.promptbench_import import AdversarialPair, write_pairs_jsonl

    pair = AdversarialPair(id="pb-1", model="chatgpt", shot="few", dataset="sst2", attack="textbugger", clean=CLEAN,
                           adversarial=TYPO, clean_score=0.9, attacked_score=0.5, dropped=0.44, source="x.md")
    path = write_pairs_jsonl([pair], tmp_path / "pairs.jsonl")
    result = run_library(path)
    (r,) = result.records
    assert r.attack == "textbugger" and r.pdr == pytest.approx(5 / 8)
    assert r.extra["source_model"] == "chatgpt" and r.extra["source_shots"] == 3 and r.extra["reported_clean"] == 0.9


def test_pre_eval_pairs_run_folder_and_output(tmp_path, monkeypatch, capsys):
    patch_backend(monkeypatch, rt_samples(8))
    f = tmp_path / "pairs.jsonl"
    f.write_bytes(
        orjson.dumps({"id": "typo", "clean": CLEAN, "adversarial": TYPO, "attack": "textbugger", "source_model": "t5"}) + b"\n"
        + orjson.dumps({"id": "same", "clean": CLEAN, "adversarial": CLEAN + " Thanks."}) + b"\n"
    )
    args = parse(["--prompts", str(f), "--model", "hf:fake", "--no-cache", "--output-dir", str(tmp_path / "out"),
                  "--limit", "8", "--log-samples"])
    assert args.handler(args) == 0
    run = only_run(tmp_path / "out")
    rows = {r["prompt_id"]: r for r in map(orjson.loads, (run / "results.jsonl").read_bytes().splitlines())}
    assert rows["typo"]["pdr"] == pytest.approx(5 / 8) and rows["typo"]["extra"] == {"source_model": "t5"}
    # Both prompts were scored once for all pairs, concurrently: no cost is a pair's own.
    assert rows["typo"]["cost"]["shared"] is True and rows["typo"]["cost"]["model_requests"] == 0
    summary = orjson.loads((run / "results.json").read_bytes())
    assert summary["samples"]["evaluated"] == 8 and summary["dataset"] == "rotten_tomatoes"
    clean = summary["results"]["clean"]
    assert clean[0]["ci95"][1] == 1.0 and clean[0]["at_chance"] is False
    assert summary["results"]["records"]["by_kind"] == {"pair": 2} and summary["samples"]["logged"] == 3 * 8
    samples = (run / "samples.jsonl").read_bytes().splitlines()
    assert len(samples) == 3 * 8  # three distinct prompts x 8 samples
    assert (run / "results.parquet").is_file() and "Pairs" in (run / "results.md").read_text()
    out = capsys.readouterr().out
    assert "0.6250" in out and "0.0625" in out  # PDR and McNemar p


def test_pre_eval_and_pre_report_print_the_same_apdr(tmp_path, monkeypatch, capsys):
    from promptrobust.cli.main import main
    from promptrobust.engine.measuring.statistics import summarize_pdrs

    patch_backend(monkeypatch, rt_samples(8))
    f = tmp_path / "pairs.jsonl"
    pairs = [("a", CLEAN, TYPO), ("b", CLEAN, CLEAN + " Thanks."), ("c", CLEAN + " Now.", ZZQ)]
    f.write_bytes(b"".join(
        orjson.dumps({"id": i, "clean": c, "adversarial": a, "attack": "textbugger", "source_model": f"m-{i}"}) + b"\n"
        for i, c, a in pairs
    ))
    args = parse(["--prompts", str(f), "--model", "hf:fake", "--no-cache", "--output-dir", str(tmp_path / "out")])
    assert args.handler(args) == 0
    eval_out = capsys.readouterr().out
    run = only_run(tmp_path / "out")
    records = [orjson.loads(x) for x in (run / "results.jsonl").read_bytes().splitlines()]
    s = summarize_pdrs(records)
    assert s.n == 3 and s.mean == pytest.approx(1.25 / 3)
    assert s.std == pytest.approx(0.360844, abs=1e-6)  # sample std (ddof=1) of {5/8, 0, 5/8}
    cell = f"{s.mean:.2f} ± {s.std:.2f} [{s.ci95[0]:.2f}, {s.ci95[1]:.2f}]"
    assert f"APDR textbugger: {cell}" in eval_out

    assert main(["report", str(run), "--output-dir", str(tmp_path / "report"), "--format", "md",
                 "--group-by", "source_model"]) == 0
    report_out = capsys.readouterr().out
    assert cell.replace("[", "\\[").replace("]", "\\]") in report_out  # Markdown shows brackets as typed: \[ renders [
    assert "m-a" in report_out and "m-c" in report_out  # the pairs file's column groups the report


def test_pre_eval_bad_input_is_one_line(tmp_path):
    with pytest.raises(Exception, match="limit must be a whole number >= 1"):
        eval_cmd.handle(parse(["--prompts", "x.txt", "--limit", "0"]))
    with pytest.raises(PromptRobustError, match="does not exist"):
        eval_cmd.handle(parse(["--prompts", str(tmp_path / "missing.txt")]))


def test_pre_eval_says_the_base_models_shots_once_before_scoring(tmp_path, monkeypatch, capsys):
    from promptrobust.cli import output
    from promptrobust.cli.main import main
    from promptrobust.testing.fake_openai import FakeOpenAIServer

    prompts = tmp_path / "p.txt"
    prompts.write_text(CLEAN + "\n")
    said: list[tuple[str, int]] = []
    real_say = output.say
    with FakeOpenAIServer() as srv:
        monkeypatch.setattr(output, "say", lambda message: (said.append((message, len(srv.bodies))), real_say(message)))
        code = main(["eval", "--prompts", str(prompts), "--model", "openai:fake-model", "--model-args",
                     f"base_url={srv.url},api=completions,base_model=true", "--limit", "4", "--mode", "choices",
                     "--no-progress", "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(tmp_path / "out")])
    assert code == 0
    notes = [(m, sent) for m, sent in said if "is a base model: 3-shot" in m]
    assert len(notes) == 1, said  # said once (not again after scoring)
    message, sent = notes[0]
    assert sent == 0 and message.endswith("set shots to 0 for zero-shot (--shots)")  # before any request
    assert "is a base model" not in capsys.readouterr().out
    results = orjson.loads((only_run(tmp_path / "out") / "results.json").read_bytes())
    assert any("is a base model: 3-shot" in n for n in results["results"]["notes"])  # and recorded
