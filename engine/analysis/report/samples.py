"""Per-sample pages: what the model answered on each sample, clean beside adversarial.

A record's samples come from ``samples.jsonl`` in its run folder, written by
``--log-samples``. Its rows take three shapes, matched to a record in this order:
an attack run's rows carry the record's ``run_key`` and a ``role`` (clean or
adversarial; ``Workbench.sample_log``); ``pre transfer`` and ``pre defend`` rows
carry the scored ``prompt`` text (and its dataset, for a defense its model);
``pre eval`` rows carry ``prompt_id`` and ``role``. Clean and adversarial rows are
paired by ``sample_id``; a sample whose score changed has *flipped* (broken when it
fell, fixed when it rose).

Each page is static HTML (inline CSS, no script, nothing fetched): the two prompts
with the changed words marked, then the text every input starts with (the prompt and
the worked examples of a few-shot run, the same on every row) once, folded, then one
row per sample showing the rest of its input, the sample itself, filterable by
flipped or unchanged with radio buttons and a CSS rule. Answers are the model's
words: a user's task scores label values (``BIL``) that the model answers with words
(``billing``, the task's ``labels`` in the run's results.json), so the word is shown
with the value beside it; a generated answer is shown as generated, with the label it
was read as. Every text from the files goes through ``output_safety.html_text``.
"""

from __future__ import annotations

import hashlib
import os.path
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import promptrobust.engine.analysis.report.checks as checks
from promptrobust.engine.analysis.report.prompt_diff import word_diff
from promptrobust.engine.safe_io.output_safety import html_text as esc

FOLDER = "samples"
HOW_TO_LOG = "no per-sample answers logged: rerun with --log-samples to see every sample's clean and adversarial answer"
_SAFE_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True)
class SamplePair:
    """One sample under both prompts (a side is None when the log lacks it)."""

    sample_id: str
    input: str
    target: str
    clean_answer: str | None
    """What the model answered: its generated text, else (label scoring) the label it scored highest."""
    adversarial_answer: str | None
    clean_score: float | None
    adversarial_score: float | None
    clean_label: str | None = None
    """The label the answer was read as (None: unparseable, or the side is missing)."""
    adversarial_label: str | None = None
    input_from_clean: bool = True
    """The input shown is the clean prompt's (False: a sample logged under the adversarial prompt only)."""

    @property
    def change(self) -> str:
        """'broken' (score fell), 'fixed' (rose), 'unchanged', or 'unknown' (a side is missing)."""
        if self.clean_score is None or self.adversarial_score is None:
            return "unknown"
        if self.adversarial_score < self.clean_score:
            return "broken"
        return "fixed" if self.adversarial_score > self.clean_score else "unchanged"

    @property
    def flipped(self) -> bool:
        return self.change in ("broken", "fixed")


@dataclass(frozen=True)
class RecordSamples:
    """A record (a report's normalised record) and its samples."""

    record: Mapping[str, Any]
    pairs: tuple[SamplePair, ...]
    label_words: Mapping[str, str] = field(default_factory=dict)
    """A user's task: label value in the data -> the word the model answers with (empty: the labels are words)."""

    @property
    def page(self) -> str:
        """The page's path relative to the report folder."""
        return f"{FOLDER}/{page_key(self.record)}.html"

    @property
    def flipped(self) -> int:
        return sum(p.flipped for p in self.pairs)


def page_key(record: Mapping[str, Any]) -> str:
    """A file name for the record's page: its run_key when that is a plain name, else a digest of it."""
    key = str(record.get("run_key") or "")
    return key if _SAFE_KEY.fullmatch(key) else "r" + hashlib.sha1(key.encode("utf-8", "replace")).hexdigest()[:16]


def _answer(row: Mapping[str, Any]) -> str | None:
    """What the model answered: its generated text, else (label scoring) the label it scored highest."""
    if row.get("answer") is not None:
        return str(row["answer"])
    return None if row.get("prediction") is None else str(row["prediction"])


def _label(row: Mapping[str, Any] | None) -> str | None:
    return None if row is None or row.get("prediction") is None else str(row["prediction"])


