"""Issue 41, item 1: a data file is bounded by what it expands to, not by its bytes on disk.

A Parquet file of a few kilobytes can decode to gigabytes; a CSV's rows take several times
their bytes as Python objects. What is read is bounded (``PRE_MAX_DATA_FILE_MB``) by an
estimate of what the rows read take in memory, learnt before they are held (a Parquet file's
footer, a streamed count), and anything over it is one line. ``--limit`` reads only the rows
it uses where the sampling allows (the same samples as reading everything), and says when it
cannot. And the weak points of the same round: a duplicate CSV header, a semicolon-separated
CSV (issue 42, item 6), a non-text value in a text column, a hub folder copied whole into
the Hugging Face cache. Every file here is small on disk; the limits are set small to match.
"""

from __future__ import annotations

import dataclasses
import io
import random
from pathlib import Path

import orjson
import polars as pl
import pytest

from promptrobust.cli.main import main
from promptrobust.engine.errors import PromptRobustError
from promptrobust.tasks import get_task, task_from_columns
from promptrobust.tasks.common import DatasetTask
from promptrobust.tasks.datafiles import read_rows
from promptrobust.tasks.sampling import seeded_subset
from promptrobust.testing.fake_openai import FakeOpenAIServer

LABELS = "BIL=billing,TEC=technical,OTH=other"
LOREM = "lorem " * 66000  # 396,000 characters, as the bomb


def one_line_error(action: object, *needles: str) -> str:
    with pytest.raises(PromptRobustError) as info:
        action()  # type: ignore[operator]
    message = str(info.value)
    assert "\n" not in message, message
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    return message


def tickets_csv(path: Path, rows: int) -> Path:
    queues = ("BIL", "TEC", "OTH")
    path.write_text("ticket_id,body,queue,notes\n"
                    + "".join(f"T{i},ticket number {i} about something,{queues[i % 3]},note {i}\n" for i in range(rows)))
    return path


def tickets_task(path: Path, **changes: object) -> DatasetTask:
    kwargs: dict = dict(data_file=str(path), input_columns="body", label_column="queue", labels=LABELS,
                        prompts=["Route the ticket."])
    kwargs.update(changes)
    return task_from_columns(**kwargs)


