"""The paper's own material from the command line: a promptbench checkout's
semantic prompts for the Semantic attack, its few-shot prompt files, `pre list
prompts --promptbench`, `pre eval --promptbench-adv`, mislabelled archive
blocks, and promptbench's {content} placeholder (fixtures: our own text in
promptbench's formats)."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

from promptrobust.cli.main import main
from promptrobust.tasks import get_task
from promptrobust.attacks.registry import INSERTION_ATTACKS
from promptrobust.tasks.promptbench_import import load_adversarial_prompts, load_promptbench_prompts

classify_pair = INSERTION_ATTACKS.shown_by
from promptrobust.testing.fake_openai import FakeOpenAIServer

FIX = Path(__file__).parent / "fixtures" / "promptbench"
PAPER, PACKAGE, MISLABELLED = FIX / "paper", FIX / "package", FIX / "mislabelled"
N = 8
SAMPLES = get_task("rotten_tomatoes").load(limit=N, seed=0)
LABELS = {s.fields["sentence"]: s.target for s in SAMPLES}


def _answer(text: str) -> str:
    """Right on every sample, except with the French semantic prompt: always 'negative'."""
    if "opinion of this review" in text:
        return "negative"
    sentence = text.rsplit("Sentence: ", 1)[-1].split("\nAnswer:", 1)[0]
    return LABELS.get(sentence, "negative")


@pytest.fixture()
def server():
    with FakeOpenAIServer(answer=_answer) as srv:
        yield srv


def _run(tmp_path: Path, srv: FakeOpenAIServer, *extra: str, command: str = "run") -> tuple[int, Path]:
    out = tmp_path / "runs"
    code = main([
        command, "--model", "openai:fake-model", "--model-args", f"base_url={srv.url}", "--mode", "choices",
        "--limit", str(N), "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(out), "--no-progress", *extra,
    ])
    folders = list(out.iterdir()) if out.exists() else []
    return code, (folders[0] if folders else out)


def test_semantic_attack_scores_the_checkouts_semantic_prompts(tmp_path, server) -> None:  # noqa: ANN001
    code, folder = _run(tmp_path, server, "--promptbench", str(PAPER), "--attack", "semantic", "--top-k", "1")
    assert code == 0
    (rec,) = [orjson.loads(x) for x in (folder / "results.jsonl").read_bytes().splitlines()]
    want = [(p.language, p.text) for p in load_promptbench_prompts(PAPER, "rotten_tomatoes", ["semantic"])]
    assert want and [(lang, text) for lang, text, _ in rec["prompt_scores"]] == want
    assert rec["settings"]["prompt_set"] == f"promptbench checkout {PAPER}"
    assert rec["adversarial_prompt"] == "Tell me if the opinion of this review is positive or negative."
    assert rec["adversarial_score"] == pytest.approx(sum(s.target == "negative" for s in SAMPLES) / N)
    assert rec["prompt_id"].startswith("pb-sst2-task-")


def test_without_a_checkout_the_semantic_set_is_our_own(tmp_path, server) -> None:  # noqa: ANN001
    code, folder = _run(tmp_path, server, "--prompt", "sst2-task-01", "--attack", "semantic")
    assert code == 0
    (rec,) = [orjson.loads(x) for x in (folder / "results.jsonl").read_bytes().splitlines()]
    assert rec["settings"]["prompt_set"].startswith("promptrobust's own semantic prompts")
    assert len(rec["prompt_scores"]) > 2


def test_shots_reach_the_importer(tmp_path, server) -> None:  # noqa: ANN001
    code, folder = _run(tmp_path, server, "--promptbench", str(PAPER), "--shots", "3")
    assert code == 0
    summary = orjson.loads((folder / "results.json").read_bytes())
    ids = [c["prompt_id"] for c in summary["results"]["clean"]]
    assert ids and all("-fs-" in i for i in ids)


def test_list_prompts_from_a_checkout(capsys) -> None:  # noqa: ANN001
    assert main(["list", "prompts", "--dataset", "sst2", "--promptbench", str(PAPER)]) == 0
    out = capsys.readouterr().out
    assert "pb-sst2-task-01" in out and "pb-sst2-semantic-fr-01" in out and "-fs-" not in out
    assert main(["list", "prompts", "--dataset", "sst2", "--promptbench", str(PAPER), "--shots", "3", "--type", "task"]) == 0
    out = capsys.readouterr().out
    assert "pb-sst2-task-fs-01" in out and "semantic" not in out
    assert main(["list", "prompts", "--dataset", "sst2", "--promptbench", str(FIX / "nope")]) == 2


def test_eval_promptbench_adv_from_the_command_line(tmp_path, server, capsys) -> None:  # noqa: ANN001
    code, folder = _run(tmp_path, server, "--promptbench-adv", str(PAPER), "--source-model", "toymodel",
                        "--dataset", "rotten_tomatoes", command="eval")
    assert code == 0
    recs = [orjson.loads(x) for x in (folder / "results.jsonl").read_bytes().splitlines()]
    pairs = load_adversarial_prompts(PAPER, model="toymodel", dataset="sst2")
    assert [r["adversarial_prompt"] for r in recs] == [p.adversarial for p in pairs]
    assert {r["extra"]["source_model"] for r in recs} == {"toymodel"}
    assert "attacked prompt without an original prompt" in capsys.readouterr().err  # the importer's notes are said
    code, _ = _run(tmp_path / "x", server, "--promptbench-adv", str(PAPER), "--source-model", "gpt9", command="eval")
    assert code == 2
    assert "no adversarial prompts for model 'gpt9'; the files have: toymodel" in capsys.readouterr().err
    code, _ = _run(tmp_path / "y", server, "--prompts", "x.txt", "--source-model", "toymodel", command="eval")
    assert code == 2


def test_mislabelled_blocks_are_relabelled_or_left_out_with_a_note() -> None:
    assert not load_adversarial_prompts(MISLABELLED).relabelled, "headings are taken as given without a content check"
    pairs = load_adversarial_prompts(MISLABELLED, content=INSERTION_ATTACKS)
    by_heading = {(p.labelled_attack or p.attack, p.attack) for p in pairs}
    # the bertattack block holds CheckList prompts, the deepwordbug block StressTest ones
    assert ("bertattack", "checklist") in by_heading and ("deepwordbug", "stresstest") in by_heading
    # the checklist block changes words: which attack made it is unknown, so it is left out
    assert not any(p.clean.startswith("Tell me whether") and p.attack == "checklist" and not p.labelled_attack
                   for p in pairs)
    assert len(pairs) == 4
    notes = "\n".join(pairs.relabelled)
    assert "'## bertattack' block: 2 pair(s) hold checklist prompts" in notes
    assert "'## checklist' block: 1 pair(s) change words" in notes and "left out" in notes
    assert "'## deepwordbug' block: 1 pair(s) hold stresstest prompts" in notes
    row = next(p for p in pairs if p.labelled_attack == "bertattack").to_row()
    assert row["attack"] == "checklist" and row["labelled_attack"] == "bertattack"
    # a correctly labelled archive is left as it is
    assert not load_adversarial_prompts(PAPER, content=INSERTION_ATTACKS).relabelled
    assert not load_adversarial_prompts(PACKAGE, content=INSERTION_ATTACKS).relabelled


def test_classify_pair_by_content() -> None:
    clean = "Say if the review is 'positive' or 'negative'."
    assert classify_pair(clean, "Say if the review is 'positive' or 'negative' aB3dE5gH7j. ") == "checklist"
    assert classify_pair(clean, "Say if the review is 'positive' or 'negative'  and true is true  and true is true .") == "stresstest"
    assert classify_pair(clean, "Say if the review is 'positive' or 'negative'  and false is not true .") == "stresstest"
    assert classify_pair(clean, "Tell if the review is 'positive' or 'negative'.") is None  # a word swap
    assert classify_pair(clean, "Say if the review is 'positive' or 'negative' everything.") is None  # a word
    assert classify_pair('Answer "equivalent" or "not_equivalent".', 'Answer "equivalent" or "not_equivalent Q1w2E3r4T5".') == "checklist"


def test_content_placeholder_is_refused_in_one_line(tmp_path, capsys) -> None:  # noqa: ANN001
    code = main(["run", "--prompt-text", "Classify {content} as positive or negative.", "--output-dir", str(tmp_path / "r")])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert "{content}" in err and "remove {content}" in err and len(err.splitlines()) == 1
    prompts = tmp_path / "p.txt"
    prompts.write_text("Review: {content}\nIs it positive or negative?\n")
    assert main(["eval", "--prompts", str(prompts), "--output-dir", str(tmp_path / "e")]) == 2
    assert "holds promptbench's {content} placeholder" in capsys.readouterr().err
    assert not (tmp_path / "r").exists() and not (tmp_path / "e").exists()


def test_checklist_inserts_the_checkouts_own_strings(tmp_path, server) -> None:  # noqa: ANN001
    """`--promptbench` switches CheckList to the checkout's fixed strings (the fixture's 3, written for
    promptrobust in promptbench's shape), in both layouts; without a checkout our seeded 50 run."""
    strings = {PACKAGE: ("Qm4TzR8wLe", "p0XvB2nHsK", "Jd7YcW5aGu"), PAPER: ("Tv8cLq2WxN", "g5HmR0ePsY", "Zb3KuJ7dAo")}
    for checkout, own in strings.items():
        code, folder = _run(tmp_path / checkout.name, server, "--promptbench", str(checkout), "--attack", "checklist",
                            "--top-k", "1")
        assert code == 0
        (rec,) = [orjson.loads(x) for x in (folder / "results.jsonl").read_bytes().splitlines()]
        assert rec["settings"]["strings"] == f"promptbench's fixed list of 3 ({checkout})"
        assert rec["cost"]["candidate_evaluations"] == 3
        assert any(s in rec["adversarial_prompt"] for s in own)
    code, folder = _run(tmp_path / "ours", server, "--prompt", "sst2-task-01", "--attack", "checklist")
    assert code == 0
    (rec,) = [orjson.loads(x) for x in (folder / "results.jsonl").read_bytes().splitlines()]
    assert rec["settings"]["strings"].startswith("drawn with seed 2306")
    assert not any(s in rec["adversarial_prompt"] for own in strings.values() for s in own)


