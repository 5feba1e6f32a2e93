"""BertAttack's candidates: what a masked language model would put in a word's place.

``MaskedLM`` loads any Hugging Face masked LM by hub id or local directory
(default ``bert-base-uncased``) with ``AutoTokenizer`` and
``AutoModelForMaskedLM``, lazily, once per (model, device) per process. With
no hub access, point it at a local copy (``mlm=/path/to/model``).

The word is replaced by one mask token and the top-k tokens at that position
become candidates; only whole-word tokens (no "##" continuation pieces, purely
alphabetic) are kept, so every candidate is a single-token word.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from promptrobust.attacks.base import WordSite
from promptrobust.attacks.embeddings import is_antonym
from promptrobust.attacks.errors import AttackResourceError
from promptrobust.attacks.words import match_case


class MaskedLM:
    """A masked LM and its tokenizer; ``top_tokens`` fills masks in batches."""

    def __init__(
        self,
        model: str = "bert-base-uncased",
        *,
        device: str = "cpu",
        max_length: int = 256,
    ) -> None:
        self.model_id = model
        self.device = device
        self.max_length = max_length
        self._tok = None
        self._model = None

    def ensure_loaded(self) -> None:
        """Load now (not at the first replacement), so a missing model fails
        before any budget is spent, never silently after it."""
        self._load()

    def _load(self) -> None:
        if self._model is not None:
            return
        try:
            import torch  # noqa: F401
            from transformers import AutoModelForMaskedLM, AutoTokenizer
        except ImportError as exc:
            raise AttackResourceError(
                "BertAttack needs torch and transformers: pip install torch transformers"
            ) from exc
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
                "pass a local model directory with the attack option mlm=PATH"
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
        self._load()
        if token.startswith("##") or token in self._tok.all_special_tokens:  # type: ignore[union-attr]
            return None
        text = self._tok.convert_tokens_to_string([token]).strip()  # type: ignore[union-attr]
        return text if text.isalpha() else None

    @property
    def mask_token(self) -> str:
        self._load()
        return self._tok.mask_token  # type: ignore[union-attr]

    def top_tokens(self, masked_texts: Sequence[str], k: int) -> list[list[str]]:
        """For each text (with exactly one mask token), the ``k`` most likely
        tokens at the mask, best first, as vocabulary strings."""
        self._load()
        import torch

        tok, model = self._tok, self._model
        batch = tok(
            list(masked_texts),
            return_tensors="pt",
            padding=True,
            truncation=True,
            max_length=self.max_length,
        )
        batch = {name: t.to(self.device) for name, t in batch.items()}
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
            out.append(tok.convert_ids_to_tokens(top))
        return out


@functools.cache
def load_masked_lm(model: str = "bert-base-uncased", device: str = "cpu") -> MaskedLM:
    return MaskedLM(model, device=device)


class MaskedLMSwap:
    """Replacement words proposed by a masked LM for the word's position
    (BertAttack: the top 48)."""

    def __init__(
        self,
        mlm: MaskedLM,
        *,
        k: int = 48,
        filter_antonyms: bool = True,
        name: str = "masked_lm",
    ) -> None:
        if k <= 0:
            raise ValueError(
                f"number of masked-LM candidates must be positive, got {k}"
            )
        self.mlm = mlm
        self.k = k
        self.filter_antonyms = filter_antonyms
        self.name = name

    def replacements(self, site: WordSite) -> list[str]:
        word = site.word
        masked = site.with_word(self.mlm.mask_token)
        out: list[str] = []
        for token in self.mlm.top_tokens([masked], self.k)[0]:
            token = self.mlm.as_word(token)
            if token is None or token.lower() == word.lower():
                continue
            if self.filter_antonyms and is_antonym(word, token):
                continue
            new = match_case(word, token)
            if new not in out:
                out.append(new)
        return out
