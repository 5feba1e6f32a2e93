"""Word attacks keep meaning offline: the WordNet synonym source, the antonym
guard, the words that define the labels, and what each outcome records."""

import asyncio
import gzip
from pathlib import Path

import numpy as np
import pytest

from promptrobust.attacks import get_attack
from promptrobust.attacks.base import WordSite
from promptrobust.attacks.embeddings import load_glove
from promptrobust.attacks.lexicon import Lexicon, load_lexicon, read_table, read_wordnet, write_table
from promptrobust.attacks.search import attackable_words
from promptrobust.attacks.sentence import CachedEncoder
from promptrobust.attacks.synonyms import (
    SYNONYM_FLOOR,
    Form,
    contrast_words,
    inflect,
    is_opposite,
    lemma_forms,
)
from promptrobust.attacks.changes import substitutions
from promptrobust.attacks.words import normalize_protected, tokenize
from promptrobust.testing.synthetic import SyntheticScorer

# The opposites the issue names, with their forms. Written here, independent of
# the code under test: a candidate for a word of one side may never be a word of
# the other side.
OPPOSITES = [
    ({"pleased", "pleasing", "please", "pleases"}, {"displeased", "displeasing", "displease", "displeases"}),
    ({"positive", "positively", "positives"}, {"negative", "negatively", "negatives"}),
    ({"good", "better", "best", "goods"}, {"bad", "worse", "worst", "badly"}),
    ({"correct", "correctly", "correctness"}, {"incorrect", "incorrectly", "incorrectness", "wrong", "wrongly"}),
    ({"same", "similar", "identical"}, {"different", "differ", "differs", "dissimilar", "distinct"}),
    ({"true", "truly", "truth"}, {"false", "falsely", "untrue", "falsehood"}),
    ({"entailment", "entail", "entails", "entailed"}, {"contradiction", "contradict", "contradicts", "contradicted"}),
]

# A fixed set of prompts in the style of the paper's task and role prompts
# (our own wording), the opposites above in each.
PROMPTS = [
    "Is the writer of this sentence pleased or displeased? Answer positive if pleased and negative if displeased.",
    "Read the review and decide whether the film critic found the movie good or bad; reply positive or negative.",
    "Check whether the given answer is correct or incorrect and respond with correct or incorrect.",
    "Determine whether the two statements mean the same thing or something different; answer equivalent or not_equivalent.",
    "As a careful fact checker, judge whether the claim is true or false given the evidence, answering true or false.",
    "Does the premise entail the hypothesis, or is there a contradiction? Answer entailment, neutral or contradiction.",
    "Acting as a sentiment expert, classify the emotional tone of the following text as positive or negative.",
    "Evaluate the statement below and tell me whether the author sounds happy, satisfied and pleased with the purchase.",
]
LABELS = normalize_protected(
    {"positive", "negative", "correct", "incorrect", "equivalent", "not_equivalent", "true", "false",
     "entailment", "neutral", "contradiction"}
)


def _side(word: str) -> int | None:
    for i, (a, b) in enumerate(OPPOSITES):
        if word in a:
            return 2 * i
        if word in b:
            return 2 * i + 1
    return None


def _flip(word: str, new: str) -> bool:
    s, t = _side(word.lower()), _side(new.lower())
    return s is not None and t is not None and s // 2 == t // 2 and s != t


class FlatEncoder:
    def encode(self, texts):
        return np.ones((len(texts), 4), dtype=np.float32)


@pytest.fixture(scope="module")
def offline_word_parts():
    """The word part of TextFooler and TextBugger as they run offline (GloVe + WordNet)."""
    enc = CachedEncoder(FlatEncoder())
    fooler = get_attack("textfooler", embedding="glove", encoder=enc)
    bugger = get_attack("textbugger", embedding="glove", encoder=enc)
    words = bugger.transformation(0).parts[1]  # Composite((chars, words))
    return {"textfooler": fooler.transformation(0), "textbugger": words}


def _every_candidate(transformation, prompt):
    lex = load_lexicon()
    protected = LABELS | contrast_words(prompt, LABELS, lex)
    tokens = tokenize(prompt)
    for i in attackable_words(tokens, protected, skip_stopwords=True):
        site = WordSite(tokens, i)
        for new in transformation.replacements(site):
            yield site.word, new


def test_plain_glove_neighbours_do_propose_opposites():
    """The check below can fail: GloVe's own neighbours hold the opposites."""
    glove = load_glove()
    near = {w for w, _ in glove.neighbours("positive", 10)} | {w for w, _ in glove.neighbours("good", 10)}
    assert {"negative", "bad"} & near