class _SourceIndex:
    """The rows of one run folder's samples.jsonl, indexed the three ways records are matched."""

    def __init__(self, rows: Iterable[Mapping[str, Any]]) -> None:
        self.by_run_key: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
        self.by_prompt: dict[str, list[Mapping[str, Any]]] = {}
        self.by_prompt_id: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
        for row in rows:
            if not isinstance(row, Mapping) or "sample_id" not in row:
                continue
            role = str(row.get("role") or "")
            if row.get("run_key"):
                self.by_run_key.setdefault((str(row["run_key"]), role), []).append(row)
            elif row.get("prompt") is not None:
                self.by_prompt.setdefault(str(row["prompt"]), []).append(row)
            elif row.get("prompt_id") is not None:
                self.by_prompt_id.setdefault((str(row["prompt_id"]), role), []).append(row)

    def rows(self, record: Mapping[str, Any], role: str) -> list[Mapping[str, Any]]:
        text = record["clean_prompt"] if role == "clean" else record["adversarial_prompt"]
        found = self.by_run_key.get((str(record["run_key"]), role))
        if found:
            return found
        by_text = [r for r in self.by_prompt.get(text, []) if str(r.get("dataset", record["dataset"])) == record["dataset"]
                   and str(r.get("model", record["model"])) == record["model"]]
        return by_text or self.by_prompt_id.get((str(record["prompt_id"]), role), [])


def _pairs(clean: Sequence[Mapping[str, Any]], adversarial: Sequence[Mapping[str, Any]]) -> tuple[SamplePair, ...]:
    by_id = {str(r["sample_id"]): r for r in clean}
    adv = {str(r["sample_id"]): r for r in adversarial}
    out = []
    for sid in dict.fromkeys([*by_id, *adv]):  # clean order, then samples logged only adversarially
        c, a = by_id.get(sid), adv.get(sid)
        first = c or a or {}
        out.append(SamplePair(
            sample_id=sid, input=str(first.get("input") or ""), target=str(first.get("target")),
            clean_answer=_answer(c) if c else None, adversarial_answer=_answer(a) if a else None,
            clean_score=checks.score(c.get("score")) if c else None,
            adversarial_score=checks.score(a.get("score")) if a else None,
            clean_label=_label(c), adversarial_label=_label(a), input_from_clean=c is not None,
        ))
    return tuple(out)


def _label_words(source: Path) -> dict[str, dict[str, str]]:
    """A run folder's users' tasks: (task name and definition hash) -> {label value: answer word}, from its
    results.json ``tasks`` (a built-in dataset's labels are its words: none listed)."""
    from promptrobust.engine.analysis.report.load import _read_json

    path = source / "results.json"
    data = _read_json(path) if path.is_file() else None
    out: dict[str, dict[str, str]] = {}
    for task in (data or {}).get("tasks") or []:
        labels = task.get("labels") if isinstance(task, Mapping) else None
        if isinstance(labels, Mapping) and labels:
            words = {str(k): str(v) for k, v in labels.items()}
            out[str(task.get("name"))] = words
            if task.get("definition_hash"):
                out[str(task["definition_hash"])] = words
    return out


def find_samples(records: Sequence[Mapping[str, Any]]) -> dict[str, RecordSamples]:
    """Each record's samples by its ``run_key`` (records without logged samples are absent).
    Each run folder's samples.jsonl is read once."""
    from promptrobust.engine.measuring.records import read_jsonl

    indexes: dict[str, _SourceIndex | None] = {}
    words: dict[str, dict[str, dict[str, str]]] = {}
    out: dict[str, RecordSamples] = {}
    for r in records:
        source = str(r["source"])
        if source not in indexes:
            path = Path(source) / "samples.jsonl"
            indexes[source] = _SourceIndex(read_jsonl(path, non_finite=True)) if path.is_file() else None
            words[source] = _label_words(Path(source)) if path.is_file() else {}
        index = indexes[source]
        if index is None:
            continue
        clean = index.rows(r, "clean")
        adversarial = index.rows(r, "adversarial") if r.get("adversarial_prompt") else []
        if clean or adversarial:
            task = words[source].get(str(r.get("task_definition") or "")) or words[source].get(str(r["dataset"])) or {}
            out[str(r["run_key"])] = RecordSamples(r, _pairs(clean, adversarial), task)
    return out


