"""Prompt files: the built-in sets, user files, and errors."""

from pathlib import Path

import pytest

from promptrobust.tasks import get_prompt, load_prompts
from promptrobust.tasks.errors import PromptFileError, UnknownPromptError, UnknownTaskError
from promptrobust.tasks.prompt_sets import PROMPT_DIR, read_prompt_file

FIX = Path(__file__).parent / "fixtures" / "tasks"


def test_user_file_is_read_with_types_and_languages():
    ps = read_prompt_file(FIX / "prompts_extra.toml", "sst2")
    assert [(p.id, p.type, p.language) for p in ps] == [("user-01", "task", "en"), ("user-02", "semantic", "fr")]
    assert ps[0].text == 'Say whether the {review} is "positive" or negative.'
    assert ps[0].dataset == "sst2"


def test_duplicate_ids_and_missing_fields_name_the_file():
    with pytest.raises(PromptFileError, match=r"prompts_duplicate\.toml: duplicate prompt id 'dup-01'"):
        load_prompts("sst2", types=["task"], extra_files=[FIX / "prompts_duplicate.toml"])
    with pytest.raises(PromptFileError, match=r"prompts_missing_text\.toml: prompt #1: missing field 'text'"):
        read_prompt_file(FIX / "prompts_missing_text.toml", "sst2")


def test_bad_toml_and_bad_type(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text('[[prompt]]\nid = "a"\ntype = "task"\ntext = "unterminated\n')
    with pytest.raises(PromptFileError, match="bad.toml: invalid TOML"):
        read_prompt_file(f, "sst2")
    g = tmp_path / "type.toml"
    g.write_text('[[prompt]]\nid = "a"\ntype = "funny"\ntext = "x"\n')
    with pytest.raises(PromptFileError, match="field 'type' is 'funny'"):
        read_prompt_file(g, "sst2")


@pytest.mark.skipif(not (PROMPT_DIR / "sst2.toml").is_file(), reason="built-in prompt files not written yet")
def test_builtin_sets_filter_and_shared_prompts():
    en = load_prompts("sst2", types=["task", "role"])
    assert len(en) == 20 and {p.type for p in en} == {"task", "role"}
    zh = load_prompts("sst2", types=["semantic"], languages=["zh"])
    assert zh and all(p.type == "semantic" and p.language == "zh" for p in zh)
    # rotten_tomatoes uses SST-2's prompts, attributed to rotten_tomatoes
    rt = load_prompts("rotten_tomatoes", types=["task", "role"])
    assert [p.text for p in rt] == [p.text for p in en] and {p.dataset for p in rt} == {"rotten_tomatoes"}
    first = en[0]
    assert get_prompt("SST-2", first.id) == first
    both = load_prompts("sst2", types=["task"], extra_files=[FIX / "prompts_extra.toml"])
    assert "user-01" in {p.id for p in both}


def test_unknown_prompt_id_and_dataset():
    with pytest.raises(UnknownPromptError, match="unknown prompt id 'nope-99' for sst2"):
        get_prompt("sst2", "nope-99", extra_files=[FIX / "prompts_extra.toml"])
    with pytest.raises(UnknownTaskError):
        load_prompts("not-a-dataset")
    with pytest.raises(ValueError, match="unknown prompt type"):
        load_prompts("sst2", types=["fancy"])
