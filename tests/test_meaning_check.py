"""The meaning check independent of the attack, and the guard on the words that define the labels (issue 30)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import numpy as np
import pytest

import promptrobust.attacks.meaning_check as mc
from promptrobust.attacks import get_attack
from promptrobust.attacks.base import WordSite
from promptrobust.attacks.errors import AttackResourceError
from promptrobust.attacks.label_words import label_linked_words
from promptrobust.attacks.search import attackable_words
from promptrobust.attacks.sentence import CachedEncoder
from promptrobust.attacks.words import normalize_protected, tokenize
from promptrobust.testing.synthetic import SyntheticScorer
from tests.script_modules import load_script

ROOT = Path(__file__).resolve().parents[1]
PAIRS = [json.loads(line) for line in (ROOT / "tests/fixtures/meaning/labelled_pairs.jsonl").read_text().splitlines()]
SST2 = normalize_protected({"positive", "negative"})
TASK_06 = "Does this snippet praise or criticise its subject? Write positive for praise and negative for criticism."

#: The wrong senses issue 30 names (old -> new), each of which the labelled pairs must hold.
ISSUE_WRONG_SENSES = [("sentence", "conviction"), ("word", "bible"), ("word", "scripture"), ("State", "Nation"),
                      ("Judge", "Justice"), ("review", "inspection"), ("passage", "enactment"), ("line", "cable"),
                      ("Take", "Shoot"), ("Take", "Withdraw"), ("Decide", "Settle"), ("Answer", "Resolve")]


class FlatEncoder:
    def encode(self, texts):
        return np.ones((len(texts), 4), dtype=np.float32)


def quoted(name: str) -> float:
    """A figure docs/fidelity.md quotes for the meaning check, e.g. ``precision 0.721``."""
    text = (ROOT / "docs/fidelity.md").read_text()
    section = text[text.index("### The meaning check"):]
    words = r"\s+".join(map(re.escape, name.split()))  # a phrase may wrap across lines
    return float(re.search(rf"{words}\s+(\d\.\d+)", section).group(1))  # type: ignore[union-attr]


# -- calibration ---------------------------------------------------------------------------------


def test_the_labelled_pairs_hold_every_wrong_sense_of_the_issue_and_both_verdicts():
    assert len(PAIRS) >= 60
    assert {p["meaning"] for p in PAIRS} == {"kept", "changed"}
    held = set()
    for p in PAIRS:
        old, new = tokenize(p["clean"])[1::2], tokenize(p["adversarial"])[1::2]
        held |= {(a, b) for a, b in zip(old, new) if a != b}
    for pair in ISSUE_WRONG_SENSES:
        assert pair in held, pair
    assert all(p["meaning"] == "changed" for p in PAIRS if (p["why"].startswith("wrong sense")))


def _calibration():
    return load_script("calibrate_meaning_check")


VERDICT_PAIRS = [json.loads(line) for line in
                 (ROOT / "tests/fixtures/meaning/verdict_pairs.jsonl").read_text().splitlines()]
CATEGORIES = {"wrong sense", "same field", "instruction: language", "instruction: scope", "instruction: role",
              "real-word typo", "synonym", "label clause", "opposite", "character edit", "insertion", "deletion"}


def test_the_verdict_pairs_hold_every_category_both_labels_and_a_fixed_split():
    assert len(VERDICT_PAIRS) >= 200
    assert {p["category"] for p in VERDICT_PAIRS} == CATEGORIES
    assert {p["split"] for p in VERDICT_PAIRS} == {"calibration", "held-out"}
    for name in ("instruction: language", "instruction: scope", "instruction: role", "label clause", "synonym"):
        assert {p["meaning"] for p in VERDICT_PAIRS if p["category"] == name} == {"kept", "changed"}, name
    for name in CATEGORIES:  # alternate within each category, fixed before anything was measured
        splits = [p["split"] for p in VERDICT_PAIRS if p["category"] == name]
        assert splits == ["calibration", "held-out"] * (len(splits) // 2) + ["calibration"] * (len(splits) % 2)


def check_table() -> dict[str, tuple[int, float, float]]:
    """docs/fidelity.md's table of the shipped check (its version's columns) on every labelled set: name -> (pairs, accuracy,
    recall of changed)."""
    text = (ROOT / "docs/fidelity.md").read_text()
    section = text[text.index("| set | pairs | v10 accuracy |"):]
    header = [c.strip() for c in section.splitlines()[0].strip("|").split("|")]
    version = mc.CHECK_NAME.split()[-1]
    accuracy, recall = header.index(f"{version} accuracy"), header.index(f"{version} recall of changed")
    rows = {}
    for line in section.splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip().strip("*") for c in line.strip("|").split("|")]
        rows[cells[0]] = (int(cells[1]), float(cells[accuracy]), float(cells[recall].split()[0]))
    return rows


def test_thresholds_are_the_calibration_halfs_choice_and_every_sets_figures_are_quoted():
    """v10's thresholds (the learned judge's baseline, and an input of it) are still the calibration half's
    choice under the shipped rules, and docs/fidelity.md's table holds what the shipped check gets on every
    labelled set (in-sample for the learned judge: scripts/fit_meaning_judge.py scores each set left out)."""
    calibrate = _calibration()
    sets = load_script("meaning_sets")
    rows = calibrate.evidence(calibrate.PAIRS)
    calibration = [e for e in rows if e.split == "calibration"]
    held_out = [e for e in rows if e.split == "held-out"]
    assert calibrate.choose(calibration) == (mc.THRESHOLD_CLOSE, mc.THRESHOLD_FAR)
    text = (ROOT / "docs/fidelity.md").read_text()
    assert f"{mc.THRESHOLD_CLOSE}" in text and f"{mc.THRESHOLD_FAR}" in text
    # changed instructions are caught, held out too
    for name in ("instruction: language", "instruction: scope", "instruction: role"):
        assert calibrate.score_shipped([e for e in held_out if e.category == name])["recall"] == 1.0, name
    table = check_table()
    assert set(table) == {s.name for s in sets.ALL_SETS}
    found = {"calibration half": calibration, "held-out half": held_out}
    for labelled in sets.ALL_SETS:
        evidence = found.get(labelled.name) or calibrate.evidence(labelled.path)
        if labelled in sets.BLIND_SETS[1:]:  # every category in the sets written by people who never saw the check
            assert {e.category for e in evidence} == CATEGORIES, labelled.name
        scored = calibrate.score_shipped(evidence)
        pairs, accuracy, recall = table[labelled.name]
        assert scored["pairs"] == pairs, labelled.name
        # numerics of another CPU may move a pair at a threshold, not more
        assert scored["accuracy"] == pytest.approx(accuracy, abs=1.5 / pairs), labelled.name
        assert scored["recall"] == pytest.approx(recall, abs=1.5 / scored["changed"]), labelled.name


def test_the_verdict_on_the_word_sources_own_candidates_is_quoted():
    """The pairs real records contain: the default offline source's candidates for the word-sense
    measure's 12 prompts, labelled by its kept.json; a changed meaning among them is still found."""
    calibrate = _calibration()
    pairs = calibrate.word_source_pairs("context")
    assert len(pairs) >= 30 and {p["meaning"] for p in pairs} == {"kept", "changed"}
    scored = calibrate.score_shipped(calibrate.evidence(pairs))
    one_pair = 1 / len(pairs)
    assert scored["accuracy"] == pytest.approx(quoted("word source accuracy"), abs=one_pair)
    assert scored["recall"] == pytest.approx(quoted("word source recall of changed"), abs=1 / scored["changed"])
    assert scored["recall"] >= 0.9


