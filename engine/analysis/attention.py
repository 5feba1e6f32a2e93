"""Which words of a prompt does the model rely on? (the paper's attention analysis)

For one sample and one prompt, two word-importance scores, one per word of
the prompt (words as cut by ``attacks.words.tokenize``):

* gradient: the L2 norm of the gradient of the loss with respect to each
  input embedding, summed over the tokens of the word;
* deletion: how much the loss grows when the word is removed from the prompt
  (negative when removing it helps).

The loss is the negative log-likelihood of the correct answer (the label's
verbaliser word) as the model's answer, built exactly as the engine builds
label scoring: after the chat template's assistant header for chat models,
or as " word" after the input for completion models. Works with any
transformers causal LM or encoder-decoder model object and its (fast)
tokenizer. Rendering (PNG, HTML) compares a clean and an adversarial prompt
on the same sample with one colour scale.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from promptrobust.attacks.words import tokenize
from promptrobust.engine import progress
from promptrobust.engine.errors import PromptRobustError
from promptrobust.engine.measuring.requests import answer_continuation

if TYPE_CHECKING:
    from promptrobust.engine.analysis.sources import SourceRecord
    from promptrobust.engine.measuring.records import AttackRecord
    from promptrobust.tasks.base import Sample, Task

METHODS = ("gradient", "deletion")


class AttentionError(PromptRobustError, ValueError):
    """Inputs the importance analysis cannot work with (message names the fix; ``setting``, when set,
    the argument to change)."""


@dataclass
class WordImportance:
    """Per-word importance of one prompt on one sample."""

    prompt: str
    words: list[str]
    spans: list[tuple[int, int]]  # character spans of the words in ``prompt``
    target: str
    loss: float  # NLL of the target answer with the full prompt
    gradient: list[float] | None = None
    deletion: list[float] | None = None
    deleted_losses: list[float] = field(default_factory=list)

    def scores(self, method: str) -> list[float]:
        values = getattr(self, method, None) if method in METHODS else None
        if values is None:
            raise AttentionError(f"importance method {method!r} was not computed; use one of {', '.join(METHODS)}")
        return values

    def to_dict(self) -> dict[str, object]:
        return {
            "prompt": self.prompt, "words": self.words, "spans": self.spans, "target": self.target,
            "loss": self.loss, "target_probability": math.exp(-self.loss), "gradient": self.gradient,
            "deletion": self.deletion, "deleted_losses": self.deleted_losses,
        }


# --------------------------------------------------------------------------- loading


def load_model(ref: str | Path, *, device: str = "cpu") -> tuple[Any, Any]:
    """A transformers model (causal or seq2seq, float32, eval mode) and its tokenizer."""
    import torch
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoModelForSeq2SeqLM,
        AutoTokenizer,
    )

    try:
        config = AutoConfig.from_pretrained(str(ref))
        tok = AutoTokenizer.from_pretrained(str(ref))
        cls = AutoModelForSeq2SeqLM if getattr(config, "is_encoder_decoder", False) else AutoModelForCausalLM
        model = cls.from_pretrained(str(ref), dtype=torch.float32)
    except (OSError, ValueError, KeyError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise AttentionError(f"cannot load model {str(ref)!r} with transformers: {first}") from None
    model.to(device)  # type: ignore[arg-type]  # transformers wraps .to in functools.wraps, whose typing drops the bound self
    model.eval()
    return model, tok


# --------------------------------------------------------------------------- words


def prompt_words(prompt: str) -> tuple[list[str], list[tuple[int, int]]]:
    """Words of the prompt and their character spans."""
    words: list[str] = []
    spans: list[tuple[int, int]] = []
    pos = 0
    for i, tok in enumerate(tokenize(prompt)):
        if i % 2 == 1:
            words.append(tok)
            spans.append((pos, pos + len(tok)))
        pos += len(tok)
    return words, spans


def delete_word(prompt: str, index: int) -> str:
    """The prompt without its ``index``-th word; one space kept where two would meet."""
    tokens = list(tokenize(prompt))
    k = 2 * index + 1
    if not 0 <= index or k >= len(tokens):
        raise IndexError(f"prompt has no word {index}")
    left, right = tokens[k - 1], tokens[k + 1]
    if left.endswith(" ") and right.startswith(" "):
        right = right[1:]
    elif k == 1 and not left:
        right = right.lstrip(" ")
    return "".join(tokens[: k - 1]) + left + right + "".join(tokens[k + 2 :])


# --------------------------------------------------------------------------- the model side


@dataclass
class _Encoded:
    input_ids: list[int]
    offsets: list[tuple[int, int]]
    prompt_start: int  # where the prompt starts in the text the offsets refer to


class _Scorer:
    """Builds inputs like the engine does and computes the answer's NLL."""

    def __init__(self, model: Any, tokenizer: Any, render: Callable[[str], str], target: str, chat: bool) -> None:
        self.model = model
        self.tok = tokenizer
        self.render = render
        self.chat = chat
        self.encdec = bool(getattr(model.config, "is_encoder_decoder", False))
        answer = answer_continuation(target, chat)  # the engine's label-scoring rule
        self.target_ids = list(tokenizer(answer, add_special_tokens=False)["input_ids"])
        if not self.target_ids:
            raise AttentionError(f"the answer {target!r} tokenizes to nothing; check the dataset's label words")
        if chat and not getattr(tokenizer, "chat_template", None):
            raise AttentionError("chat=True but the tokenizer has no chat template; pass chat=False")
        if not getattr(tokenizer, "is_fast", False):
            raise AttentionError("word importance needs a fast tokenizer (character offsets); install `tokenizers`")

    def encode(self, prompt: str) -> _Encoded:
        text = self.render(prompt)
        start = text.find(prompt)
        if start < 0:
            raise AttentionError("the rendered input does not contain the prompt verbatim; cannot map words to tokens")
        if self.chat:
            templated = self.tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False)
            shift = templated.find(text)
            if shift < 0:
                raise AttentionError("the chat template changed the input text; cannot map words to tokens")
            enc = self.tok(templated, add_special_tokens=False, return_offsets_mapping=True)
            start += shift
        else:
            enc = self.tok(text, add_special_tokens=True, return_offsets_mapping=True)
        ids = list(enc["input_ids"])
        if not ids:
            raise AttentionError("the input tokenizes to nothing")
        return _Encoded(ids, [tuple(o) for o in enc["offset_mapping"]], start)

    def _decoder_start(self) -> int:
        cfg = self.model.config
        start = getattr(getattr(self.model, "generation_config", None), "decoder_start_token_id", None)
        if start is None:
            start = getattr(cfg, "decoder_start_token_id", None)
        if start is None:
            start = self.tok.pad_token_id
        if start is None:
            raise AttentionError("encoder-decoder model has no decoder_start_token_id or pad token")
        return int(start)

    def loss_from_embeddings(self, embeds: Any) -> Any:
        """NLL (summed over the answer's tokens) given input embeddings (1, L, H)."""
        import torch

        device = embeds.device
        target = torch.tensor([self.target_ids], device=device)
        if self.encdec:
            dec = torch.tensor([[self._decoder_start(), *self.target_ids[:-1]]], device=device)
            mask = torch.ones(embeds.shape[:2], dtype=torch.long, device=device)
            logits = self.model(inputs_embeds=embeds, attention_mask=mask, decoder_input_ids=dec, use_cache=False).logits
            logp = torch.log_softmax(logits.float(), dim=-1)[0]
            return -logp.gather(-1, target[0].unsqueeze(-1)).sum()
        answer = self.model.get_input_embeddings()(target[:, :-1])
        full = torch.cat([embeds, answer], dim=1)
        mask = torch.ones(full.shape[:2], dtype=torch.long, device=device)
        logits = self.model(inputs_embeds=full, attention_mask=mask, use_cache=False).logits
        n = len(self.target_ids)
        logp = torch.log_softmax(logits[0, -n:].float(), dim=-1)
        return -logp.gather(-1, target[0].unsqueeze(-1)).sum()

    def embed(self, ids: list[int]) -> Any:
        import torch

        device = next(self.model.parameters()).device
        return self.model.get_input_embeddings()(torch.tensor([ids], device=device))

    def loss(self, prompt: str) -> float:
        import torch

        with torch.no_grad():
            return float(self.loss_from_embeddings(self.embed(self.encode(prompt).input_ids)))


