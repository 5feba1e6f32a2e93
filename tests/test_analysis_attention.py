"""Word importance on tiny randomly initialised models (decoder-only Llama and
encoder-decoder T5) with a word-level tokenizer built here."""

from __future__ import annotations

import argparse
import math

import orjson
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from promptrobust.engine.analysis.attention import (
    AttentionError,
    delete_word,
    prompt_words,
    render_html,
    render_png,
    word_importance,
)

VOCAB = ["[PAD]", "[UNK]", "</s>", "<user>", "<bot>", "determine", "the", "sentiment", "of", "this", "review", ":", "positive", "or", "negative", "sentence", "answer", "a", "good", "film", ".", "sentimnet", "reveiw", ",", "witty", "and", "moving"]
CLEAN = "Determine the sentiment of this review: positive or negative."
ADV = "Determine the sentimnet of this reveiw: positive or negative."
CHAT_TEMPLATE = (
    "{% for m in messages %}<user> {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}<bot> {% endif %}"
)


def render(prompt: str) -> str:
    return prompt + "\n\nSentence: a good film .\nAnswer:"


@pytest.fixture(scope="module")
def tok():
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(VOCAB)}, unk_token="[UNK]"))
    tk.normalizer = normalizers.Lowercase()
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    t = PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="[PAD]", unk_token="[UNK]", eos_token="</s>")
    t.chat_template = CHAT_TEMPLATE
    return t


@pytest.fixture(scope="module")
def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(VOCAB), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128)
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def t5():
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    cfg = T5Config(vocab_size=len(VOCAB), d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
                   num_heads=4, decoder_start_token_id=0, pad_token_id=0, eos_token_id=2)
    return T5ForConditionalGeneration(cfg).eval()


