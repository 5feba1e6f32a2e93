"""BertAttack's candidates: what a masked language model predicts for a word's
own position in the UNMASKED text (BERT-Attack, Li et al. 2020, as
TextAttack's ``WordSwapMaskedLM(method="bert-attack")``).

``MaskedLM`` loads any Hugging Face masked LM by hub id or local directory
(default ``bert-base-uncased``) with ``AutoTokenizer`` and
``AutoModelForMaskedLM``, lazily, once per (model, device) per process. With
no hub access, point it at a local copy (``mlm=/path/to/model``).

The current prompt is run through the model once, as it is (no mask); the
word's sub-word positions are found by masking it in a copy and locating the
mask. A one-piece word gets the top-k predictions at its position (whole
words only, no "##" continuations); a word of several pieces gets every
combination of the top-k predictions at each of its positions, ranked by
perplexity under the same predictions, best k kept (TextAttack forgets to
sort, so it keeps the first k combinations in product order; we sort, as the
paper describes).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from promptrobust.attacks.base import WordSite
from promptrobust.attacks.embeddings import is_antonym
from promptrobust.attacks.errors import AttackResourceError
from promptrobust.attacks.words import has_letter, match_case, tokenize

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

#: One import of torch/transformers at a time (a sweep loads masked LMs from worker threads).
_IMPORT_LOCK = threading.Lock()


class MaskedLM:
    """A masked LM and its tokenizer; ``top_tokens`` fills masks in batches."""

    def __init__(
        self,
        model: str = "bert-base-uncased",
        *,
        device: str = "cpu",
        max_length: int = 512,
    ) -> None:
        self.model_id = model
        self.device = device
        self.max_length = max_length
        self._tok: PreTrainedTokenizerBase | None = None
        self._model: PreTrainedModel | None = None
        self._last: tuple[str, torch.Tensor] | None = None

    def ensure_loaded(self) -> None:
        """Load now (not at the first replacement), so a missing model fails
        before any budget is spent, never silently after it."""
        self._load()

    def _loaded(self) -> tuple[PreTrainedTokenizerBase, PreTrainedModel]:
        """The tokenizer and model, loaded on first use."""
        self._load()
        assert self._tok is not None and self._model is not None  # _load set both or raised
        return self._tok, self._model

    def _load(self) -> None:
        if self._model is not None:
            return
        import importlib.util

        missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
        if missing:
            raise AttackResourceError(
                f"BertAttack needs {' and '.join(missing)} (the [local] extra): pip install 'promptrobust[local]'"
            )
        try:
            with _IMPORT_LOCK:  # concurrent sweep jobs importing transformers at once can see a half-made module
                importlib.import_module("torch")  # before transformers, under the same lock
                from transformers import AutoModelForMaskedLM, AutoTokenizer
        except ImportError as exc:  # installed, but importing failed: say the real cause
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise AttackResourceError(f"BertAttack could not import transformers' masked LM classes ({first})") from exc
        try:
            try:  # a local directory or the local HF cache first: no network
                tok = AutoTokenizer.from_pretrained(
                    self.model_id, local_files_only=True
                )
                model = AutoModelForMaskedLM.from_pretrained(
                    self.model_id, local_files_only=True
                )
            except (OSError, ValueError):
                # the hub (retries for about a minute when offline; HF_HUB_OFFLINE=1 fails at once)
                tok = AutoTokenizer.from_pretrained(self.model_id)
                model = AutoModelForMaskedLM.from_pretrained(self.model_id)
        except (OSError, ValueError) as exc:
            first = (
                str(exc).strip().splitlines()[0]
                if str(exc).strip()
                else type(exc).__name__
            )
            raise AttackResourceError(
                f"cannot load masked LM {self.model_id!r} ({first}); "
                "pass a local model directory with the attack option mlm=PATH (`pre list attacks` says how to get one)",
                setting="attack_options",
            ) from exc
        if tok.mask_token is None:
            raise AttackResourceError(
                f"{self.model_id!r} has no mask token; use a masked LM such as bert-base-uncased"
            )
        model.eval()
        model.to(self.device)
        self._tok, self._model = tok, model

    def as_word(self, token: str) -> str | None:
        """The word a vocabulary token stands for, or None for word pieces
        that continue a word (WordPiece "##ing") and special tokens."""
        tok, _ = self._loaded()
        if token.startswith("##") or token in tok.all_special_tokens:
            return None
        text = tok.convert_tokens_to_string([token]).strip()
        return text if text.isalpha() else None

    def piece_count(self, word: str) -> int:
        """How many tokens the word becomes on its own."""
        tok, _ = self._loaded()
        return len(tok.encode(word, add_special_tokens=False))

    def is_special(self, token: str) -> bool:
        tok, _ = self._loaded()
        return token in tok.all_special_tokens

    def join_pieces(self, tokens: Sequence[str]) -> str:
        """The text a run of vocabulary tokens spells ("play", "##ing" -> "playing")."""
        tok, _ = self._loaded()
        text = tok.convert_tokens_to_string(list(tokens))
        return text.replace("##", "").replace(" ", "").strip()

    def mask_position(self, masked_text: str) -> int | None:
        """Token index of the (first) mask token in ``masked_text``; None when
        truncation cut it off."""
        tok, _ = self._loaded()
        ids = tok(masked_text, truncation=True, max_length=self.max_length)["input_ids"]
        try:
            return ids.index(tok.mask_token_id)
        except ValueError:
            return None

    def position_log_probs(self, text: str) -> torch.Tensor:
        """Log-probabilities over the vocabulary at every token position of
        ``text`` (unmasked), as a [positions, vocab] tensor. The last text's
        result is kept: the greedy search asks for every word of one prompt."""
        tok, model = self._loaded()
        if self._last is not None and self._last[0] == text:
            return self._last[1]
        import torch

        encoded = tok(text, return_tensors="pt", truncation=True, max_length=self.max_length)
        batch = {name: t.to(self.device) for name, t in encoded.items()}
        with torch.inference_mode():
            logits = model(**batch).logits[0]
        out = torch.log_softmax(logits.float(), dim=-1).cpu()
        self._last = (text, out)
        return out

    def token(self, token_id: int) -> str:
        tok, _ = self._loaded()
        return tok.convert_ids_to_tokens([int(token_id)])[0]

    @property
    def mask_token(self) -> str:
        tok, _ = self._loaded()
        return tok.mask_token

    def top_tokens(self, masked_texts: Sequence[str], k: int) -> list[list[str]]:
        """For each text (with exactly one mask token), the ``k`` most likely
        tokens at the mask, best first, as vocabulary strings."""
        tok, model = self._loaded()
        import torch

        encoded = tok(
            list(masked_texts),
            return_tensors="pt",
            padding=True,
            truncation=True,
            max_length=self.max_length,
        )
        batch = {name: t.to(self.device) for name, t in encoded.items()}
        with torch.inference_mode():
            logits = model(**batch).logits
        out: list[list[str]] = []
        ids = batch["input_ids"]
        for row in range(ids.shape[0]):
            where = (ids[row] == tok.mask_token_id).nonzero(as_tuple=True)[0]
            if len(where) == 0:  # the mask fell beyond max_length
                out.append([])
                continue
            top = torch.topk(
                logits[row, where[0]], min(k, logits.shape[-1])
            ).indices.tolist()
            out.append(list(tok.convert_ids_to_tokens(top)))
        return out


@functools.cache
def load_masked_lm(model: str = "bert-base-uncased", device: str = "cpu") -> MaskedLM:
    return MaskedLM(model, device=device)


def _best_combinations(rows, k: int, beam: int) -> list[tuple[tuple[int, ...], float]]:
    """The ``beam`` best combinations of one choice per row, by summed score.

    ``rows`` holds, per position, (token id, log-prob) pairs. Merging one row
    at a time and keeping the best ``beam`` prefixes is exact for the best
    ``beam`` full combinations (every prefix of a top combination is itself a
    top prefix), without building all k**n of them."""
    combos: list[tuple[tuple[int, ...], float]] = [((), 0.0)]
    for row in rows:
        merged = [(ids + (tid,), total + lp) for ids, total in combos for tid, lp in row]
        merged.sort(key=lambda c: -c[1])
        combos = merged[:beam]
    return combos


class MaskedLMSwap:
    """Replacement words for one word, BERT-Attack style (top 48 per word)."""

    def __init__(
        self,
        mlm: MaskedLM,
        *,
        k: int = 48,
        filter_antonyms: bool = False,
        keep_case: bool = False,
        name: str = "masked_lm",
    ) -> None:
        if k <= 0:
            raise ValueError(
                f"number of masked-LM candidates must be positive, got {k}"
            )
        self.mlm = mlm
        self.k = k
        self.filter_antonyms = filter_antonyms
        self.keep_case = keep_case
        self.name = name

    def _is_one_word(self, text: str) -> bool:
        tokens = tokenize(text)
        return len(tokens) == 3 and tokens[0] == "" and tokens[2] == "" and has_letter(text)

    def proposals(self, site: WordSite) -> list[str]:
        """The model's words for the site, best first, before any filtering
        against the original word."""
        import torch

        text = "".join(site.tokens)
        where = self.mlm.mask_position(site.with_word(self.mlm.mask_token))
        if where is None:
            return []
        log_probs = self.mlm.position_log_probs(text)
        pieces = max(1, self.mlm.piece_count(site.word))
        positions = list(range(where, min(where + pieces, log_probs.shape[0])))
        if not positions:
            return []
        top = torch.topk(log_probs[positions], min(self.k, log_probs.shape[-1]), dim=-1)
        if len(positions) == 1:
            out = []
            for tid in top.indices[0].tolist():
                tok = self.mlm.token(tid)
                if tok.startswith("##") or self.mlm.is_special(tok):
                    continue
                word = self.mlm.join_pieces([tok])
                if self._is_one_word(word):
                    out.append(word)
            return out
        rows = [
            list(zip(ids.tolist(), lps.tolist()))
            for ids, lps in zip(top.indices, top.values)
        ]
        out = []
        for ids, _total in _best_combinations(rows, self.k, beam=max(4 * self.k, 256)):
            toks = [self.mlm.token(t) for t in ids]
            if any(self.mlm.is_special(t) for t in toks):
                continue
            word = self.mlm.join_pieces(toks)
            if self._is_one_word(word) and word not in out:
                out.append(word)
            if len(out) == self.k:
                break
        return out

    def replacements(self, site: WordSite) -> list[str]:
        word = site.word
        out: list[str] = []
        for cand in self.proposals(site):
            if self.keep_case:
                cand = match_case(word, cand)
            if cand == word:
                continue
            if self.filter_antonyms and is_antonym(word, cand):
                continue
            if cand not in out:
                out.append(cand)
        return out
