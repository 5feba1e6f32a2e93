"""Calibrate the meaning verdict on pairs labelled by hand, and measure it on pairs it never saw.

    python scripts/calibrate_meaning_check.py [--show-wrong] [--thresholds] [--minilm-alone] [--compare]

``tests/fixtures/meaning/verdict_pairs.jsonl`` holds 217 (clean, adversarial) pairs written
for promptrobust, each labelled kept or changed, in categories (wrong sense, same field,
changed instructions: language, scope, role; real-word typos, synonyms, words in a label's
clause, opposites, character edits, insertions, deletions). Each pair's ``split`` was fixed
before anything was measured: within each category, alternately ``calibration`` and
``held-out``. The verdict's two numbers (``meaning_check.THRESHOLD_CLOSE`` and
``THRESHOLD_FAR``: the encoder's in-context cosine a replacement needs when WordNet relates
it closely to the old word, and when not) are chosen on the calibration pairs only (most
pairs right; ties: more changed meanings found, then the lower thresholds); the held-out
pairs, never used to choose them, give the figures docs/fidelity.md quotes, per category.
The rules (instruction words, opposites, part of speech, spelling, WordNet relations) have
no number fitted to these pairs. The earlier 80 pairs (``labelled_pairs.jsonl``, issue 30)
are scored too, as a further set, and so is ``blind_pairs.jsonl``: 62 pairs on nine prompts none of
the other sets use, written and committed on 2026-11-29 after the verdict (check v4) was fixed and
before it was run on them, since the held-out half's errors had been read while rules were written;
``blind2_pairs.jsonl`` (120 pairs, before check v5 was run on them) and ``blind3_pairs.jsonl`` (150
pairs on 15 more prompts, before the rules for translation direction and British spellings were
run on them; the rest of check v6's rules were written after its errors were read) and
``blind4_pairs.jsonl`` (150 pairs on 15 more prompts, committed after check v6's rules were
written and before they were run on them; a few were narrowed after, docs/fidelity.md says
which) and ``blind5_pairs.jsonl`` and ``blind6_pairs.jsonl`` (150 pairs on 15 more prompts each,
committed before the final check v6 was run on them: nothing was changed after), each written by
someone who never read or ran the check, and ``blind7_pairs.jsonl`` (150 pairs on 15 more prompts,
committed before check v7, whose rules were written from the fifth and sixth sets' errors, was run on
them) and ``blind8_pairs.jsonl`` (150 more, committed after v7 was measured on the seventh and before
it was run on them: a second measurement of v7), ``blind9_pairs.jsonl`` (committed before check v8,
whose rules were written from the seventh and eighth sets' errors, was run on them) and
``blind10_pairs.jsonl`` (committed before check v9, whose rules were written from the ninth set's
errors, was run on them) and ``blind11_pairs.jsonl`` (committed before check v9 or v10, whose rules
were written from the tenth set's errors, was run on them). ``scripts/meaning_sets.py`` names every set once.

Since check v11 a learned judge (``attacks.meaning_judge``, fitted on every set here by
``scripts/fit_meaning_judge.py``) decides the replaced words instead of the two thresholds: the figures
printed are the check's own verdicts, in-sample for the judge (``fit_meaning_judge.py`` scores each set
left out of its fit); ``--thresholds`` prints the thresholds' figures under the same rules (v10), which
the threshold choice above still concerns.

Last, the pairs real attack records contain: every candidate the offline word source proposes for
the 12 prompts of ``scripts/measure_word_senses.py``, labelled by that script's hand-written
``tests/fixtures/senses/kept.json`` (never used to choose anything), for the default source
(``word_senses=context``) and the one that takes every sense (``any``). ``--compare`` also prints
the best alternative found: three thresholds (WordNet synonym in a usual sense, related, other)
chosen on the calibration and earlier pairs together, scored on every set.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import promptrobust.attacks.meaning_check as mc
from promptrobust.attacks.synonyms import RELATED, SYNONYM
from promptrobust.attacks.words import normalize_protected

from meaning_sets import BLIND_SETS, CALIBRATION, EARLIER, read_rows  # scripts/meaning_sets.py: the labelled sets, named once

PAIRS = CALIBRATION.path  # both halves: each row's split says which
GRID = [round(0.20 + 0.01 * i, 2) for i in range(61)]
#: Classes of a similarity check: which threshold it needs (``meaning_check`` applies THRESHOLD_CLOSE to the
#: first two, THRESHOLD_FAR to the rest and to every word in a clause with a label word).
SYNONYM_CLASS, RELATED_CLASS, OTHER_CLASS = CLASSES = ("synonym", "related", "other")


def by_class(close: float, far: float) -> dict[str, float]:
    """The verdict's two thresholds as a threshold per class."""
    return {SYNONYM_CLASS: close, RELATED_CLASS: close, OTHER_CLASS: far}