PAGE_CSS = """
body{font-family:-apple-system,"Segoe UI",Roboto,"DejaVu Sans",Arial,sans-serif;color:#1d2430;background:#f6f7f9;margin:0}
main{max-width:1280px;margin:0 auto;padding:20px 28px 48px;background:#fff;min-height:100vh}
h1{font-size:22px;margin:4px 0 6px;overflow-wrap:anywhere}
p.meta{color:#5b6472;margin:2px 0;font-size:13px}
a{color:#1f5fa8}
table{border-collapse:collapse;font-size:13px;width:100%;table-layout:fixed}
th,td{border:1px solid #d9dde3;padding:5px 7px;vertical-align:top}
td{overflow-wrap:anywhere}th{overflow-wrap:normal}
thead th{background:#eef1f5;position:sticky;top:0}
table.prompts td{font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12.5px;line-height:1.5}
del{background:#fde2e1;color:#9b1c1c;text-decoration:line-through;border-radius:3px;padding:0 2px}
ins{background:#dcf5dd;color:#14532d;text-decoration:none;font-weight:600;border-radius:3px;padding:0 2px}
div.input{white-space:pre-wrap;max-height:16em;overflow:auto;font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12px}
span.ph{background:#eef1f5;color:#5b6472;border-radius:3px;padding:0 3px;font-style:italic}
details.shared{margin:12px 0 4px;border:1px solid #d9dde3;border-radius:4px;padding:6px 10px;background:#fafbfc;font-size:13px}
details.shared summary{cursor:pointer;color:#1d2430}
details.shared div.input{max-height:none;margin-top:6px}
span.code{color:#5b6472;font-size:11.5px;font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace;white-space:nowrap}
span.gen{font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12px;white-space:pre-wrap}
td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.broken td{background:#fdf0ef}tr.fixed td{background:#eff8f0}
td.change{font-weight:600}tr.broken td.change{color:#9b1c1c}tr.fixed td.change{color:#14532d}
.filter{margin:14px 0 8px;font-size:14px}
.filter input{margin-left:14px}
#show-flipped:checked~table tr.same{display:none}
#show-same:checked~table tr.flip{display:none}
#show-flipped:checked~table tr.unknown,#show-same:checked~table tr.unknown{display:none}
col.n{width:3%}col.id{width:8%}col.in{width:30%}col.t{width:9%}col.a{width:13%}col.s{width:8%}col.c{width:8%}
td.change{overflow-wrap:normal;font-size:12px}
"""


def _input_html(text: str, prompt: str) -> str:
    """The sample's input with the clean prompt shown as a marker (the page shows the prompt above)."""
    if prompt and prompt in text:
        before, after = text.split(prompt, 1)
        return f'{esc(before)}<span class="ph">[clean prompt]</span>{esc(after)}'
    return esc(text)


def shared_start(texts: Sequence[str]) -> str:
    """The text every one of ``texts`` starts with, up to a line's end (the prompt and the worked
    examples of a few-shot input); '' for fewer than two texts or when no whole line is shared."""
    if len(texts) < 2:
        return ""
    common = os.path.commonprefix(list(texts))
    return common[: common.rfind("\n") + 1]


def shared_end(texts: Sequence[str]) -> str:
    """The whole lines every one of ``texts`` ends with (the answer cue, 'Answer:'); '' when none."""
    if len(texts) < 2:
        return ""
    common = os.path.commonprefix([t[::-1] for t in texts])[::-1]
    cut = common.find("\n")
    return common[cut:] if cut >= 0 else ""


def answer_html(answer: str | None, label: str | None, words: Mapping[str, str]) -> str:
    """An answer as the model's words with the label it scores as beside: 'billing BIL' for label
    scoring of a user's task; a generated answer as generated, with the label it was read as."""
    if answer is None:
        return "–"
    if answer == label or label is None and answer in words:  # label scoring: the answer is a label value
        word = words.get(answer)
        return f'{esc(word)} <span class="code">{esc(answer)}</span>' if word is not None else esc(answer)
    read = "unparseable" if label is None else (f"{words[label]} = {label}" if label in words else label)
    return f'<span class="gen">{esc(answer)}</span> <span class="code">read as {esc(read)}</span>'


def _score(x: float | None) -> str:
    return "–" if x is None else f"{x:.3g}"


