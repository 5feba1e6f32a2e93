"""Reading the paper's prompts and published adversarial prompts from a
promptbench checkout (fixtures in promptbench's two layouts, our own text)."""

from pathlib import Path

import orjson
import pytest

from promptrobust.tasks import get_task
from promptrobust.tasks.base import Sample
from promptrobust.tasks.promptbench_import import (
    PromptbenchImportError,
    find_layout,
    load_adversarial_prompts,
    load_promptbench_prompts,
    normalize_prompt_text,
    parse_adversarial_file,
    write_pairs_jsonl,
)

FIX = Path(__file__).parent / "fixtures" / "promptbench"
PAPER, PACKAGE = FIX / "paper", FIX / "package"


def test_layouts_are_recognised_from_root_package_or_prompts_folder():
    assert find_layout(PAPER).kind == "paper"
    assert find_layout(PAPER / "prompts").kind == "paper"
    assert find_layout(PACKAGE).kind == "package"
    assert find_layout(PACKAGE / "promptbench").kind == "package"
    assert find_layout(PAPER).adv_dir == PAPER / "adv_prompts"
    assert find_layout(PACKAGE).adv_dir == PACKAGE / "promptbench" / "prompts" / "adv_prompts"


def test_paper_layout_task_role_and_semantic_prompts():
    ps = load_promptbench_prompts(PAPER, "sst2", ["task", "role", "semantic"])
    assert [(p.id, p.type, p.language) for p in ps] == [
        ("pb-sst2-task-01", "task", "en"), ("pb-sst2-task-02", "task", "en"), ("pb-sst2-role-01", "role", "en"),
        ("pb-sst2-semantic-zh-01", "semantic", "zh"), ("pb-sst2-semantic-fr-01", "semantic", "fr"),
    ]
    assert ps[0].text == "Say if the review sounds 'positive' or 'negative':"
    assert {p.dataset for p in ps} == {"sst2"}
    few = load_promptbench_prompts(PAPER, "sst2", ["task", "role"], shot="few")
    assert [p.id for p in few] == ["pb-sst2-task-fs-01", "pb-sst2-role-fs-01"]
    assert few[0].text.startswith("After the examples")
    only_fr = load_promptbench_prompts(PAPER, "sst2", ["task", "semantic"], languages=["fr"])
    assert [p.id for p in only_fr] == ["pb-sst2-semantic-fr-01"]


def test_rotten_tomatoes_reads_sst2_prompts_and_translation_semantic_key():
    rt = load_promptbench_prompts(PAPER, "rotten_tomatoes", ["task"])
    assert [p.id for p in rt] == ["pb-sst2-task-01", "pb-sst2-task-02"] and {p.dataset for p in rt} == {"rotten_tomatoes"}
    ko = load_promptbench_prompts(PAPER, "iwslt", ["semantic"])
    assert [(p.id, p.text) for p in ko] == [("pb-iwslt-semantic-ko-01", "Please change sentence of {} into {}.")]


def test_package_layout_drops_the_content_tail_and_unifies_slots():
    ps = load_promptbench_prompts(PACKAGE, "sst2", ["task", "role"])
    assert [p.text for p in ps] == ["Say if the review sounds 'positive' or 'negative':",
                                    "As a film critic, call the snippet 'positive' or 'negative':"]
    assert load_promptbench_prompts(PACKAGE, "math", ["task"])[0].text == "Work out this problem about {}:"
    assert load_promptbench_prompts(PACKAGE, "iwslt", ["task"])[0].text == "Put this sentence from {} into {}:"
    # a tail pasted inside a quote is cut out and the prompt joined back together
    assert load_promptbench_prompts(PACKAGE, "wnli", ["task"])[0].text == 'Reply "entailment" or "not_entailment", a single word.'
    # the package has one prompt set for zero- and few-shot: same ids either way
    assert [p.id for p in load_promptbench_prompts(PACKAGE, "sst2", ["task"], shot="few")] == ["pb-sst2-task-01"]
    assert normalize_prompt_text("From {soruce_lang} to {target_lang}:\nQuestion: {content}\nAnswer: ") == "From {} to {}:"


