"""Loading tasks from local files in every supported format, from the hub
(with a recording stand-in for the ``datasets`` package), and rendering."""

import sys
import types
from pathlib import Path

import orjson
import polars as pl
import pytest

from promptrobust.tasks import few_shot_examples, get_task
from promptrobust.tasks.base import Sample
from promptrobust.tasks.errors import TaskDataError, UnknownTaskError

FIX = Path(__file__).parent / "fixtures" / "tasks"

SST2_ROWS = [
    {"sentence": "it is a {charming} journey", "label": 1},
    {"sentence": "unflinchingly bleak", "label": 0},
    {"sentence": 'the "movie" is\nfun', "label": 1},
]
QQP_ROWS = [
    {"question1": "How do I cook rice?", "question2": "What is the way to cook rice?", "label": 1, "idx": 7},
    {"question1": "Who is the president?", "question2": "What is rice?", "label": 0, "idx": 9},
]



def file_order(samples):
    """Samples come in a seeded random order; these checks are about file contents, so restore file order."""

    def row(sample):
        tail = sample.id.rsplit(":", 1)[-1]
        return (0, int(tail), "") if tail.isdigit() else (1, 0, sample.id)

    return sorted(samples, key=row)

def _write(rows, path: Path) -> Path:
    ext = path.suffix
    if ext == ".parquet":
        pl.DataFrame(rows).write_parquet(path)
    elif ext == ".jsonl":
        path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    elif ext == ".csv":
        pl.DataFrame(rows).write_csv(path)
    return path


@pytest.mark.parametrize("ext", [".parquet", ".jsonl", ".csv"])
def test_sst2_and_qqp_from_local_formats(tmp_path, ext):
    sst2 = file_order(get_task("sst2").load(data_file=str(_write(SST2_ROWS, tmp_path / f"sst2{ext}"))))
    assert [s.target for s in sst2] == ["positive", "negative", "positive"]
    assert sst2[2].fields["sentence"] == 'the "movie" is\nfun'
    qqp = file_order(get_task("qqp").load(data_file=str(_write(QQP_ROWS, tmp_path / f"qqp{ext}"))))
    assert [s.target for s in qqp] == ["equivalent", "not_equivalent"]
    assert qqp[0].fields == {"question1": "How do I cook rice?", "question2": "What is the way to cook rice?"}
    assert qqp[0].id == "qqp:7"


def test_glue_tsv_layouts(tmp_path):
    d = tmp_path / "SST-2"
    d.mkdir()
    (d / "dev.tsv").write_bytes((FIX / "sst2_dev.tsv").read_bytes())
    (d / "train.tsv").write_bytes((FIX / "sst2_train.tsv").read_bytes())
    samples = file_order(get_task("sst2").load(data_dir=str(d)))
    assert len(samples) == 5
    assert samples[0].fields["sentence"].startswith("it is a {charming}")
    assert samples[2].fields["sentence"] == '"the movie" is \\"fun\\"'  # GLUE TSV: quotes are data
    pool = file_order(get_task("sst2").few_shot_pool(data_dir=str(d)))
    assert [s.target for s in pool] == ["negative", "positive", "negative", "positive"]

    m = tmp_path / "MNLI"
    m.mkdir()
    (m / "dev_matched.tsv").write_bytes((FIX / "mnli_dev_matched.tsv").read_bytes())
    mnli = file_order(get_task("mnli").load(data_dir=str(m)))
    assert [s.target for s in mnli] == ["entailment", "neutral", "contradiction"]
    assert mnli[1].fields == {"premise": "He went home early.", "hypothesis": "He was tired."}

    c = tmp_path / "CoLA"
    c.mkdir()
    (c / "dev.tsv").write_bytes((FIX / "cola_dev.tsv").read_bytes())  # no header row
    cola = file_order(get_task("cola").load(data_dir=str(c)))
    assert [s.target for s in cola] == ["acceptable", "unacceptable"]