def test_without_mpnet_the_check_is_minilm_alone_said_and_named(monkeypatch):
    """The fallback is MiniLM alone at its own thresholds, announced once with the install command and
    named in every verdict it gives; the full check names v11 and has its learned judge."""
    from promptrobust.attacks import mpnet

    clean = "Judge the tone of the review. Answer positive or negative."
    full = mc.meaning_verdict(clean, clean.replace("review", "critique"), SST2)
    assert full.check == mc.CHECK and "v11" in full.check and "all-mpnet-base-v2" in full.check
    assert full.substitutions[0].changed_probability is not None and "learned judge" in (full.reasons or ("learned judge",))[0]

    def missing():
        raise mpnet.MPNetUnavailable(f"package {mpnet.PACKAGES[0]!r} is not installed; run: {mpnet.INSTALL_HINT}")

    mc.load_context_encoder.cache_clear()
    mc.load_encoders.cache_clear()
    mpnet.load_mpnet.cache_clear()
    monkeypatch.setattr(mpnet, "piece_paths", missing)
    said: list[tuple[str, str]] = []
    monkeypatch.setattr(mc, "announce", lambda key, message: said.append((key, message)))
    try:
        alone = mc.meaning_verdict(clean, clean.replace("review", "critique"), SST2)
        encoder = mc.load_context_encoder()
    finally:
        mc.load_context_encoder.cache_clear()
        mc.load_encoders.cache_clear()
        mpnet.load_mpnet.cache_clear()
    assert encoder.judge is None and alone.substitutions[0].changed_probability is None
    assert alone.check == mc.CHECK_MINILM_ALONE and "all-MiniLM-L6-v2 alone" in alone.check
    assert (encoder.threshold_close, encoder.threshold_far) == (mc.MINILM_ALONE_CLOSE, mc.MINILM_ALONE_FAR)
    assert len(said) == 1 and said[0][0] == "meaning_check_mpnet"  # once: the encoder is loaded once per process
    assert mpnet.INSTALL_HINT in said[0][1] and "all-MiniLM-L6-v2 alone" in said[0][1]
    assert alone.substitutions[0].similarity != full.substitutions[0].similarity  # one encoder, not the mean of two


