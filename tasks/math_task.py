"""DeepMind Mathematics: 20 question types, 8 each (the paper's 160).

Three sources, in this order: local files (``question``, ``answer``, optional
``module``), else the default offline generator (``tasks.math_gen``, seeded),
else with ``source="hf"`` the hub's ``deepmind/math_dataset`` test splits. The
offline few-shot pool is generated at the package's training difficulty and
never repeats an evaluation question.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from promptrobust.tasks.base import Metric, ParserName, Sample
from promptrobust.tasks.common import DatasetTask, HFSplit, LocalSplit, Rows, Source, column, text_value
from promptrobust.tasks.math_gen import PAPER_MODULES, generate
from promptrobust.tasks.metrics import MathExactMatch
from promptrobust.tasks.sampling import stratified_subset
from promptrobust.tasks.datafiles import DataRow

PER_MODULE = 8
#: How a prompt names each question type (the paper shows the type in its prompt;
#: these descriptions are ours).
QUESTION_TYPES = {
    "algebra__linear_1d": "linear equations in one variable",
    "algebra__linear_2d": "linear equations in two variables",
    "algebra__sequence_next_term": "the next term of a sequence",
    "arithmetic__add_sub_multiple": "adding and subtracting several numbers",
    "arithmetic__mul_div_multiple": "multiplying and dividing several numbers",
    "arithmetic__mixed": "mixed arithmetic",
    "arithmetic__nearest_integer_root": "roots rounded to the nearest integer",
    "comparison__closest": "finding the number closest to a target",
    "comparison__kth_biggest": "ranking numbers by size",
    "comparison__pair": "comparing two numbers",
    "measurement__conversion": "converting units of measurement",
    "numbers__base_conversion": "converting between number bases",
    "numbers__div_remainder": "remainders of a division",
    "numbers__gcd": "greatest common divisors",
    "numbers__is_factor": "whether one number divides another",
    "numbers__is_prime": "whether a number is prime",
    "numbers__lcm": "least common multiples",
    "numbers__place_value": "the place value of digits",
    "numbers__round_number": "rounding numbers",
    "polynomials__evaluate": "evaluating polynomials",
}
POOL_PER_MODULE = 3
_EDGE = "\"'`$()[]{}<>*.,;:!?"
_LEAD = re.compile(r"^.*?\b(?:answer\s+is|answer\s*:|equals|=)\s*", re.IGNORECASE | re.DOTALL)
_NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?(?:/\d+)?")


def math_last_word(answer: str) -> str:
    """Last word with quotes, brackets and trailing punctuation removed; signs kept."""
    words = answer.split()
    return words[-1].strip(_EDGE) if words else ""


def question_type(module: str) -> str:
    """The words a prompt uses for a question type ("numbers__gcd" -> "greatest common divisors")."""
    return QUESTION_TYPES.get(module) or " ".join(module.replace("__", " ").replace("_", " ").split())


@dataclass
class MathTask(DatasetTask):
    math_source: Literal["generate", "hf"] = "generate"

    @property
    def metric(self) -> Metric:
        return MathExactMatch()

    def _generated(self, split: str, seed: int, per_module: int) -> Rows:
        problems = generate(PAPER_MODULES, per_module, seed=seed, split=split)
        return [({"question": p.question, "answer": p.answer, "module": p.module, "id": f"{split}-{seed}-{i}"},
                 f"generated {p.module} #{i}", "") for i, p in enumerate(problems)]

    def eval_rows(self, data_dir: str | None, data_file: str | None, *, seed: int = 0) -> Rows:
        if data_dir is None and data_file is None and self.math_source == "generate":
            # Generation already draws fresh questions per seed; select() keeps all.
            return self._generated("test", seed, PER_MODULE)
        return super().eval_rows(data_dir, data_file, seed=seed)

    def few_shot_pool(self, *, seed: int = 0, data_dir: str | None = None, data_file: str | None = None) -> list[Sample]:
        if data_dir is None and data_file is None and self.math_source == "generate":
            evals = {s.fields["question"] for s in self.to_samples(self._generated("test", seed, PER_MODULE))}
            pool = self.to_samples(self._generated("train", seed, POOL_PER_MODULE))
            return [s for s in pool if s.fields["question"] not in evals]
        return super().few_shot_pool(seed=seed, data_dir=data_dir, data_file=data_file)

    def row_to_sample(self, row: DataRow, index: int, origin: str, tag: str) -> Sample:
        question = text_value(column(row, ("question", "problem"), origin), "question", origin)
        answer = text_value(column(row, ("answer", "solution"), origin), "answer", origin).strip()
        module = str(row.get("module") or tag or "")
        rid = row.get("id", index)
        return Sample(id=f"math:{module}:{rid}", fields={"question": question.strip(), "module": module}, target=answer)

    def select(self, samples: list[Sample], seed: int) -> list[Sample]:
        return stratified_subset(samples, lambda s: s.fields["module"], self.sample_size, seed,
                                 first=self.selection == "first")

    def slot_values(self, sample: Sample) -> tuple[str, ...]:
        module = sample.fields.get("module", "")
        return (question_type(module),) if module else ()

    def context_lines(self, sample: Sample) -> list[str]:
        values = self.slot_values(sample)
        return ["Question type: " + values[0]] if values else []

    def few_shot_group(self, sample: Sample) -> str:
        return sample.fields.get("module", "")

    def fields_block(self, sample: Sample, *, slots_shown: bool = False) -> list[str]:
        return ["Question: " + sample.fields["question"]]

    def answer_text(self, sample: Sample) -> str:
        return str(sample.target)

    def parse(self, answer: str, parser: ParserName = "last_word") -> str | None:
        """``last_word``: the last word. ``robust``: the text after "answer is" / "=",
        else a lone token, else the last number in the first line."""
        if parser == "last_word":
            word = math_last_word(answer)
            return word or None
        if parser != "robust":
            raise ValueError(f"unknown parser {parser!r}; use 'last_word' or 'robust'")
        lines = [ln.strip() for ln in answer.strip().splitlines() if ln.strip()]
        if not lines:
            return None
        text = _LEAD.sub("", lines[0]).strip().strip(_EDGE).strip()
        if not text:
            return None
        if len(text.split()) == 1:
            return text
        numbers = _NUMBER.findall(text)
        return numbers[-1] if numbers else text


def math(source: Literal["generate", "hf"] = "generate") -> MathTask:
    return MathTask(
        name="math",
        labels=(),
        verbalizers={},
        protected_words=frozenset({"math"}),  # promptbench's LABEL_SET for math
        max_tokens=20,  # promptbench: 20 new tokens, EOS only (the last word is parsed)
        stop=(),
        supports_choices=False,
        description="DeepMind Mathematics, 20 question types x 8 (generated offline with a fixed seed)",
        sample_size=PER_MODULE * len(PAPER_MODULES),
        source=Source(
            hf_eval=tuple(HFSplit("deepmind/math_dataset", m, "test", tag=m) for m in PAPER_MODULES),
            hf_pool=tuple(HFSplit("deepmind/math_dataset", m, "train", take=50, tag=m) for m in PAPER_MODULES),
            local_eval=(LocalSplit(("test", "validation")),),
            local_pool=(LocalSplit(("train",)),),
        ),
        math_source=source,
    )
