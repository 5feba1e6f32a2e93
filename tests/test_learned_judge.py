"""The meaning check's learned judge (check v11, ``attacks/meaning_judge.py``) and the script that fits it
(``scripts/fit_meaning_judge.py``): the regression it fits, the groups it leaves out, the features it reads
off a real verdict, the shipped file and what happens when it cannot be read."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from promptrobust.attacks import meaning_check as mc
from promptrobust.attacks import meaning_judge
from promptrobust.attacks.errors import AttackResourceError
from tests.script_modules import load_script

ROOT = Path(__file__).resolve().parents[1]
SST2 = frozenset({"positive", "negative"})


def test_the_fit_minimises_the_regularised_log_loss_it_names():
    """Newton's method lands where the gradient of 0.5 |w|^2 + C * log loss is zero (the intercept not
    penalised), and separates two clouds it was fitted on."""
    script = load_script("fit_meaning_judge")
    rng = np.random.default_rng(7)
    x = np.vstack([rng.normal(0.0, 1.0, (60, 5)), rng.normal(1.5, 1.0, (60, 5))])
    y = np.array([0.0] * 60 + [1.0] * 60)
    c = 0.1
    judge = script.fit(x, y, c)
    w = np.append(judge.weights, judge.bias)
    z = np.hstack([(x - judge.mean) / judge.scale, np.ones((len(x), 1))])
    p = 1.0 / (1.0 + np.exp(-(z @ w)))
    gradient = np.append(w[:-1], 0.0) + c * z.T @ (p - y)
    assert np.abs(gradient).max() < 1e-6
    said = np.array([judge.changed_probability(row) >= meaning_judge.CUT for row in x])
    assert np.mean(said == (y == 1.0)) > 0.85
    # the judge the check reads gives the probabilities the fit minimised over
    assert [judge.changed_probability(row) for row in x[:5]] == pytest.approx(p[:5].tolist())
    # a stronger penalty shrinks the weights
    assert np.linalg.norm(script.fit(x, y, 0.001).weights) < np.linalg.norm(judge.weights)


def test_sets_that_share_prompts_are_left_out_together():
    script = load_script("fit_meaning_judge")
    assert script.group("calibration half") == script.group("held-out half")
    assert script.group("word source context") == script.group("word source any")
    assert len({script.group(name) for name in ("blind 1", "blind 2", "earlier 80 pairs")}) == 3


def test_the_shipped_judge_was_fitted_on_the_files_as_they_are():
    """Every labelled file the judge was fitted on is in the repository unchanged (a changed label needs a
    refit: scripts/fit_meaning_judge.py --write), and the judge reads as many features as the check gives."""
    judge = meaning_judge.read_judge()
    assert judge.trained_on and all(name.startswith("tests/fixtures/") for name in judge.trained_on)
    for name, digest in judge.trained_on.items():
        assert hashlib.sha256((ROOT / name).read_bytes()).hexdigest() == digest, f"{name} changed since the fit"
    assert judge.mean.shape == (2 * (384 + 768) + 4,) and np.all(judge.scale > 0)
    with pytest.raises(ValueError, match="features"):
        judge.changed_probability(np.zeros(3))


@pytest.mark.parametrize("text, why", [
    (b"", "cannot be read"), (b'{"format": "something else"}', "format"),
    (b'{"format": "promptrobust meaning judge 1", "mean": [0, 0], "scale": [1, 0], "weights": [1, 1], "bias": 0, '
     b'"c": 1, "pairs": 2}', "scale is not positive"),
])
def test_a_judge_file_that_is_not_one_is_refused_naming_the_fix(tmp_path, text, why):
    path = tmp_path / "meaning_judge.json"
    path.write_bytes(text)
    with pytest.raises(AttackResourceError, match="fit_meaning_judge.py --write") as caught:
        meaning_judge.read_judge(path)
    assert why in str(caught.value) or why == "cannot be read"


def test_without_the_judges_file_a_replaced_word_is_not_checked_and_the_reason_names_the_fix(tmp_path, monkeypatch):
    """A broken install (the judge's file missing) never falls back silently to the thresholds: the words the
    rules leave open are not checked, and the reason names the file and the command that rebuilds it."""
    try:
        mc.load_encoders()
    except AttackResourceError as exc:
        pytest.skip(f"no encoder here: {exc}")
    clean = "Read the film review and judge its tone: answer 'positive' or 'negative'."
    monkeypatch.setattr(meaning_judge, "JUDGE_FILE", tmp_path / "meaning_judge.json")
    mc.load_context_encoder.cache_clear()
    meaning_judge.load_judge.cache_clear()
    try:
        if len(mc.load_encoders().encoders) < 2:
            pytest.skip("all-mpnet-base-v2 not installed: MiniLM alone needs no judge")
        got = mc.meaning_verdict(clean, clean.replace("review", "critique"), SST2)
    finally:
        mc.load_context_encoder.cache_clear()
        meaning_judge.load_judge.cache_clear()
    assert got.verdict == "not checked"
    assert "meaning_judge.json cannot be read" in got.reasons[0] and "fit_meaning_judge.py --write" in got.reasons[0]


def _encoder() -> mc.ContextEncoder:
    try:
        encoder = mc.load_context_encoder()
    except AttackResourceError as exc:
        pytest.skip(f"no encoder here: {exc}")
    if encoder.judge is None:
        pytest.skip("all-mpnet-base-v2 not installed: the check is MiniLM alone, without the judge")
    return encoder


def test_features_of_a_word_the_encoders_judge():
    """One pair the rules leave to the encoders: per encoder |a - b| and a * b, then the two cosines and
    the class; its cosines are the ones the check averages, and the check's probability is the judge's."""
    script = load_script("fit_meaning_judge")
    encoder = _encoder()
    row = {"clean": "Read the film review and judge its tone: answer 'positive' or 'negative'.",
           "adversarial": "Read the film critique and judge its tone: answer 'positive' or 'negative'.",
           "labels": ["positive", "negative"], "meaning": "kept"}
    (pair,) = script.pairs_of("example", [row], encoder)
    assert pair.features is not None and pair.features.shape == (2 * (768 + 384) + 4,)
    verdict = mc.meaning_verdict(row["clean"], row["adversarial"], SST2, encoder=encoder)
    (word,) = verdict.substitutions
    assert float(np.mean(pair.features[-4:-2])) == pytest.approx(word.similarity, abs=1e-5)
    assert word.changed_probability == pytest.approx(encoder.judge.changed_probability(pair.features), abs=1e-6)
    assert word.kept == (word.changed_probability < meaning_judge.CUT)
    assert word.reason.startswith(f"learned judge: probability of a change {word.changed_probability:.3f}")