@dataclass(frozen=True)
class Evidence:
    """What the verdict saw on one pair: per changed stretch, its rule verdict when no
    similarity decides it, else its similarity and its class (``SYNONYM_CLASS`` ...)."""

    label: str
    category: str
    split: str
    why: str
    checks: tuple[tuple[bool | None, float | None, str], ...]
    #: The check's own verdict: with the learned judge (v11) its decisions, else the encoder's thresholds.
    shipped: bool = False

    def changed_by(self, thresholds: Mapping[str, float]) -> bool:
        """The verdict with a threshold per class."""
        for rule, sim, kind in self.checks:
            if sim is None:
                if rule is not True:
                    return True
            elif sim < thresholds[kind]:
                return True
        return False

    def changed(self, close: float, far: float) -> bool:
        """The verdict as ``meaning_check`` gives it: ``close`` for synonyms and related words, else ``far``."""
        return self.changed_by(by_class(close, far))


def encoder_for(argv: Sequence[str] = ()) -> mc.ContextEncoder:
    """The check's encoders, or with ``--minilm-alone`` all-MiniLM-L6-v2 alone at its own thresholds (the fallback)."""
    encoder = mc.load_context_encoder()
    return mc.minilm_alone(encoder.encoders[0]) if "--minilm-alone" in argv else encoder


def evidence(source: Path | Sequence[dict[str, Any]], encoder: mc.ContextEncoder | None = None) -> list[Evidence]:
    """Each pair's evidence, from one verdict: the rules' word where they decide a stretch, else its
    similarity and the class of threshold the check held it to (``threshold_class``), which is what any
    thresholds would be applied to."""
    encoder = encoder or mc.load_context_encoder()
    out = []
    for row in read_rows(source) if isinstance(source, Path) else source:
        verdict = mc.meaning_verdict(str(row["clean"]), str(row["adversarial"]),
                                     normalize_protected(row["labels"]), encoder=encoder)  # type: ignore[arg-type]
        checks = tuple((c.kept if c.similarity is None else None, c.similarity, _class(c)) for c in verdict.substitutions)
        out.append(Evidence(str(row["meaning"]), str(row.get("category", "earlier set")),
                            str(row.get("split", "earlier set")), str(row["why"]), checks,
                            verdict.verdict == "changed"))
    return out


def _class(check: mc.SubstitutionCheck) -> str:
    if check.threshold_class != "close":
        return OTHER_CLASS
    return {SYNONYM: SYNONYM_CLASS, RELATED: RELATED_CLASS}.get(check.relation, OTHER_CLASS)


def word_source_pairs(word_senses: str) -> list[dict[str, Any]]:
    """The offline word source's candidates for the 12 prompts, labelled (``measure_word_senses.labelled_pairs``)."""
    import measure_word_senses  # a sibling script (scripts/ is on sys.path)

    return list(measure_word_senses.labelled_pairs(word_senses))


def score(rows: list[Evidence], close: float, far: float) -> dict[str, float]:
    return score_by(rows, by_class(close, far))


def score_by(rows: list[Evidence], thresholds: Mapping[str, float] | None) -> dict[str, float]:
    """Figures with a threshold per class, or (None) of the check's own verdicts."""
    said = [e.shipped if thresholds is None else e.changed_by(thresholds) for e in rows]
    right = sum((e.label == "changed") == c for e, c in zip(rows, said))
    changed = [c for e, c in zip(rows, said) if e.label == "changed"]
    return {"pairs": len(rows), "accuracy": right / len(rows) if rows else float("nan"),
            "changed": len(changed), "recall": sum(changed) / len(changed) if changed else float("nan"),
            "precision": sum(changed) / sum(said) if sum(said) else float("nan")}


def score_shipped(rows: list[Evidence]) -> dict[str, float]:
    """Figures of the check's own verdicts (the learned judge's, where it has one)."""
    return score_by(rows, None)


def choose(rows: list[Evidence]) -> tuple[float, float]:
    def key(pair: tuple[float, float]) -> tuple[float, float, float, float]:
        s = score(rows, *pair)
        return s["accuracy"], s["recall"], -pair[0], -pair[1]

    return max(((c, f) for c in GRID for f in GRID), key=key)


