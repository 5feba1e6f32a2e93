"""The report as one self-contained HTML page: inline CSS, PNGs as data URIs, no scripts.

Every piece of text from the results (prompts, model and dataset names,
paths) goes through ``output_safety.html_text`` (control characters and bidi
marks shown as ``[U+XXXX]``, then ``html.escape``); adversarial prompts are
shown next to their clean originals with a word-level diff (``prompt_diff``).
Tables wrap (long names break anywhere, an APDR cell before its interval) and
scroll as a whole when still wider than the page. Records link to their
per-sample pages (``samples``), written beside the page.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from promptrobust.engine.analysis.report.prompt_diff import CAPPED_NOTE, word_diff
from promptrobust.engine.analysis.report.samples import HOW_TO_LOG
from promptrobust.engine.analysis.report.tables import ALL, MISSING, Table, numeric_column, p_text
from promptrobust.engine.measuring.records import KINDS
from promptrobust.engine.safe_io.output_safety import html_text as escape  # controls made visible, then html.escape

__all__ = ["CAPPED_NOTE", "render", "table_html", "word_diff"]

if TYPE_CHECKING:
    from promptrobust.engine.analysis.report.parts import ReportContent as Report

CSS = """
body{font-family:-apple-system,"Segoe UI",Roboto,"DejaVu Sans",Arial,sans-serif;color:#1d2430;background:#f6f7f9;margin:0}
main{max-width:1180px;margin:0 auto;padding:24px 28px 48px;background:#fff;min-height:100vh}
h1{font-size:26px;margin:4px 0 4px}
h2{font-size:20px;margin:32px 0 10px;padding-bottom:4px;border-bottom:2px solid #e3e6eb}
h3{font-size:16px;margin:20px 0 6px}
p.meta{color:#5b6472;margin:2px 0;font-size:13px}
table{border-collapse:collapse;margin:6px 0 4px;font-size:13px}
th,td{border:1px solid #d9dde3;padding:4px 9px;vertical-align:top}
th{background:#eef1f5;text-align:center}
td.num{text-align:right;font-variant-numeric:tabular-nums}
td.long{overflow-wrap:anywhere}td.short{white-space:nowrap}
tr:nth-child(even) td{background:#fafbfc}
p.note{color:#5b6472;font-size:12px;font-style:italic;margin:2px 0 10px}
.plots{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}
.scroll{overflow-x:auto;max-width:100%}
@media print{.scroll{overflow:visible}}
figure{margin:0;border:1px solid #e3e6eb;border-radius:6px;padding:8px;background:#fff;flex:0 1 auto;max-width:100%;box-sizing:border-box}
figure img{max-width:100%;height:auto;display:block;margin:0 auto}
figcaption{font-size:12px;color:#5b6472;text-align:center;margin-top:4px}
table.diff{width:100%;table-layout:fixed}
table.diff td.prompt{font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:12.5px;line-height:1.5;word-wrap:break-word;overflow-wrap:anywhere}
table.diff col.rank{width:34px}table.diff col.info{width:190px}
del{background:#fde2e1;color:#9b1c1c;text-decoration:line-through;border-radius:3px;padding:0 2px}
ins{background:#dcf5dd;color:#14532d;text-decoration:none;font-weight:600;border-radius:3px;padding:0 2px}
.skip{color:#8a5a00;background:#fff7e0;border:1px solid #f1d48a;padding:6px 10px;border-radius:4px;font-size:13px}
.words{display:flex;flex-wrap:wrap;gap:24px;align-items:flex-start}
.words>div{flex:1 1 420px;min-width:0}
tbody th{text-align:left;font-weight:600;white-space:nowrap}
td.all,th.all{background:#f3f5f8;font-weight:600}
"""


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


#: A word longer than this (a run folder's name) may break anywhere; a cell this short (a prompt
#: id such as sst2-task-01) never breaks; the rest wrap at spaces.
LONG_WORD = 24
SHORT_CELL = 16


def _wrap_class(text: str) -> str:
    if any(len(w) > LONG_WORD for w in text.split()):
        return " long"
    return " short" if len(text) <= SHORT_CELL else ""


def number_html(text: str) -> str:
    """A number cell that may wrap only before its interval: '0.31 ± 0.12' and '[0.20, 0.43]' stay whole."""
    return escape(text).replace(" ± ", "&nbsp;±&nbsp;").replace(", ", ",&nbsp;")


def table_html(t: Table) -> str:
    """A table whose number columns are right-aligned and wrap only before an interval, and whose
    text columns wrap anywhere, so it fits the page (else it scrolls whole)."""
    marg = [h == ALL for h in t.header]
    numbers = [numeric_column([r[i] for r in t.rows if i < len(r)]) for i in range(len(t.header))]
    head = "".join(f'<th class="all">{escape(h)}</th>' if m else f"<th>{escape(h)}</th>" for h, m in zip(t.header, marg))
    body = []
    for row in t.rows:
        cells = [f"<th>{escape(row[0])}</th>"]
        cells += [f'<td class="num{" all" if m else ""}">{number_html(c)}</td>' if n else
                  f'<td class="text{_wrap_class(c)}{" all" if m else ""}">{escape(c)}</td>'
                  for c, m, n in zip(row[1:], marg[1:], numbers[1:])]
        body.append("<tr>" + "".join(cells) + "</tr>")
    note = f'<p class="note">{escape(t.note)}</p>' if t.note else ""
    return f'<h3>{escape(t.title)}</h3><div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>{note}'


def figure_html(caption: str, png: bytes) -> str:
    return f'<figure><img src="{data_uri(png)}" alt="{escape(caption)}"><figcaption>{escape(caption)}</figcaption></figure>'


_LINK_KEY = ("model", "dataset", "attack", "prompt_id", "adversarial_prompt")


def _score(x: float | None) -> str:
    """A score, or '–' for an older record that kept its PDR alone."""
    return MISSING if x is None else f"{x:.3f}"


def _sample_links(report: "Report") -> dict[tuple[str, ...], str]:
    """(model, dataset, attack, prompt id, adversarial prompt) -> the record's per-sample page."""
    return {tuple(str(s.record[k]) for k in _LINK_KEY): s.page for s in report.samples().values()}


def prompts_html(rows: Sequence[Mapping[str, Any]], links: Mapping[tuple[str, ...], str] | None = None) -> str:
    """Adversarial prompts beside their clean originals, changed words marked (and a link to
    each record's per-sample page where ``links`` has one)."""
    out = []
    for rank, r in enumerate(rows, 1):
        left, right = word_diff(r["clean_prompt"], r["adversarial_prompt"])
        ci = r.get("pdr_ci95")
        extra = f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
        p = "" if r.get("mcnemar_p") is None else f"<br>McNemar p {escape(p_text(r['mcnemar_p']))}"
        chance = "<br><i>clean score at chance</i>" if r.get("at_chance") else ""
        info = (
            f"<b>PDR {r['pdr']:.3f}</b>{escape(extra)}{p}<br>{escape(str(r['attack']))}<br>{escape(str(r['model']))}<br>"
            f"{escape(str(r['dataset']))} / {escape(str(r['prompt_id']))}<br>"
            f"score {_score(r.get('clean_score'))} &rarr; {_score(r.get('adversarial_score'))}{chance}"
        )
        from promptrobust.engine.analysis.report.meaning import meaning_text

        if meaning_text(r):  # issue 23: substitutions, similarity, held-out PDR
            info += f"<br><small>{escape(meaning_text(r))}</small>"
        page = (links or {}).get(tuple(str(r.get(k)) for k in _LINK_KEY))
        if page:
            info += f'<br><a href="{escape(page)}">per-sample answers</a>'
        out.append(f'<tr><td class="num">{rank}</td><td>{info}</td><td class="prompt">{left}</td><td class="prompt">{right}</td></tr>')
    return (
        '<table class="diff"><colgroup><col class="rank"><col class="info"><col><col></colgroup>'
        "<thead><tr><th>#</th><th>attack / model / prompt</th><th>clean prompt</th><th>adversarial prompt</th></tr></thead>"
        f"<tbody>{''.join(out)}</tbody></table>"
    )


def render(report: "Report") -> str:
    """The whole page."""
    title = "promptrobust report"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{title}</title><style>{CSS}</style></head><body><main>",
        f"<h1>{title}</h1>",
        *(f'<p class="meta">{escape(m)}</p>' for m in report.meta),
        *(f'<p class="skip">{escape(n)}</p>' for n in report.notes),
    ]
    for section in report.sections:
        if section.title:
            parts.append(f"<h2>{escape(section.title)}</h2>")
        parts += [f'<p class="skip">{escape(n)}</p>' for n in section.notes]
        words = [t for t in section.tables if t.name.startswith("words_")]
        parts += [table_html(t) for t in section.tables if t not in words]
        pictures = [f for f in section.figures if not f.name.startswith("word_frequency")]
        if pictures:
            parts.append('<h3>Pictures</h3><div class="plots">')
            parts += [figure_html(f.caption, f.png) for f in pictures]
            parts.append("</div>")
        if words:
            parts.append('<h3>Word frequency: robust vs vulnerable prompts</h3><div class="words">')
            parts += [f"<div>{table_html(t)}</div>" for t in words]
            parts.append("</div>")
            parts += [f'<div class="plots">{figure_html(f.caption, f.png)}</div>'
                      for f in section.figures if f.name.startswith("word_frequency")]
    links = _sample_links(report)
    for t in report.extremes:
        if t.name in ("held_out_pdr", "adversarial_prompts_meaning", "meaning_agreement"):  # plain tables, not prompt lists
            parts.append(f"<h2>{escape(t.title)}</h2>")
            parts.append(table_html(t))
            continue
        parts.append(f"<h2>{escape(t.title)} (top {len(t.long)})</h2>")
        parts.append(prompts_html(t.long, links))
        parts.append(f'<p class="note">{escape(t.note)}</p>')
    parts += records_index_html(report)
    if report.excluded is not None:
        parts.append("<h2>Records not averaged</h2>")
        parts.append(table_html(report.excluded))
    parts.append("</main></body></html>")
    return "\n".join(parts) + "\n"


def records_index_html(report: "Report") -> list[str]:
    """Every record with a link to its per-sample page; one line saying how to log them when none was."""
    if not report.records:
        return []
    found = report.samples()
    if not found:
        return [f'<p class="skip">{escape(HOW_TO_LOG)}</p>']
    order = {k: i for i, k in enumerate(KINDS)}
    rows = []
    for r in sorted(report.records, key=lambda r: (order.get(r["kind"], len(order)), r["model"], r["dataset"],
                                                   r["attack"], r["prompt_id"], r["run_key"])):
        s = found.get(r["run_key"])
        pdr = MISSING if r.get("pdr") is None or r["status"] != "attacked" else f"{r['pdr']:.3f}"
        link = (f'<a href="{escape(s.page)}">{len(s.pairs)} samples, {s.flipped} flipped</a>' if s
                else "not logged (--log-samples)")
        rows.append(f"<tr><td>{escape(r['kind'])}</td><td>{escape(r['model'])}</td><td>{escape(r['dataset'])}</td>"
                    f"<td>{escape(r['attack'])}</td><td>{escape(r['prompt_id'])}</td><td>{escape(r['status'])}</td>"
                    f'<td class="num">{pdr}</td><td>{link}</td></tr>')
    head = "".join(f"<th>{h}</th>" for h in ("kind", "model", "dataset", "attack", "prompt", "status", "PDR", "samples"))
    return ["<h2>Per-sample answers</h2>",
            '<p class="note">each record\'s samples on their own page: input, clean and adversarial answers and '
            "scores, which flipped (filter: flipped / unchanged)</p>",
            f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>']