def test_imported_slots_are_filled_by_the_task_like_the_paper():
    mmlu = get_task("mmlu")
    text = load_promptbench_prompts(PAPER, "mmlu", ["task"])[0].text
    s = Sample("mmlu:x:0", {"question": "Q?", "subject": "high_school_physics", "A": "a", "B": "b", "C": "c", "D": "d"}, "A")
    out = mmlu.render(text, s)
    assert out.startswith("Pick the right letter for this question on high school physics: 'A'")
    iwslt = get_task("iwslt")
    t = load_promptbench_prompts(PAPER, "iwslt", ["task"])[0].text
    s2 = Sample("iwslt:en-de:0", {"text": "Good morning.", "source_language": "English", "target_language": "German"}, "Guten Morgen.")
    rendered = iwslt.render(t, s2)
    assert rendered.startswith("Put this sentence from English into German:")
    assert "Translate from" not in rendered  # the direction is already in the instruction


def test_files_are_parsed_never_run():
    # the fixture's task_oriented.py starts with `raise SystemExit(...)`
    assert load_promptbench_prompts(PAPER, "sst2", ["task"])


def test_adversarial_pairs_from_a_paper_checkout():
    pairs = load_adversarial_prompts(PAPER)
    assert [p.id for p in pairs] == [
        "pb-toymodel-zeroshot-sst2-textfooler-01", "pb-toymodel-zeroshot-sst2-textfooler-02",
        "pb-toymodel-zeroshot-sst2-stresstest-01", "pb-toymodel-zeroshot-mmlu-deepwordbug-01",
    ]
    first, second = pairs[0], pairs[1]
    assert (first.model, first.shot, first.dataset, first.attack) == ("toymodel", "zero", "sst2", "textfooler")
    assert first.clean == "Say if the review sounds 'positive' or 'negative':"
    assert first.adversarial == "Tell if the critique seems 'positive' or 'negative':"
    assert (first.clean_score, first.attacked_score, first.dropped) == (0.9, 0.605, 0.295)
    assert "critécism" in second.adversarial and second.dropped == pytest.approx(-0.02)  # UTF-8 bytes decoded; negative drop kept
    assert pairs[3].adversarial == "Pcik the rigt letter for this question on {}: 'A', 'B', 'C', or 'D'."
    assert pairs.skipped == ["toymodel_zeroshot.md line 22: attacked prompt without an original prompt (skipped)"]


def test_adversarial_filters_and_file_and_folder_paths():
    assert [p.id for p in load_adversarial_prompts(PAPER, dataset="rotten_tomatoes")][:1] == [
        "pb-toymodel-zeroshot-sst2-textfooler-01"]
    assert len(load_adversarial_prompts(PAPER, model="TOYMODEL", dataset="mmlu", shot="zero")) == 1
    one = parse_adversarial_file(PACKAGE / "promptbench" / "prompts" / "adv_prompts" / "toymodel_fewshot.md")
    assert [(p.id, p.shot, p.attack) for p in one] == [("pb-toymodel-fewshot-math-checklist-01", "few", "checklist")]
    assert len(load_adversarial_prompts(PACKAGE / "promptbench" / "prompts" / "adv_prompts")) == 1
    with pytest.raises(PromptbenchImportError, match=r"no adversarial prompts for model 'gpt9'; the files have: toymodel"):
        load_adversarial_prompts(PAPER, model="gpt9")
    with pytest.raises(PromptbenchImportError, match=r"no adversarial prompts for dataset 'qqp' \(qqp\); the files have: mmlu, sst2"):
        load_adversarial_prompts(PAPER, dataset="qqp")


def test_pairs_file_is_what_pre_eval_reads(tmp_path):
    from promptrobust.engine.analysis.prompt_eval import read_prompt_file

    out = write_pairs_jsonl(load_adversarial_prompts(PAPER, dataset="sst2"), tmp_path / "pairs.jsonl")
    rows = [orjson.loads(line) for line in out.read_text().splitlines()]
    assert rows[0]["source_model"] == "toymodel" and rows[0]["shots"] == 0 and rows[0]["reported_clean"] == 0.9
    items = read_prompt_file(out)
    assert [(i.id, i.attack, i.is_pair) for i in items][:2] == [
        ("pb-toymodel-zeroshot-sst2-textfooler-01", "textfooler", True),
        ("pb-toymodel-zeroshot-sst2-textfooler-02", "textfooler", True)]
    assert items[0].clean == rows[0]["clean"] and items[0].adversarial == rows[0]["adversarial"]
    if hasattr(items[0], "extra"):  # the other columns ride along for grouping
        assert items[0].extra["source_model"] == "toymodel" and items[0].dataset == "sst2"


