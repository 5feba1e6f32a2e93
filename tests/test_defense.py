"""The spell-check defense, and `pre defend` on the fixture source run."""

from __future__ import annotations

import argparse
import csv

import orjson
import pytest

pytest.importorskip("spellchecker", reason="pip install pyspellchecker")

from promptrobust.attacks.defense import SpellCheckDefense
from promptrobust.cli import defend
from tests.fixtures.analysis.fake_model import (
    REVIEWS,
    SOURCE_RUN,
    patch_backend,
    rt_samples,
)


@pytest.fixture(scope="module")
def checker() -> SpellCheckDefense:
    return SpellCheckDefense(protected=["positive", "negative", "Answer", "sentence"])


def test_corrects_known_typos(checker):
    fixed = checker.correct("Determine the sentimnet of this reveiw")
    assert fixed.text == "Determine the sentiment of this review"
    assert fixed.changes == (("sentimnet", "sentiment"), ("reveiw", "review"))


def test_keeps_case_and_punctuation(checker):
    assert checker("Sentimnet: is the REVEIW 'good', or bad?!") == "Sentiment: is the REVIEW 'good', or bad?!"


def test_undoes_character_bugs(checker):
    assert checker("Classify the r3view") == "Classify the review"  # leet digit
    assert checker("Classify the rev\u0456ew") == "Classify the review"  # Cyrillic look-alike
    assert checker("Classify the rev iew now") == "Classify the review now"  # inserted space
    assert checker("an @mazing film") == "an amazing film"


def test_leaves_correct_and_protected_words_alone(checker):
    clean = "Read the review below and say whether its overall opinion is positive or negative. Answer:"
    assert checker.correct(clean).changes == ()
    # protected words stay as written even when misspelt-looking
    p = SpellCheckDefense(protected=["not_entailment", "positiv"])
    assert p("Reply positiv or not_entailment.") == "Reply positiv or not_entailment."
    # real words swapped in by word-level attacks are not "corrected"
    assert checker("Determine the feeling of this critique") == "Determine the feeling of this critique"
    # numbers, ordinals and acronyms
    assert checker("the 21st LLM in 2024") == "the 21st LLM in 2024"


def test_defend_cli_recovers_char_attack_not_word_attack(tmp_path, monkeypatch, capsys):
    samples = rt_samples(8)
    patch_backend(monkeypatch, samples)
    parser = argparse.ArgumentParser(prog="pre")
    defend.add_parser(parser.add_subparsers(dest="command"), argparse.HelpFormatter)
    args = parser.parse_args(["defend", "--source", str(SOURCE_RUN), "--model", "hf:fake", "--data-file", str(REVIEWS),
                              "--no-cache", "--no-progress", "--output-dir", str(tmp_path / "out")])
    assert args.handler(args) == 0
    (run,) = [p for p in (tmp_path / "out").iterdir() if not p.name.startswith(".")]
    recs = {r["attack"]: r for r in map(orjson.loads, (run / "results.jsonl").read_bytes().splitlines())}
    tb = recs["textbugger"]
    assert tb["adversarial_prompt"] == "Determine the sentiment of this review: positive or negative."
    assert tb["settings"]["undefended_pdr"] == pytest.approx(5 / 8)  # fake answers "positive": 3/8 right
    assert tb["pdr"] == 0.0  # fully recovered
    tf = recs["textfooler"]
    assert tf["settings"]["corrections"] == []
    assert tf["pdr"] == pytest.approx(5 / 8) == tf["settings"]["undefended_pdr"]
    with open(run / "defense.csv", newline="") as fh:
        table = {row["attack"]: row for row in csv.DictReader(fh)}
    assert float(table["textbugger"]["recovered"]) == 1.0
    assert float(table["textfooler"]["recovered"]) == 0.0
    assert table["checklist"]["recovered"] == ""  # nothing to recover
    assert "'sentimnet'->'sentiment'" in capsys.readouterr().out