def reference_nll(model, tok, prompt: str, chat: bool) -> float:
    """-log p(answer) through the models' ordinary input_ids path (independent of the module)."""
    text = render(prompt)
    if chat:
        text = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        answer = tok("positive", add_special_tokens=False)["input_ids"]
    else:
        ids = tok(text)["input_ids"]
        answer = tok(" positive", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        if model.config.is_encoder_decoder:
            out = model(input_ids=torch.tensor([ids]), labels=torch.tensor([answer]))
            return float(out.loss) * len(answer)  # mean over answer tokens -> sum
        full = torch.tensor([ids + answer])
        logp = torch.log_softmax(model(input_ids=full).logits[0], -1)
        return -sum(float(logp[len(ids) - 1 + k, t]) for k, t in enumerate(answer))


@pytest.mark.parametrize(("which", "chat"), [("llama", False), ("llama", True), ("t5", False)])
def test_one_finite_score_per_word_and_losses_match_reference(request, tok, which, chat):
    model = request.getfixturevalue(which)
    imp = word_importance(model, tok, ADV, render=render, target="positive", chat=chat)
    words, _ = prompt_words(ADV)
    assert imp.words == words == ["Determine", "the", "sentimnet", "of", "this", "reveiw", "positive", "or", "negative"]
    for scores in (imp.gradient, imp.deletion):
        assert scores is not None and len(scores) == len(words)
        assert all(math.isfinite(v) for v in scores)
    assert all(v > 0 for v in imp.gradient)  # every word has a token whose embedding matters
    assert imp.loss == pytest.approx(reference_nll(model, tok, ADV, chat), rel=1e-4, abs=1e-5)
    # deletion importance = NLL without the word - NLL with it, checked independently
    for i in (0, 2, len(words) - 1):
        expected = reference_nll(model, tok, delete_word(ADV, i), chat) - imp.loss
        assert imp.deletion[i] == pytest.approx(expected, rel=1e-4, abs=1e-5)


def test_gradient_counts_only_the_words_own_tokens(tok, llama):
    # "sentiment" vs "sentimnet" (unknown -> [UNK]): words elsewhere keep their
    # per-word sums finite and the word count stays the prompt's, not the input's.
    imp = word_importance(llama, tok, CLEAN, render=render, target="positive", methods=("gradient",))
    assert imp.deletion is None and len(imp.gradient) == 9
    sent_only = word_importance(llama, tok, "review", render=render, target="positive", methods=("gradient",))
    assert len(sent_only.gradient) == 1 and sent_only.gradient[0] > 0


def test_delete_word_keeps_spacing():
    assert delete_word("Determine the sentiment.", 0) == "the sentiment."
    assert delete_word("Determine the sentiment.", 1) == "Determine sentiment."
    assert delete_word("Determine the sentiment.", 2) == "Determine the ."
    with pytest.raises(IndexError):
        delete_word("one two", 5)


def test_bad_inputs_raise(tok, llama):
    with pytest.raises(AttentionError, match="verbatim"):
        word_importance(llama, tok, CLEAN, render=lambda p: "something else", target="positive")
    with pytest.raises(AttentionError, match="no words"):
        word_importance(llama, tok, "...", render=render, target="positive")
    with pytest.raises(AttentionError, match="unknown importance method"):
        word_importance(llama, tok, CLEAN, render=render, target="positive", methods=("saliency",))


def test_png_and_html_rendering(tmp_path, tok, llama):
    rows = [(label, word_importance(llama, tok, p, render=render, target="positive")) for label, p in (("clean", CLEAN), ("adversarial", ADV))]
    for method in ("gradient", "deletion"):
        path = render_png(rows, method, tmp_path / f"{method}.png", title="t")
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000
        frag = render_html(rows, method)
        assert frag.count("<span ") == 18  # 9 words in each of the two prompts
        assert "sentimnet</span>" in frag and "<b>adversarial</b>" in frag


def attention_parser() -> argparse.ArgumentParser:
    """`pre attention`'s parser alone, as the CLI builds it."""
    from promptrobust.cli import attention_cmd

    parser = argparse.ArgumentParser(prog="pre")
    attention_cmd.add_parser(parser.add_subparsers(dest="command"), argparse.HelpFormatter)
    return parser


def attention_on_tiny_model(tmp_path, tok, llama, *flags: str) -> argparse.Namespace:
    """`pre attention` on the tiny model saved under tmp_path, with CLEAN/ADV and `flags`, parsed."""
    model_dir = tmp_path / "tiny"
    llama.save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    return attention_parser().parse_args([
        "attention", "--model", f"hf:{model_dir}", "--model-args", "chat=false", *flags,
        "--clean", CLEAN, "--adversarial", ADV, "--output-dir", str(tmp_path / "out"),
    ])


def test_attention_cli_on_a_saved_tiny_model(tmp_path, tok, llama):
    from tests.fixtures.analysis.fake_model import REVIEWS

    args = attention_on_tiny_model(tmp_path, tok, llama, "--data-file", str(REVIEWS), "--sample-index", "1")
    parser = attention_parser()
    assert args.handler(args) == 0
    (out,) = [p for p in (tmp_path / "out").iterdir() if not p.name.startswith(".")]
    assert {p.name for p in out.iterdir()} == {"gradient.png", "deletion.png", "attention.html", "attention.json", "config.json"}
    data = orjson.loads((out / "attention.json").read_bytes())
    assert data["target"] == "negative"  # sample 1 of reviews.tsv is negative
    assert data["shots"] == 0 and data["dataset"] == "rotten_tomatoes"
    assert len(data["rows"]["adversarial"]["gradient"]) == 9
    from promptrobust.engine.errors import PromptRobustError

    # --output is the old name of --output-dir, still accepted
    old = parser.parse_args(["attention", "--clean", "a", "--adversarial", "b", "--output", str(tmp_path / "x")])
    assert old.output_dir == str(tmp_path / "x")
    bad = parser.parse_args(["attention", "--model", "openai:gpt-4", "--clean", "a", "--adversarial", "b", "--output-dir", str(tmp_path)])
    with pytest.raises(PromptRobustError, match="hf model"):
        bad.handler(bad)
    with pytest.raises(PromptRobustError, match="from a record or give clean and adversarial prompts, not both"):
        bad.handler(parser.parse_args(["attention", "--clean", "a", "--adversarial", "b", "--record", str(tmp_path)]))
    # no run folder is left behind by a failed analysis
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_worst_record_picks_the_largest_pdr_whose_prompt_changed():
    from promptrobust.engine.analysis.attention import worst_record
    from tests.fixtures.analysis.fake_model import SOURCE_RUN

    r = worst_record(SOURCE_RUN)
    assert r.pdr == 0.5 and r.adversarial_prompt != r.clean_prompt
    with pytest.raises(Exception, match="prompt type 'role'"):
        worst_record(SOURCE_RUN, prompt_type="role")


def test_each_phase_says_how_many_passes_over_the_model_are_done(tok, llama):
    """`pre attention` used to sit at 'starting' for minutes per phase: now every pass is counted."""
    from promptrobust.engine import progress
    from promptrobust.engine.progress import ProgressState, format_status

    state = ProgressState()
    seen: list[progress.Work] = []

    class Listen:
        def emit(self, event: progress.Event) -> None:
            state.apply(event)
            if isinstance(event, progress.Work):
                seen.append(event)
                if event.done == 4:
                    lines.append(format_status(state.status()))

    lines: list[str] = []
    with progress.use(Listen()):
        progress.phase("gradient and deletion importance of the adversarial prompt's words")
        word_importance(llama, tok, ADV, render=render, target="positive")
    words = len(prompt_words(ADV)[0])
    assert [w.done for w in seen] == list(range(words + 2))  # the full prompt's pass, then one per deleted word
    assert {w.total for w in seen} == {words + 1} and {w.label for w in seen} == {"passes over the model"}
    assert lines and lines[0].startswith(f"passes over the model 4/{words + 1}, ETA ")  # numbers first
    seen.clear()
    with progress.use(Listen()):
        word_importance(llama, tok, ADV, render=render, target="positive", methods=("gradient",))
    assert [(w.done, w.total) for w in seen] == [(0, 1), (1, 1)]  # gradients only: one pass
