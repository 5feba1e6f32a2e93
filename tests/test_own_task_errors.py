"""Bad input to a user's own task (issue 34, item 5), at library level: each case is a
``PromptRobustError`` (the CLI's exit code 2) with one line that names the file, the row or
key at fault and the fix, raised before anything is written. The CLI's own checks (exit
code 2, no run folder) come with ``pre run --task``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from promptrobust.engine.errors import PromptRobustError
from promptrobust.tasks import load_task_file, task_from_columns
from promptrobust.tasks.own import task_for_data_file

CSV = "ticket_id,body,queue\nT1,charged twice,BIL\nT2,app crashes,TEC\nT3,where is your office,OTH\n"
TOML = """\
name = "tickets"
data = "tickets.csv"
input = "body"
label = "queue"
id = "ticket_id"

[labels]
BIL = "billing"
TEC = "technical"
OTH = "other"
"""


def fails(action: Callable[[], object], *needles: str) -> str:
    """Run ``action``; it must raise one line of PromptRobustError holding every needle."""
    with pytest.raises(PromptRobustError) as info:
        action()
    message = str(info.value)
    assert "\n" not in message, message
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    return message


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "tickets.csv").write_text(CSV)
    (tmp_path / "tickets.toml").write_text(TOML)
    return tmp_path


def load(folder: Path, toml: str | None = None, csv: str | bytes | None = None) -> Callable[[], object]:
    """Write the variant, then the action that loads the task and its samples."""
    if toml is not None:
        (folder / "tickets.toml").write_text(toml)
    if isinstance(csv, bytes):
        (folder / "tickets.csv").write_bytes(csv)
    elif csv is not None:
        (folder / "tickets.csv").write_text(csv)
    return lambda: load_task_file(folder / "tickets.toml").load()


@pytest.fixture(autouse=True)
def nothing_written(folder: Path):
    """Every case leaves the folder as the case itself wrote it (no half-written output)."""
    yield
    assert not [p for p in listing(folder) if p not in ("tickets.csv", "tickets.toml", "tickets.yaml", "big.csv")]


def test_a_missing_input_column(folder: Path) -> None:
    fails(load(folder, TOML.replace('input = "body"', 'input = "text"')),
          "tickets.toml: key 'input'", "column 'text' is not in", "'body'", "set input to the column")


def test_a_missing_label_column(folder: Path) -> None:
    fails(load(folder, TOML.replace('label = "queue"', 'label = "team"')),
          "tickets.toml: key 'label'", "column 'team'", "'queue'", "set label")


def test_a_label_value_outside_the_mapping(folder: Path) -> None:
    fails(load(folder, csv=CSV + "T4,a new kind,SALES\n"),
          "tickets.csv row 4", "label value 'SALES'", "BIL, TEC, OTH", "map it to an answer word (", "key 'labels'")


def test_an_empty_file(folder: Path) -> None:
    fails(load(folder, csv=""), "tickets.csv", "empty", "add a header and rows")


def test_a_file_with_a_header_only(folder: Path) -> None:
    fails(load(folder, csv="ticket_id,body,queue\n"), "tickets.csv", "no rows", "add rows")


def test_duplicate_prompt_ids(folder: Path) -> None:
    prompts = '\n[[prompts]]\nid = "a"\ntext = "Route it."\n[[prompts]]\nid = "a"\ntext = "Route it again."\n'
    fails(load(folder, TOML.replace("\n[labels]", prompts + "\n[labels]")),
          "tickets.toml: key 'prompts'", "duplicate id 'a'", "ids must be unique")


def test_duplicate_sample_ids(folder: Path) -> None:
    fails(load(folder, csv=CSV + "T1,charged again,BIL\n"), "tickets.csv row 4", "duplicate sample id", "unique")


def test_a_template_without_the_input(folder: Path) -> None:
    fails(load(folder, TOML.replace('label = "queue"', 'label = "queue"\ntemplate = "Ticket follows."')),
          "tickets.toml: key 'template'", "never shows input column 'body'", "{body}")


def test_a_template_slot_that_names_no_column(folder: Path) -> None:
    fails(load(folder, TOML.replace('label = "queue"', 'label = "queue"\ntemplate = "Ticket: {bdy}"')),
          "tickets.toml: key 'template'", "{bdy} names no input column", "{body}")


def test_an_unknown_metric(folder: Path) -> None:
    fails(load(folder, TOML.replace('label = "queue"', 'label = "queue"\nmetric = "f1"')),
          "tickets.toml: key 'metric'", "unknown metric 'f1'", "accuracy, macro_f1")
    fails(load(folder, TOML.replace('label = "queue"', 'label = "queue"\nmetric = "bleu"')),
          "key 'metric'", "fits a free-text task")


def test_a_data_file_that_is_not_utf8(folder: Path) -> None:
    fails(load(folder, csv=CSV.encode() + "T4,caf\u00e9 bill,BIL\n".encode("latin-1")),
          "tickets.csv", "not UTF-8", "line 5", "save the file as UTF-8")


def test_a_task_file_that_is_not_utf8(folder: Path) -> None:
    (folder / "tickets.toml").write_bytes(TOML.replace("tickets", "tick\u00e9ts", 1).encode("latin-1"))
    fails(lambda: load_task_file(folder / "tickets.toml"), "tickets.toml", "not UTF-8", "save the task file as UTF-8")


def test_a_file_too_large_for_memory_is_refused_with_its_size(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (folder / "big.csv").write_text("ticket_id,body,queue\n" + "".join(f"T{i},ticket {i},BIL\n" for i in range(60_000)))
    monkeypatch.setenv("PRE_MAX_DATA_FILE_MB", "0.5")
    fails(load(folder, TOML.replace('data = "tickets.csv"', 'data = "big.csv"')),
          "big.csv", "all 60,000 rows would take at least", "more than pre's limit of 0.5 MB", "PRE_MAX_DATA_FILE_MB")


def test_a_name_that_collides_with_a_built_in(folder: Path) -> None:
    for name, builtin in (("sst2", "sst2"), ("SST-2", "sst2"), ("rt", "rotten_tomatoes")):
        fails(load(folder, TOML.replace('name = "tickets"', f'name = "{name}"')),
              "tickets.toml: key 'name'", f"built-in dataset {builtin}", "choose another name")


def test_an_unknown_key(folder: Path) -> None:
    fails(load(folder, TOML.replace("[labels]", "[lables]")), "tickets.toml: key 'lables'", "did you mean 'labels'")


def test_a_missing_key_and_a_bad_value(folder: Path) -> None:
    fails(load(folder, TOML.replace('input = "body"\n', "")), "tickets.toml: key 'input'", "missing")
    fails(load(folder, TOML.replace('input = "body"', "input = 3")), "tickets.toml: key 'input'", "column name")
    fails(load(folder, TOML.replace('TEC = "technical"', 'TEC = "tech support"')),
          "key 'labels'", "several words", "tech_support")
    fails(load(folder, TOML.replace('TEC = "technical"', 'TEC = "billing"')), "key 'labels'", "share the answer word")


def test_invalid_toml_and_a_yaml_task_file(folder: Path) -> None:
    fails(load(folder, TOML + "name = \n"), "tickets.toml", "invalid TOML")
    (folder / "tickets.yaml").write_text("name: tickets\n")
    fails(lambda: load_task_file(folder / "tickets.yaml"), "tickets.yaml", "YAML task files are not read yet", "TOML")


def test_few_shot_from_a_single_file_needs_a_source(folder: Path) -> None:
    task = load_task_file(folder / "tickets.toml")
    fails(lambda: task.fixed_few_shot(3), "task tickets", "no worked examples", "tickets.toml: key 'few_shot'", "0 shots")


def test_a_data_file_is_never_read_as_another_task(folder: Path) -> None:
    # given alone, a data file is not the default dataset whatever it holds
    fails(lambda: task_for_data_file(folder / "tickets.csv", None),
          "tickets.csv", "which task does this data file hold", "input_columns=", "task=FILE")
    # named as a built-in dataset, it must hold that dataset's columns
    fails(lambda: task_for_data_file(folder / "tickets.csv", "sst2"),
          "tickets.csv", "no column 'sentence'", "which sst2 reads", "'body'", "input_columns=")
    # a user's task reads the data its definition names, not another file
    (folder / "other.csv").write_text(CSV)
    task = load_task_file(folder / "tickets.toml")
    fails(lambda: task.load(data_file=str(folder / "other.csv")), "task tickets reads its data from", "change data")
    (folder / "other.csv").unlink()


def test_the_flags_form_names_its_parameters(folder: Path) -> None:
    csv = str(folder / "tickets.csv")
    fails(lambda: task_from_columns(data_file=csv, input_columns="body", label_column="queue", labels="BIL:billing"),
          "labels", "is not VALUE=WORD")
    error = fails(lambda: task_from_columns(data_file=csv, input_columns="text", label_column="queue",
                                            labels="BIL=billing,TEC=technical,OTH=other").load(),
                  "input_columns: column 'text' is not in", "set input_columns to the column")
    with pytest.raises(PromptRobustError) as info:
        task_from_columns(data_file=csv, input_columns="text", label_column="queue",
                          labels="BIL=billing,TEC=technical,OTH=other").load()
    assert info.value.setting == "input_columns" and error


# -- issue 41, weak points: answer words a reader cannot tell apart, an absurd max_tokens ------------


@pytest.mark.parametrize("word, shown", [
    ("bill\u200bing", "U+200B"),  # a zero-width space
    ("\u200ebilling", "U+200E"),  # a left-to-right mark
    ("bill\u202eing", "U+202E"),  # a right-to-left override
    ("bill\u00ading", "U+00AD"),  # a soft hyphen
])
def test_an_answer_word_with_an_invisible_character_is_refused(folder: Path, word: str, shown: str) -> None:
    fails(load(folder, TOML.replace('TEC = "technical"', f'TEC = "{word}"')), "key 'labels'", "label 'TEC'", shown,
          "invisible")


@pytest.mark.parametrize("first, second", [
    ("caf\u00e9", "cafe\u0301"),  # NFC and NFD spellings of one word
    ("\ufb01le", "file"),  # a ligature and its letters
    ("ｂｉｌｌ", "bill"),  # full-width letters
])
def test_answer_words_that_read_the_same_are_refused(folder: Path, first: str, second: str) -> None:
    toml = TOML.replace('BIL = "billing"', f'BIL = "{first}"').replace('TEC = "technical"', f'TEC = "{second}"')
    fails(load(folder, toml), "key 'labels'", "'BIL'", "'TEC'", "read the same")


def test_max_tokens_beyond_any_answer_is_refused(folder: Path) -> None:
    fails(load(folder, TOML.replace('id = "ticket_id"', 'id = "ticket_id"\nmax_tokens = 100000000000')),
          "key 'max_tokens'", "100000000000", "at most 32768")
    load(folder, TOML.replace('id = "ticket_id"', 'id = "ticket_id"\nmax_tokens = 512'))()  # a long answer is fine
