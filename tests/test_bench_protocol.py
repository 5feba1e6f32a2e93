"""Pieces of the protocol bench: the promptbench baseline's per-call behaviour, the request recorder,
the positions lower bound and summary.json."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson

from bench.reference import PromptbenchScorer, promptbench_last_word
from promptrobust.engine.serving.types import ChatMessage, Completion, Decoding, Request
from promptrobust.testing.backends import TableTask

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.levers import Recorder, lower_bound_positions  # noqa: E402
from bench.summary import update_summary  # noqa: E402


def test_promptbench_parse_is_the_last_word_after_its_cleanup() -> None:
    assert promptbench_last_word("Review: fine.\nAnswer: Positive.</s>") == "positive"
    assert promptbench_last_word("<pad> the answer is NEGATIVE!") == "negative"
    # the model's own end token is dropped only when asked (stock promptbench knows </s> and <pad>)
    assert promptbench_last_word("answer: positive<|im_end|>", ("<|im_end|>",)) == "positive"
    assert promptbench_last_word("answer: positive<|im_end|>") == "positive<|im_end"
    assert promptbench_last_word("") == ""


class _Ids:
    def __init__(self, ids: list[int]) -> None:
        self.ids = ids

    def to(self, _device: object) -> "_Ids":
        return self


class _Tokenizer:
    """Characters as token ids; records what it was asked to encode."""

    eos_token = "<|im_end|>"
    pad_token = "<|im_end|>"
    pad_token_id = 0

    def __init__(self) -> None:
        self.encoded: list[str] = []

    def __call__(self, text: str, return_tensors: str) -> object:
        self.encoded.append(text)
        return type("Enc", (), {"input_ids": _Ids([ord(c) for c in text])})()

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i) for i in ids)


class _Model:
    """Answers the table's score for the rendered input, then the end token; records generate's arguments."""

    device = "cpu"

    def __init__(self, table: dict) -> None:
        self.table = table
        self.calls: list[dict] = []

    def generate(self, ids: _Ids, **kwargs: object) -> list[list[int]]:
        self.calls.append(kwargs)
        prompt, _, sample_id = "".join(chr(i) for i in ids.ids).rpartition("\u241e")
        answer = f" {self.table[(prompt, sample_id)]!r}<|im_end|>"
        return [ids.ids + [ord(c) for c in answer]]


async def test_promptbench_scorer_calls_generate_once_per_sample_on_raw_text() -> None:
    n = 4
    table = {("p0", str(j)): float(j % 2) for j in range(n)}
    task = TableTask(n=n, table=table)
    tok, model = _Tokenizer(), _Model(table)
    scorer = PromptbenchScorer(model, tok, task, task.load())
    out = await scorer(["p0"])
    assert scorer.cost.model_calls == n and len(model.calls) == n
    assert all(c["max_new_tokens"] == 20 and c["do_sample"] is False for c in model.calls)
    assert tok.encoded == [f"p0\u241e{j}" for j in range(n)]  # raw text, no chat template
    # the whole output is decoded (input included) and its last word parsed, the end token dropped
    assert out[0].score == 0.5 and out[0].complete


class _Encoder:
    """A backend stand-in for the lower bound: characters as tokens."""

    positions = 0

    def encode_input(self, r: Request) -> list[int]:
        return [ord(c) for c in r.input_text()]

    async def complete_batch(self, requests: list[Request]) -> list[Completion]:
        return [Completion(text="ab", completion_tokens=3) for _ in requests]

    def arrange_batches(self, requests: list[Request], batch_size: int) -> list[list[int]]:
        return [list(range(len(requests)))]


async def test_recorder_keeps_distinct_requests_and_the_lower_bound_counts_a_prefix_once() -> None:
    inner = _Encoder()
    rec = Recorder(inner)
    prefix = "INSTRUCTION-ONE "
    reqs = [Request("generate", messages=(ChatMessage("user", prefix + s),)) for s in ("aa", "bbb", "cccc")]
    await rec.complete_batch(reqs)
    await rec.complete_batch(reqs[:1])  # a repeat is not a new request
    assert list(rec.sent) == reqs
    assert rec.positions == 0  # everything else reaches the backend
    own = sum(len(prefix + s) - len(prefix) for s in ("aa", "bbb", "cccc"))
    # 3 tokens ended by EOS: 3 decode steps each (the step that predicts EOS runs too)
    assert lower_bound_positions(inner, rec) == len(prefix) + own + 3 * 3
    # 3 tokens ended by the token limit: no step after the last one
    capped = Recorder(inner)
    await capped.complete_batch([Request("generate", messages=r.messages, decoding=Decoding(max_tokens=3)) for r in reqs])
    assert lower_bound_positions(inner, capped) == len(prefix) + own + 3 * 2


def test_summary_keeps_other_keys_and_records_the_run(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    path.write_bytes(orjson.dumps({"other_bench_figure": 1.5}))
    data = update_summary(path, "python bench/protocol.py --limit 2", {"speedup_vs_reference_choices": 6.1})
    again = orjson.loads(path.read_bytes())
    assert again == data
    assert again["other_bench_figure"] == 1.5 and again["speedup_vs_reference_choices"] == 6.1
    assert again["figures_by_command"] == {"python bench/protocol.py --limit 2": ["speedup_vs_reference_choices"]}
    assert again["command"] == "python bench/protocol.py --limit 2"
    assert {"machine", "versions", "commit"} <= set(again) and again["versions"]


async def test_the_bench_applies_pre_runs_shots_rule(tmp_path: Path) -> None:
    """The protocol bench runs what users run: gemma3-270m (a base model) gets `pre run`'s few-shot examples."""
    from bench.protocol import shots_and_examples
    from promptrobust.engine.runs.session import Session
    from promptrobust.engine.measuring.settings import EvaluationSettings
    from promptrobust.tasks import get_task
    from promptrobust.testing.backends import CountingBackend

    task = get_task("rotten_tomatoes")
    # `pre run --model gemma3-270m` builds its workbench this way (cli/run.py); only the model is a stand-in
    async with Session(use_cache=False, backend_factory=lambda spec: CountingBackend()) as session:
        bench = await session.workbench("gemma3-270m", EvaluationSettings(limit=2))
        chat = await session.workbench("smollm2-135m-instruct", EvaluationSettings(limit=2))
    shots, examples = shots_and_examples(task, "gemma3-270m", None, 0)
    assert bench.shots == shots == 3
    assert examples == list(bench.examples) and len(examples) == 3
    assert shots_and_examples(task, "smollm2-135m-instruct", None, 0)[0] == chat.shots == 0
    assert shots_and_examples(task, "gemma3-270m", 0, 0) == (0, [])  # --shots 0 forces 0-shot