def test_squad_v2_official_json_and_jsonl(tmp_path):
    t = get_task("squad_v2")
    samples = file_order(t.load(data_file=str(FIX / "squad_dev.json")))
    assert [s.target for s in samples] == [["France", "France."], []]
    rows = [{"id": "a", "context": "C {x}", "question": "Q?", "answers": {"text": ["C"], "answer_start": [0]}},
            {"id": "b", "context": "D", "question": "R?", "answers": {"text": [], "answer_start": []}}]
    for ext in (".jsonl", ".parquet"):
        got = file_order(t.load(data_file=str(_write(rows, tmp_path / f"squad{ext}"))))
        assert [s.target for s in got] == [["C"], []]
    csv_rows = [{**r, "answers": orjson.dumps(r["answers"]).decode()} for r in rows]
    got = file_order(t.load(data_file=str(_write(csv_rows, tmp_path / "squad.csv"))))
    assert [s.target for s in got] == [["C"], []]


@pytest.mark.parametrize("data, says", [
    ({"data": {"title": "not a list"}}, "'data' must be a list of JSON objects"),
    ({"data": [{"paragraphs": ["a string"]}]}, "'paragraphs' must be a list of JSON objects"),
    ({"data": [{"paragraphs": [{"context": "C", "qas": [{"question": "Q?"}]}]}]}, "a question without 'id'"),
    ({"data": [{"paragraphs": [{"context": "C", "qas": [{"id": "a", "question": "Q?", "answers": [{"text": None}]}]}]}]},
     "empty value in column 'answers.text'"),
])
def test_squad_v2_official_layout_broken_is_named(tmp_path, data, says):
    """A file in SQuAD's official layout whose parts are not what the layout says is refused naming the
    part (it used to fail with an AttributeError or KeyError, or score the text 'None')."""
    path = tmp_path / "squad.json"
    path.write_bytes(orjson.dumps(data))
    with pytest.raises(TaskDataError, match=says):
        get_task("squad_v2").load(data_file=str(path))


def test_sample_size_and_limit_are_seeded_prefixes(tmp_path):
    rows = [{"sentence": f"s{i}", "label": i % 2} for i in range(2000)]
    f = _write(rows, tmp_path / "big.parquet")
    t = get_task("sst2")
    a = t.load(data_file=str(f), seed=1)
    assert len(a) == 872  # the paper's SST-2 size
    assert a == t.load(data_file=str(f), seed=1)
    assert a != t.load(data_file=str(f), seed=2)
    assert t.load(data_file=str(f), seed=1, limit=10) == a[:10]
    pool_ids = {s.id for s in t.few_shot_pool(seed=1, data_file=str(f))}
    assert len(pool_ids) == 2000 - 872 and not pool_ids & {s.id for s in a}


class _RecordingDatasets(types.ModuleType):
    def __init__(self, rows_for):
        super().__init__("datasets")
        self.__version__ = "3.6.0"  # inside the [hub] extra's range
        self.calls = []
        self.trusted = []
        self._rows_for = rows_for

    def load_dataset(self, path, name=None, *, split, streaming=False, trust_remote_code=False):
        self.calls.append((path, name, split, streaming))
        self.trusted.append(trust_remote_code)
        return self._rows_for(path, name, split)