def test_no_offline_candidate_replaces_a_word_by_its_opposite(offline_word_parts):
    lex = load_lexicon()
    glove = load_glove()
    seen = 0
    for name, transformation in offline_word_parts.items():
        for prompt in PROMPTS:
            for word, new in _every_candidate(transformation, prompt):
                seen += 1
                assert not _flip(word, new), (name, prompt, word, new)
                assert not is_opposite(word, new, lex), (name, word, new)
                # Every substitution is a listed synonym of one of the word's lemmas
                # (re-inflected as the word) and passes the documented cosine floor.
                listed = any(
                    inflect(syn, form.inflection) == new.lower()
                    for form in lemma_forms(word, lex)
                    for syn in lex.synonyms(form.lemma)
                )
                assert listed, (name, word, new)
                assert glove.cosine(word, new) >= SYNONYM_FLOOR, (name, word, new)
                if name == "textfooler":
                    assert glove.cosine(word, new) >= 0.6
    assert seen > 20  # the prompts do get candidates: the check is not vacuous


def test_the_words_that_define_the_labels_are_never_offered(offline_word_parts):
    for transformation in offline_word_parts.values():
        touched = {w.lower() for w, _ in _every_candidate(transformation, PROMPTS[0])}
        assert not touched & {"pleased", "displeased", "positive", "negative"}
        assert "writer" in touched  # the rest of the prompt is attackable


def test_contrast_words_are_opposed_pairs_and_opposites_of_labels():
    lex = load_lexicon()
    found = contrast_words(PROMPTS[0], normalize_protected({"positive", "negative"}), lex)
    assert {"pleased", "displeased"} <= found
    assert "writer" not in found
    # a word opposing a protected label word is protected too, even alone
    assert "unfavorable" in contrast_words("Is the review unfavorable?", normalize_protected({"favorable"}), lex)
    # WordNet draws "praise" / "criticize" on the American spelling; the British one opposes it as well
    assert {"praises", "criticises"} <= contrast_words("Say positive if it praises the film and negative if it "
                                                       "criticises it.", normalize_protected({"positive"}), lex)


def test_textfooler_run_leaves_pleased_and_displeased_alone_and_records_it():
    prompt = PROMPTS[0]
    words = tokenize(prompt)[1::2]

    def fn(p, i):  # every word kept is worth a point: the attack changes all it can
        return 1.0 if words[i] in set(tokenize(p)[1::2]) else 0.0

    attack = get_attack("textfooler", embedding="glove", encoder=CachedEncoder(FlatEncoder()),
                        similarity=0.0)
    out = asyncio.run(attack.run(prompt, SyntheticScorer(fn, len(words)), protected=LABELS, seed=0))
    assert out.adversarial_prompt != prompt
    for w in ("pleased", "displeased", "positive", "negative"):
        assert tokenize(out.adversarial_prompt)[1::2].count(w) == words.count(w)
    assert set(out.settings["contrast_words"]) >= {"pleased", "displeased"}
    assert out.substitutions and all(not is_opposite(o, n, load_lexicon()) for o, n in out.substitutions)
    assert ("writer", "author") in out.substitutions
    assert out.final_similarity["encoder"] == "FlatEncoder"
    assert out.final_similarity["cosine"] == pytest.approx(1.0)
    assert "synonym_source" in out.settings["deviations"]


def test_synonym_source_none_keeps_plain_neighbours_but_still_guards():
    enc = CachedEncoder(FlatEncoder())
    t = get_attack("textfooler", embedding="glove", encoder=enc, synonyms="none").transformation(0)
    tokens = tokenize("The review is positive overall.")
    cands = t.replacements(WordSite(tokens, tokens.index("positive")))
    assert cands and "negative" not in [c.lower() for c in cands]
    with pytest.raises(ValueError, match="synonyms must be one of"):
        get_attack("textfooler", synonyms="thesaurus")


def test_substitutions_lists_changed_stretches():
    assert substitutions("Is the writer pleased?", "Is the author pleased?") == [("writer", "author")]
    assert substitutions("a good film", "a g ood film") == [("good", "g ood")]
    assert substitutions("same", "same") == []


def test_inflection_round_trip():
    lex = load_lexicon()
    assert inflect("author", "s") == "authors"
    assert inflect("reply", "ing") == "replying"
    assert inflect("reply", "ed") == "replied"
    assert inflect("box", "s") == "boxes"
    assert any(f.lemma == "answer" and f.inflection == "ing" for f in lemma_forms("answering", lex))
    assert any(f.lemma == "stop" for f in lemma_forms("stopped", lex))
    assert inflect("brief", "est") == "briefest" and inflect("happy", "er") == "happier"


