"""Answer parsers and metrics, against values worked out by hand."""

import pytest
import sacrebleu

from promptrobust.tasks import get_task
from promptrobust.tasks.base import Sample
from promptrobust.tasks.metrics import Accuracy, CorpusBleu, MathExactMatch, SquadF1, normalize_math_answer, squad_f1


@pytest.mark.parametrize(
    ("answer", "last_word", "robust"),
    [
        ("Positive.", "positive", "positive"),
        ("The answer is: negative", "negative", "negative"),
        ("negative'", "negative", "negative"),
        ("", None, None),
        ("positive or negative", "negative", None),  # two labels: ambiguous for robust
        ("Negative. The review is harsh.", None, "negative"),  # last word is no label
        ("I cannot tell", None, None),
    ],
)
def test_sst2_parsers(answer, last_word, robust):
    t = get_task("sst2")
    assert t.parse(answer, "last_word") == last_word
    assert t.parse(answer, "robust") == robust


def test_mnli_labels_including_neutral_with_quote():
    t = get_task("mnli")
    assert t.parse("neutral'", "robust") == "neutral"
    assert t.parse("Contradiction!", "last_word") == "contradiction"
    assert t.parse("entailment, or maybe neutral", "robust") is None


@pytest.mark.parametrize("name", ["qnli", "rte", "wnli"])
def test_not_entailment_is_not_read_as_entailment(name):
    t = get_task(name)
    assert t.parse("not_entailment", "last_word") == "not_entailment"
    assert t.parse("The answer is: not entailment.", "robust") == "not_entailment"
    assert t.parse("Entailment.", "robust") == "entailment"
    # last_word is the reference rule: only the verbaliser itself maps
    assert t.parse("not entailment", "last_word") == "entailment"


def test_qqp_and_cola_label_words():
    qqp, cola = get_task("qqp"), get_task("cola")
    assert qqp.parse("Not_equivalent.", "last_word") == "not_equivalent"
    assert qqp.parse("They are not equivalent", "robust") == "not_equivalent"
    assert qqp.parse("equivalent", "robust") == "equivalent"
    assert cola.parse("Unacceptable", "last_word") == "unacceptable"
    assert cola.parse("The sentence is not acceptable.", "robust") == "unacceptable"


def test_mmlu_letters_and_article_a():
    t = get_task("mmlu")
    assert t.parse("(B)", "robust") == "B"
    assert t.parse("The answer is C.", "robust") == "C"
    assert t.parse("A dog is an animal", "robust") is None  # article, not option A
    assert t.parse("Answer: A", "robust") == "A"
    assert t.parse("b.", "last_word") == "B"
    assert t.parse("B or D", "robust") is None


def test_accuracy_counts_none_as_wrong():
    s = Sample("1", {"sentence": "x"}, "positive")
    assert Accuracy().sample_score("positive", s) == 1.0
    assert Accuracy().sample_score(None, s) == 0.0
    assert Accuracy().corpus_score(["positive", None], [s, s]) == 0.5


def test_squad_f1_hand_computed():
    # pred tokens: [normans, came, from, normandy]; ref: [normans]; overlap 1
    # precision 1/4, recall 1 -> F1 = 2*(1/4)/(5/4) = 0.4
    assert squad_f1("The Normans came from Normandy", "Normans") == pytest.approx(0.4)
    # articles and punctuation are ignored -> exact
    assert squad_f1("the France.", "France") == 1.0
    # pred [in, france] vs ref [france, region]: overlap 1, p=1/2, r=1/2 -> 0.5
    assert squad_f1("in France", "France region") == pytest.approx(0.5)
    m = SquadF1()
    answerable = Sample("q1", {}, ["France", "in France"])
    unanswerable = Sample("q2", {}, [])
    assert m.sample_score("in France", answerable) == 1.0  # best reference wins
    assert m.sample_score("", unanswerable) == 1.0  # both empty
    assert m.sample_score("Paris", unanswerable) == 0.0  # one empty
    assert m.sample_score("", answerable) == 0.0
    assert m.sample_score(None, unanswerable) == 0.0  # unparseable is wrong


