"""A user's own task (issue 34, library side): a task file, the flags' form and code make
one definition and the same ``Task``; it loads from every data form, renders, parses with
its own answer words, scores with its metric, brings its prompts and few-shot examples,
and keys the cache by its definition. Bad input has its own file (test_own_task_errors.py);
a real model runs it in test_own_task_model.py."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import orjson
import polars as pl
import pytest

from promptrobust.engine.errors import PromptRobustError
from promptrobust.engine.measuring.settings import EvaluationSettings
from promptrobust.engine.measuring.target import with_selection
from promptrobust.engine.measuring.workbench import protected_words
from promptrobust.engine.runs.session import Session
from promptrobust.engine.serving.types import Completion, Request, request_key
from promptrobust.tasks import get_task, load_prompts, load_task_file, resolve_task, task_from_columns
from promptrobust.tasks.base import Sample
from promptrobust.tasks.metrics import MacroF1
from promptrobust.tasks.own import OwnTask, TaskDefinition, build_task, read_task_file
from promptrobust.tasks.own.definition import DataSource, InputColumn
from promptrobust.testing.backends import CountingBackend

DOCS = Path(__file__).resolve().parents[1] / "docs" / "examples" / "tickets"
ROWS = [
    {"ticket_id": "T1", "body": "I was charged twice {invoice 7}", "queue": "BIL"},
    {"ticket_id": "T2", "body": "The app crashes on start", "queue": "TEC"},
    {"ticket_id": "T3", "body": "Where is your office?", "queue": "OTH"},
    {"ticket_id": "T4", "body": "Refund my last payment", "queue": "BIL"},
    {"ticket_id": "T5", "body": "Login fails with error 500", "queue": "TEC"},
    {"ticket_id": "T6", "body": "Are you hiring?", "queue": "OTH"},
]
LABELS = "BIL=billing,TEC=technical,OTH=other"
TASK_TOML = """\
name = "tickets"
data = "tickets.csv"
input = "body"
label = "queue"
id = "ticket_id"
protected = ["ticket"]
prompts = ["Route the ticket to a queue.", "Which team handles the ticket?"]

