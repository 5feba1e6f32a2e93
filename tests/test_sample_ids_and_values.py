"""Issue 41, item 6 and a weak point of the same round: what a row's values may be.

An AdvGLUE file whose ``idx`` nests 1,000 levels was a ``RecursionError`` (the id was the
value's repr); any non-scalar ``idx`` went into the sample id. A sample id is a scalar or
the row is refused, in one line naming the row and column; a text column (AdvGLUE's
``sentence``, a user's input column) refuses an object or a list instead of showing its repr.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from promptrobust.engine.errors import PromptRobustError
from promptrobust.tasks import get_task, task_from_columns
from promptrobust.tasks.adversarial_samples import load_adversarial_samples


class Nested:
    """A value nested ``depth`` lists deep, written as JSON text (orjson writes at most 255 levels)."""

    def __init__(self, depth: int) -> None:
        self.depth = depth

    def json(self) -> bytes:
        return b"[" * self.depth + b"7" + b"]" * self.depth


def nested(depth: int) -> Nested:
    return Nested(depth)


def json_text(value: object) -> bytes:
    if isinstance(value, Nested):
        return value.json()
    if isinstance(value, dict):
        return b"{" + b",".join(orjson.dumps(k) + b":" + json_text(v) for k, v in value.items()) + b"}"
    if isinstance(value, list):
        return b"[" + b",".join(json_text(v) for v in value) + b"]"
    return orjson.dumps(value)


def advglue(path: Path, rows: list[dict]) -> Path:
    """An AdvGLUE dev.json with ``rows`` as its SST-2 block."""
    path.write_bytes(json_text({"sst2": rows}))
    return path


def refused(action: object, *needles: str) -> str:
    with pytest.raises(PromptRobustError) as info:
        action()  # type: ignore[operator]
    message = str(info.value)
    assert "\n" not in message and len(message) < 400, message
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"
    return message


def test_an_advglue_idx_nested_a_thousand_levels_is_one_line(tmp_path: Path) -> None:
    path = advglue(tmp_path / "dev.json", [{"sentence": "a fine film", "label": 1, "idx": nested(1000)}])
    refused(lambda: load_adversarial_samples(get_task("sst2"), str(path)), "dev.json sst2 row 1", "'idx'", "not an id")


@pytest.mark.parametrize("idx", [[1, 2], {"a": 1}])
def test_a_non_scalar_idx_is_refused_not_taken_into_the_id(tmp_path: Path, idx: object) -> None:
    path = advglue(tmp_path / "dev.json", [{"sentence": "a fine film", "label": 1, "idx": idx}])
    refused(lambda: load_adversarial_samples(get_task("sst2"), str(path)), "row 1", "'idx'", "not an id")


def test_scalar_ids_are_kept_as_they_were(tmp_path: Path) -> None:
    path = advglue(tmp_path / "dev.json", [{"sentence": "a fine film", "label": 1, "idx": 41},
                                           {"sentence": "a dull film", "label": 0, "idx": "x7"}])
    assert [s.id for s in load_adversarial_samples(get_task("sst2"), str(path))] == ["sst2:adv:41", "sst2:adv:x7"]


@pytest.mark.parametrize("sentence", [["a", "list"], {"text": "an object"}, nested(900)])
def test_an_advglue_sentence_that_is_not_text_is_refused(tmp_path: Path, sentence: object) -> None:
    path = advglue(tmp_path / "dev.json", [{"sentence": sentence, "label": 1, "idx": 0}])
    refused(lambda: load_adversarial_samples(get_task("sst2"), str(path)), "row 1", "'sentence'", "not text")


def test_a_label_nested_deep_is_one_line(tmp_path: Path) -> None:
    path = advglue(tmp_path / "dev.json", [{"sentence": "a fine film", "label": nested(1000), "idx": 0}])
    refused(lambda: load_adversarial_samples(get_task("sst2"), str(path)), "row 1", "'label'", "not a label")


def test_a_users_id_and_label_columns_refuse_objects_too(tmp_path: Path) -> None:
    path = tmp_path / "tickets.jsonl"
    rows = [{"id": nested(1000), "body": "charged twice", "queue": "BIL"}]
    path.write_bytes(b"".join(json_text(r) + b"\n" for r in rows))
    task = task_from_columns(data_file=str(path), input_columns="body", label_column="queue",
                             labels="BIL=billing,TEC=technical", id_column="id")
    refused(task.load, "tickets.jsonl row 1", "'id'", "not an id")
    path.write_bytes(json_text({"id": "T1", "body": "charged twice", "queue": nested(1000)}) + b"\n")
    refused(task.load, "tickets.jsonl row 1", "'queue'", "not a label")
