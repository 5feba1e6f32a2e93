"""The joint attack on prompt and sample (the paper's AdvGLUE study): `pre run --adversarial-samples
FILE` attacks the prompt while the samples are adversarial ones (a local file in AdvGLUE's layout),
each record also scores its clean prompt on the clean samples, and `pre report` lays the three
scores out as the paper's table does."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from promptrobust.cli.main import main
from promptrobust.engine.analysis.report import build_report
from promptrobust.engine.errors import PromptRobustError
from promptrobust.tasks import get_task
from promptrobust.tasks.adversarial_samples import load_adversarial_samples
from promptrobust.testing.fake_openai import FakeOpenAIServer

ADV = Path(__file__).resolve().parents[1] / "docs" / "examples" / "adv_glue" / "dev.json"
N = 8
TASK = get_task("rotten_tomatoes")
CLEAN = {s.fields["sentence"]: s.target for s in TASK.load(limit=N, seed=0)}
ADVERSARIAL = {r["sentence"]: ("positive" if r["label"] == 1 else "negative") for r in orjson.loads(ADV.read_bytes())["sst2"]}
TYPO_WORDS = ("funy", "fal", "beautifuly", "editted")  # the model misreads these four adversarial samples
FLIP = {"positive": "negative", "negative": "positive"}


def _answer(text: str) -> str:
    """Right on every clean sample; wrong on the four adversarial samples with a misread typo; a
    CheckList suffix ending in a digit makes it answer 'negative' on adversarial samples too."""
    sentence = text.rsplit("Sentence: ", 1)[-1].split("\nAnswer:", 1)[0]
    if sentence in CLEAN:
        return CLEAN[sentence]
    gold = ADVERSARIAL.get(sentence, "negative")
    instruction = text.split("\n", 1)[0].rstrip(".:? ")
    if instruction[-1:].isdigit():
        return "negative"
    return FLIP[gold] if any(w in sentence.split() for w in TYPO_WORDS) else gold


def test_adversarial_samples_from_an_advglue_file() -> None:
    samples = load_adversarial_samples(TASK, str(ADV))
    assert [s.fields["sentence"] for s in samples] == list(ADVERSARIAL)
    assert [s.target for s in samples] == list(ADVERSARIAL.values())
    assert all(s.id.startswith("rotten_tomatoes:adv:") for s in samples)  # never a clean sample's id
    with pytest.raises(PromptRobustError, match="AdvGLUE has no"):
        load_adversarial_samples(get_task("cola"), str(ADV))


def test_joint_prompt_and_sample_attack(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    out = tmp_path / "runs"
    with FakeOpenAIServer(answer=_answer) as srv:
        assert main(["run", "--model", "openai:fake-model", "--model-args", f"base_url={srv.url}", "--mode", "choices",
                     "--limit", str(N), "--cache", str(tmp_path / "c.sqlite"), "--output-dir", str(out), "--no-progress",
                     "--prompt", "sst2-task-01", "--attack", "checklist", "--adversarial-samples", str(ADV)]) == 0
    (folder,) = list(out.iterdir())
    (rec,) = [orjson.loads(x) for x in (folder / "results.jsonl").read_bytes().splitlines()]
    assert rec["sample_selection"] == "seeded, adversarial samples dev.json" and rec["samples"] == 8
    assert rec["clean_score"] == pytest.approx(4 / 8)  # clean prompt, adversarial samples
    negatives = sum(v == "negative" for v in ADVERSARIAL.values()) / 8
    assert rec["adversarial_score"] == pytest.approx(negatives)  # a suffix ending in a digit: always 'negative'
    clean = rec["clean_samples"]
    assert clean["score"] == 1.0 and clean["samples"] == N  # clean prompt, clean samples
    assert clean["pdr_both_adversarial"] == pytest.approx(1 - negatives)
    assert "clean prompt on 8 clean samples 1.000" in capsys.readouterr().out  # said on the terminal too
    config = orjson.loads((folder / "config.json").read_bytes())
    assert str(ADV) in orjson.dumps(config).decode()

    report = tmp_path / "report"
    assert main(["report", str(out), "--output-dir", str(report), "--format", "md,csv"]) == 0
    md = (report / "report.md").read_text()
    assert "Joint attack on prompt and samples (the paper's AdvGLUE table)" in md
    assert "adversarial samples dev.json" in md  # its own section: never pooled with clean-sample records
    csv = (report / "joint_prompt_and_samples.csv").read_text()
    assert "0.5" in csv and "1.0" in csv
    # each of the three scores keeps its own interval (issue 40 item 4: the third was always '-')
    table = build_report([out], figures=False).table("joint_prompt_and_samples")
    (row,) = [dict(zip(table.header, line)) for line in table.rows]
    for column, score, ci in (("clean prompt + clean samples", clean["score"], clean["ci95"]),
                              ("clean prompt + adv. samples", rec["clean_score"], rec["clean_ci95"]),
                              ("adv. prompt + adv. samples", rec["adversarial_score"], rec["adversarial_ci95"])):
        assert ci and row[column] == f"{score:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]", column
    (long,) = table.long
    assert long["adversarial_prompt_adversarial_samples_ci95"] == pytest.approx(rec["adversarial_ci95"])


def test_a_missing_adversarial_file_is_one_line(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    code = main(["run", "--model", "random:tiny-llama", "--output-dir", str(tmp_path / "r"), "--attack", "checklist",
                 "--adversarial-samples", str(tmp_path / "none.json"), "--limit", "2"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert "none.json" in err and len(err.splitlines()) == 1
