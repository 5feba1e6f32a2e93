"""The eight GLUE tasks of the paper, on their validation splits.

Generation follows promptbench: up to 20 new tokens, stopping at the end of
sequence only (no stop strings), then the last word is parsed. Protected words
are promptbench's label set for the dataset (the engine adds the labels and
verbalisers itself): template words such as "Sentence" or "Answer" may change.

Columns are accepted under their Hugging Face names and under GLUE's own TSV
names (``#1 String``, ``gold_label``, ``is_duplicate``...), so the HF export,
a Parquet/JSONL/CSV copy and the original GLUE ``dev.tsv`` all load.
"""

from __future__ import annotations

from promptrobust.tasks.classification import ClassificationTask, Field, binary_labels
from promptrobust.tasks.common import HFSplit, LocalSplit, Source

GLUE_HF = "nyu-mll/glue"
_DEV = LocalSplit(("validation", "dev"))
#: promptbench's generation length for every label task (``max_new_tokens=20``), EOS only.
LABEL_MAX_TOKENS = 20
#: promptbench also protects the digit labels of these datasets (LABEL_SET).
_DIGITS = frozenset({"0", "1"})


def _glue_source(config: str, splits: tuple[str, ...] = ("validation",), local: tuple[LocalSplit, ...] = (_DEV,)) -> Source:
    return Source(
        hf_eval=tuple(HFSplit(GLUE_HF, config, s, tag=s if len(splits) > 1 else "") for s in splits),
        hf_pool=(HFSplit(GLUE_HF, config, "train"),),
        local_eval=local,
    )


def _task(name, description, size, fields, labels, raw, synonyms=None, *, label_columns=("label",),
          source=None, headerless=(), protected=frozenset()) -> ClassificationTask:
    verbalizers = {lab: lab for lab in labels}
    return ClassificationTask(
        name=name,
        labels=labels,
        verbalizers=verbalizers,
        protected_words=frozenset(protected),
        digit_answers=bool(protected),
        max_tokens=LABEL_MAX_TOKENS,
        stop=(),
        description=description,
        sample_size=size,
        source=source or _glue_source(name),
        fields=fields,
        label_columns=label_columns,
        raw_labels=raw,
        synonyms=synonyms or {},
        headerless_tsv_columns=headerless,
    )


_NOT_ENT = {"not_entailment": ("not entailment", "non-entailment", "no entailment")}
_NOT_EQ = {"not_equivalent": ("not equivalent", "non-equivalent", "nonequivalent", "not_duplicate", "not duplicate")}


def sst2() -> ClassificationTask:
    return _task("sst2", "SST-2 sentiment of movie-review sentences (GLUE validation)", 872,
                 (Field("sentence", "Sentence", ("sentence", "text")),),
                 ("negative", "positive"), binary_labels("negative", "positive"), protected=_DIGITS)


def cola() -> ClassificationTask:
    return _task("cola", "CoLA grammatical acceptability (GLUE validation)", 1000,
                 (Field("sentence", "Sentence", ("sentence",)),),
                 ("unacceptable", "acceptable"), binary_labels("unacceptable", "acceptable"),
                 {"unacceptable": ("not acceptable",)},
                 headerless=("source", "label", "original_label", "sentence"))


def qqp() -> ClassificationTask:
    return _task("qqp", "QQP duplicate Quora questions (GLUE validation)", 1000,
                 (Field("question1", "Question 1", ("question1",)), Field("question2", "Question 2", ("question2",))),
                 ("not_equivalent", "equivalent"), binary_labels("not_equivalent", "equivalent"), _NOT_EQ,
                 label_columns=("label", "is_duplicate"))


def mrpc() -> ClassificationTask:
    return _task("mrpc", "MRPC paraphrase of news sentences (GLUE validation)", 408,
                 (Field("sentence1", "Sentence 1", ("sentence1", "#1 String")),
                  Field("sentence2", "Sentence 2", ("sentence2", "#2 String"))),
                 ("not_equivalent", "equivalent"), binary_labels("not_equivalent", "equivalent"), _NOT_EQ,
                 label_columns=("label", "Quality"))


def mnli() -> ClassificationTask:
    source = _glue_source(
        "mnli",
        ("validation_matched", "validation_mismatched"),
        (LocalSplit(("validation_matched", "dev_matched"), "matched"),
         LocalSplit(("validation_mismatched", "dev_mismatched"), "mismatched"),
         LocalSplit(("validation", "dev"))),
    )
    return _task("mnli", "MNLI entailment (GLUE validation, matched + mismatched)", 1000,
                 (Field("premise", "Premise", ("premise", "sentence1")),
                  Field("hypothesis", "Hypothesis", ("hypothesis", "sentence2"))),
                 ("entailment", "neutral", "contradiction"),
                 {"0": "entailment", "1": "neutral", "2": "contradiction"},
                 label_columns=("label", "gold_label"), source=source)


def qnli() -> ClassificationTask:
    return _task("qnli", "QNLI: does the context sentence answer the question (GLUE validation)", 1000,
                 (Field("question", "Question", ("question",)), Field("sentence", "Context", ("sentence",))),
                 ("entailment", "not_entailment"), binary_labels("entailment", "not_entailment"), _NOT_ENT,
                 protected=_DIGITS)


def rte() -> ClassificationTask:
    return _task("rte", "RTE textual entailment (GLUE validation)", 277,
                 (Field("sentence1", "Sentence 1", ("sentence1",)), Field("sentence2", "Sentence 2", ("sentence2",))),
                 ("entailment", "not_entailment"), binary_labels("entailment", "not_entailment"), _NOT_ENT,
                 protected=_DIGITS)


def wnli() -> ClassificationTask:
    return _task("wnli", "WNLI pronoun-resolution entailment (GLUE validation)", 71,
                 (Field("sentence1", "Sentence 1", ("sentence1",)), Field("sentence2", "Sentence 2", ("sentence2",))),
                 ("entailment", "not_entailment"), binary_labels("not_entailment", "entailment"), _NOT_ENT,
                 protected=_DIGITS)