def _split_zip(tmp_path: Path, weights: bytes, pieces: int = 3) -> list[Path]:
    import zipfile

    from promptrobust.attacks import mpnet

    whole = tmp_path / "whole.zip"
    with zipfile.ZipFile(whole, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(mpnet.FOLDER + "model.safetensors", weights)
        for name in mpnet.SMALL_FILES:
            archive.writestr(mpnet.FOLDER + name, "{}")
    data = whole.read_bytes()
    size = -(-len(data) // pieces)
    paths = []
    for i in range(pieces):
        path = tmp_path / f"all-mpnet-base-v2.zip.{i + 1:03d}"
        path.write_bytes(data[i * size:(i + 1) * size])
        paths.append(path)
    return paths


def test_the_split_zip_reads_as_one_and_other_weights_are_refused(tmp_path, monkeypatch):
    import zipfile

    from promptrobust.attacks import mpnet

    weights = bytes(range(256)) * 4000
    paths = _split_zip(tmp_path, weights)
    with mpnet.JoinedPieces(paths) as stream, zipfile.ZipFile(stream) as archive:
        assert archive.read(mpnet.FOLDER + "model.safetensors") == weights
    monkeypatch.setattr(mpnet, "piece_paths", lambda: paths)
    with pytest.raises(mpnet.MPNetUnavailable, match="other weights than the pinned sha256"):
        mpnet.load_mpnet.__wrapped__()
    monkeypatch.setattr(mpnet, "piece_paths", lambda: paths[:2])  # a piece missing: not a zip
    with pytest.raises(mpnet.MPNetUnavailable, match="do not make a readable zip"):
        mpnet.load_mpnet.__wrapped__()


# -- the verdict's rules -----------------------------------------------------------------------


@pytest.fixture
def no_encoder(monkeypatch):
    """No encoder can be loaded (as without torch): only the rules decide."""
    def unavailable():
        raise AttackResourceError("no torch here (test)")

    monkeypatch.setattr(mc, "load_context_encoder", unavailable)


@pytest.mark.parametrize(
    "adversarial, verdict, kind",
    [
        (TASK_06, "kept", None),
        (TASK_06.replace("subject", "sbuject"), "kept", "reads the same"),
        (TASK_06.replace("subject", "sub ject"), "kept", "reads the same"),
        (TASK_06.replace("subject", "subj\u0435ct"), "kept", "reads the same"),
        (TASK_06.replace("criticism.", "criticism Xq9."), "kept", "insertion"),
        (TASK_06.replace("criticism.", "criticism and positive."), "changed", "insertion"),
        (TASK_06.replace("for praise", "for kudos"), "changed", "word"),
        (TASK_06.replace("for criticism", "for critique"), "kept", "word"),  # a synonym the encoder keeps
        (TASK_06.replace("praise or", "blame or"), "changed", "word"),
    ],
)
def test_verdict_rules_and_the_encoder(adversarial, verdict, kind):
    got = mc.meaning_verdict(TASK_06, adversarial, SST2, encoder=None)
    assert got.verdict == verdict, got
    if kind is not None:
        assert got.substitutions[0].kind == kind
    assert got.acceptable == (verdict == "kept")


def test_label_clause_words_are_changed_and_say_why():
    got = mc.meaning_verdict(TASK_06, TASK_06.replace("Write", "Pen"), SST2)
    assert got.verdict == "changed" and "in a clause with a label word" in got.reasons[0]
    assert got.substitutions[0].relation == "synonym in a usual sense"
    # the learned judge decides (check v11); it is told the word is in a label's clause, not a close synonym
    assert "learned judge: probability of a change" in got.reasons[0] and got.substitutions[0].changed_probability >= 0.5
    assert got.substitutions[0].threshold_class == "far"  # recorded, so calibration needs one verdict a pair
    assert {"praise", "criticism", "write"} <= set(got.label_defining_words)
    # "praise" is opposed by "criticise" (WordNet's antonym is drawn on "criticize"): replaced by a word
    # WordNet does not relate to it, the contrast is gone; by one it relates, the encoders judge it
    opposed = mc.meaning_verdict(TASK_06, TASK_06.replace("for praise", "for money"), SST2)
    assert opposed.verdict == "changed" and "which another word of the prompt opposes" in opposed.reasons[0]
    related = mc.meaning_verdict(TASK_06, TASK_06.replace("for praise", "for congratulations"), SST2)
    assert related.verdict == "changed" and "in-context similarity" in related.reasons[0]


def test_wrong_sense_is_changed_and_a_synonym_kept_by_the_encoder():
    clean = "Judge the polarity of the review and respond with positive or negative."
    wrong = mc.meaning_verdict(clean, clean.replace("the review", "the inspection"), SST2)
    right = mc.meaning_verdict("Is the writer pleased with the film? Answer positive or negative.",
                               "Is the writer pleased with the movie? Answer positive or negative.", SST2)
    assert wrong.verdict == "changed" and wrong.substitutions[0].similarity < mc.THRESHOLD_FAR
    assert wrong.substitutions[0].relation == "synonym in a rarer sense only"
    assert right.verdict == "kept" and right.substitutions[0].similarity >= mc.THRESHOLD_CLOSE
    assert right.substitutions[0].relation == "synonym in a usual sense"
    assert (right.substitutions[0].threshold_class, wrong.substitutions[0].threshold_class) == ("close", "far")
    assert wrong.substitutions[0].senses.startswith("shares 1 of")  # WordNet: a synonym of another sense


@pytest.mark.parametrize("old, new, why", [
    ("German", "Dutch", "another language"), ("only", "also", "another scope word"),
    ("premise", "hypothesis", "another role"), ("judge", "justice", "a verb replaced by a word WordNet lists only as a noun"),
    ("tone", "tune", "another word spelled like 'tone'"),
])
def test_changed_instructions_parts_of_speech_and_real_word_typos_need_no_encoder(no_encoder, old, new, why):
    clean = ("Read the premise and the hypothesis, judge the tone only, and translate your German verdict: "
             "answer positive or negative.")
    got = mc.meaning_verdict(clean, clean.replace(old, new, 1), SST2)
    assert got.verdict == "changed" and why in got.reasons[0], got.reasons
    same = mc.meaning_verdict(clean, clean.replace("only", "solely"), SST2)
    assert same.verdict == "kept" and "the same scope word" in same.substitutions[0].reason


def test_a_translations_direction_and_a_british_spelling_are_read_without_an_encoder(no_encoder):
    """"into German" -> "from German" turns the translation round, "into" -> "to" keeps it; "criticises"
    is the opposite of "praises" though WordNet draws that antonym on the American spelling only."""
    clean = "Translate the diner's note into German, then answer positive if the diner praises the meal."
    turned = mc.meaning_verdict(clean, clean.replace("into", "from"), SST2)
    assert turned.verdict == "changed" and "turns the translation round" in turned.reasons[0], turned.reasons
    kept = mc.meaning_verdict(clean, clean.replace("into", "to"), SST2)
    assert kept.verdict == "kept" and "the same direction" in kept.substitutions[0].reason
    flipped = mc.meaning_verdict(clean, clean.replace("praises", "criticises"), SST2)
    assert flipped.verdict == "changed" and "an opposite" in flipped.reasons[0], flipped.reasons
    # a preposition before anything but a language is left to the other rules
    assert mc.direction_change("into", "from", "the") is None and mc.direction_change("into", "onto", "German") is None


V6_RULES = "Read the premise and the claim, and say supported if the evidence contains the answer or refuted if not."


@pytest.mark.parametrize("adversarial, verdict, why", [
    (V6_RULES.replace("contains", "lacks"), "changed", "an opposite"),  # a relation a label is defined by
    (V6_RULES.replace(" and the claim", " or the claim"), "changed", "another scope word"),  # and / or
    (V6_RULES.replace("and say", "and never say"), "changed", "inserts the negation 'never'"),
    (V6_RULES.replace("say supported", "don\u2019t say supported"), "changed", "inserts the negation"),
    (V6_RULES + " It is not true.", "kept", "inserted text names no label"),  # appended after the prompt: StressTest
    (V6_RULES.replace("the claim", "the writer"), "changed", "another role"),  # a party of a text is a role
])
def test_v6_rules_need_no_encoder(no_encoder, adversarial, verdict, why):
    got = mc.meaning_verdict(V6_RULES, adversarial, normalize_protected({"supported", "refuted"}))
    assert got.verdict == verdict and why in (got.reasons or (got.substitutions[0].reason,))[0], got


V7_RULES = ("Read the patient's message below and translate it from German into Italian; answer 'urgent' if the "
            "message confirms a symptom, otherwise 'routine', rather than giving a diagnosis.")
V7_LABELS = normalize_protected({"urgent", "routine"})


@pytest.mark.parametrize("adversarial, verdict, why", [
    (V7_RULES.replace("from German", "from Deutsch"), "kept", "the same language"),  # its own name for itself
    (V7_RULES.replace("into Italian", "into Italian-language"), "kept", "the same language"),
    (V7_RULES.replace("from German", "from Flemish"), "changed", "another language"),  # ISO 639-2: Dutch
    (V7_RULES.replace("patient's", "doctor's"), "changed", "another party"),
    (V7_RULES.replace("rather than", "rather then"), "kept", "a common slip"),
    (V7_RULES.replace("from German", "form German"), "kept", "a common slip"),
    (V7_RULES.replace("'routine',", "'routine', or 'unclear'"), "changed", "adds the answer option 'unclear'"),
    (V7_RULES.replace("'urgent' if", "'urgent' or 'emergency' if"), "changed", "adds the answer option"),
    (V7_RULES.replace("confirms", "fully confirms"), "changed", "inserts 'fully', which narrows"),
    (V7_RULES.replace("confirms", "also confirms"), "kept", "inserted text names no label"),
    (V7_RULES.replace("message below", "message"), "kept", "only points at the input"),
    (V7_RULES.replace("patient's message", "message"), "changed", "removes"),
])
def test_v7_rules_need_no_encoder(no_encoder, adversarial, verdict, why):
    """Check v7's rules: a language by its other names, the parties of an exchange, the slips a reader
    reads through, an inserted answer option or degree word, a deleted pointer to the input."""
    got = mc.meaning_verdict(V7_RULES, adversarial, V7_LABELS)
    assert got.verdict == verdict and why in (got.reasons or (got.substitutions[0].reason,))[0], got


V8_RULES = ("Summarise the driver's quarterly report below in Bengali, without any notes, in a sentence; give the "
            "fuel used in litres and answer 'late' if a delivery came from the depot after noon, otherwise 'on time'.")
V8_LABELS = normalize_protected({"late", "on time"})


@pytest.mark.parametrize("adversarial, verdict, why", [
    (V8_RULES.replace("quarterly", "annual"), "changed", "another period"),
    (V8_RULES.replace("in litres", "in gallons"), "changed", "another unit"),
    (V8_RULES.replace("without any", "with any"), "changed", "a preposition of the opposite relation"),
    (V8_RULES.replace("from the depot", "to the depot"), "changed", "a preposition of the opposite relation"),
    (V8_RULES.replace("after noon", "before noon"), "changed", "opposite"),  # WordNet: adverbs
    (V8_RULES.replace("in Bengali", "in Bangla"), "kept", "the same language"),  # ISO 639-1's native name
    (V8_RULES.replace("in a sentence", "in one sentence"), "kept", "the same count: one"),
    (V8_RULES.replace("without any notes", "without notes"), "kept", "which it only stresses"),
    (V8_RULES.replace("the fuel used", "the fuel and oil used"), "changed", "adds 'oil' to what the instruction names"),
])
def test_v8_rules_need_no_encoder(no_encoder, adversarial, verdict, why):
    """Check v8's rules: periods, units, prepositions of opposite relations, "a" for "one", "Bangla", a
    stressing "any" deleted after a negation, an item added with "and"."""
    got = mc.meaning_verdict(V8_RULES, adversarial, V8_LABELS)
    assert got.verdict == verdict and why in (got.reasons or (got.substitutions[0].reason,))[0], got


V9_RULES = ("Translate the user's question from Slovak into Romanian in about 40 words, then say whether the "
            "speaker's claim entails the hypothesis: answer 'true' if it does and 'false' if it does not, and report "
            "the energy in kilowatt-hours.")
V9_LABELS = normalize_protected({"true", "false"})


@pytest.mark.parametrize("adversarial, verdict, why", [
    (V9_RULES.replace("user's", "assistant's"), "changed", "another party"),  # the sides of a chat
    (V9_RULES.replace("from Slovak", "from Slovakian"), "kept", "the same language"),  # Merriam-Webster's variant
    (V9_RULES.replace("into Romanian", "into Rumanian"), "kept", "the same language"),
    (V9_RULES.replace("speaker's", "orator's"), "kept", "the same party"),
    (V9_RULES.replace("entails", "involves"), "changed", "another role"),  # the relation NLI asks about
    (V9_RULES.replace("entails", "implies"), "kept", "the same role"),
    (V9_RULES.replace("kilowatt-hours", "megawatt-hours"), "changed", "another unit"),
    (V9_RULES.replace("about 40", "around 40"), "kept", "the same scope word"),  # before a number: approximate
    (V9_RULES.replace("about 40", "exactly 40"), "changed", "another scope word"),
    (V9_RULES.replace("'false' if", "'sorry' if"), "changed", "which another word of the prompt opposes"),
])
def test_v9_rules_need_no_encoder(no_encoder, adversarial, verdict, why):
    """Check v9's rules: the sides of a chat, more names of languages and parties, the relation an NLI
    task asks about, watt-hours, "about" as a scope word before a number; a contrasted word replaced by
    a word WordNet does not relate to it."""
    got = mc.meaning_verdict(V9_RULES, adversarial, V9_LABELS)
    assert got.verdict == verdict and why in (got.reasons or (got.substitutions[0].reason,))[0], got


V10_RULES = ("Rewrite the Greek passenger notice below in plain wording, keeping every departure time exactly as "
             "printed. Assess clarity only, not style.")  # spaCy's small tagger reads this "Assess" as a proper noun


@pytest.mark.parametrize("adversarial, verdict, why", [
    (V10_RULES.replace("Greek", "Hellenic"), "kept", "the same language"),  # Merriam-Webster: Hellenic = Greek
    (V10_RULES.replace("departure", "arrival"), "changed", "an opposite"),
    # an imperative opening the prompt is a verb, whatever the small tagger says: left to the encoders
    (V10_RULES.replace("Assess", "Evaluate"), "not checked", "not checked"),
    (V10_RULES.replace("Rewrite", "Redraft"), "not checked", "not checked"),  # a verb made with re-
    (V10_RULES.replace("wording", "phrasing"), "not checked", "not checked"),  # a noun in -ing, not "phrase"
    (V10_RULES.replace("wording", "sentence"), "changed", "another role"),
])
def test_v10_rules_need_no_encoder(no_encoder, adversarial, verdict, why):
    """Check v10's rules: "Hellenic", arrival and departure as opposites; a noun or verb tag read as the
    other where WordNet lists the word only so; verbs made with "re-"; a noun in -ing read as itself."""
    got = mc.meaning_verdict(V10_RULES, adversarial, frozenset())
    assert got.verdict == verdict and why in (got.reasons or (got.substitutions[0].reason,))[0], got


def test_the_part_of_speech_wordnet_contradicts_and_verbs_made_with_re():
    from promptrobust.attacks.lexicon import load_lexicon

    lexicon = load_lexicon()
    assert mc.wordnet_pos("Assess", "n", lexicon) == "v"  # WordNet lists "assess" only as a verb
    assert mc.wordnet_pos("judge", "v", lexicon) == "v" and mc.wordnet_pos("review", "n", lexicon) == "n"
    assert mc.wordnet_pos("quickly", "r", lexicon) == "r"
    assert not mc.crosses_noun_and_verb("rewrite", "redraft", "v", lexicon)
    assert mc.crosses_noun_and_verb("judge", "justice", "v", lexicon)  # still caught
    assert mc.crosses_noun_and_verb("judge", "reality", "v", lexicon)  # "re-" makes no verb of "ality"


def test_about_as_a_preposition_and_a_contrasted_words_synonym_go_to_the_encoder(no_encoder):
    """Not a scope word without a number after it ("a review about the hotel"), and a WordNet synonym of a
    contrasted word ("false" -> "untrue") is judged by the encoders: with none, not checked."""
    clean = "Read a review about the hotel and answer 'true' if it praises the staff and 'false' if it does not."
    labels = normalize_protected({"true", "false"})
    for old, new in (("about the", "concerning the"), ("'false' if", "'untrue' if")):
        got = mc.meaning_verdict(clean, clean.replace(old, new), labels)
        assert got.verdict == "not checked" and "not checked: no torch here (test)" in got.reasons[0], got


def test_a_period_or_unit_renamed_by_a_word_no_list_names_is_left_to_the_encoder():
    from promptrobust.attacks.instructions import instruction_change

    assert instruction_change(["annual"], ["yearly"]) == (True, "the same period")
    assert instruction_change(["day"], ["date"]) is None and instruction_change(["litre"], ["volume"]) is None
    assert instruction_change(["no"], ["zero"]) == (True, "the same scope word")


def test_a_possessive_is_related_as_its_noun(no_encoder):
    got = mc.meaning_verdict(V8_RULES, V8_RULES.replace("driver's", "chauffeur's"), V8_LABELS)
    assert got.substitutions[0].relation.startswith("related") or got.substitutions[0].relation.startswith("synonym")


def test_a_party_renamed_by_a_word_no_list_names_is_left_to_the_encoder():
    from promptrobust.attacks.instructions import instruction_change

    assert instruction_change(["listener"], ["reviewer"]) is None and instruction_change(["diner"], ["customer"]) is None
    assert instruction_change(["customer"], ["agent"]) == (False, "changes the instruction: another party")
    assert instruction_change(["premise"], ["visitor"]) == (False, "changes the instruction: another role")


def test_two_names_of_one_language_and_the_scope_groups():
    assert mc.instruction_change(["persian"], ["farsi"]) == (True, "the same language")
    assert mc.instruction_change(["all"], ["totally"])[0] is False  # a determiner is not a degree adverb
    assert mc.instruction_change(["entirely"], ["partly"])[0] is False
    assert mc.instruction_change(["might"], ["perhaps"]) == (True, "the same scope word")


def test_a_word_of_a_fixed_expression_replaced_alone_changes_the_meaning(no_encoder):
    """"Figure out" -> "picture out", "step by step" -> "measure by step": the expression WordNet lists
    as one verb or adverb is gone, however close the word alone sits; a typo in it still reads the same."""
    clean = "Look at the passage, figure out the answer step by step, then reply positive or negative."
    for old, new, expression in [("figure", "picture", "figure out"), ("step by", "measure by", "step by step"),
                                 ("Look", "Glance", "look at")]:
        got = mc.meaning_verdict(clean, clean.replace(old, new, 1), SST2)
        assert got.verdict == "changed" and f"breaks the fixed expression {expression!r}" in got.reasons[0], got.reasons
    typo = mc.meaning_verdict(clean, clean.replace("figure", "figrue"), SST2)
    assert typo.verdict == "kept" and typo.substitutions[0].kind == "reads the same"


def test_a_rewritten_prompt_and_a_missing_encoder_are_not_checked(no_encoder):
    rewritten = mc.meaning_verdict(TASK_06, "Tell me how the author feels about the film: positive or negative?", SST2)
    assert rewritten.verdict == "not checked" and not rewritten.acceptable

    clean = "Judge the tone of the review. Answer positive or negative."
    got = mc.meaning_verdict(clean, clean.replace("tone", "feeling"), SST2)
    assert got.verdict == "not checked" and "no torch here (test)" in got.reasons[0]  # the loader's own words
    # the rules that need no encoder still decide
    assert mc.meaning_verdict(clean, clean.replace("negative.", "negative x9."), SST2).verdict == "kept"
    assert mc.meaning_verdict(clean, clean.replace("Answer", "Reply"), SST2).verdict == "kept"  # the same act


# -- the guard: label-linked words are never attacked (sst2-task-06) ---------------------------


@pytest.fixture(scope="module")
def offline_word_parts():
    enc = CachedEncoder(FlatEncoder())
    fooler = get_attack("textfooler", embedding="glove", encoder=enc)
    bugger = get_attack("textbugger", embedding="glove", encoder=enc)
    return {"textfooler": (fooler, fooler.transformation(0)), "textbugger": (bugger, bugger.transformation(0).parts[1])}


def test_the_guard_refuses_praise_and_criticism_substitutions_on_sst2_task_06(offline_word_parts):
    from promptrobust.tasks import load_prompts

    prompt = next(p.text for p in load_prompts("sst2") if p.id == "sst2-task-06")
    assert "Write positive for praise and negative for criticism" in prompt
    tokens = tokenize(prompt)
    last_praise = max(i for i, t in enumerate(tokens) if t == "praise")
    for name, (attack, words) in offline_word_parts.items():
        # the word source itself offers them: the guard is what stops them
        offered = set(words.replacements(WordSite(tokens, last_praise)))
        offered |= set(words.replacements(WordSite(tokens, tokens.index("criticism"))))
        assert {"congratulations", "critique"} <= offered, (name, offered)
        extra = attack.meaning_guard.protected_in(prompt, SST2)
        assert {"praise", "criticism", "write"} <= extra["label_linked_words"]
        protected = SST2 | extra["label_linked_words"] | extra["contrast_words"]
        touched = {tokens[i].lower() for i in attackable_words(tokens, protected, skip_stopwords=True)}
        assert not touched & {"praise", "criticism", "write"}, (name, touched)
        assert "snippet" in touched  # the rest of the prompt is attackable


def test_a_textfooler_run_leaves_the_label_linked_words_and_records_them():
    from promptrobust.tasks import load_prompts

    prompt = next(p.text for p in load_prompts("sst2") if p.id == "sst2-task-06")
    words = tokenize(prompt)[1::2]

    def fn(p, i):  # every word kept is worth a point: the attack changes all it can
        return 1.0 if words[i] in set(tokenize(p)[1::2]) else 0.0

    attack = get_attack("textfooler", embedding="glove", encoder=CachedEncoder(FlatEncoder()), similarity=0.0)
    out = asyncio.run(attack.run(prompt, SyntheticScorer(fn, len(words)), protected=SST2, seed=0))
    after = tokenize(out.adversarial_prompt)[1::2]
    assert out.adversarial_prompt != prompt
    for w in ("praise", "criticism", "Write"):
        assert after.count(w) == words.count(w), (w, out.adversarial_prompt)
    assert {"criticism", "praise", "write"} <= set(out.settings["label_linked_words"])
    assert "label_linked_words" in out.settings["antonym_guard"]
    assert out.meaning["verdict"] in ("kept", "changed") and out.meaning["substitutions"]
    assert label_linked_words(prompt, SST2) >= {"praise", "criticism", "write"}


def test_a_long_prompt_is_tagged_around_its_changes_only_with_the_same_tags_there() -> None:
    """The tagger reads windows around the changes of a long prompt (its memory grows with what it
    reads: 270 MB for 10,000 words at once); the tags at the changes are the whole text's."""
    from promptrobust.attacks.meaning_check import TAG_WINDOW_CHARS, _tagged
    from promptrobust.attacks.pos import tag_at

    sentence = "Read the review carefully and judge its tone. "
    text = sentence * (20 * TAG_WINDOW_CHARS // len(sentence))
    at = [text.index("judge"), text.rindex("review"), text.index("tone", len(text) // 2)]
    whole, windows = _tagged(text), _tagged(text, at)
    if whole is None:
        pytest.skip("no part-of-speech tagger here")
    assert windows is not None and len(windows) < len(whole) / 2
    assert [tag_at(windows, a) for a in at] == [tag_at(whole, a) for a in at] == ["VERB", "NOUN", "NOUN"]


def test_the_report_names_the_shipped_check_in_short():
    """The report (which may not import attacks) keeps its own copy of the checks' common prefix: it must
    stay the prefix of the shipped check's name, so tables say "v11", not the whole name."""
    from promptrobust.engine.analysis.report.acceptable import CHECK_PREFIX, check_name

    assert mc.CHECK_NAME.startswith(CHECK_PREFIX)
    assert check_name({"meaning": {"check": mc.CHECK}}) == mc.CHECK_NAME.removeprefix(CHECK_PREFIX).strip() == "v11"
    assert check_name({"meaning": {"check": mc.CHECK_MINILM_ALONE}}) == "v11, all-MiniLM-L6-v2 alone"
