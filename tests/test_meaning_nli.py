"""``--meaning-nli MODEL``: an NLI model judges the replaced words the meaning verdict's rules pass, by
mutual entailment (``attacks/nli_check.py``). No NLI model ships offline, so most of these tests build
tiny BERT classifiers whose answer is fixed (``build_tiny_nli_model``): they check the plumbing and
the decision, not an NLI model's judgement; scripts/train_nli_judge.py builds a real one from
registry pieces (50 minutes: docs/fidelity.md quotes its measurement), tested here on a few pairs."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from promptrobust.attacks.errors import AttackResourceError
from promptrobust.attacks.meaning_check import meaning_verdict
from promptrobust.attacks.nli_check import Entailment, NliJudge, entailment_index, load_nli_judge
from promptrobust.cli.main import main
from promptrobust.engine.analysis.report.acceptable import check_name
from promptrobust.testing.fake_openai import FakeOpenAIServer
from promptrobust.testing.synthetic import build_tiny_nli_model
from tests.script_modules import load_script

LABELS = frozenset({"positive", "negative"})
CLEAN = "Read the review carefully. Then say whether it is positive or negative."
WORDS = CLEAN.replace(".", " .").split() + ["attentively", "examine", "text", "spanish", "french", "into", "translate"]


@pytest.fixture(scope="module")
def nli_models(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("nli")
    return {answer: build_tiny_nli_model(str(root / answer), WORDS, answer=answer)
            for answer in ("entailment", "contradiction", "neutral")}


def test_mutual_entailment_keeps_a_replaced_word_and_the_record_names_the_model(nli_models) -> None:
    judge = load_nli_judge(nli_models["entailment"])
    verdict = meaning_verdict(CLEAN, CLEAN.replace("carefully", "attentively"), LABELS, nli=judge)
    assert verdict.verdict == "kept"
    (check,) = verdict.substitutions
    assert check.kind == "word" and check.kept is True and check.similarity is None
    assert check.entailment is not None and check.entailment > 0.9
    assert "mutual entailment" in check.reason and judge.name in check.reason
    assert verdict.check.startswith(f"promptrobust meaning check v11 + NLI {judge.name}:")
    assert check_name({"meaning": verdict.to_dict()}) == f"v11 + NLI {judge.name}"  # a report's row of its own


@pytest.mark.parametrize("answer", ["contradiction", "neutral"])
def test_a_replaced_word_without_entailment_both_ways_changes_the_meaning(nli_models, answer: str) -> None:
    verdict = meaning_verdict(CLEAN, CLEAN.replace("carefully", "attentively"), LABELS,
                              nli=load_nli_judge(nli_models[answer]))
    assert verdict.verdict == "changed"
    assert "not entailment both ways" in verdict.reasons[0]


def test_the_rules_decide_before_the_nli_model(nli_models) -> None:
    """An instruction word replaced is a change whatever the model says; a typo still reads as the
    word, with no model asked."""
    judge = load_nli_judge(nli_models["entailment"])
    clean = "Translate the text into Spanish."
    changed = meaning_verdict(clean, clean.replace("Spanish", "French"), nli=judge)
    assert changed.verdict == "changed" and "language" in changed.reasons[0]
    typo = meaning_verdict(CLEAN, CLEAN.replace("carefully", "carefuly"), LABELS, nli=judge)
    assert typo.verdict == "kept" and typo.substitutions[0].kind == "reads the same"
    assert typo.substitutions[0].entailment is None


@dataclass(frozen=True)
class RecordingJudge(NliJudge):
    """The real judge, noting what it was asked."""

    asked: list[tuple[str, str]] = field(default_factory=list, compare=False)

    def entailment(self, premise: str, hypothesis: str) -> Entailment:
        self.asked.append((premise, hypothesis))
        return super().entailment(premise, hypothesis)


def test_each_replaced_word_is_judged_alone(nli_models) -> None:
    real = load_nli_judge(nli_models["entailment"])
    judge = RecordingJudge(real.name, real.entailment_index, real.tokenizer, real.model)
    adversarial = CLEAN.replace("carefully", "attentively").replace("Read", "Examine")
    assert meaning_verdict(CLEAN, adversarial, LABELS, nli=judge).verdict == "kept"
    assert judge.asked == [(CLEAN, CLEAN.replace("Read", "Examine")),
                           (CLEAN, CLEAN.replace("carefully", "attentively"))]


def test_a_classifier_without_an_entailment_label_is_refused_in_one_line(tmp_path: Path) -> None:
    assert entailment_index(["CONTRADICTION", "NEUTRAL", "ENTAILMENT"], "m") == 2  # roberta-large-mnli's spelling
    folder = build_tiny_nli_model(str(tmp_path / "sentiment"), WORDS, labels=("negative", "positive"))
    with pytest.raises(AttackResourceError, match="no entailment label") as caught:
        load_nli_judge(folder)
    assert "\n" not in str(caught.value) and "cross-encoder/nli-deberta-v3-base" in str(caught.value)


def test_a_model_that_cannot_be_had_is_refused_in_one_line(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(AttackResourceError, match="cannot load it") as caught:
        load_nli_judge("promptrobust-tests/no-such-nli-model")
    assert "\n" not in str(caught.value)


def _run(tmp_path: Path, url: str, *extra: str) -> int:
    return main(["run", "--model", "openai:fake-model", "--model-args", f"base_url={url}", "--dataset", "rotten_tomatoes",
                 "--limit", "8", "--prompt", "sst2-task-01", "--attack", "deepwordbug", "--budget", "6", "--top-k", "1",
                 "--output-dir", str(tmp_path / "runs"), "--no-progress", "--no-cache", *extra])


def test_pre_run_records_the_nli_judge_in_verdicts_and_results(tmp_path: Path, nli_models) -> None:
    with FakeOpenAIServer() as server:
        assert _run(tmp_path, server.url, "--meaning-nli", nli_models["entailment"]) == 0
    (folder,) = (tmp_path / "runs").iterdir()
    document = orjson.loads((folder / "results.json").read_bytes())
    assert document["configs"]["attack"]["meaning_nli"] == nli_models["entailment"]
    rows = [orjson.loads(line) for line in (folder / "results.jsonl").read_bytes().splitlines() if line.strip()]
    (record,) = [r for r in rows if r.get("attack") == "deepwordbug"]
    assert record["meaning"]["check"].startswith(f"promptrobust meaning check v11 + NLI {nli_models['entailment']}:")


def test_pre_run_refuses_a_missing_nli_folder_before_any_model_call(tmp_path: Path, capsys) -> None:
    with FakeOpenAIServer() as server:
        code = _run(tmp_path, server.url, "--meaning-nli", str(tmp_path / "nope"))
        assert server.count() == 0  # refused with the plan: not a request sent
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert any("no NLI model folder at" in line and "--meaning-nli" in line for line in err)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_pre_run_stops_in_one_line_when_the_nli_model_is_not_one(tmp_path: Path, capsys) -> None:
    """A classifier without an entailment label is refused when the run starts, before any model call:
    exit 2 (not an attack failed per prompt after its clean scores)."""
    folder = build_tiny_nli_model(str(tmp_path / "sentiment"), WORDS, labels=("negative", "positive"))
    with FakeOpenAIServer() as server:
        code = _run(tmp_path, server.url, "--meaning-nli", folder)
        assert server.count() == 0
    assert code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "no entailment label" in line]
    assert len(err) == 1 and "cross-encoder/nli-deberta-v3-base" in err[0]


def test_the_measuring_script_scores_a_model_and_the_ceiling_docs_quote(nli_models, capsys) -> None:
    """scripts/measure_meaning_nli.py: a model that always says entailment judges every pair as the
    rules alone do (its floor); the ceiling (each pair's label judging its replaced words) is the
    figure docs/fidelity.md quotes for the fifth to eleventh blind sets."""
    script = load_script("measure_meaning_nli")
    rows = load_script("meaning_sets").labelled_set("blind 5").rows()
    always = script.judged(rows, load_nli_judge(nli_models["entailment"]))
    assert [said for _, said in always] == [said for _, said in script.judged(rows, script.RULES_ALONE)]
    floor = script.figures(always)
    assert (floor["found"], floor["changed"]) == (57, 93)
    assert script.main(["--ceiling"]) == 0
    out = capsys.readouterr().out
    fidelity = (Path(__file__).resolve().parents[1] / "docs" / "fidelity.md").read_text(encoding="utf-8")
    for name, printed, row in (
            ("blind 5", "0.940 1.000 (93/93)", "| blind 5 | 150 | 0.700 | 0.613 (57/93) | 0.940 | 1.000 (93/93) |"),
            ("blind 6", "0.940 0.968 (90/93)", "| blind 6 | 150 | 0.707 | 0.591 (55/93) | 0.940 | 0.968 (90/93) |"),
            ("blind 7", "0.947 0.978 (91/93)", "| blind 7 | 150 | 0.680 | 0.548 (51/93) | 0.947 | 0.978 (91/93) |"),
            ("blind 8", "0.967 0.989 (92/93)", "| blind 8 | 150 | 0.733 | 0.613 (57/93) | 0.967 | 0.989 (92/93) |"),
            ("blind 9", "0.980 0.978 (91/93)", "| blind 9 | 150 | 0.713 | 0.548 (51/93) | 0.980 | 0.978 (91/93) |"),
            ("blind 10", "0.967 1.000 (93/93)", "| blind 10 | 150 | 0.693 | 0.559 (52/93) | 0.967 | 1.000 (93/93) |"),
            ("blind 11", "0.913 0.957 (89/93)", "| blind 11 | 150 | 0.680 | 0.581 (54/93) | 0.913 | 0.957 (89/93) |")):
        line = next(x for x in out.splitlines() if x.startswith(name + " "))
        assert line.split() == [*name.split(), "150", *printed.split()]
        assert row in fidelity, name
    assert script.main(["no-such-folder-or-model", "--ceiling"]) == 2


SWEEP = """
[sweep]
name = "t"
output_dir = "{out}"
limit = 6
top_k = 1
budget = 4
meaning_nli = "{nli}"

[grid]
models = ["openai:fake-model"]
datasets = ["rotten_tomatoes"]
prompt_types = ["task"]
attacks = ["stresstest"]

[models."openai:fake-model"]
model_args = "base_url={url}"
"""


def test_a_sweep_takes_the_nli_judge_and_refuses_one_that_is_not_before_any_call(tmp_path: Path, nli_models,
                                                                                  capsys, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "EMPTY")
    not_nli = build_tiny_nli_model(str(tmp_path / "sentiment"), WORDS, labels=("negative", "positive"))
    with FakeOpenAIServer() as server:
        bad = tmp_path / "bad.toml"
        bad.write_text(SWEEP.format(out=tmp_path / "bad", nli=not_nli, url=server.url))
        assert main(["sweep", str(bad), "--no-progress"]) == 2
        assert server.count() == 0
        assert "no entailment label" in capsys.readouterr().err
        good = tmp_path / "good.toml"
        good.write_text(SWEEP.format(out=tmp_path / "good", nli=nli_models["entailment"], url=server.url))
        assert main(["sweep", str(good), "--no-progress"]) == 0
    rows = [orjson.loads(line) for line in (tmp_path / "good" / "t" / "results.jsonl").read_bytes().splitlines()
            if line.strip()]
    attacked = [r for r in rows if r.get("attack") == "stresstest"]
    assert attacked and all(r["meaning"]["check"].startswith("promptrobust meaning check v11 + NLI ") for r in attacked)


def test_the_training_script_makes_a_judge_meaning_nli_loads(tmp_path: Path) -> None:
    """scripts/train_nli_judge.py on a few SNLI-shaped pairs (the real run reads SNLI from a registry
    sdist and takes about 50 minutes): a folder --meaning-nli loads, with how it was made."""
    snli = tmp_path / "snli"
    snli.mkdir()
    rows = [("A man plays a guitar on stage.", "A man plays music.", "entailment"),
            ("A man plays a guitar on stage.", "A woman sleeps at home.", "contradiction"),
            ("A man plays a guitar on stage.", "A man plays for his friends.", "neutral"),
            ("Two dogs run in a field.", "Animals are outside.", "entailment"),
            ("Two dogs run in a field.", "The dogs are asleep.", "contradiction"),
            ("Two dogs run in a field.", "The dogs chase a ball.", "neutral"),
            ("Two dogs run in a field.", "Cats are running.", "-")]  # no gold label: left out
    lines = "\n".join(json.dumps({"sentence1": a, "sentence2": b, "gold_label": y}) for a, b, y in rows) + "\n"
    for name in ("snli_1.0_train_subset.jsonl", "snli_1.0_test.jsonl"):
        (snli / name).write_text(lines, encoding="utf-8")
    script = load_script("train_nli_judge")
    out = tmp_path / "judge"
    assert script.main([str(out), f"--snli={snli}", "--pairs=5"]) == 0
    made = json.loads((out / "training.json").read_text(encoding="utf-8"))
    assert made["training_pairs"] == 5 and made["snli_test_pairs"] == 6
    assert 0 <= made["snli_test_accuracy"] <= 1
    judge = load_nli_judge(str(out))
    assert judge.entailment_index == 1
    found = judge.entailment("Read the review carefully.", "Read the review attentively.")
    assert 0 <= found.forward <= 1 and 0 <= found.backward <= 1
    assert script.main([str(out), "--colour=red"]) == 2