def word_importance(
    model: Any,
    tokenizer: Any,
    prompt: str,
    *,
    render: Callable[[str], str],
    target: str,
    chat: bool = False,
    methods: Sequence[str] = METHODS,
) -> WordImportance:
    """Importance of every word of ``prompt`` for answering ``target``.

    ``render`` turns a prompt into the model input for the chosen sample (it
    must contain the prompt verbatim, e.g. ``lambda p: task.render(p, sample)``).
    """
    import torch

    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise AttentionError(f"unknown importance method {unknown[0]!r}; use {', '.join(METHODS)}")
    words, spans = prompt_words(prompt)
    if not words:
        raise AttentionError("the prompt has no words to score")
    scorer = _Scorer(model, tokenizer, render, target, chat)
    enc = scorer.encode(prompt)
    result = WordImportance(prompt=prompt, words=words, spans=spans, target=target, loss=0.0)
    deleting = "deletion" in methods and len(words) > 1
    passes = 1 + (len(words) if deleting else 0)  # progress: the full prompt's pass, then one per deleted word
    progress.work("passes over the model", 0, passes)

    with torch.enable_grad():
        embeds = scorer.embed(enc.input_ids).detach().requires_grad_(True)
        loss = scorer.loss_from_embeddings(embeds)
        if "gradient" in methods:
            (grad,) = torch.autograd.grad(loss, embeds)
            norms = grad[0].float().norm(dim=-1).tolist()
            result.gradient = _per_word(norms, enc, spans)
    result.loss = float(loss.detach())
    progress.work("passes over the model", 1, passes)

    if "deletion" in methods:
        if deleting:
            for i in range(len(words)):
                result.deleted_losses.append(scorer.loss(delete_word(prompt, i)))
                progress.work("passes over the model", 2 + i, passes)
        else:
            result.deleted_losses = [result.loss] * len(words)
        result.deletion = [d - result.loss for d in result.deleted_losses]
    for name in ("gradient", "deletion"):
        values = getattr(result, name)
        if values is not None and not all(math.isfinite(v) for v in values):
            raise AttentionError(f"{name} importance is not finite for this input (model produced NaN/inf)")
    return result


