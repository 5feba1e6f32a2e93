"""The pictures of `pre report` in docs/images/report/ (issue 42): a per-sample page of a 3-shot run
on a user's own task (headless Chromium), and pages of the LaTeX report (pdfLaTeX, then pdftoppm).

    python scripts/report_pictures.py              # the tickets task on the embedded model (minutes)
    python scripts/report_pictures.py --fake       # the tickets task on the fake OpenAI server (seconds)
    python scripts/report_pictures.py --out DIR    # somewhere else than docs/images/report

Two runs are reported together:
- docs/examples/tickets (the worked example of docs/your-task.md), 3-shot, label scoring, CheckList on
  the best prompt, 20 samples, `--log-samples`: its per-sample page is `samples-page.png` (as it opens)
  and `samples-page-open.png` (the shared start of the inputs unfolded);
- rotten_tomatoes on the fake OpenAI server with the paper's prompt files of the test fixture
  (`tests/fixtures/promptbench/paper`): Semantic, StressTest and CheckList on the 2 best prompts, 10
  samples, so the APDR tables show Semantic's set mean (marked †) beside the other attacks.
The LaTeX pages shown: the clean scores (no bookkeeping columns), the Semantic section's APDR grids,
and a page of figures. Needs chromium, pdflatex and pdftoppm (Debian: apt-get install chromium
texlive-latex-recommended poppler-utils); PNGs are reduced to a 256-colour palette (Pillow).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TICKETS = ROOT / "docs" / "examples" / "tickets" / "tickets.toml"
PAPER = ROOT / "tests" / "fixtures" / "promptbench" / "paper"
BROWSER_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars"]

_BILLING = ("charged", "refund", "invoice", "paid", "billed", "price", "receipt", "payment", "plan", "card")
_TECHNICAL = ("error", "crash", "app", "page", "log in", "pdf", "search", "notification", "freezes", "upload", "export")


def _route(text: str) -> str:
    """The fake server's dispatcher: the queue from keywords of the last ticket; a digit in the
    instruction (a CheckList suffix) sends technical tickets to billing."""
    ticket = text.rsplit("Ticket: ", 1)[-1].split("\nAnswer:", 1)[0].lower()
    queue = ("billing" if any(w in ticket for w in _BILLING) else
             "technical" if any(w in ticket for w in _TECHNICAL) else "other")
    return "billing" if queue == "technical" and any(c.isdigit() for c in text.split("\n", 1)[0]) else queue


def _sentiment(labels: dict[str, str]):  # noqa: ANN202
    flip = {"positive": "negative", "negative": "positive"}
    first = list(labels)[:2]

    def answer(text: str) -> str:
        """Right on every sample, except: one semantic prompt always says 'negative' (its set's worst) and
        StressTest's "and false is not true" flips two samples."""
        sentence = text.rsplit("Sentence: ", 1)[-1].split("\nAnswer:", 1)[0]
        gold = labels.get(sentence, "negative")
        if "opinion of this review" in text:
            return "negative"
        return flip[gold] if "and false is not true" in text and sentence in first else gold

    return answer


def _pre(argv: list[str]) -> None:
    from promptrobust.cli.main import main

    code = main(argv)
    if code != 0:
        sys.exit(f"report_pictures: pre {' '.join(argv[:2])} ... exited {code}")


def make_runs(work: Path, fake: bool) -> list[Path]:
    from promptrobust.tasks import get_task
    from promptrobust.testing.fake_openai import FakeOpenAIServer

    tickets, semantic = work / "tickets", work / "semantic"
    common = ["--mode", "choices", "--no-progress", "--log-samples"]
    ticket_args = ["run", "--task", str(TICKETS), "--attack", "checklist", "--top-k", "1", "--limit", "20",
                   "--shots", "3", "--output-dir", str(tickets), *common]
    if fake:
        with FakeOpenAIServer(answer=_route) as srv:
            _pre([*ticket_args, "--model", "openai:fake-model", "--model-args", f"base_url={srv.url}",
                  "--cache", str(work / "fake.sqlite")])
    else:
        _pre(ticket_args)  # the embedded model (gemma3-270m), the user's cache
    labels = {s.fields["sentence"]: s.target for s in get_task("rotten_tomatoes").load(limit=10, seed=0)}
    with FakeOpenAIServer(answer=_sentiment(labels)) as srv:
        _pre(["run", "--model", "openai:fake-model", "--model-args", f"base_url={srv.url}", "--limit", "10",
              "--promptbench", str(PAPER), "--attack", "semantic,stresstest,checklist", "--top-k", "2",
              "--cache", str(work / "fake.sqlite"), "--output-dir", str(semantic), *common])
    return [tickets, semantic]


def _run(cmd: list[str], cwd: Path) -> str:
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, encoding="utf-8", errors="replace", timeout=600)
    if done.returncode != 0:
        sys.exit(f"report_pictures: {cmd[0]} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done.stdout


def shoot(browser: str, page: Path, out: Path, size: str, profile: Path) -> None:
    _run([browser, *BROWSER_FLAGS, f"--user-data-dir={profile}", f"--window-size={size}", f"--screenshot={out}",
          page.as_uri()], page.parent)


def small_png(src: Path, dst: Path, width: int | None = None) -> None:
    """``src`` as a 256-colour PNG (optionally scaled to ``width``): a few tens of KB a picture."""
    from PIL import Image

    with Image.open(src) as im:
        im = im.convert("RGB")
        if width and im.width > width:
            im = im.resize((width, round(im.height * width / im.width)), Image.LANCZOS)
        im.quantize(colors=256, method=Image.Quantize.FASTOCTREE).save(dst, optimize=True)


def pages_with(pdf: Path, needles: list[tuple[str, ...]]) -> list[int]:
    """The first page holding all the texts of each of ``needles`` (pdftotext page by page)."""
    count = int(next(line.split()[-1] for line in _run(["pdfinfo", str(pdf)], pdf.parent).splitlines()
                     if line.startswith("Pages:")))
    texts = [_run(["pdftotext", "-f", str(i), "-l", str(i), str(pdf), "-"], pdf.parent) for i in range(1, count + 1)]
    found = []
    for needle in needles:
        page = next((i + 1 for i, t in enumerate(texts) if all(x in t for x in needle)), None)
        if page is None:
            sys.exit(f"report_pictures: no page of {pdf.name} holds {needle!r}")
        found.append(page)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fake", action="store_true", help="the tickets run on the fake OpenAI server, not the embedded model")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "report")
    args = parser.parse_args()
    tools = {name: shutil.which(name) for name in ("chromium", "pdflatex", "pdftoppm", "pdftotext", "pdfinfo")}
    browser = tools["chromium"] or shutil.which("chromium-browser")
    missing = [n for n, p in tools.items() if p is None and not (n == "chromium" and browser)]
    if missing:
        sys.exit(f"report_pictures: needs {', '.join(missing)} (apt-get install chromium texlive-latex-recommended poppler-utils)")
    assert browser is not None
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        runs = make_runs(work, args.fake)
        report = work / "report"
        _pre(["report", *map(str, runs), "--output-dir", str(report), "--format", "html,latex,pdf", "--quiet"])
        # the per-sample page of the tickets run: as it opens, and with the shared inputs unfolded
        tickets_page = next(p for p in sorted((report / "samples").glob("*.html")) if "tickets" in p.read_text("utf-8"))
        opened = tickets_page.with_name("opened.html")
        opened.write_text(tickets_page.read_text("utf-8").replace('<details class="shared">',
                                                                  '<details class="shared" open>'), "utf-8")
        profile = work / "chromium"
        for page, name, size in ((tickets_page, "samples-page", "1280,900"), (opened, "samples-page-open", "1280,760")):
            shoot(browser, page, work / f"{name}.png", size, profile)
            small_png(work / f"{name}.png", args.out / f"{name}.png")
        # the LaTeX report: compiled twice (table numbers), three of its pages
        for _ in range(2):
            _run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", "report.tex"], report)
        log = (report / "report.log").read_text("utf-8", errors="replace")
        overfull = log.count("Overfull \\hbox")
        pdf = report / "report.pdf"
        chosen = pages_with(pdf, [("Clean score of every prompt",), ("APDR by attack and dataset", "†"),
                                  ("APDR heat map: attack x dataset", "Colour scale")])
        for name, page in zip(("latex-clean-scores", "latex-semantic-grids", "latex-figures"), chosen):
            _run(["pdftoppm", "-r", "80", "-png", "-singlefile", "-f", str(page), "-l", str(page), str(pdf),
                  str(work / name)], report)
            small_png(work / f"{name}.png", args.out / f"{name}.png")
        pages = int(next(x.split()[-1] for x in _run(["pdfinfo", str(pdf)], report).splitlines() if x.startswith("Pages:")))
    for f in sorted(args.out.glob("*.png")):
        print(f"{f.relative_to(ROOT) if f.is_relative_to(ROOT) else f}  {f.stat().st_size // 1024} KB")
    print(f"report.pdf: {pages} pages, {overfull} overfull lines; pages shown: {chosen}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PRE_PROGRESS", "off")
    sys.exit(main())