def choose_three(rows: list[Evidence]) -> dict[str, float]:
    """The alternative: a threshold per class (on a 0.02 grid), most pairs right, then recall, then lower."""
    grid = GRID[::2]

    def key(t: tuple[float, float, float]) -> tuple[float, float, float, float, float]:
        s = score_by(rows, dict(zip(CLASSES, t)))
        return s["accuracy"], s["recall"], -t[0], -t[1], -t[2]

    best = max(((a, b, c) for a in grid for b in grid for c in grid), key=key)
    return dict(zip(CLASSES, best))


def lines(title: str, rows: list[Evidence], thresholds: Mapping[str, float] | None, *,
          by_category: bool = True) -> Iterator[str]:
    groups: dict[str, list[Evidence]] = defaultdict(list)
    for e in rows:
        groups[e.category].append(e)
    yield title
    for name, members in [("all", rows), *(sorted(groups.items()) if by_category else [])]:
        s = score_by(members, thresholds)
        recall = f"{s['recall']:.3f} ({round(s['recall'] * s['changed'])}/{s['changed']})" if s["changed"] else "-"
        yield (f"  {name:24} pairs {s['pairs']:3}  accuracy {s['accuracy']:.3f}  recall of changed {recall}")


def main(argv: list[str]) -> int:
    encoder = encoder_for(argv)
    rows = evidence(PAIRS, encoder)
    calibration = [e for e in rows if e.split == "calibration"]
    held_out = [e for e in rows if e.split == "held-out"]
    close, far = choose(calibration)
    thresholds = by_class(encoder.threshold_close, encoder.threshold_far)
    # the check's own verdicts; with --thresholds (or without the learned judge) the thresholds' instead
    committed = thresholds if "--thresholds" in argv or encoder.judge is None else None
    print(f"check: {encoder.check}")
    if committed is None:
        print(f"figures: the check's own verdicts, its learned judge ({encoder.judge.name}) fitted on every set below "
              "(in-sample for it: scripts/fit_meaning_judge.py scores each set left out of the fit)")
    else:
        print(f"figures: the encoders' thresholds {encoder.threshold_close} / {encoder.threshold_far}")
    print(f"{len(rows)} pairs ({sum(e.label == 'changed' for e in rows)} changed); calibration {len(calibration)}, "
          f"held-out {len(held_out)}")
    print(f"chosen on the calibration pairs: close {close}, far {far}; committed: "
          f"{encoder.threshold_close}, {encoder.threshold_far}")
    for line in lines("calibration pairs (used to choose the thresholds):", calibration, committed):
        print(line)
    for line in lines("HELD-OUT pairs (never used to choose the thresholds):", held_out, committed):
        print(line)
    earlier = evidence(EARLIER.path, encoder)
    for line in lines(f"the earlier {len(earlier)} pairs ({EARLIER.history}):", earlier, committed):
        print(line)
    blinds = {labelled.name: evidence(labelled.path, encoder) for labelled in BLIND_SETS}
    for labelled in BLIND_SETS:
        found = blinds[labelled.name]
        for line in lines(f"{labelled.name}, {len(found)} pairs ({labelled.history}):", found, committed):
            print(line)
    sources = {senses: evidence(word_source_pairs(senses), encoder) for senses in ("context", "any")}
    for senses, found in sources.items():
        title = (f"the offline word source's own {len(found)} candidates, word_senses={senses}"
                 f"{' (the default)' if senses == 'context' else ''} (tests/fixtures/senses/kept.json, never used to choose anything):")
        for line in lines(title, found, committed, by_category=False):
            print(line)
    if "--compare" in argv:
        alternative = choose_three(calibration + earlier)
        print(f"ALTERNATIVE: a threshold per class chosen on the calibration and earlier pairs together: {alternative}")
        for title, found in (("calibration", calibration), ("held-out", held_out), ("earlier", earlier), *blinds.items(),
                             ("word source, context", sources["context"]), ("word source, any", sources["any"])):
            for line in lines(f" {title}:", found, alternative, by_category=False):
                print(line)
    if "--show-wrong" in argv:
        for e in [*rows, *earlier, *(e for found in blinds.values() for e in found), *sources["context"]]:
            said = e.shipped if committed is None else e.changed_by(committed)
            if (e.label == "changed") != said:
                print(f"  wrong ({e.split}, {e.category}): labelled {e.label}: {e.why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