def _per_word(token_scores: Sequence[float], enc: _Encoded, spans: Sequence[tuple[int, int]]) -> list[float]:
    """Sum token scores over the tokens whose characters overlap each word."""
    out = [0.0] * len(spans)
    for score, (s, e) in zip(token_scores, enc.offsets):
        if e <= s:
            continue  # special tokens have empty offsets
        for w, (ws, we) in enumerate(spans):
            if s < enc.prompt_start + we and e > enc.prompt_start + ws:
                out[w] += float(score)
    return out


# --------------------------------------------------------------------------- rendering


def _scale(rows: Sequence[Sequence[float]], signed: bool) -> Callable[[float], float]:
    """Map scores to [0, 1] (or [-1, 1] when signed) with one scale for all rows."""
    peak = max((abs(v) for row in rows for v in row), default=0.0) or 1.0
    return (lambda v: v / peak) if signed else (lambda v: max(v, 0.0) / peak)


def _colour(x: float, signed: bool) -> tuple[float, float, float, float]:
    """Red for important (supports the answer), blue for negative deletion scores."""
    if signed and x < 0:
        return (0.2, 0.4, 1.0, min(1.0, -x) * 0.85)
    return (1.0, 0.25, 0.1, min(1.0, x) * 0.85)


def render_html(rows: Sequence[tuple[str, WordImportance]], method: str) -> str:
    """An HTML fragment: one line per (label, importance), words as spans whose
    background shows the importance (one scale for all lines)."""
    signed = method == "deletion"
    scale = _scale([r.scores(method) for _, r in rows], signed)
    parts = [f'<div class="pre-attention" data-method="{html.escape(method)}">']
    for label, imp in rows:
        pieces: list[str] = []
        pos = 0
        for word, (s, e), value in zip(imp.words, imp.spans, imp.scores(method)):
            pieces.append(html.escape(imp.prompt[pos:s]))
            r, g, b, a = _colour(scale(value), signed)
            pieces.append(
                f'<span style="background: rgba({int(r * 255)},{int(g * 255)},{int(b * 255)},{a:.2f})" '
                f'title="{value:.4g}">{html.escape(word)}</span>'
            )
            pos = e
        pieces.append(html.escape(imp.prompt[pos:]))
        parts.append(
            f'<p><b>{html.escape(label)}</b> <small>(p({html.escape(imp.target)}) = {math.exp(-imp.loss):.3f})</small><br>'
            + "".join(pieces) + "</p>"
        )
    parts.append("</div>")
    return "\n".join(parts) + "\n"


