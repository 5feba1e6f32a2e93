"""SQuAD v2: extractive answers, or "unanswerable" when the context has none.

``Sample.target`` is the list of reference answers ([] = unanswerable); the
parser returns the answer text, "" for "unanswerable". Rows: ``id``,
``context``, ``question``, ``answers`` (HF's ``{"text": [...], ...}``, a list of
strings, or either as a JSON string in CSV). SQuAD's official nested JSON
(``dev-v2.0.json``) loads too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from promptrobust.tasks.base import Metric, ParserName, Sample
from promptrobust.tasks.common import DatasetTask, HFSplit, LocalSplit, Rows, Source, column, text_value
from promptrobust.tasks.errors import TaskDataError
from promptrobust.tasks.metrics import SquadF1, squad_normalize
from promptrobust.tasks.datafiles import DataRow

UNANSWERABLE = "unanswerable"
_NO_ANSWER = {"unanswerable", "no answer", "not answerable", "none", "cannot be answered", "n a"}
_LEAD = re.compile(r"^\s*(?:the\s+)?answer\s*(?:is)?\s*[:\-]?\s*", re.IGNORECASE)


def _answers(raw: Any, origin: str) -> list[str]:
    if isinstance(raw, str):
        try:
            raw = orjson.loads(raw) if raw.strip() else []
        except orjson.JSONDecodeError as exc:
            raise TaskDataError(f"{origin}: column 'answers' must be JSON in a CSV file; got {raw[:40]!r}") from exc
    if isinstance(raw, dict):
        raw = raw.get("text", [])
    if raw is None:
        return []
    if not isinstance(raw, (list, tuple)):
        raise TaskDataError(f"{origin}: column 'answers' must be a list of strings or {{'text': [...]}}")
    return [str(a.get("text", "") if isinstance(a, dict) else a) for a in raw]


def _objects(value: object, what: str, origin: str) -> list[dict[str, object]]:
    """``value`` as SQuAD's layout has it there: a list of JSON objects; anything else refused."""
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise TaskDataError(f"{origin}: {what} must be a list of JSON objects (SQuAD's layout)")
    return value


def _flatten_official(doc: object, origin: str) -> list[DataRow]:
    if not isinstance(doc, dict) or "data" not in doc:
        raise TaskDataError(f"{origin}: JSON object without 'data'; use SQuAD's layout or JSON Lines records")
    rows: list[DataRow] = []
    for article in _objects(doc["data"], "'data'", origin):
        for para in _objects(article.get("paragraphs", []), "'paragraphs'", origin):
            for qa in _objects(para.get("qas", []), "'qas'", origin):
                if "id" not in qa or "question" not in qa or "context" not in para:
                    raise TaskDataError(f"{origin}: a question without 'id' or 'question', or a paragraph without "
                                        "'context' (SQuAD's layout)")
                answers = [] if qa.get("is_impossible") else [
                    text_value(a.get("text"), "answers.text", origin)
                    for a in _objects(qa.get("answers", []), "'answers'", origin)]
                rows.append({"id": qa["id"], "title": article.get("title", ""), "context": para["context"],
                             "question": qa["question"], "answers": answers})
    return rows


@dataclass
class SquadV2Task(DatasetTask):
    #: A JSON file in SQuAD's official layout is one document of many questions.
    rows_are_file_rows = False

    @property
    def metric(self) -> Metric:
        return SquadF1()

    def _read_local(self, path: Path, tag: str) -> Rows:
        rows = super()._read_local(path, tag)
        if len(rows) == 1 and "__document__" in rows[0][0]:
            flat = _flatten_official(rows[0][0]["__document__"], str(path))
            return [(r, f"{path} question {r['id']}", tag) for r in flat]
        return rows

    def row_to_sample(self, row: DataRow, index: int, origin: str, tag: str) -> Sample:
        fields = {
            "context": text_value(column(row, ("context",), origin), "context", origin),
            "question": text_value(column(row, ("question",), origin), "question", origin),
        }
        rid = row.get("id", index)
        return Sample(id=f"squad_v2:{rid}", fields=fields, target=_answers(column(row, ("answers",), origin), origin))

    def fields_block(self, sample: Sample, *, slots_shown: bool = False) -> list[str]:
        return ["Context: " + sample.fields["context"], "Question: " + sample.fields["question"]]

    def answer_text(self, sample: Sample) -> str:
        return sample.target[0] if sample.target else UNANSWERABLE

    def parse(self, answer: str, parser: ParserName = "last_word") -> str | None:
        """The first line of the answer ("" = unanswerable). ``robust`` also drops
        a leading "Answer:"/"The answer is" and quotes, and reads any short answer
        that says it is unanswerable."""
        if parser not in ("last_word", "robust"):
            raise ValueError(f"unknown parser {parser!r}; use 'last_word' or 'robust'")
        lines = answer.strip().splitlines()
        text = lines[0].strip() if lines else ""
        if parser == "robust":
            text = _LEAD.sub("", text).strip().strip("\"'").strip()
            norm = squad_normalize(text)
            if norm in _NO_ANSWER or (UNANSWERABLE in norm.split() and len(norm.split()) <= 6):
                return ""
            return text
        return "" if squad_normalize(text) == UNANSWERABLE else text


def squad_v2() -> SquadV2Task:
    return SquadV2Task(
        name="squad_v2",
        labels=(),
        verbalizers={},
        protected_words=frozenset({UNANSWERABLE}),  # promptbench's LABEL_SET
        # promptbench: 20 new tokens. The parser reads the first line only, so
        # stopping at a newline returns the same parse, exactly, with less decoding.
        max_tokens=20,
        stop=("\n",),
        supports_choices=False,
        description="SQuAD v2 extractive QA with unanswerable questions (validation)",
        sample_size=200,
        source=Source(
            hf_eval=(HFSplit("rajpurkar/squad_v2", None, "validation"),),
            hf_pool=(HFSplit("rajpurkar/squad_v2", None, "train"),),
            local_eval=(LocalSplit(("validation", "dev", "dev-v2.0")),),
            local_pool=(LocalSplit(("train", "train-v2.0")),),
        ),
    )