def test_lemmas_as_wordnets_lemmatiser_finds_them_irregular_forms_and_adjective_degrees():
    lex = load_lexicon()
    assert Form("buy", "ed") in lemma_forms("bought", lex)  # verb.exc
    assert Form("have", "s") in lemma_forms("has", lex) and Form("be", "ed") in lemma_forms("was", lex)
    assert Form("child", "s") in lemma_forms("children", lex)  # noun.exc
    assert {Form("good", "er"), Form("well", "er")} <= set(lemma_forms("better", lex))  # adj.exc, adv.exc
    assert Form("short", "est") in lemma_forms("shortest", lex)  # the -est rule
    assert Form("big", "est") in lemma_forms("biggest", lex)  # with the doubled consonant
    # a word that is itself a lemma is not read as a comparative ("number" is not "numb" + "er")
    assert lemma_forms("number", lex) == [Form("number", "")]
    # the opposite guard and the verdict see the lemmas: these were "not in WordNet" before
    assert is_opposite("shortest", "longest", lex) and is_opposite("bought", "sold", lex)
    assert not is_opposite("bought", "purchased", lex)


# -- the lexicon file format, on a WordNet-format fixture written here ----------------------

_DATA_ADJ = """\
  1 This fixture is written for promptrobust's tests in WordNet's data file format.
00000010 00 a 01 glad 0 001 ! 00000020 a 0101 | feeling joy
00000020 00 a 01 sad 0 002 ! 00000010 a 0101 & 00000030 a 0000 | feeling sorrow
00000030 00 s 02 gloomy 0 glum 0 001 & 00000020 a 0000 | sad in a dull way
00000040 00 s 02 cheerful 0 merry(a) 0 001 & 00000010 a 0000 | glad and lively
"""
_DATA_NOUN = "00000050 00 n 02 film 0 movie 0 000 | a story told in moving pictures\n"


def _fixture_dict(folder: Path) -> Path:
    folder.mkdir()
    (folder / "data.adj").write_text(_DATA_ADJ)
    (folder / "data.noun").write_text(_DATA_NOUN)
    (folder / "data.verb").write_text("")
    (folder / "data.adv").write_text("")
    # satellites point at their head
    return folder


def test_wordnet_files_give_synonyms_direct_and_indirect_antonyms(tmp_path):
    data = read_wordnet(_fixture_dict(tmp_path / "dict"))
    table = tmp_path / "lex.tsv.gz"
    write_table(data, table)
    with gzip.open(table, "rt") as fh:
        assert fh.readline().startswith("# WordNet 3.0")
    lex = read_table(table, name="fixture")
    assert lex.synonyms("film") == {"movie"}
    assert lex.synonyms("gloomy") == {"glum"}
    assert lex.antonyms("glad") == {"sad", "gloomy", "glum"}  # direct + the other head's satellites
    assert "merry" in lex.antonyms("glum")  # satellite against satellite
    assert lex.synonyms("merry") == {"cheerful"}  # adjective markers such as (a) are stripped
    assert is_opposite("cheerful", "glum", lex)
    assert not is_opposite("film", "movie", lex)
    assert lex.irregular("gladder") == () and lemma_forms("sadder", lex) == [Form("sad", "er")]  # the -er rule


def test_exception_lists_are_read_and_kept_for_known_lemmas(tmp_path):
    folder = _fixture_dict(tmp_path / "dict")
    (folder / "adj.exc").write_text("gladder glad\nmerrier merry\n\nbluer blue\n")  # blue: not in the fixture
    (folder / "noun.exc").write_text("films film\n")
    data = read_wordnet(folder)
    assert ("a", "merrier", "merry") in data.exceptions
    table = tmp_path / "lex.tsv.gz"
    write_table(data, table)
    lex = read_table(table, name="fixture")
    assert lex.irregular("merrier") == (("a", "merry"),) and lex.irregular("bluer") == ()
    assert Form("merry", "er") in lemma_forms("merrier", lex) and lex.synonyms("merry") == {"cheerful"}


def test_missing_wordnet_files_are_named(tmp_path):
    from promptrobust.attacks.errors import AttackResourceError

    with pytest.raises(AttackResourceError, match="no WordNet data.noun"):
        read_wordnet(tmp_path)


def test_shipped_lexicon_knows_the_task_words():
    lex = load_lexicon()
    assert isinstance(lex, Lexicon) and len(lex) > 50_000
    assert "author" in lex.synonyms("writer")
    assert "displeased" in lex.antonyms("pleased")
    assert "incorrect" in lex.antonyms("correct")
    assert "elated" not in lex.synonyms("displeased")


def test_list_attacks_says_what_bertattack_needs_and_the_command(capsys):
    from promptrobust.cli.main import main

    assert main(["list", "attacks"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("bertattack: "))
    assert "needs a masked language model" in line and "no PyPI package ships" in line
    assert "huggingface-cli download bert-base-uncased --local-dir ~/models/bert-base-uncased" in line
    assert "pre run --attack bertattack --attack-option mlm=~/models/bert-base-uncased" in line
    assert get_attack("bertattack", mlm="~/models/bert").configured.transformation.model == str(Path.home() / "models" / "bert")