def test_a_named_section_keeps_the_top_level_figures_and_their_provenance(tmp_path: Path) -> None:
    from bench.summary import update_section

    path = tmp_path / "summary.json"
    update_summary(path, "python bench/protocol.py --limit 2", {"speedup_vs_reference_choices": 5.0})
    before = orjson.loads(path.read_bytes())
    update_section(path, "default_model_100", "python bench/protocol.py --limit 100", {"samples": 100, "shots": 3})
    after = orjson.loads(path.read_bytes())
    assert {k: v for k, v in after.items() if k != "default_model_100"} == before
    section = after["default_model_100"]
    assert section["samples"] == 100 and section["command"] == "python bench/protocol.py --limit 100"
    assert {"machine", "versions", "commit"} <= set(section)


def test_a_sequential_loop_pays_every_candidate_repeats_included_on_every_sample() -> None:
    from types import SimpleNamespace

    from bench.extrapolate import CallTimes, baseline_calls

    evaluators = [SimpleNamespace(cost=SimpleNamespace(candidate_evaluations=10, duplicate_candidates=0)),  # ranking
                  SimpleNamespace(cost=SimpleNamespace(candidate_evaluations=7, duplicate_candidates=2))]  # an attack
    assert baseline_calls(evaluators, 100) == (10 + 7 + 2) * 100
    t = CallTimes("reference", seconds=[1.0, 2.0, 3.0], agree=3)
    s = t.summary()
    assert (s["calls_measured"], s["mean_s"], s["median_s"], s["min_s"], s["max_s"]) == (3, 2.0, 2.0, 1.0, 3.0)
    assert CallTimes("reference").summary() == {"calls_measured": 0}