def test_a_checkout_without_checklist_strings_is_refused_in_one_line(tmp_path, server, capsys) -> None:  # noqa: ANN001
    bare = tmp_path / "bare"
    (bare / "promptbench").mkdir(parents=True)
    shutil.copytree(PACKAGE / "promptbench" / "prompts", bare / "promptbench" / "prompts")
    code, _ = _run(tmp_path, server, "--promptbench", str(bare), "--attack", "checklist", "--top-k", "1")
    assert code == 2
    err = capsys.readouterr().err
    assert "CheckList strings" in err and "promptbench checkout" in err


def test_eval_prompts_relabels_a_pairs_file_as_the_archive_reader_does(tmp_path, server, capsys) -> None:  # noqa: ANN001
    """`pre eval --prompts` checks each pair's label against its content as `--promptbench-adv` does: an
    archive file given as --prompts, and a JSONL of rows exported from a mislabelled block."""
    code, folder = _run(tmp_path / "md", server, "--prompts", str(MISLABELLED / "othermodel_fewshot.md"), command="eval")
    assert code == 0
    recs = [orjson.loads(x) for x in (folder / "results.jsonl").read_bytes().splitlines()]
    assert sorted(r["attack"] for r in recs) == ["checklist", "checklist", "stresstest", "stresstest"]
    assert sum(r["extra"].get("labelled_attack") == "bertattack" for r in recs) == 2
    rows = [
        {"id": "a", "attack": "bertattack", "clean": "Say if the review is 'positive' or 'negative'.",
         "adversarial": "Say if the review is 'positive' or 'negative' aB3dE5gH7j."},
        {"id": "b", "attack": "checklist", "clean": "Say if the review is 'positive' or 'negative'.",
         "adversarial": "Tell if the review is 'positive' or 'negative'."},
        {"id": "c", "attack": "textfooler", "clean": "Say if the review is 'positive' or 'negative'.",
         "adversarial": "State if the review is 'positive' or 'negative'."},
        {"id": "d", "attack": "my-own", "clean": "Say if the review is 'positive' or 'negative'.",
         "adversarial": "Say if the review is 'positive' or 'negative' Zz9Yy8Xx7W."},
    ]
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_bytes(b"\n".join(orjson.dumps(r) for r in rows))
    capsys.readouterr()
    code, folder = _run(tmp_path / "jsonl", server, "--prompts", str(pairs), command="eval")
    assert code == 0
    recs = {r["prompt_id"]: r for r in (orjson.loads(x) for x in (folder / "results.jsonl").read_bytes().splitlines())}
    assert set(recs) == {"a", "c", "d"}  # b changes words under a CheckList label: left out, with a note
    assert recs["a"]["attack"] == "checklist" and recs["a"]["extra"]["labelled_attack"] == "bertattack"
    assert recs["c"]["attack"] == "textfooler" and "labelled_attack" not in recs["c"]["extra"]
    assert recs["d"]["attack"] == "my-own"  # not one of the paper's attacks: the file's own name stays
    said = capsys.readouterr()
    text = said.out + said.err
    assert "1 pair(s) labelled bertattack hold checklist prompts" in text
    assert "1 pair(s) labelled checklist change words" in text and "left out" in text
