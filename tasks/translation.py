"""Translation tasks scored with corpus BLEU: IWSLT 2017 and UN Multi.

A sample's fields are ``text`` plus ``source_language`` and
``target_language`` (names such as "German"); the input states the direction
("Translate from English to German."), so one instruction serves every
direction. Local rows: ``source``/``target`` text columns and
``source_lang``/``target_lang`` (codes such as "de" or names); or HF's
``translation`` dict with the direction given by the split.
"""

from __future__ import annotations

from dataclasses import dataclass

from promptrobust.tasks.base import Metric, ParserName, Sample
from promptrobust.tasks.common import DatasetTask, HFSplit, LocalSplit, Source, column, text_value
from promptrobust.tasks.errors import TaskDataError
from promptrobust.tasks.metrics import CorpusBleu
from promptrobust.tasks.sampling import stratified_subset
from promptrobust.tasks.datafiles import DataRow

LANGUAGES = {
    "ar": "Arabic", "de": "German", "en": "English", "es": "Spanish", "fr": "French",
    "ru": "Russian", "zh": "Chinese", "it": "Italian", "nl": "Dutch", "ro": "Romanian",
    "ja": "Japanese", "ko": "Korean",
}
_BY_NAME = {v.lower(): k for k, v in LANGUAGES.items()}


def language_code(value: str, origin: str) -> str:
    key = str(value).strip().lower()
    if key in LANGUAGES:
        return key
    if key in _BY_NAME:
        return _BY_NAME[key]
    raise TaskDataError(f"{origin}: unknown language {value!r}; use a code such as {', '.join(sorted(LANGUAGES))}")


@dataclass
class TranslationTask(DatasetTask):
    bleu_tokenize: str = "13a"

    @property
    def metric(self) -> Metric:
        return CorpusBleu(self.bleu_tokenize)

    def row_to_sample(self, row: DataRow, index: int, origin: str, tag: str) -> Sample:
        if "translation" in row and tag:
            src, tgt = tag.split("-")
            pair = row["translation"]
            if not isinstance(pair, dict) or src not in pair or tgt not in pair:
                raise TaskDataError(f"{origin}: column 'translation' lacks {src!r}/{tgt!r} text")
            text, ref = text_value(pair[src], src, origin), text_value(pair[tgt], tgt, origin)
        else:
            src = language_code(column(row, ("source_lang", "source_language", "src_lang"), origin), origin)
            tgt = language_code(column(row, ("target_lang", "target_language", "tgt_lang"), origin), origin)
            text = text_value(column(row, ("source", "src", "text"), origin), "source", origin)
            ref = text_value(column(row, ("target", "tgt", "reference"), origin), "target", origin)
        fields = {"text": text, "source_language": LANGUAGES[src], "target_language": LANGUAGES[tgt]}
        rid = row.get("id", index)
        return Sample(id=f"{self.name}:{src}-{tgt}:{rid}", fields=fields, target=ref)

    def select(self, samples: list[Sample], seed: int) -> list[Sample]:
        """An equal share per translation direction."""
        return stratified_subset(samples, lambda s: (s.fields["source_language"], s.fields["target_language"]),
                                 self.sample_size, seed, first=self.selection == "first")

    def slot_values(self, sample: Sample) -> tuple[str, ...]:
        return (sample.fields["source_language"], sample.fields["target_language"])

    def few_shot_group(self, sample: Sample) -> tuple[str, str]:
        return (sample.fields["source_language"], sample.fields["target_language"])

    def fields_block(self, sample: Sample, *, slots_shown: bool = False) -> list[str]:
        """The direction line (unless the prompt's slots already name both languages) and the text."""
        f = sample.fields
        direction = [] if slots_shown else ["Translate from " + f["source_language"] + " to " + f["target_language"] + "."]
        return [*direction, "Text: " + f["text"]]

    def answer_text(self, sample: Sample) -> str:
        return str(sample.target)

    def parse(self, answer: str, parser: ParserName = "last_word") -> str | None:
        """The first non-empty line (both parsers: a translation has no label word)."""
        if parser not in ("last_word", "robust"):
            raise ValueError(f"unknown parser {parser!r}; use 'last_word' or 'robust'")
        for line in answer.strip().splitlines():
            if line.strip():
                return line.strip()
        return ""


def _directions(dataset: str, pairs: list[tuple[str, str, str]], split: str, take: int | None) -> tuple[HFSplit, ...]:
    """``pairs``: (config, source code, target code)."""
    return tuple(HFSplit(dataset, config, split, take=take, tag=f"{s}-{t}") for config, s, t in pairs)


IWSLT_PAIRS = [("iwslt2017-en-de", "en", "de"), ("iwslt2017-en-de", "de", "en"),
               ("iwslt2017-en-fr", "en", "fr"), ("iwslt2017-en-fr", "fr", "en")]
#: The paper's UN Multi directions: every pair of its languages en, de, fr as
#: promptbench names them (source-target, 33 samples each = 99).
UN_PAIRS = [("de-en", "de", "en"), ("de-fr", "de", "fr"), ("en-fr", "en", "fr")]
_UN_TAKE = 3000  # UN Multi has only a (huge) train split: stream its first rows
#: promptbench's generation lengths (config.GENERATE_LEN of the paper's code).
IWSLT_MAX_TOKENS = 70
UN_MULTI_MAX_TOKENS = 140


def _protected() -> frozenset[str]:
    """promptbench's LABEL_SET for translation: only the word "translate"."""
    return frozenset({"translate"})


def iwslt() -> TranslationTask:
    return TranslationTask(
        name="iwslt", max_tokens=IWSLT_MAX_TOKENS, stop=("\n",), supports_choices=False,
        protected_words=_protected(),
        description="IWSLT 2017 TED talk translation, en<->de and en<->fr (test split)",
        sample_size=100,
        source=Source(
            hf_eval=_directions("IWSLT/iwslt2017", IWSLT_PAIRS, "test", None),
            hf_pool=_directions("IWSLT/iwslt2017", IWSLT_PAIRS, "validation", None),
            local_eval=(LocalSplit(("test",)),), local_pool=(LocalSplit(("train", "validation", "dev")),),
        ),
    )


def un_multi() -> TranslationTask:
    return TranslationTask(
        name="un_multi", max_tokens=UN_MULTI_MAX_TOKENS, stop=("\n",), supports_choices=False,
        protected_words=_protected(),
        description="UN Multi parallel UN documents, de->en, de->fr, en->fr (pairs within en, de, fr)",
        sample_size=99,
        # Only a train split exists: the pool is the held-out rest of the same rows.
        source=Source(
            hf_eval=_directions("Helsinki-NLP/un_multi", UN_PAIRS, "train", _UN_TAKE),
            local_eval=(LocalSplit(("test", "train")),), local_pool=(),
        ),
    )