def test_hf_path_builds_the_right_load_dataset_calls(monkeypatch):
    # the calls a machine that reaches the hub makes (offline, a bounded read takes the whole cached split instead)
    monkeypatch.setattr("promptrobust.tasks.hf_data.hub_reachable", lambda: (True, ""))
    fake = _RecordingDatasets(lambda p, n, s: [{"premise": f"{s} p", "hypothesis": "h", "label": 2, "idx": 0}])
    monkeypatch.setitem(sys.modules, "datasets", fake)
    samples = get_task("mnli").load()
    assert fake.calls == [("nyu-mll/glue", "mnli", "validation_matched", False),
                          ("nyu-mll/glue", "mnli", "validation_mismatched", False)]
    assert [s.target for s in samples] == ["contradiction", "contradiction"]
    assert len({s.id for s in samples}) == 2

    fake2 = _RecordingDatasets(lambda p, n, s: [{"sentence": "x", "label": 1, "idx": 0}])
    monkeypatch.setitem(sys.modules, "datasets", fake2)
    get_task("sst2").load()
    get_task("sst2").few_shot_pool()
    assert fake2.calls == [("nyu-mll/glue", "sst2", "validation", False), ("nyu-mll/glue", "sst2", "train", False)]

    fake3 = _RecordingDatasets(lambda p, n, s: [{"id": "q", "context": "c", "question": "q", "answers": {"text": []}}])
    monkeypatch.setitem(sys.modules, "datasets", fake3)
    get_task("squad_v2").load()
    assert fake3.calls == [("rajpurkar/squad_v2", None, "validation", False)]

    fake4 = _RecordingDatasets(lambda p, n, s: [{"translation": {"en": "hi", "fr": "salut", "de": "hallo"}, "id": i}
                                                for i in range(40)])
    monkeypatch.setitem(sys.modules, "datasets", fake4)
    un = get_task("un_multi").load()
    # the paper's pairs within en, de, fr (promptbench: de-en, de-fr, en-fr), streamed
    assert [c[1] for c in fake4.calls] == ["de-en", "de-fr", "en-fr"] and all(c[3] for c in fake4.calls)
    assert all(fake4.trusted) and not any(fake.trusted + fake2.trusted + fake3.trusted)  # scripts only
    directions = [(s.fields["source_language"], s.fields["target_language"]) for s in un]
    assert len(un) == 99
    assert {d: directions.count(d) for d in set(directions)} == {
        ("German", "English"): 33, ("German", "French"): 33, ("English", "French"): 33}


def test_hf_mmlu_stratified_ten_per_subject(monkeypatch):
    def rows(p, n, s):
        return [{"question": f"{sub} q{i}", "subject": sub, "choices": ["w", "x", "y", "z"], "answer": i % 4}
                for sub in (f"subj{k:02d}" for k in range(57)) for i in range(30)]
    fake = _RecordingDatasets(rows)
    monkeypatch.setitem(sys.modules, "datasets", fake)
    samples = get_task("mmlu").load(seed=3)
    assert fake.calls == [("cais/mmlu", "all", "test", False)]
    assert len(samples) == 564
    per = {}
    for s in samples:
        per[s.fields["subject"]] = per.get(s.fields["subject"], 0) + 1
    assert len(per) == 57 and max(per.values()) == 10 and min(per.values()) >= 9


