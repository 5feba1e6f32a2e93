"""docs/fidelity.md's claims about promptbench's behaviour, where they can be
reproduced: its answer parsers (restated here: the package's OutputProcess.cls
and the paper's own code, `inference.py`'s `_process_cls_pred` before commit
f257c82) against ours, and the clean-score-0 rule (promptbench's checkout attacks such a prompt;
we skip it, since its PDR is undefined)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from promptrobust.cli.main import main
from promptrobust.tasks import get_task
from promptrobust.testing.fake_openai import FakeOpenAIServer

# The characters promptbench strips from both ends of the whole answer (no * ; ~).
PB_STRIP = ",._\"'-+=!?()&^%$#@:\\|{}[]<>/`\n\t\r\v\f "


def promptbench_cls(raw: str) -> str:
    """promptbench's classification parser, restated: lowercase, drop <pad> and </s>,
    strip PB_STRIP from the ends of the whole text, then the last piece of split(" ")."""
    pred = raw.lower().replace("<pad>", "").replace("</s>", "").strip(PB_STRIP)
    return pred.split(" ")[-1]


def paper_cls(raw: str) -> str:
    """The paper's own parser (`inference.py` `_process_cls_pred`, removed in f257c82), restated: as the
    package's, then the last piece stripped of PB_STRIP again."""
    return promptbench_cls(raw).strip(PB_STRIP)


@pytest.mark.parametrize("answer", [" Answer: 'positive'", " **positive**", " positive;", "Answer:\npositive"])
def test_answers_promptbench_scores_wrong_and_we_score_right(answer: str) -> None:
    task = get_task("rotten_tomatoes")
    assert promptbench_cls(answer) not in ("positive", "negative")  # not a label there: wrong
    assert task.parse(answer) == "positive"


def test_the_quote_bug_is_the_packages_not_the_papers() -> None:
    """The paper's code strips the last word again, so it reads " Answer: 'positive'" as we do; only the
    package's OutputProcess.cls misses it. `*`, `;` and a newline defeat both of promptbench's parsers."""
    assert paper_cls(" Answer: 'positive'") == "positive" != promptbench_cls(" Answer: 'positive'")
    for answer in (" **positive**", " positive;", "Answer:\npositive"):
        assert paper_cls(answer) not in ("positive", "negative")


@pytest.mark.parametrize("answer", ["positive", " Positive.", "The answer is negative", "'negative'"])
def test_plain_answers_agree(answer: str) -> None:
    assert get_task("rotten_tomatoes").parse(answer) == promptbench_cls(answer)


def test_a_clean_score_of_zero_is_skipped_not_attacked(tmp_path: Path) -> None:
    samples = get_task("rotten_tomatoes").load(limit=6, seed=0)
    wrong = {s.fields["sentence"]: ("negative" if s.target == "positive" else "positive") for s in samples}

    def answer(text: str) -> str:  # always wrong: clean score 0
        sentence = text.rsplit("Sentence: ", 1)[-1].split("\nAnswer:", 1)[0]
        return wrong.get(sentence, "negative")

    with FakeOpenAIServer(answer=answer) as srv:
        out = tmp_path / "runs"
        assert main(["run", "--model", "openai:fake-model", "--model-args", f"base_url={srv.url}", "--mode", "choices",
                     "--limit", "6", "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(out), "--no-progress",
                     "--prompt", "sst2-task-01", "--attack", "stresstest"]) == 0
    (folder,) = list(out.iterdir())
    (rec,) = [orjson.loads(x) for x in (folder / "results.jsonl").read_bytes().splitlines()]
    assert rec["status"] == "skipped_clean_zero" and rec["pdr"] is None and rec["clean_score"] == 0.0