def test_wrong_paths_give_one_line_errors(tmp_path):
    with pytest.raises(PromptbenchImportError, match=r"does not exist; pass the folder of a clone of github.com/microsoft/promptbench"):
        load_promptbench_prompts(tmp_path / "nope", "sst2")
    with pytest.raises(PromptbenchImportError, match=r"no promptbench prompt files .*; pass the root folder"):
        load_promptbench_prompts(tmp_path, "sst2")
    with pytest.raises(PromptbenchImportError, match=r"does not exist; pass a promptbench checkout"):
        load_adversarial_prompts(tmp_path / "missing.md")
    with pytest.raises(PromptbenchImportError, match=r"no prompts for dataset 'qqp' \(it has: iwslt, mmlu, sst2\)"):
        load_promptbench_prompts(PAPER, "qqp", ["task"])
    with pytest.raises(PromptbenchImportError, match="unknown prompt type"):
        load_promptbench_prompts(PAPER, "sst2", ["fancy"])
    bad = tmp_path / "x_zeroshot.md"
    bad.write_text("# x_zeroshot\n\n## textfooler\n\nOriginal prompt: a\nAttacked prompt: b'b'\nOriginal acc: 1.00%, attacked acc: 0.00%, dropped acc: 1.00%\n")
    with pytest.raises(PromptbenchImportError, match=r"line 7: a prompt pair before any '# <dataset>' heading"):
        parse_adversarial_file(bad)
    for err in (PromptbenchImportError("x"),):
        assert isinstance(err, ValueError) and "\n" not in str(err)


@pytest.mark.parametrize("poison", [
    "'a' " + "+ 'a' " * 200_000,  # issue 32: a 200k-term expression was a RecursionError/MemoryError traceback
    "[" * 100_000 + "]" * 100_000,
    "-" * 200_000 + "1",
    "x" + ".y" * 200_000,
])
def test_deep_expressions_in_prompt_files_are_refused_before_parsing(tmp_path, poison):
    import shutil

    checkout = tmp_path / "checkout"
    shutil.copytree(PAPER, checkout)
    target = checkout / "prompts" / "zero_shot" / "task_oriented.py"
    target.write_text(target.read_text() + f"\nPOISON = {{'sst2': [{poison}]}}\n")
    with pytest.raises(PromptbenchImportError, match=r"task_oriented.py line \d+: an expression nests deeper than 100 levels"):
        load_promptbench_prompts(checkout, "sst2", ["task"])


def test_the_depth_bound_passes_real_prompt_files_and_counts_levels():
    from promptrobust.tasks.promptbench_import import MAX_EXPRESSION_DEPTH, check_expression_depth

    for path in PAPER.rglob("*.py"):
        check_expression_depth(path.read_text(), str(path))  # the fixtures hold promptbench's shapes
    check_expression_depth("X = " + "[" * (MAX_EXPRESSION_DEPTH - 1) + "]" * (MAX_EXPRESSION_DEPTH - 1), "ok")
    check_expression_depth("X = [" + "'a' + 'b', " * 50_000 + "]", "wide, not deep")  # width is no depth
    with pytest.raises(PromptbenchImportError, match="deeper than"):
        check_expression_depth("X = " + "[" * (MAX_EXPRESSION_DEPTH + 1) + "]" * (MAX_EXPRESSION_DEPTH + 1), "deep")


def test_a_deep_attacked_prompt_line_is_one_line_error(tmp_path):
    bad = tmp_path / "toymodel_zeroshot.md"
    bad.write_text("# sst2\n\n## textfooler\n\nOriginal prompt: a\nAttacked prompt: b'b'" + " + b'b'" * 200_000 + "\n"
                   "Original acc: 1.00%, attacked acc: 0.00%, dropped acc: 1.00%\n")
    with pytest.raises(PromptbenchImportError, match=r"line 6: an expression nests deeper"):
        parse_adversarial_file(bad)


def test_the_cli_says_a_deep_prompt_file_in_one_line(tmp_path, capsys):
    import shutil

    from promptrobust.cli.main import main

    checkout = tmp_path / "checkout"
    shutil.copytree(PAPER, checkout)
    target = checkout / "prompts" / "zero_shot" / "task_oriented.py"
    target.write_text(target.read_text() + "\nPOISON = {'sst2': ['a'" + " + 'a'" * 200_000 + "]}\n")
    assert main(["list", "prompts", "--dataset", "sst2", "--promptbench", str(checkout)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nests deeper than 100 levels" in err[0] and "Traceback" not in err[0]