def test_bleu_equals_sacrebleu_corpus_score_over_100():
    hyps = ["the cat sat on the mat", "a quick brown fox jumps", "hello there world"]
    refs = ["the cat is sitting on the mat", "the quick brown fox jumps", "hello world"]
    samples = [Sample(str(i), {}, r) for i, r in enumerate(refs)]
    expected = sacrebleu.corpus_bleu(hyps, [refs], smooth_method="none").score / 100
    got = CorpusBleu().corpus_score(hyps, samples)
    assert got == pytest.approx(expected)
    # promptbench's BLEU (no smoothing), worked by hand: 14 hypothesis and 14
    # reference tokens (brevity penalty 1); 1..4-gram matches 11/14, 6/11, 3/8, 1/5
    import math
    by_hand = math.exp(sum(math.log(p) for p in (11 / 14, 6 / 11, 3 / 8, 1 / 5)) / 4)
    assert got == pytest.approx(by_hand)
    assert 0 < got < 1
    assert CorpusBleu().decomposable is False
    # corpus BLEU is not the mean of sentence scores
    mean = sum(CorpusBleu().sample_score(h, s) for h, s in zip(hyps, samples)) / 3
    assert mean != pytest.approx(got)


@pytest.mark.parametrize(
    ("a", "b"),
    [("3.0", "3"), ("True", "true"), ("1/2", "0.5"), ("42.", "42"), (" -7 ", "-7"), ("1,000", "1000"), ("2/4", "1/2")],
)
def test_math_normalisation_equal(a, b):
    assert normalize_math_answer(a) == normalize_math_answer(b)
    assert MathExactMatch().sample_score(a, Sample("m", {}, b)) == 1.0


@pytest.mark.parametrize(("a", "b"), [("3.1", "3"), ("false", "true"), ("-4a5", "4a5"), ("1/3", "0.33")])
def test_math_normalisation_different(a, b):
    assert MathExactMatch().sample_score(a, Sample("m", {}, b)) == 0.0


def test_math_parsers():
    t = get_task("math")
    assert t.parse("The answer is -9.", "last_word") == "-9"
    assert t.parse("x = -9", "robust") == "-9"
    assert t.parse("True.", "robust") == "True"
    assert t.parse("", "robust") is None


def test_squad_parsers():
    t = get_task("squad_v2")
    assert t.parse("unanswerable", "last_word") == ""
    assert t.parse("The answer is: France.\nMore text", "robust") == "France."
    assert t.parse("This question is unanswerable.", "robust") == ""
    assert t.parse("France\nsecond line", "last_word") == "France"


def test_unknown_parser_is_rejected():
    with pytest.raises(ValueError, match="unknown parser"):
        get_task("sst2").parse("positive", "fancy")  # type: ignore[arg-type]


@pytest.mark.parametrize("answer, target, score", [
    ("Yes", "True", 1.0), ("The answer is yes.", "True", 1.0), ("no", "False", 1.0),
    ("No.", "True", 0.0), ("yes", "False", 0.0), ("True", "True", 1.0), ("yes", "7", 0.0),
])
def test_math_yes_no_scores_as_true_false(answer, target, score):
    """promptbench reads a "yes"/"no" answer as True/False before comparing."""
    t = get_task("math")
    s = Sample("m", {"question": "Is 7 a factor of 14?", "module": "numbers__is_factor"}, target)
    assert t.metric.sample_score(t.parse(answer, "last_word"), s) == score


@pytest.mark.parametrize("name", ["sst2", "cola", "qqp", "mrpc", "mnli", "qnli", "rte", "wnli", "mmlu",
                                  "rotten_tomatoes", "math"])
def test_label_tasks_decode_twenty_tokens_eos_only(name):
    """promptbench: max_new_tokens=20, no stop strings (the last word is parsed)."""
    t = get_task(name)
    assert (t.max_tokens, tuple(t.stop)) == (20, ())


def test_first_line_tasks_keep_the_exact_newline_stop():
    """SQuAD and translation parse the first line, so a newline stop changes nothing."""
    for name, length in (("squad_v2", 20), ("iwslt", 70), ("un_multi", 140)):
        t = get_task(name)
        assert (t.max_tokens, tuple(t.stop)) == (length, ("\n",))
        assert t.parse("first line\nsecond line") == t.parse("first line")


@pytest.mark.parametrize("name, answer, label", [
    ("sst2", "1", "positive"), ("sst2", "Answer: 0.", "negative"), ("rotten_tomatoes", "1", "positive"),
    ("wnli", "1", "entailment"), ("qnli", "1", "not_entailment"), ("rte", "0", "entailment"),
    ("mnli", "2", None), ("qqp", "0", None), ("cola", "1", None), ("sst2", "7", None), ("mmlu", "1", None),
])
def test_last_word_reads_label_ids_like_promptbench(name, answer, label):
    """promptbench maps a bare id to its label where LABEL_SET lists the ids (SST-2, QNLI, RTE, WNLI)."""
    assert get_task(name).parse(answer, "last_word") == label