def page_html(samples: RecordSamples, *, report_link: str = "../report.html") -> str:
    """The static page of one record's samples."""
    r = samples.record
    pairs = samples.pairs
    flipped = samples.flipped
    unchanged = sum(p.change == "unchanged" for p in pairs)
    left, right = word_diff(str(r["clean_prompt"]), str(r["adversarial_prompt"] or ""))
    pdr = "–" if r.get("pdr") is None else f"{r['pdr']:.3f}"
    ci = r.get("pdr_ci95")
    interval = f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
    scores = " → ".join("–" if r.get(k) is None else f"{r[k]:.3f}" for k in ("clean_score", "adversarial_score"))
    setting = r["setting"].label() if hasattr(r.get("setting"), "label") else ""
    title = f"{r['model']} / {r['dataset']} / {r['attack']} / {r['prompt_id']}"
    words = samples.label_words
    prompt = str(r["clean_prompt"])
    inputs = [p.input for p in pairs if p.input_from_clean]
    shared = shared_start(inputs)
    ending = shared_end([t[len(shared):] for t in inputs])
    rows = []
    for i, p in enumerate(pairs, 1):
        css = {"broken": "broken flip", "fixed": "fixed flip", "unknown": "unknown"}.get(p.change, "same")
        own = p.input[len(shared):len(p.input) - len(ending)] if p.input_from_clean else p.input
        target = (f'{esc(words[p.target])} <span class="code">{esc(p.target)}</span>' if p.target in words
                  else esc(p.target))
        rows.append(
            f'<tr class="{css}"><td class="num">{i}</td><td>{esc(p.sample_id)}</td>'
            f'<td><div class="input">{_input_html(own, prompt)}</div></td><td>{target}</td>'
            f'<td>{answer_html(p.clean_answer, p.clean_label, words)}</td><td class="num">{_score(p.clean_score)}</td>'
            f'<td>{answer_html(p.adversarial_answer, p.adversarial_label, words)}</td>'
            f'<td class="num">{_score(p.adversarial_score)}</td><td class="change">{p.change}</td></tr>'
        )
    shots = r.get("shots")
    examples = f" and the {shots} worked example{'s' if shots != 1 else ''}" if isinstance(shots, int) and shots > 0 else ""
    shared_html = (
        f'<details class="shared"><summary>The start of every input below, the same on all {len(pairs)} rows '
        f"(the clean prompt{examples}; {shared.count(chr(10))} lines): show</summary>"
        f'<div class="input">{_input_html(shared, prompt)}</div></details>' if shared else "")
    if ending.strip():
        shared_html += (f'<p class="meta">every input then ends with <span class="gen">{esc(ending.strip())}</span> '
                        "(left out of the rows below)</p>")
    if words:
        labels = ", ".join(f"{v} = {k}" for k, v in words.items())
        shared_html += (f'<p class="meta">answers are the model\'s words, with the label value of the data beside '
                        f"them: {esc(labels)}</p>")
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}: samples</title><style>{PAGE_CSS}</style></head><body><main>",
        f'<p class="meta"><a href="{esc(report_link)}">&larr; report</a></p>',
        f"<h1>{esc(title)}</h1>",
        f'<p class="meta">{esc(r["kind"])} record; PDR <b>{pdr}</b>{esc(interval)}; score {scores}; {esc(setting)}</p>',
        f'<p class="meta">{len(pairs)} samples: {flipped} flipped '
        f'({sum(p.change == "broken" for p in pairs)} broken, {sum(p.change == "fixed" for p in pairs)} fixed), '
        f'{unchanged} unchanged'
        + (f', {sum(p.change == "unknown" for p in pairs)} logged under one prompt only' if any(
            p.change == "unknown" for p in pairs) else "") + "</p>",
        '<table class="prompts"><thead><tr><th>clean prompt</th><th>adversarial prompt</th></tr></thead>',
        f"<tbody><tr><td>{left}</td><td>{right}</td></tr></tbody></table>",
        shared_html,
        '<div class="filter">show:'
        '<input type="radio" name="show" id="show-all" checked><label for="show-all">all</label>'
        f'<input type="radio" name="show" id="show-flipped"><label for="show-flipped">flipped ({flipped})</label>'
        f'<input type="radio" name="show" id="show-same"><label for="show-same">unchanged ({unchanged})</label>',
        '<table class="samples"><colgroup><col class="n"><col class="id"><col class="in"><col class="t"><col class="a">'
        '<col class="s"><col class="a"><col class="s"><col class="c"></colgroup>',
        "<thead><tr><th>#</th><th>sample</th><th>input (the sample)</th><th>target</th><th>clean answer</th><th>clean score</th>"
        "<th>adversarial answer</th><th>adversarial score</th><th>change</th></tr></thead>",
        f"<tbody>{''.join(rows)}</tbody></table></div>",
        "</main></body></html>",
    ]) + "\n"
