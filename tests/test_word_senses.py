"""The offline word source keeps the word's sense in its prompt (issue 40 item 1): a
replacement has the part of speech the word has there (a verb stays a verb), comes from
the word's usual senses, and fewer candidates change the meaning than the source that
takes every sense (measured on 12 prompts labelled by hand, scripts/measure_word_senses.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from promptrobust.attacks import get_attack
from promptrobust.attacks.base import WordSite
from promptrobust.attacks.lexicon import load_lexicon
from promptrobust.attacks.pos import load_spacy_tagger, tag_at
from promptrobust.attacks.sentence import CachedEncoder
from promptrobust.attacks.synonyms import WORDNET_POS, lemma_forms, usual_senses
from promptrobust.attacks.words import tokenize
from tests.script_modules import load_script

ROOT = Path(__file__).resolve().parents[1]
ISSUE_PROMPT = ("As a film critic, read the following review carefully and judge its overall tone; "
                "answer with 'positive' or 'negative'.")


class _Unused:
    def encode(self, texts):
        return np.ones((len(texts), 4), dtype=np.float32)


def _measure():
    return load_script("measure_word_senses")


def _words(name: str, **options):
    attack = get_attack(name, embedding="glove", encoder=CachedEncoder(_Unused()), **options)
    words = attack.transformation(0)
    return getattr(words, "parts", (None, words))[1]


def test_a_verb_stays_a_verb_judge_is_never_justice() -> None:
    tokens = tokenize(ISSUE_PROMPT)
    judge = tokens.index("judge")
    lexicon = load_lexicon()
    for name in ("textfooler", "textbugger"):
        assert "justice" in _words(name, word_senses="any").replacements(WordSite(tokens, judge)), "the old source"
        in_context = _words(name).replacements(WordSite(tokens, judge))
        assert "justice" not in in_context, name
        assert all(lexicon.senses_in(c.lower(), ["v"]) for c in in_context), in_context


def test_every_candidate_is_a_word_of_the_part_of_speech_the_word_has_in_its_prompt() -> None:
    tagger = load_spacy_tagger()
    lexicon = load_lexicon()
    measure = _measure()
    found = measure.candidates("context")
    assert found, "the source proposes something"
    texts = {r["id"]: r["text"] for r in map(json.loads, (ROOT / "tests" / "fixtures" / "senses" / "prompts.jsonl")
                                             .read_text().splitlines())}
    for c in found:
        tokens = tokenize(texts[c["prompt"]])
        pos = WORDNET_POS[tag_at(tagger.tag(["".join(tokens)])[0], len("".join(tokens[: c["index"]])))]
        forms = {c["candidate"].lower(), *(f.lemma for f in lemma_forms(c["candidate"].lower(), lexicon))}
        assert any(lexicon.senses_in(f, [pos]) for f in forms), (c, pos)
    # Tagged again in the attacked prompt, a candidate rarely crosses between noun and verb; those
    # that do are verbs both (spaCy tags a capitalised or imperative verb a noun now and then).
    before, after = measure.noun_verb_crossings(measure.candidates("any")), measure.noun_verb_crossings(found)
    assert len(after) * 4 <= len(before), (before, after)
    for _, word, new in after:
        assert lexicon.senses_in(lemma_forms(word.lower(), lexicon)[0].lemma, ["v"]) and lexicon.senses_in(new.lower(), ["v"])


def test_fewer_candidates_change_the_meaning_than_with_every_sense(capsys) -> None:
    assert _measure().main([]) == 0
    lines = {tuple(line.split()[:2]): line for line in capsys.readouterr().out.splitlines()}

    def share(senses: str) -> float:
        return float(lines[(f"word_senses={senses}", "both")].rsplit("(", 1)[1].rstrip("%)")) / 100

    assert share("any") > 0.7, "the labels see the old source's wrong senses"
    assert share("context") < share("any") - 0.2


def test_usual_senses_follow_the_sense_tagged_counts() -> None:
    lexicon = load_lexicon()
    review = usual_senses("review", "n", lexicon)
    assert review and "critique" in {w for sid in review for w in lexicon.members(sid)}
    assert "inspection" not in {w for sid in review for w in lexicon.members(sid)}, "a rarer sense of review"
    assert usual_senses("judge", "v", lexicon) and not usual_senses("judge", "r", lexicon)


def test_a_word_of_a_fixed_expression_gets_no_replacement() -> None:
    """In "Look at", "figure out" and "step by step" the word has no sense of its own (WordNet lists
    the whole as one verb or adverb): the source proposes nothing for it, and the same word outside
    the expression still gets its synonyms."""
    from promptrobust.attacks.synonyms import expression_at

    lexicon = load_lexicon()
    prompt = "Look at the two sentences, figured out step by step; then look carefully and take one step."
    tokens = tokenize(prompt)
    at = {w: [i for i, t in enumerate(tokens) if t == w] for w in ("Look", "figured", "step", "look")}
    assert expression_at(WordSite(tokens, at["Look"][0]), lexicon) == ("look", "at")
    assert expression_at(WordSite(tokens, at["figured"][0]), lexicon) == ("figure", "out")  # inflected first word
    assert [expression_at(WordSite(tokens, i), lexicon) for i in at["step"]] == [("step", "by", "step")] * 2 + [None]
    assert expression_at(WordSite(tokens, at["look"][0]), lexicon) is None  # "look carefully": no expression
    split = tokenize("Look, at last")  # punctuation between: not the expression
    assert expression_at(WordSite(split, 1), lexicon) is None
    for name in ("textfooler", "textbugger"):
        words = _words(name)
        assert words.replacements(WordSite(tokens, at["Look"][0])) == [], name
        assert [words.replacements(WordSite(tokens, i)) for i in at["step"][:2]] == [[], []], name
        assert _words(name, word_senses="any").replacements(WordSite(tokens, at["step"][0])), "the old source"


def test_an_instruction_word_is_replaced_only_within_its_group() -> None:
    """"premise" -> "assumption" and "hypothesis" -> "theory" change the task's roles; "one" ->
    "ace" a number: the source keeps a language, scope word or role within its own group."""
    from promptrobust.attacks.instructions import group_of
    from promptrobust.attacks.synonyms import forms_of

    lexicon = load_lexicon()
    prompt = ("Read the premise and the hypothesis, then answer only with one word for each question "
              "about the passage.")
    tokens = tokenize(prompt)
    any_change = False
    for name in ("textfooler", "textbugger"):
        words, before = _words(name), _words(name, word_senses="any")
        for i, word in enumerate(tokens):
            group = group_of([word.lower()])
            if not word.strip() or group is None:
                continue
            old = before.replacements(WordSite(tokens, i))
            new = words.replacements(WordSite(tokens, i))
            any_change |= bool(set(old) - set(new))
            for cand in new:
                assert group_of(forms_of(cand, lexicon)) == group, (word, cand)
        premise, hypothesis = tokens.index("premise"), tokens.index("hypothesis")
        assert "assumption" not in words.replacements(WordSite(tokens, premise))
        assert "theory" not in words.replacements(WordSite(tokens, hypothesis))
    assert any_change, "the old source proposed other groups' words here"