def lorem_parquet(path: Path, rows: int) -> Path:
    """The issue's bomb, smaller: every row's body is 396,000 characters; dictionary-encoded and
    compressed, the file is a couple of kilobytes."""
    pl.DataFrame({"body": [LOREM] * rows, "queue": ["BIL", "TEC"] * (rows // 2)}).write_parquet(path, compression="zstd")
    return path


# -- Parquet: what it decodes to ------------------------------------------------------------------


def test_a_parquet_bomb_is_refused_in_one_line_and_its_rows_needed_still_load(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    path = lorem_parquet(tmp_path / "bomb.parquet", 400)  # 158 MB of text once decoded
    assert path.stat().st_size < 20_000
    monkeypatch.setenv("PRE_MAX_DATA_FILE_MB", "50")
    task = tickets_task(path, labels="BIL=billing,TEC=technical")
    one_line_error(task.load, "bomb.parquet", "400 rows", "PRE_MAX_DATA_FILE_MB", "limit")
    samples = task.load(limit=20)  # 7.9 MB of text: within the limit
    assert len(samples) == 20 and all(s.fields["body"] == LOREM.strip() or s.fields["body"] == LOREM for s in samples)


def test_a_parquet_row_group_too_large_to_decode_is_refused_from_the_footer(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "plain.parquet"
    table = pa.table({"body": [LOREM] * 100, "queue": ["BIL", "TEC"] * 50})  # 40 MB of plain-encoded text
    pq.write_table(table, path, compression="zstd", use_dictionary=False)
    assert path.stat().st_size < 200_000
    monkeypatch.setenv("PRE_MAX_DATA_FILE_MB", "10")

    def no_decoding(*args: object, **kwargs: object) -> None:
        raise AssertionError("the file was decoded before its footer was checked")

    monkeypatch.setattr(pl, "scan_parquet", no_decoding)
    monkeypatch.setattr(pl, "read_parquet", no_decoding)
    one_line_error(tickets_task(path, labels="BIL=billing,TEC=technical").load, "plain.parquet", "Parquet footer",
                   "PRE_MAX_DATA_FILE_MB")
    one_line_error(lambda: tickets_task(path, labels="BIL=billing,TEC=technical").load(limit=5), "plain.parquet",
                   "Parquet footer", "smaller row groups")


# -- text files: the rows used, not the file --------------------------------------------------------


def test_limit_reads_only_the_rows_it_uses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tickets_csv(tmp_path / "tickets.csv", 30_000)  # about 1.3 MB; its rows take much more as objects
    expected = [s.id for s in tickets_task(path).load(seed=3)][:20]
    monkeypatch.setenv("PRE_MAX_DATA_FILE_MB", "1")
    one_line_error(tickets_task(path).load, "tickets.csv", "30,000 rows", "PRE_MAX_DATA_FILE_MB", "limit")
    assert [s.id for s in tickets_task(path).load(limit=20, seed=3)] == expected


@pytest.mark.parametrize("ext", [".csv", ".jsonl", ".parquet", ".json", ".tsv"])
def test_the_rows_a_limit_reads_are_the_samples_a_full_read_draws(tmp_path: Path, ext: str) -> None:
    rows = [{"ticket_id": f"T{i}", "body": f"ticket {i}", "queue": ("BIL", "TEC", "OTH")[i % 3]} for i in range(257)]
    path = tmp_path / f"tickets{ext}"
    if ext == ".parquet":
        pl.DataFrame(rows).write_parquet(path, row_group_size=50)
    elif ext == ".jsonl":
        path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    elif ext == ".json":
        path.write_bytes(orjson.dumps(rows))
    else:
        sep = "," if ext == ".csv" else "\t"
        path.write_text(sep.join(rows[0]) + "\n" + "".join(sep.join(r.values()) + "\n" for r in rows))
    for id_column in (None, "ticket_id"):
        task = tickets_task(path, id_column=id_column)
        for seed in (0, 1, 7):
            everything = task.select(task.to_samples(task.eval_rows(None, None)), seed)
            for limit in (0, 1, 5, 100, 257, 400):
                assert task.load(limit=limit, seed=seed) == everything[:limit], (limit, seed)
        in_order = dataclasses.replace(task, selection="first").load(limit=4)
        assert [s.fields["body"] for s in in_order] == [f"ticket {i}" for i in range(4)]


def test_a_builtin_task_with_a_data_file_reads_only_its_rows_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "sst2.tsv"
    path.write_text("sentence\tlabel\n" + "".join(f"a fine film number {i}\t{i % 2}\n" for i in range(40_000)))
    task = get_task("sst2")
    expected = task.load(data_file=str(path), seed=2)[:10]
    monkeypatch.setenv("PRE_MAX_DATA_FILE_MB", "1")
    one_line_error(lambda: task.load(data_file=str(path), seed=2), "sst2.tsv", "40,000 rows")
    assert task.load(data_file=str(path), seed=2, limit=10) == expected


@pytest.mark.parametrize("n", [0, 1, 5, 6, 30, 200, 5000])
def test_seeded_positions_are_the_prefix_of_the_seeded_draw(n: int) -> None:
    from promptrobust.tasks.sampling import seeded_positions

    for k in (None, 0, 1, 3, 6, 7, 100, 872, 10_000):
        for seed in (0, 1, 42):
            drawn = seeded_subset(range(n), k, seed)
            for limit in (0, 1, 2, 10, 500, 20_000):
                assert seeded_positions(n, k, seed, limit) == list(drawn[:limit]), (n, k, seed, limit)
            assert seeded_positions(n, k, seed, 3, first=True) == list(seeded_subset(range(n), k, seed, first=True))[:3]


def test_a_limit_that_cannot_shorten_the_read_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from promptrobust.engine.progress import StreamReporter, reporting
    from promptrobust.tasks import datafiles

    monkeypatch.setattr(datafiles, "LARGE_FILE_BYTES", 1000)
    folder = tmp_path / "mmlu"
    folder.mkdir()
    (folder / "test.csv").write_text("question,A,B,C,D,answer,subject\n"
                                     + "".join(f"q{i}?,a,b,c,d,A,s{i % 4}\n" for i in range(200)))
    stream = io.StringIO()
    with reporting(StreamReporter(stream, every=0)):
        get_task("mmlu").load(data_dir=str(folder), limit=5)
    said = stream.getvalue()
    assert "limit 5" in said and "every row" in said and "test.csv" in said, said


# -- out of memory: one line, never a traceback -------------------------------------------------------


def test_running_out_of_memory_while_reading_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = tickets_csv(tmp_path / "tickets.csv", 50)

    def exhausted(self: object, *args: object, **kwargs: object) -> object:
        raise MemoryError

    monkeypatch.setattr(DatasetTask, "to_samples", exhausted)
    from promptrobust.tasks.own.task import OwnTask

    monkeypatch.setattr(OwnTask, "to_samples", exhausted)
    with FakeOpenAIServer() as server:
        code = main(["run", "--data-file", str(path), "--input-column", "body", "--label-column", "queue", "--labels", LABELS,
                     "--prompt-text", "Route it.", "--model", "openai:fake-model", "--model-args", f"base_url={server.url}",
                     "--mode", "choices", "--output-dir", str(tmp_path / "runs"), "--no-cache", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "memory" in err and "tickets.csv" in err, err


# -- the weak points: what a data file holds -----------------------------------------------------------


def test_a_duplicate_csv_header_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "dup.csv"
    path.write_text("body,queue,body\nfirst text,BIL,second text\n")
    one_line_error(lambda: read_rows(path), "dup.csv", "'body'", "twice", "rename")
    one_line_error(lambda: tickets_task(path).load(), "dup.csv", "'body'", "twice")


def test_a_semicolon_csv_is_read_by_its_separator(tmp_path: Path) -> None:
    path = tmp_path / "eu.csv"
    path.write_text("ticket_id;body;queue\nT1;charged twice, 12,50 EUR;BIL\nT2;app crashes;TEC\nT3;hello;OTH\n")
    samples = tickets_task(path, id_column="ticket_id").load(seed=0)
    assert sorted((s.id, s.fields["body"]) for s in samples) == [
        ("eu:T1", "charged twice, 12,50 EUR"), ("eu:T2", "app crashes"), ("eu:T3", "hello")]


def test_a_csv_that_does_not_parse_names_the_separator_it_was_read_with(tmp_path: Path) -> None:
    path = tmp_path / "odd.csv"
    path.write_text("ticket_id,body,queue\nT1,charged twice,BIL,extra,fields\n")
    one_line_error(lambda: read_rows(path), "odd.csv", "','", "separator")


@pytest.mark.parametrize("value", [{"text": "nested"}, ["a", "list"]])
def test_a_non_text_value_in_a_text_column_is_refused(tmp_path: Path, value: object) -> None:
    path = tmp_path / "tickets.jsonl"
    rows = [{"body": "fine", "queue": "BIL"}, {"body": value, "queue": "TEC"}]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    one_line_error(tickets_task(path).load, "tickets.jsonl row 2", "'body'", "not text")


def test_a_hub_folder_is_read_without_a_copy_in_the_hugging_face_cache(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("datasets")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("HF_HOME", "HF_DATASETS_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    folder = tmp_path / "hubdata"
    folder.mkdir()
    tickets_csv(folder / "test.csv", 3000)
    task = tickets_task(f"hf:{folder}", split="test")
    samples = task.load(limit=5, seed=1)
    assert len(samples) == 5
    copies = [p for p in home.rglob("*.arrow")]
    assert copies == [], copies
    monkeypatch.setenv("PRE_MAX_DATA_FILE_MB", "0.5")
    one_line_error(tickets_task(f"hf:{folder}", split="test").load, "hubdata", "PRE_MAX_DATA_FILE_MB")


def test_random_prefix_replica_holds_for_large_populations() -> None:
    from promptrobust.tasks.sampling import seeded_positions

    rng = random.Random(5)
    for _ in range(20):
        n = rng.randrange(1, 200_000)
        k = rng.choice([None, rng.randrange(0, n + 1)])
        seed = rng.randrange(1000)
        assert seeded_positions(n, k, seed, 50) == seeded_subset(range(n), k, seed)[:50]


def test_running_out_of_memory_anywhere_else_is_one_line_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from promptrobust.engine.runs import executor

    def exhausted(*args: object, **kwargs: object) -> object:
        raise MemoryError

    monkeypatch.setattr(executor, "run_plan", exhausted)  # what `pre run` calls once the plan is made
    path = tickets_csv(tmp_path / "tickets.csv", 5)
    code = main(["run", "--data-file", str(path), "--input-column", "body", "--label-column", "queue", "--labels", LABELS,
                 "--prompt-text", "Route it.", "--model", "openai:fake-model", "--model-args", "base_url=http://127.0.0.1:9/v1",
                 "--output-dir", str(tmp_path / "runs"), "--no-cache", "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1 and "out of memory" in err and "Traceback" not in err, err