def test_hf_missing_package_says_how_to_go_offline(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import fails
    with pytest.raises(TaskDataError, match=r"pip install 'promptrobust\[hub\]'.*local data files") as info:
        get_task("rte").load()
    assert info.value.setting == "data_dir" and "--" not in str(info.value)


@pytest.mark.parametrize("name", ["sst2", "mnli", "mmlu", "squad_v2", "iwslt", "math"])
def test_render_is_concatenation_and_data_cannot_break_it(name):
    t = get_task(name)
    nasty = 'x {0} {{y}} {} %s \\n "q" \'r\'\nline2 — ünïcödé 中文 {name}'
    fields = {"sentence": nasty, "premise": nasty, "hypothesis": nasty, "question": nasty, "context": nasty,
              "subject": "s", "A": nasty, "B": "b", "C": "c", "D": "d", "text": nasty,
              "source_language": "English", "target_language": "German", "module": "m"}
    target = {"sst2": "positive", "mnli": "neutral", "mmlu": "A", "squad_v2": [], "iwslt": "ref {x}", "math": "3"}[name]
    s = Sample("id", fields, target)
    instruction = "Classify {content} carefully: {0} %s"
    out = t.render(instruction, s)
    assert out.startswith(instruction + "\n\n")
    assert out.endswith("\nAnswer:")
    assert nasty in out
    few = t.render(instruction, s, [s, s, s])
    assert few.count("\nAnswer: ") == 3 and few.endswith("\nAnswer:")
    sample_block = out.rsplit("\n\n", 1)[-1]
    assert few.startswith(instruction + "\n\n") and few.endswith("\n\n" + sample_block)


@pytest.mark.parametrize("name, template, first_line, line", [
    ("mmlu", "Answer this question about {}:", "Answer this question about high school physics:",
     "Subject: high school physics"),
    ("math", "Answer this question about {}:", "Answer this question about greatest common divisors:",
     "Question type: greatest common divisors"),
    ("iwslt", "Go from {} to {}:", "Go from English to German:", "Translate from English to German."),
])
def test_paper_slots_show_subject_type_and_languages(name, template, first_line, line):
    """The paper fills {} in its prompts with the MMLU subject, the math question
    type and the translation languages; a prompt without a slot gets a line."""
    t = get_task(name)
    fields = {"question": "Q {}?", "subject": "high_school_physics", "A": "a", "B": "b", "C": "c", "D": "d",
              "module": "numbers__gcd", "text": "Hello {}.", "source_language": "English", "target_language": "German"}
    s = Sample("id", fields, "A")
    filled = t.render(template, s)
    assert filled.split("\n\n")[0] == first_line
    assert line not in filled
    assert ("Q {}?" in filled) or ("Hello {}." in filled)  # data keeps its braces
    plain = t.render("Answer it.", s)
    assert line in plain and plain.startswith("Answer it.\n\n")


def test_builtin_math_and_mmlu_prompts_name_the_type_and_subject():
    from promptrobust.tasks import load_prompts

    for name in ("math", "mmlu"):
        assert all(p.text.count("{}") == 1 for p in load_prompts(name, types=["task", "role"]))


def test_sst2_render_exact_layout():
    t = get_task("sst2")
    ex = Sample("e", {"sentence": "great"}, "positive")
    s = Sample("s", {"sentence": "bad {x}"}, "negative")
    assert t.render("Rate it.", s, [ex]) == "Rate it.\n\nSentence: great\nAnswer: positive\n\nSentence: bad {x}\nAnswer:"


def test_errors_name_file_and_column(tmp_path):
    bad_col = _write([{"text_x": "a", "label": 1}], tmp_path / "x.jsonl")
    with pytest.raises(TaskDataError, match=r"x\.jsonl row 1: missing column 'sentence'"):
        get_task("sst2").load(data_file=str(bad_col))
    bad_label = _write([{"sentence": "a", "label": 7}], tmp_path / "y.jsonl")
    with pytest.raises(TaskDataError, match="unknown label 7"):
        get_task("sst2").load(data_file=str(bad_label))
    broken = tmp_path / "z.jsonl"
    broken.write_text('{"sentence": "a", "label": 1}\n{oops\n')
    with pytest.raises(TaskDataError, match="line 2 is not valid JSON"):
        get_task("sst2").load(data_file=str(broken))
    with pytest.raises(TaskDataError, match="not found"):
        get_task("sst2").load(data_file=str(tmp_path / "nope.csv"))
    with pytest.raises(TaskDataError, match="unsupported data file type .xlsx"):
        (tmp_path / "a.xlsx").write_text("x")
        get_task("sst2").load(data_file=str(tmp_path / "a.xlsx"))
    with pytest.raises(TaskDataError, match="no sst2 evaluation file"):
        get_task("sst2").load(data_dir=str(tmp_path))


def test_unknown_dataset_and_aliases():
    assert get_task("SST-2").name == "sst2"
    assert get_task("squad-v2").name == "squad_v2"
    assert get_task("Rotten_Tomatoes").name == "rotten_tomatoes"
    with pytest.raises(UnknownTaskError, match="unknown dataset 'glue9'; valid names: sst2, cola"):
        get_task("glue9")
    assert isinstance(UnknownTaskError("x"), ValueError)


def test_few_shot_examples_are_the_fixed_paper_set(tmp_path):
    """Three hand-written examples per dataset, the same for every seed; k <= 3
    takes the first k; a few_shot file in the data folder replaces the set."""
    t = get_task("sst2")
    ex = few_shot_examples(t, seed=5)
    assert len(ex) == 3 and ex == few_shot_examples(t, seed=0) == few_shot_examples(t, seed=123)
    assert few_shot_examples(t, seed=7, k=2) == ex[:2]
    assert {e.target for e in ex} == {"positive", "negative"}
    with pytest.raises(TaskDataError, match="fixed few-shot set has 3 examples per dataset; use 0 to 3 shots") as info:
        few_shot_examples(t, seed=0, k=5)
    assert info.value.setting == "shots"
    d = tmp_path / "d"
    d.mkdir()
    _write([{"sentence": f"own example {i}", "label": i % 2} for i in range(3)], d / "few_shot.jsonl")
    own = few_shot_examples(t, seed=1, data_dir=str(d))
    assert [e.fields["sentence"] for e in own] == ["own example 0", "own example 1", "own example 2"]
    _write([{"sentence": "only one", "label": 1}], d / "few_shot.jsonl")
    with pytest.raises(TaskDataError, match="3 few-shot examples needed per group"):
        few_shot_examples(t, seed=1, data_dir=str(d))


@pytest.mark.parametrize("name, groups, per", [
    ("mmlu", 57, 3), ("math", 20, 3), ("iwslt", 4, 3), ("un_multi", 3, 3), ("rotten_tomatoes", 1, 3),
    ("cola", 1, 3), ("qqp", 1, 3), ("mrpc", 1, 3), ("mnli", 1, 3), ("qnli", 1, 3), ("rte", 1, 3),
    ("wnli", 1, 3), ("squad_v2", 1, 3),
])
def test_fixed_sets_cover_every_group(name, groups, per):
    t = get_task(name)
    ex = few_shot_examples(t, seed=0)
    keys = [t.few_shot_group(e) for e in ex]
    assert len(set(keys)) == groups and len(ex) == groups * per
    assert len(few_shot_examples(t, seed=0, k=1)) == groups


def test_each_sample_sees_the_examples_of_its_own_group():
    t = get_task("mmlu")
    ex = few_shot_examples(t, seed=0)
    s = Sample("s", {"question": "Q?", "subject": "virology", "A": "a", "B": "b", "C": "c", "D": "d"}, "A")
    out = t.render("Answer about {}.", s, ex)
    assert out.count("\nAnswer: ") == 3
    virology = [e.fields["question"] for e in ex if e.fields["subject"] == "virology"]
    assert all(q in out for q in virology)
    assert "What is 7 x 8?" not in out  # another subject's example
    un = get_task("un_multi")
    u = Sample("u", {"text": "Hallo.", "source_language": "German", "target_language": "French"}, "x")
    rendered = un.render("Translate.", u, few_shot_examples(un, seed=0))
    assert rendered.count("Translate from German to French.") == 4  # 3 examples + the sample


def test_first_selection_is_the_papers_first_rows(tmp_path):
    """selection="first": promptbench's first N rows in file order, whatever the seed."""
    import dataclasses

    rows = [{"sentence": f"s{i}", "label": i % 2} for i in range(1500)]
    f = _write(rows, tmp_path / "big.jsonl")
    t = dataclasses.replace(get_task("cola"), selection="first")
    a = t.load(data_file=str(f), seed=1)
    assert [s.fields["sentence"] for s in a] == [f"s{i}" for i in range(1000)]
    assert a == t.load(data_file=str(f), seed=2) and t.load(data_file=str(f), limit=3) == a[:3]
    pairs = ("de-en", "de-fr", "en-fr")
    un = [{"source_lang": p[:2], "target_lang": p[3:], "source": f"{p} {i}", "target": "t"} for p in pairs for i in range(50)]
    g = _write(un, tmp_path / "un.jsonl")
    u = dataclasses.replace(get_task("un_multi"), selection="first").load(data_file=str(g))
    assert [s.fields["text"] for s in u] == [f"{p} {i}" for p in pairs for i in range(33)]  # 33 per pair = 99