def render_png(rows: Sequence[tuple[str, WordImportance]], method: str, path: str | Path, *, title: str = "") -> Path:
    """A PNG with one block of words per (label, importance), coloured by
    importance on one shared scale; returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from promptrobust.engine.safe_io.output_safety import PLOT_RC

    matplotlib.rcParams.update(PLOT_RC)  # tokens are data: never TeX or mathtext

    signed = method == "deletion"
    scale = _scale([r.scores(method) for _, r in rows], signed)
    width_chars = 100
    laid: list[tuple[str, list[list[tuple[str, float]]]]] = []
    for label, imp in rows:
        lines: list[list[tuple[str, float]]] = [[]]
        used = 0
        for word, value in zip(imp.words, imp.scores(method)):
            if used and used + len(word) + 1 > width_chars:
                lines.append([])
                used = 0
            lines[-1].append((word, value))
            used += len(word) + 1
        heading = f"{label}  (p({imp.target}) = {math.exp(-imp.loss):.3f})"
        laid.append((heading, lines))
    n_lines = sum(len(lines) + 1.6 for _, lines in laid) + (1.5 if title else 0.5)
    fontsize = 11
    char_w = fontsize * 0.6 / 72  # monospace advance, inches
    line_h = fontsize * 2.0 / 72
    fig_w = width_chars * char_w + 0.6
    fig_h = n_lines * line_h + 0.3
    fig = plt.figure(figsize=(fig_w, fig_h), dpi=110)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, fig_w)
    ax.set_ylim(fig_h, 0)
    ax.axis("off")
    y = 0.3
    if title:
        ax.text(0.3, y, title, fontsize=fontsize + 1, weight="bold", va="center", family="DejaVu Sans")
        y += line_h * 1.2
    for heading, lines in laid:
        ax.text(0.3, y, heading, fontsize=fontsize, weight="bold", va="center", family="DejaVu Sans")
        y += line_h * 1.1
        for line in lines:
            x = 0.3
            for word, value in line:
                ax.text(
                    x, y, word, fontsize=fontsize, family="DejaVu Sans Mono", va="center",
                    bbox={"boxstyle": "square,pad=0.15", "facecolor": _colour(scale(value), signed), "edgecolor": "none"},
                )
                x += (len(word) + 1) * char_w
            y += line_h
        y += line_h * 0.5
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------- the analysis, end to end


@dataclass
class AttentionComparison:
    """Word importance of a clean and an adversarial prompt on one sample."""

    model: str
    dataset: str
    sample_id: str
    sample_index: int
    seed: int
    shots: int
    chat: bool
    target: str
    methods: tuple[str, ...]
    rows: list[tuple[str, WordImportance]]
    """("clean", importance), ("adversarial", importance)."""

    def to_dict(self) -> dict[str, object]:
        return {
            "model": self.model, "dataset": self.dataset, "sample_id": self.sample_id,
            "sample_index": self.sample_index, "seed": self.seed, "shots": self.shots, "chat": self.chat,
            "target": self.target, "methods": list(self.methods),
            "rows": {label: imp.to_dict() for label, imp in self.rows},
        }

    def write(self, folder: str | Path) -> list[Path]:
        """<method>.png per method, attention.html (a fragment for reports) and attention.json."""
        import orjson

        out = Path(folder)
        title = f"{self.model} / {self.dataset} sample {self.sample_id}"
        written = []
        fragments = []
        for method in self.methods:
            written.append(render_png(self.rows, method, out / f"{method}.png", title=f"{title}: {method} importance"))
            fragments.append(f"<h4>{method} importance</h4>\n" + render_html(self.rows, method))
        (out / "attention.html").write_text("\n".join(fragments), encoding="utf-8")
        (out / "attention.json").write_bytes(orjson.dumps(self.to_dict(), option=orjson.OPT_INDENT_2))
        return written + [out / "attention.html", out / "attention.json"]

    def table(self) -> str:
        """Plain text: the answer's probability and every word's scores, per prompt."""
        lines = []
        for label, imp in self.rows:
            lines.append(f"{label}: p({imp.target}) = {math.exp(-imp.loss):.4f}")
            lines.append(f"  {'word':<20} " + "  ".join(f"{m:>10}" for m in self.methods))
            for i, word in enumerate(imp.words):
                lines.append(f"  {word:<20} " + "  ".join(f"{imp.scores(m)[i]:>10.4f}" for m in self.methods))
        return "\n".join(lines)


def worst_record(run_dir: str | Path, *, prompt_type: str = "all") -> AttackRecord:
    """The attacked record of a run folder with the largest PDR whose prompt changed."""
    return worst_source(run_dir, prompt_type=prompt_type).record


def worst_source(run_dir: str | Path, *, prompt_type: str = "all") -> SourceRecord:
    """``worst_record`` with what its run folder says of it (``SourceRecord``: a user's own task included)."""
    from promptrobust.engine.analysis.sources import load_source_records, select_sources

    sources, _ = select_sources(load_source_records([run_dir]), prompt_type=prompt_type)
    changed = [s for s in sources if s.record.adversarial_prompt != s.record.clean_prompt and s.record.pdr is not None]
    if not changed:
        raise AttentionError(f"no record in {run_dir} changed its prompt; give the clean and the adversarial prompt yourself instead",
                             setting="clean")
    return max(changed, key=lambda s: float(s.record.pdr or 0.0))  # every one has a PDR (filtered above)


def answer_word(task: Task, sample: Sample) -> str:
    """The word whose likelihood is scored: the gold label's verbaliser."""
    target = sample.target
    if isinstance(target, (list, tuple)):
        target = target[0] if target else ""
    word = task.verbalizers.get(target, target) if task.verbalizers else target
    if not str(word).strip():
        raise AttentionError(f"sample {sample.id} has no answer to score; pick another sample index", setting="sample_index")
    return str(word)


def load_for_attention(model: str, model_args: Mapping[str, object] | None = None, *, device: str = "cpu") -> tuple[Any, Any, bool, Any]:
    """(model, tokenizer, chat, spec) of an hf model (gradients need the weights in-process)."""
    from promptrobust.engine.serving.registry import registration_of, resolve_model

    spec = resolve_model(model, model_args)
    backend = registration_of(spec)
    if not backend.gradients:
        raise AttentionError(f"word importance needs gradients, so an hf model (transformers); {model} uses the {backend.name} backend")
    from promptrobust.extras import MissingExtraError, require_extra

    try:
        require_extra("local", "word importance (pre attention)")
    except MissingExtraError as exc:
        raise AttentionError(str(exc)) from None
    progress.phase(f"loading {spec.name} for word importance")  # after the checks: bad input stays one line
    chat = spec.args.get("chat")
    ref: str | Path = spec.model
    if spec.embedded:
        from promptrobust.engine.serving.model_store import ensure_embedded

        emb = ensure_embedded(spec.model)
        ref = emb.path
        chat = emb.is_chat if chat is None else chat
    loaded, tok = load_model(ref, device=device)
    if chat is None:
        chat = bool(getattr(tok, "chat_template", None))
    elif isinstance(chat, str):
        chat = chat.strip().lower() in ("1", "true", "yes")
    return loaded, tok, bool(chat), spec


def compare_prompts(
    clean: str,
    adversarial: str,
    *,
    model: str = "gemma3-270m",  # engine.serving.registry.DEFAULT_MODEL (the model `pip install` brings)
    model_args: Mapping[str, object] | None = None,
    settings: Any = None,
    sample_index: int = 0,
    methods: Sequence[str] = METHODS,
    device: str = "cpu",
) -> AttentionComparison:
    """Word importance of ``clean`` and ``adversarial`` on sample ``sample_index``
    of ``settings`` (an ``EvaluationSettings``; a base model without explicit
    shots gets the paper's 3)."""
    from promptrobust.engine.measuring.settings import EvaluationSettings
    from promptrobust.engine.measuring.target import decide_target
    from promptrobust.engine.measuring.workbench import few_shot, load_samples
    from promptrobust.engine.serving.registry import resolve_model

    settings = settings or EvaluationSettings()
    if sample_index < 0:
        raise AttentionError(f"sample index must be 0 or more (got {sample_index})", setting="sample_index")
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise AttentionError(f"unknown importance method {unknown[0]!r}; use {', '.join(METHODS)}")
    spec = resolve_model(model, dict(model_args or {}))
    decided = decide_target(settings, base_model=spec.base_model)  # a built-in dataset, or a user's own task
    task, settings = decided.task, decided.evaluation
    samples = load_samples(task, settings)  # a fraction of the dataset too
    if sample_index >= len(samples):
        raise AttentionError(f"sample index {sample_index} is out of range: {task.name} has {len(samples)} samples",
                             setting="sample_index")
    sample = samples[sample_index]
    target = answer_word(task, sample)
    loaded, tok, chat, spec = load_for_attention(model, model_args, device=device)
    shots = decided.shots
    examples = few_shot(task, shots, seed=settings.seed, data_dir=settings.data_dir)
    rows = []
    for label, prompt in (("clean", clean), ("adversarial", adversarial)):
        progress.phase(f"{' and '.join(methods)} importance of the {label} prompt's words")
        rows.append((label, word_importance(loaded, tok, prompt, render=lambda p: task.render(p, sample, examples),
                                            target=target, chat=chat, methods=methods)))
    return AttentionComparison(
        model=spec.name, dataset=task.name, sample_id=str(sample.id), sample_index=sample_index, seed=settings.seed,
        shots=shots, chat=chat, target=target, methods=tuple(methods), rows=rows,
    )
