"""The report as one self-contained HTML page: inline CSS, PNGs as data URIs, no scripts.

Every piece of text from the results (prompts, model and dataset names,
paths) goes through ``html.escape``; adversarial prompts are shown next to
their clean originals with a word-level diff (difflib): words the attack
removed or changed are wrapped in <del>, words it added or changed in <ins>.
"""

from __future__ import annotations

import base64
import difflib
import re
from collections.abc import Mapping, Sequence
from html import escape
from typing import TYPE_CHECKING, Any

from promptrobust.engine.analysis.report.tables import ALL, Table

if TYPE_CHECKING:
    from promptrobust.engine.analysis.report import Report

_TOKEN = re.compile(r"\S+|\s+")

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
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
tr:nth-child(even) td{background:#fafbfc}
p.note{color:#5b6472;font-size:12px;font-style:italic;margin:2px 0 10px}
.plots{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}
.scroll{overflow-x:auto;max-width:100%}
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


#: difflib's matching is quadratic in the worst case. The common start and end are found in
#: linear time; the differing middle is matched word by word only while it has at most this
#: many token pairs (a few hundred words on each side). Beyond that it is shown as replaced
#: whole, with a note: a 20k-word prompt takes milliseconds, not minutes.
DIFF_PAIRS = 1_000_000
CAPPED_NOTE = "(word diff capped: the changed middle is too long to match word by word; shown as replaced whole)"
#: Characters of each prompt shown on the page (the records keep the whole prompt).
SHOWN_CHARS = 100_000


def word_diff(clean: str, adversarial: str) -> tuple[str, str]:
    """Escaped HTML of both prompts with removed words in <del> and added words in <ins>.

    Linear outside the differing middle; see ``DIFF_PAIRS`` for the cap (noted in the cell).
    A prompt longer than ``SHOWN_CHARS`` is shown cut, with a note saying how much is left out."""
    cut_a, cut_b = max(0, len(clean) - SHOWN_CHARS), max(0, len(adversarial) - SHOWN_CHARS)
    left_html, right_html = _word_diff(clean[:SHOWN_CHARS], adversarial[:SHOWN_CHARS])
    if cut_a:
        left_html += f'<br><i class="note">({cut_a:,} more characters not shown)</i>'
    if cut_b:
        right_html += f'<br><i class="note">({cut_b:,} more characters not shown)</i>'
    return left_html, right_html


def _word_diff(clean: str, adversarial: str) -> tuple[str, str]:
    a, b = _TOKEN.findall(clean), _TOKEN.findall(adversarial)
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    end = 0
    while end < min(len(a), len(b)) - start and a[len(a) - 1 - end] == b[len(b) - 1 - end]:
        end += 1
    mid_a, mid_b = a[start : len(a) - end], b[start : len(b) - end]
    left: list[str] = [escape("".join(a[:start]))]
    right: list[str] = [escape("".join(b[:start]))]
    if len(mid_a) * len(mid_b) > DIFF_PAIRS:
        left.append(_mark("del", mid_a))
        right.append(_mark("ins", mid_b))
        tail_a, tail_b = escape("".join(a[len(a) - end :])), escape("".join(b[len(b) - end :]))
        note = f'<br><i class="note">{escape(CAPPED_NOTE)}</i>'
        return "".join(left) + tail_a, "".join(right) + tail_b + note
    for op, i1, i2, j1, j2 in _opcodes(mid_a, mid_b, start):
        if op == "equal":
            left.append(escape("".join(a[i1:i2])))
            right.append(escape("".join(b[j1:j2])))
            continue
        if op in ("delete", "replace"):
            left.append(_mark("del", a[i1:i2]))
        if op in ("insert", "replace"):
            right.append(_mark("ins", b[j1:j2]))
    left.append(escape("".join(a[len(a) - end :])))
    right.append(escape("".join(b[len(b) - end :])))
    return "".join(left), "".join(right)


def _opcodes(a: Sequence[str], b: Sequence[str], offset: int) -> list[tuple[str, int, int, int, int]]:
    """difflib's opcodes of the middles, shifted to positions in the whole token lists."""
    ops = difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    return [(op, i1 + offset, i2 + offset, j1 + offset, j2 + offset) for op, i1, i2, j1, j2 in ops]


def _mark(tag: str, tokens: Sequence[str]) -> str:
    """Wrap each word (not the whitespace between) so highlights stay word-shaped."""
    return "".join(escape(t) if t.isspace() else f"<{tag}>{escape(t)}</{tag}>" for t in tokens)


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def table_html(t: Table) -> str:
    marg = [h == ALL for h in t.header]
    head = "".join(f'<th class="all">{escape(h)}</th>' if m else f"<th>{escape(h)}</th>" for h, m in zip(t.header, marg))
    body = []
    for row in t.rows:
        cells = [f"<th>{escape(row[0])}</th>"]
        cells += [f'<td class="num{" all" if m else ""}">{escape(c)}</td>' for c, m in zip(row[1:], marg[1:])]
        body.append("<tr>" + "".join(cells) + "</tr>")
    note = f'<p class="note">{escape(t.note)}</p>' if t.note else ""
    return f'<h3>{escape(t.title)}</h3><div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>{note}'


def figure_html(caption: str, png: bytes) -> str:
    return f'<figure><img src="{data_uri(png)}" alt="{escape(caption)}"><figcaption>{escape(caption)}</figcaption></figure>'


def prompts_html(rows: Sequence[Mapping[str, Any]]) -> str:
    """Adversarial prompts beside their clean originals, changed words marked."""
    out = []
    for rank, r in enumerate(rows, 1):
        left, right = word_diff(r["clean_prompt"], r["adversarial_prompt"])
        ci = r.get("pdr_ci95")
        extra = f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
        p = "" if r.get("mcnemar_p") is None else f"<br>McNemar p {r['mcnemar_p']:.3g}"
        chance = "<br><i>clean score at chance</i>" if r.get("at_chance") else ""
        info = (
            f"<b>PDR {r['pdr']:.3f}</b>{escape(extra)}{p}<br>{escape(str(r['attack']))}<br>{escape(str(r['model']))}<br>"
            f"{escape(str(r['dataset']))} / {escape(str(r['prompt_id']))}<br>"
            f"score {r['clean_score']:.3f} &rarr; {r['adversarial_score']:.3f}{chance}"
        )
        from promptrobust.engine.analysis.report.meaning import meaning_text

        if meaning_text(r):  # issue 23: substitutions, similarity, held-out PDR
            info += f"<br><small>{escape(meaning_text(r))}</small>"
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
    for t in report.extremes:
        if t.name in ("held_out_pdr", "adversarial_prompts_meaning"):  # issue 23: plain tables
            parts.append(f"<h2>{escape(t.title)}</h2>")
            parts.append(table_html(t))
            continue
        parts.append(f"<h2>{escape(t.title)} (top {len(t.long)})</h2>")
        parts.append(prompts_html(t.long))
        parts.append(f'<p class="note">{escape(t.note)}</p>')
    if report.excluded is not None:
        parts.append("<h2>Records not averaged</h2>")
        parts.append(table_html(report.excluded))
    parts.append("</main></body></html>")
    return "\n".join(parts) + "\n"