[labels]
BIL = "billing"
TEC = "technical"
OTH = "other"
"""


def write_rows(rows: list[dict], path: Path) -> Path:
    ext = path.suffix
    if ext == ".parquet":
        pl.DataFrame(rows).write_parquet(path)
    elif ext == ".jsonl":
        path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    elif ext == ".json":
        path.write_bytes(orjson.dumps(rows))
    elif ext == ".csv":
        pl.DataFrame(rows).write_csv(path)
    elif ext == ".tsv":
        pl.DataFrame(rows).write_csv(path, separator="\t", quote_style="never")
    return path


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    write_rows(ROWS, tmp_path / "tickets.csv")
    (tmp_path / "tickets.toml").write_text(TASK_TOML)
    return tmp_path


def flags_task(folder: Path, **changes: object) -> OwnTask:
    kwargs: dict = dict(data_file=str(folder / "tickets.csv"), input_columns="body", label_column="queue", labels=LABELS,
                        id_column="ticket_id", protected=["ticket"],
                        prompts=["Route the ticket to a queue.", "Which team handles the ticket?"])
    kwargs.update(changes)
    return task_from_columns(**kwargs)


# -- one definition, whichever way it is given ------------------------------------------------


def test_the_flags_form_and_the_task_file_are_one_definition(folder: Path) -> None:
    from_file, from_flags = load_task_file(folder / "tickets.toml"), flags_task(folder)
    assert from_file.definition == from_flags.definition and from_file == from_flags
    assert from_file.cache_namespace == from_flags.cache_namespace
    assert from_file.load(seed=3) == from_flags.load(seed=3)
    prompt = from_file.own_prompts()[0]
    assert [p.id for p in from_file.own_prompts()] == ["tickets-01", "tickets-02"] == [p.id for p in from_flags.own_prompts()]
    sample = from_file.load()[0]
    assert from_file.render(prompt.text, sample) == from_flags.render(prompt.text, sample)
    # the flags' form names the task after its data file
    assert task_from_columns(data_file=str(folder / "tickets.csv"), input_columns="body", label_column="queue",
                             labels=LABELS).name == "tickets"


def test_code_gives_the_same_definition_as_the_task_file(folder: Path) -> None:
    toml_task = load_task_file(folder / "tickets.toml")
    assert read_task_file(folder / "tickets.toml") == toml_task.definition
    in_code = build_task(TaskDefinition(
        name="tickets", data=DataSource(str(folder / "tickets.csv")), input=(InputColumn("body", "Body"),), label="queue",
        labels=(("BIL", "billing"), ("TEC", "technical"), ("OTH", "other")), id_column="ticket_id",
        prompts=toml_task.definition.prompts, protected=("ticket",),
    ))
    assert in_code == toml_task and in_code.cache_namespace == toml_task.cache_namespace


def test_resolve_takes_a_name_a_task_file_or_a_task(folder: Path) -> None:
    task = load_task_file(folder / "tickets.toml")
    assert resolve_task(task) is task
    assert resolve_task(str(folder / "tickets.toml")) == task
    assert resolve_task("SST-2").name == "sst2"
    settings = EvaluationSettings(task=task, limit=2)
    assert settings.dataset == "tickets" and settings.with_(limit=3).task is task
    with pytest.raises(PromptRobustError, match="dataset 'sst2' and task 'tickets' disagree"):
        EvaluationSettings(task=task, dataset="sst2")
    assert hash(settings) == hash(EvaluationSettings(task=load_task_file(folder / "tickets.toml"), limit=2))
    from promptrobust.engine.measuring.target import task_of

    assert task_of(settings) == task and task_of(EvaluationSettings(dataset=str(folder / "tickets.toml"))) == task
    assert task_of(EvaluationSettings(dataset="sst2", sample_selection="first")).selection == "first"
    first = with_selection(task, "first")
    assert isinstance(first, OwnTask) and first.selection == "first" and first.definition == task.definition


# -- data -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("ext", [".csv", ".tsv", ".jsonl", ".json", ".parquet"])
def test_every_data_format_reads_the_same_samples(folder: Path, ext: str) -> None:
    rows = [dict(r, body=r["body"].replace("{invoice 7}", "(invoice 7)")) if ext == ".tsv" else r for r in ROWS]
    path = write_rows(rows, folder / f"data{ext}")
    task = flags_task(folder, data_file=str(path))
    samples = sorted(task.load(), key=lambda s: s.id)
    assert [s.id for s in samples] == [f"data:T{i}" for i in range(1, 7)]
    assert [s.target for s in samples] == ["BIL", "TEC", "OTH", "BIL", "TEC", "OTH"]
    assert samples[0].fields == {"body": rows[0]["body"]}


def test_numeric_labels_read_alike_from_every_format(tmp_path: Path) -> None:
    rows = [{"text": "a", "label": 0}, {"text": "b", "label": 1}, {"text": "c", "label": 2}]
    for ext in (".parquet", ".jsonl", ".csv"):
        path = write_rows(rows, tmp_path / f"nums{ext}")
        task = task_from_columns(data_file=str(path), input_columns="text", label_column="label",
                                 labels="0=low,1=medium,2=high")
        assert sorted(s.target for s in task.load()) == ["0", "1", "2"]


def test_braces_in_data_stay_braces_and_the_template_lays_out_several_columns(tmp_path: Path) -> None:
    rows = [{"subject": "Bill {x}", "body": "charged {{twice}}", "queue": "BIL"},
            {"subject": "Crash", "body": "app {0} dies", "queue": "TEC"}]
    task = task_from_columns(data_file=str(write_rows(rows, tmp_path / "t.jsonl")), input_columns=["subject", "body"],
                             label_column="queue", labels="BIL=billing,TEC=technical",
                             template="Subject: {subject}\nMessage {{verbatim}}: {body}")
    sample = next(s for s in task.load() if s.target == "BIL")
    assert task.render("Route it.", sample) == "Route it.\n\nSubject: Bill {x}\nMessage {verbatim}: charged {{twice}}\nAnswer:"
    default = task_from_columns(data_file=str(tmp_path / "t.jsonl"), input_columns=["subject", "body"],
                                label_column="queue", labels="BIL=billing,TEC=technical")
    assert default.render("", sample) == "Subject: Bill {x}\nBody: charged {{twice}}\nAnswer:"


def test_a_folder_of_splits_and_its_train_split_as_few_shot_source(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    write_rows(ROWS, data / "test.csv")
    train = [{"ticket_id": f"X{i}", "body": f"training ticket {i}", "queue": ["BIL", "TEC", "OTH"][i % 3]} for i in range(9)]
    write_rows(train, data / "train.jsonl")
    task = task_from_columns(data_file=str(data), input_columns="body", label_column="queue", labels=LABELS,
                             id_column="ticket_id")
    assert {s.id for s in task.load()} == {f"data:T{i}" for i in range(1, 7)}
    examples = task.fixed_few_shot(3)
    assert len(examples) == 3 and all(e.fields["body"].startswith("training ticket") for e in examples)
    # a fixed set: the same examples whatever the run's seed, and a run's shots take its first ones
    from promptrobust.tasks import few_shot_examples

    assert few_shot_examples(task, seed=5, k=3) == few_shot_examples(task, seed=0, k=3) == examples
    assert few_shot_examples(task, seed=0, k=2) == examples[:2]


def test_a_file_of_examples_is_the_few_shot_set_in_file_order() -> None:
    task = load_task_file(DOCS / "tickets.toml")
    examples = task.fixed_few_shot(3)
    assert [e.id for e in examples] == ["tickets:E01", "tickets:E02", "tickets:E03"]
    rendered = task.render("Route the ticket.", task.load()[0], examples)
    assert "Ticket: My credit card was charged for a plan I never ordered.\nAnswer: billing" in rendered


# -- answers, metrics, prompts ------------------------------------------------------------------


def test_both_parsers_know_the_tasks_answer_words(folder: Path) -> None:
    task = load_task_file(folder / "tickets.toml")
    assert task.parse("The queue is technical.") == "TEC"
    assert task.parse("Technical") == "TEC"
    assert task.parse("technical support") is None  # the paper's rule: the last word
    assert task.parse("technical support", "robust") == "TEC"
    assert task.parse("billing or other", "robust") is None  # two labels: ambiguous
    assert task.parse("positive") is None
    assert task.choices() == ("billing", "technical", "other")


def test_protected_words_are_the_answer_words_the_labels_and_the_tasks_own(folder: Path) -> None:
    task = load_task_file(folder / "tickets.toml")
    assert protected_words(task) == frozenset({"billing", "technical", "other", "bil", "tec", "oth", "ticket"})


def test_macro_f1_is_scikit_learns_and_its_contributions_average_to_it() -> None:
    targets = ["a", "a", "a", "b", "b", "c"]
    predictions = ["a", "a", "b", "b", None, "a"]
    samples = [Sample(str(i), {}, t) for i, t in enumerate(targets)]
    # per label: a: tp 2 fp 1 fn 1 -> 2/3; b: tp 1 fp 1 fn 1 -> 1/2; c: tp 0 -> 0
    expected = (2 / 3 + 1 / 2 + 0) / 3
    metric = MacroF1()
    assert metric.corpus_score(predictions, samples) == pytest.approx(expected)
    scores = metric.sample_scores(predictions, samples)
    assert sum(scores) / len(scores) == pytest.approx(expected)
    assert scores[2] == scores[4] == scores[5] == 0.0
    # always answering the majority label (a: 3 of 6): F1 2p/(1+p) on it, 0 on b and c
    assert metric.majority_score(targets) == pytest.approx(2 * 0.5 / 1.5 / 3)


def test_free_text_tasks_score_with_their_metric(tmp_path: Path) -> None:
    rows = [{"q": "Capital of France?", "a": "Paris"}, {"q": "2+2?", "a": "four"}]
    path = write_rows(rows, tmp_path / "qa.jsonl")
    scores = {}
    for metric in ("exact_match", "squad_f1", "bleu"):
        task = task_from_columns(data_file=str(path), input_columns="q", target_column="a", metric=metric,
                                 prompts=["Answer the question."])
        assert not task.supports_choices and task.stop == ("\n",)
        sample = next(s for s in task.load() if s.fields["q"].startswith("Capital"))
        prediction = task.parse("The answer is: the Paris\nmore text", "robust")
        assert prediction == "the Paris"
        scores[metric] = task.metric.sample_score(prediction, sample)
    assert scores["exact_match"] == 1.0 and scores["squad_f1"] == 1.0  # SQuAD normalisation drops "the"
    assert task.metric.name == "bleu"


def test_default_prompts_name_the_answer_words_and_serve_through_load_prompts(tmp_path: Path) -> None:
    task = task_from_columns(data_file=str(write_rows(ROWS, tmp_path / "tickets.csv")), input_columns="body",
                             label_column="queue", labels=LABELS)
    prompts = load_prompts(task)
    assert len([p for p in prompts if p.type == "task"]) == 10 and len([p for p in prompts if p.type == "role"]) == 10
    assert all("billing, technical or other" in p.text and p.dataset == "tickets" for p in prompts)
    assert [p.id for p in load_prompts(task, types=["role"])][:2] == ["tickets-role-01", "tickets-role-02"]


def test_prompt_tables_a_prompts_file_and_semantic_prompts(tmp_path: Path) -> None:
    write_rows(ROWS, tmp_path / "tickets.csv")
    (tmp_path / "mine.toml").write_text(
        '[[prompt]]\nid = "p1"\ntype = "role"\ntext = "You sort tickets."\n'
        '[[prompt]]\nid = "p2"\ntype = "semantic"\nlanguage = "fr"\ntext = "Trier le ticket."\n')
    base = TASK_TOML.replace('prompts = ["Route the ticket to a queue.", "Which team handles the ticket?"]\n', "")
    (tmp_path / "a.toml").write_text(base + '\n[[prompts]]\nid = "t1"\ntype = "task"\ntext = "Route it."\n')
    (tmp_path / "b.toml").write_text(base.replace('name = "tickets"', 'name = "tickets"\nprompts = "mine.toml"'))
    assert [(p.id, p.type) for p in load_prompts(load_task_file(tmp_path / "a.toml"))] == [("t1", "task")]
    b = load_task_file(tmp_path / "b.toml")
    assert [(p.id, p.type, p.language) for p in load_prompts(b)] == [("p1", "role", "en"), ("p2", "semantic", "fr")]
    from promptrobust.engine.measuring.workbench import semantic_prompts_for

    assert semantic_prompts_for(b, "semantic") == [("fr", "Trier le ticket.")]
    with pytest.raises(PromptRobustError, match='task tickets has no semantic prompts.*type = "semantic"'):
        semantic_prompts_for(load_task_file(tmp_path / "a.toml"), "semantic")


# -- the hub, offline ------------------------------------------------------------------------------


@pytest.fixture
def offline_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    train = [{"ticket_id": f"X{i}", "body": f"training ticket {i}", "queue": ["BIL", "TEC", "OTH"][i % 3]} for i in range(6)]
    dd = datasets.DatasetDict({"test": datasets.Dataset.from_list(ROWS), "train": datasets.Dataset.from_list(train)})
    dd.save_to_disk(str(tmp_path / "saved"))
    # the folder form load_dataset reads offline: the hub's parquet layout
    (tmp_path / "hubform" / "data").mkdir(parents=True)
    for split, ds in dd.items():
        ds.to_parquet(str(tmp_path / "hubform" / "data" / f"{split}-00000-of-00001.parquet"))
    return tmp_path


@pytest.mark.parametrize("form", ["saved", "hubform"])
def test_a_hub_dataset_saved_locally_loads_offline(offline_hub: Path, form: str) -> None:
    location = f"hf:{offline_hub / form}"
    task = task_from_columns(data_file=location, input_columns="body", label_column="queue", labels=LABELS,
                             split="test", id_column="ticket_id", task_name="hub_tickets")
    samples = task.load()
    assert sorted(s.id for s in samples) == [f"hub_tickets:T{i}" for i in range(1, 7)]
    assert sorted(s.target for s in samples) == sorted(r["queue"] for r in ROWS)
    assert all(e.fields["body"].startswith("training ticket") for e in task.fixed_few_shot(3))  # its train split
    provenance = task.provenance()
    assert provenance["data"] == location and len(provenance["data_hash"]) == 64


# -- trust: hashes in the cache key and the provenance --------------------------------------------


def test_the_definition_hash_follows_what_decides_a_score(folder: Path) -> None:
    base = flags_task(folder)
    same = [flags_task(folder, task_name="other_name"), flags_task(folder, prompts=["Something else."]),
            flags_task(folder, protected=[])]
    assert {t.cache_namespace for t in same} == {base.cache_namespace}
    changed = [flags_task(folder, labels="BIL=billing,TEC=tech,OTH=other"), flags_task(folder, template="Ticket: {body}"),
               flags_task(folder, metric="macro_f1"), flags_task(folder, label_column="queue", labels="TEC=technical,BIL=billing,OTH=other")]
    assert len({t.cache_namespace for t in changed} | {base.cache_namespace}) == len(changed) + 1


def test_provenance_names_the_file_and_hashes_the_definition_and_the_data(folder: Path) -> None:
    task = load_task_file(folder / "tickets.toml")
    p = task.provenance()
    assert p["name"] == "tickets" and p["task_file"] == str((folder / "tickets.toml").resolve())
    assert p["definition_hash"] == task.definition.definition_hash() and task.cache_namespace.endswith(p["definition_hash"])
    before = p["data_hash"]
    with (folder / "tickets.csv").open("a") as f:
        f.write("T7,another ticket,OTH\n")
    assert load_task_file(folder / "tickets.toml").provenance()["data_hash"] != before


def test_built_in_tasks_keep_release_0_1_cache_keys() -> None:
    from promptrobust.engine.measuring.requests import RequestBuilder

    task = get_task("sst2")
    assert task.cache_namespace == ""
    request = RequestBuilder(task, mode="choices", chat=False).build("Classify.", task.load(data_file=str(
        write_rows([{"sentence": "fine", "label": 1}], Path(os.environ.get("TMPDIR", "/tmp")) / "own-task-sst2.csv"))
    )[0])
    assert request.namespace == "" and b"namespace" not in request.content_key()


def _answer_first_choice(request: Request) -> Completion:
    if request.kind == "score_choices":
        return Completion(choice_logprobs=tuple(-float(i) for i in range(len(request.choices))))
    return Completion(text="billing", completion_tokens=1)


async def _evaluate(cache: Path, task: OwnTask, mode: str) -> tuple[int, list[float]]:
    backend = CountingBackend(answer=_answer_first_choice)
    async with Session(cache=cache, backend_factory=lambda spec: backend) as session:
        result = await session.evaluate(EvaluationSettings(task=task, mode=mode, shots=0), model="smollm2-135m-instruct",
                                        prompts=load_prompts(task))
    return backend.calls, [c.score for c in result.clean]


@pytest.mark.parametrize("mode", ["choices", "generate"])
def test_editing_a_label_word_asks_again_and_an_unchanged_rerun_asks_nothing(folder: Path, mode: str) -> None:
    cache = folder / "cache.sqlite"
    task = load_task_file(folder / "tickets.toml")
    sent, scores = asyncio.run(_evaluate(cache, task, mode))
    assert sent == 2 * len(ROWS)
    assert asyncio.run(_evaluate(cache, load_task_file(folder / "tickets.toml"), mode)) == (0, scores)
    # the same task given by flags: the same cache keys, so nothing is sent
    assert asyncio.run(_evaluate(cache, flags_task(folder), mode)) == (0, scores)
    (folder / "tickets.toml").write_text(TASK_TOML.replace('TEC = "technical"', 'TEC = "tech_support"'))
    edited = load_task_file(folder / "tickets.toml")
    assert edited.cache_namespace != task.cache_namespace
    assert asyncio.run(_evaluate(cache, edited, mode))[0] == 2 * len(ROWS)


def test_request_keys_differ_only_by_the_namespace(folder: Path) -> None:
    from promptrobust.engine.measuring.requests import RequestBuilder
    from promptrobust.engine.serving.types import ModelIdentity

    task = load_task_file(folder / "tickets.toml")
    edited = flags_task(folder, labels="BIL=billing,TEC=tech,OTH=other")
    sample = task.load()[0]
    a = RequestBuilder(task, mode="generate", chat=True).build("Route it.", sample)
    b = RequestBuilder(edited, mode="generate", chat=True).build("Route it.", sample)
    assert a.messages == b.messages and a.decoding == b.decoding and a.namespace != b.namespace
    model = ModelIdentity("fake", "m")
    assert request_key(model, a) != request_key(model, b)


def test_the_docs_example_is_a_valid_task(tmp_path: Path) -> None:
    shutil.copytree(DOCS, tmp_path / "tickets")
    task = load_task_file(tmp_path / "tickets" / "tickets.toml")
    assert task.name == "tickets" and len(task.load()) == 24
    assert sorted({s.target for s in task.load()}) == ["BIL", "OTH", "TEC"]
    assert {p.type for p in task.own_prompts()} == {"task", "role"}


def test_the_docs_show_the_example_as_it_is() -> None:
    """docs/your-task.md quotes the task file and what the model reads: both stay true."""
    import re

    text = (DOCS.parents[1] / "your-task.md").read_text(encoding="utf-8")
    quoted = re.search(r"```toml\n(.*?)```", text, re.S).group(1)
    file_text = (DOCS / "tickets.toml").read_text(encoding="utf-8")
    assert file_text.endswith(quoted) and file_text[: -len(quoted)].lstrip("\n").startswith("#")
    shown = re.search(r"What the model reads.*?```text\n(.*?)\n```", text, re.S).group(1)
    task = load_task_file(DOCS / "tickets.toml")
    sample = next(s for s in task.load() if s.id == "tickets:T13")
    assert task.render(task.own_prompts()[0].text, sample, task.fixed_few_shot(3)) == shown


def test_a_macro_f1_task_gets_a_bootstrap_interval_and_its_own_chance_level(folder: Path) -> None:
    task = flags_task(folder, metric="macro_f1")

    async def run() -> tuple:
        backend = CountingBackend(answer=_answer_first_choice)  # always the first label: billing
        async with Session(use_cache=False, backend_factory=lambda spec: backend) as session:
            bench = await session.workbench("smollm2-135m-instruct", EvaluationSettings(task=task, mode="choices", shots=0))
            result = await session.evaluate(EvaluationSettings(task=task, mode="choices", shots=0),
                                            model="smollm2-135m-instruct", prompts=load_prompts(task)[:1])
        return bench, result

    bench, result = asyncio.run(run())
    assert not bench.binary
    clean = result.clean[0]
    # always "BIL" on 2 BIL, 2 TEC, 2 OTH: F1(BIL) = 2*2/(6+2) = 0.5, the others 0 -> macro-F1 1/6
    assert clean.score == pytest.approx(1 / 6)
    assert bench.chance_rate == pytest.approx(2 * (1 / 3) / ((1 + 1 / 3) * 3))
    assert clean.ci95[0] <= clean.score <= clean.ci95[1] and clean.at_chance
