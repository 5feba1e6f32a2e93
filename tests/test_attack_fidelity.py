"""The attacks against the recipes they follow (TextAttack as promptbench runs
it): budget, insertion point, negative PDR, homoglyphs, letter cases, USE
similarity, word vectors, BertAttack's candidates, Semantic's per-prompt scores,
and the settings every record carries."""

import asyncio
import math
import pickle
import random

import numpy as np
import pytest

from promptrobust.attacks import get_attack
from promptrobust.attacks.base import WordSite
from promptrobust.attacks.chars import HOMOGLYPHS
from promptrobust.attacks.constraints import SentenceSimilarity, window_bounds
from promptrobust.attacks.embeddings import (
    AttackResourceError,
    WordEmbedding,
    load_paragramcf,
    resolve_embedding,
)
from promptrobust.attacks.attack import Attack
from promptrobust.attacks.suffix import STRESS_SUFFIXES
from promptrobust.attacks.sentence import CachedEncoder, angular_similarity
from promptrobust.attacks.suffix import insert_after_last_word
from promptrobust.attacks.words import tokenize
from promptrobust.testing.synthetic import SyntheticScorer, build_paragramcf_folder


def run(coro):
    return asyncio.run(coro)


class FlatEncoder:
    def encode(self, texts):
        return np.ones((len(texts), 4), dtype=np.float32)


class AllTag:
    def tag(self, texts):
        return [[(0, len(t), "X")] for t in texts]


# --- budget ---------------------------------------------------------------------------

PROMPT_WORDS = ["judge", "tone", "review", "decide", "mood", "text", "label", "verdict"]


def synonym_embedding(per_word: int = 30) -> WordEmbedding:
    """Each prompt word with ``per_word`` close synonyms (more than a budget of 100 covers)."""
    rng = np.random.default_rng(1)
    words, vecs = [], []
    for w in PROMPT_WORDS:
        centre = rng.normal(size=16)
        words.append(w)
        vecs.append(centre)
        for j in range(per_word):
            words.append(f"{w}{'abcdefghijklmnopqrstuvwxyz'[j % 26]}{'xyz'[j // 26]}")
            vecs.append(centre + 0.01 * rng.normal(size=16))
    return WordEmbedding(words, np.array(vecs))


def textfooler(**kw):
    return get_attack(
        "textfooler",
        embedding=synonym_embedding(),
        encoder=CachedEncoder(FlatEncoder()),
        tagger=AllTag(),
        **kw,
    )


def test_unlimited_budget_is_the_default_and_walks_every_word():
    prompt = " ".join(PROMPT_WORDS) + ": positive or negative?"
    scorer = SyntheticScorer(lambda p, i: 1.0, 5)  # no swap ever helps: the search must go on
    out = run(textfooler().run(prompt, scorer, protected=frozenset({"positive", "negative"})))
    assert out.budget is None and not out.budget_exhausted
    assert out.settings["budget"] == "unlimited" and "budget" not in out.settings["deviations"]
    visited = set()
    for prompts, _ in scorer.calls[2:]:  # after the clean prompt and the ranking
        (changed,) = {i for p in prompts for i, (a, b) in enumerate(zip(tokenize(p), tokenize(prompt))) if a != b}
        visited.add(tokenize(prompt)[changed])
    assert visited == set(PROMPT_WORDS), "every attackable word was tried"
    assert out.queries == len(PROMPT_WORDS) * (1 + 30)

    capped = SyntheticScorer(lambda p, i: 1.0, 5)
    out = run(textfooler().run(prompt, capped, protected=frozenset({"positive", "negative"}), budget=100))
    assert out.budget_exhausted and out.queries == 100
    assert out.settings["budget"] == "100 (recipe: unlimited)" and "budget" in out.settings["deviations"]


# --- CheckList / StressTest -------------------------------------------------------------


def test_suffix_goes_after_the_last_word_before_the_final_punctuation():
    p = "Classify the review as 'positive' or 'negative':"
    assert insert_after_last_word(p, "d6ZQ3u0GBQ") == "Classify the review as 'positive' or 'negative' d6ZQ3u0GBQ:"
    assert insert_after_last_word(p, STRESS_SUFFIXES[0]) == (
        "Classify the review as 'positive' or 'negative'  and true is true :"
    )
    assert insert_after_last_word("Answer with yes or no.\nAnswer:", "X") == "Answer with yes or no.\nAnswer X:"
    assert insert_after_last_word("No punctuation here", "X") == "No punctuation here X"
    assert insert_after_last_word("?!", "X") == "?! X"


@pytest.mark.parametrize("name", ["checklist", "stresstest"])
def test_brute_force_whose_candidates_all_raise_the_score_gives_a_negative_pdr(name):
    attack = get_attack(name)
    clean = "Judge the tone of the review, 'positive' or 'negative':"
    helped = {c: 0.6 + 0.01 * k for k, c in enumerate(sorted(attack.configured.transformation.candidates(clean)))}

    def fn(p, i):  # clean: 5 of 10 right; every candidate more
        rate = 0.5 if p == clean else helped[p]
        return 1.0 if i < round(rate * 10) else 0.0

    out = run(attack.run(clean, SyntheticScorer(fn, 10)))
    assert out.adversarial_prompt == min(helped), "the best (lowest) candidate, although above the clean score"
    assert out.adversarial_score == pytest.approx(0.6) and out.clean_score == pytest.approx(0.5)
    assert out.pdr == pytest.approx(1 - 0.6 / 0.5) and out.pdr < 0
    assert not out.succeeded


# --- TextBugger and DeepWordBug characters ------------------------------------------------


def test_textbugger_homoglyphs_one_per_position_and_no_space_before_the_last_character():
    bugger = get_attack("textbugger", embedding=synonym_embedding(2), encoder=CachedEncoder(FlatEncoder()))
    for seed in range(30):
        for word in ("statement", "tone", "Review", "the"):
            site = WordSite(tokenize(f"judge {word} now"), 3)
            cands = bugger.transformation(seed).replacements(site)
            glyphs = [c for c in cands if " " not in c and len(c) == len(word) and not c.isascii()]
            assert len(glyphs) == sum(ch in HOMOGLYPHS for ch in word), "one look-alike candidate per position"
            assert len({next(i for i, (a, b) in enumerate(zip(word, g)) if a != b) for g in glyphs}) == len(glyphs)
            for c in cands:
                if " " in c:
                    assert len(c.split(" ")[-1]) >= 2, (word, c)
    assert bugger.settings()["homoglyphs"].startswith("promptrobust's Unicode look-alike table")


def test_deepwordbug_inserts_upper_case_letters():
    attack = get_attack("deepwordbug")
    site = WordSite(tokenize("analyze the sentiment"), 5)
    uppers = set()
    for seed in range(100):
        for cand in attack.transformation(seed).replacements(site):
            if len(cand) == len("sentiment") + 1:
                uppers |= {c for c in cand if c.isupper()}
    assert uppers, "insertions draw from A-Z too"


# --- USE similarity -----------------------------------------------------------------------


def test_angular_similarity_values():
    assert angular_similarity(1.0) == pytest.approx(1.0)
    assert angular_similarity(0.0) == pytest.approx(0.5)
    assert angular_similarity(-1.0) == pytest.approx(0.0)
    assert angular_similarity(0.5) == pytest.approx(2 / 3)
    assert angular_similarity(math.cos(math.pi / 10)) == pytest.approx(0.9)
    # TextFooler's 0.840845057 is 1 - 0.5/pi: an angle of 0.5 radians
    assert angular_similarity(math.cos(0.5)) == pytest.approx(0.840845057)


class AngleEncoder:
    """Unit vectors at a chosen angle: texts containing 'far' are 0.6 rad away."""

    def __init__(self):
        self.seen = []

    def encode(self, texts):
        self.seen.extend(texts)
        out = []
        for t in texts:
            a = 0.6 if "far" in t.split() else (0.4 if "near" in t.split() else 0.0)
            out.append([math.cos(a), math.sin(a)])
        return np.array(out)


def test_textfooler_similarity_window_threshold_and_short_texts():
    words = [f"w{i}" for i in range(30)]
    base = " ".join(words) + "."
    near = base.replace("w20", "near")
    far = base.replace("w20", "far")
    enc = AngleEncoder()
    sim = SentenceSimilarity(0.840845057, metric="angular", window=15, skip_shorter_than_window=True,
                             reference="current", encoder=CachedEncoder(enc))
    assert sim.allowed(base, [near, far]) == [True, False]  # 0.4 rad -> 0.873; 0.6 rad -> 0.809
    assert sim.similarities(base, [far])[0] == pytest.approx(1 - 0.6 / math.pi)
    windows = [t for t in enc.seen if "far" in t.split() or "near" in t.split()]
    assert windows and all(len(t.split()) == 15 for t in windows)
    assert windows[0] == " ".join(words[13:20] + ["near"] + words[21:28]), "centred on the changed word"
    assert window_bounds(0, 30, 15) == (0, 14) and window_bounds(29, 30, 15) == (15, 29)
    short = "one two far four"
    enc.seen.clear()
    assert sim.allowed("one two three four", [short]) == [True], "texts under 15 words skip the constraint"
    assert enc.seen == []
    whole = SentenceSimilarity(0.8, metric="cosine", encoder=CachedEncoder(AngleEncoder()))
    assert whole.similarities(base, [far])[0] == pytest.approx(math.cos(0.6))


def test_recipe_similarity_settings():
    enc = CachedEncoder(FlatEncoder())
    tf = get_attack("textfooler", embedding=synonym_embedding(1), encoder=enc, tagger=AllTag()).settings()
    assert tf["use_threshold"] == 0.840845057 and tf["use_metric"] == "angular"
    assert tf["use_window"] == "15 words around the changed word" and tf["use_skip_shorter_than_window"] is True
    assert tf["use_compare_against"] == "prompt before this step"
    tb = get_attack("textbugger", embedding=synonym_embedding(1), encoder=enc).settings()
    assert (tb["use_threshold"], tb["use_metric"], tb["use_window"]) == (0.8, "angular", "whole prompt")
    ba = get_attack("bertattack", mlm="unused", encoder=enc).settings()
    assert (ba["use_threshold"], ba["use_metric"], ba["use_compare_against"]) == (0.8, "cosine", "original prompt")
    for s in (tf, tb, ba):
        assert "sentence_encoder" in s["deviations"] and "recipe: USE v3" in s["sentence_encoder"]
        assert not any(k.startswith("use_") for k in s["deviations"]), "thresholds and windows as the recipe"


# --- word vectors -------------------------------------------------------------------------


def test_paragramcf_folder_in_textattack_format(tmp_path):
    words = ["good", "fine", "great", "bad", "film"]
    vecs = np.array([[1, 0, 0], [0.9, 0.1, 0], [0.8, 0.3, 0], [-1, 0, 0], [0, 0, 1]], dtype=np.float32)
    path = build_paragramcf_folder(str(tmp_path / "paragramcf"), words, vecs)
    resolved = resolve_embedding(path)
    assert not resolved.fallback and resolved.label == f"paragramcf ({path})"
    emb = resolved.embedding
    assert [w for w, _ in emb.neighbours("good", 2)] == ["fine", "great"], "nn.npy order, itself skipped"
    assert [w for w, _ in emb.neighbours("good", 4, 0.5)] == ["fine", "great"], "cosine filter after nn.npy"
    assert load_paragramcf(str(tmp_path)) is not None, "a folder holding paragramcf/ works too"
    attack = get_attack("textfooler", embedding=path, encoder=CachedEncoder(FlatEncoder()), tagger=AllTag())
    attack.transformation(0)
    assert attack.settings()["word_embedding"] == f"paragramcf ({path})"
    assert "word_embedding" not in attack.settings()["deviations"]


def test_paragramcf_errors_are_one_line_and_pickles_cannot_run_code(tmp_path):
    with pytest.raises(AttackResourceError, match="embedding=PATH"):
        resolve_embedding(str(tmp_path / "missing"))
    bad = tmp_path / "evil"
    build_paragramcf_folder(str(bad), ["a", "b"], np.eye(2))

    class Boom:
        def __reduce__(self):
            return (print, ("pwned",))

    (bad / "wordlist.pickle").write_bytes(pickle.dumps({"a": 0, "b": Boom()}))
    with pytest.raises(AttackResourceError, match="wordlist.pickle"):
        resolve_embedding(str(bad))


def test_offline_auto_falls_back_to_glove_and_says_so(monkeypatch, tmp_path):
    from promptrobust.attacks import embeddings

    monkeypatch.setenv("TA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(embeddings, "_DOWNLOAD_FAILED", ["offline (test)"])
    tiny = WordEmbedding(["good", "bad", "fine"], np.eye(3), name=embeddings.GLOVE_NAME)
    monkeypatch.setattr(embeddings, "load_glove", lambda: tiny)
    resolved = resolve_embedding("auto")
    assert resolved.fallback and resolved.embedding is tiny
    assert resolved.label == "glove-6b-50d (fallback; recipe: paragramcf)"
    attack = get_attack("textbugger", encoder=CachedEncoder(FlatEncoder()))
    attack.transformation(0)
    settings = attack.settings()
    assert settings["word_embedding"] == "glove-6b-50d (fallback; recipe: paragramcf)"
    assert {"word_embedding", "antonym_guard", "synonym_source"} <= set(settings["deviations"])
    assert settings["synonym_source"].startswith("WordNet 3.0 synonyms")


# --- Semantic -------------------------------------------------------------------------------


def test_semantic_returns_every_prompt_score_with_its_language():
    class P:
        def __init__(self, language, text):
            self.language, self.text = language, text

    sem = [P("zh", "Tell me the feeling."), ("fr", "What emotion is here?"), "Sentiment please."]
    scores = {"Tell me the feeling.": 0.8, "What emotion is here?": 0.3, "Sentiment please.": 0.9, "Clean.": 0.6}
    scorer = SyntheticScorer(lambda p, i: 1.0 if i < scores[p] * 10 else 0.0, 10)
    out = run(get_attack("semantic").run("Clean.", scorer, semantic_prompts=sem))
    assert out.adversarial_prompt == "What emotion is here?" and out.pdr == pytest.approx(0.5)
    assert out.prompt_scores == (
        ("zh", "Tell me the feeling.", pytest.approx(0.8)),
        ("fr", "What emotion is here?", pytest.approx(0.3)),
        ("unknown", "Sentiment please.", pytest.approx(0.9)),
    )
    assert out.settings["result"] == "worst of 3 semantic prompts"
    assert out.to_dict()["prompt_scores"][0][0] == "zh"


# --- every attack records its settings against the recipe ---------------------------------


@pytest.mark.parametrize("name", ["textbugger", "deepwordbug", "textfooler", "bertattack", "checklist", "stresstest", "semantic"])
def test_every_attack_records_recipe_goal_budget_and_deviations(name):
    kw = {"mlm": "unused"} if name == "bertattack" else {}
    attack: Attack = get_attack(name, **kw)
    s = attack.settings()
    assert s["recipe"] and s["goal"] and s["budget"] == "unlimited"
    assert "transformation" in s and "search" in s
    assert isinstance(s["deviations"], list)
    for key in s["deviations"]:
        assert "recipe:" in str(s[key]), (name, key, s[key])
    for key, value in s.items():
        if "(recipe:" in str(value):
            assert key in s["deviations"], (name, key)


def test_textbugger_space_insertion_seen_in_both_places():
    seen = set()
    for seed in range(40):
        from promptrobust.attacks.chars import insert_space

        seen |= set(insert_space("sentiment", random.Random(seed)))
    assert all(len(s.split(" ")[1]) >= 2 and len(s.split(" ")[0]) >= 1 for s in seen)
    assert "s entiment" in seen and "sentime nt" in seen


def test_semantic_every_score_false_keeps_only_the_worst_and_stops_early():
    sem = ["a b", "c d", "e f"]
    scores = {"a b": 0.8, "c d": 0.3, "e f": 0.9, "Clean.": 0.6}
    scorer = SyntheticScorer(lambda p, i: 1.0 if i < scores[p] * 10 else 0.0, 10)
    out = run(get_attack("semantic", every_score=False).run("Clean.", scorer, semantic_prompts=sem))
    assert out.adversarial_prompt == "c d" and out.prompt_scores == ()
    assert "every_score=false" in out.settings["result"] and "search" in out.settings["deviations"]
    assert scorer.calls[1][1] == float("inf")


# --- recipes are values; how a run differs is derived -------------------------------------

CHANGED = {
    "textbugger": {"neighbours": 3, "similarity": 0.5},
    "deepwordbug": {"max_edit_distance": 2, "unk_token": "<unk>"},
    "textfooler": {"neighbours": 40, "min_word_cos": 0.5, "similarity": 0.7, "window": 10},
    "bertattack": {"mlm": "some/mlm", "candidates": 8, "similarity": 0.2, "keep_case": True},
    "checklist": {"count": 5, "length": 4},
    "semantic": {"every_score": False},
}


@pytest.mark.parametrize("name", sorted(CHANGED))
def test_options_that_move_a_recipe_value_become_deviations_naming_the_recipe_value(name):
    base_kw = {"mlm": "bert-base-uncased"} if name == "bertattack" else {}
    base = get_attack(name, **base_kw).settings()
    changed = get_attack(name, **{**base_kw, **CHANGED[name]}).settings()
    moved = {k for k in base if k != "deviations" and base[k] != changed[k]}
    assert len(moved) >= len(CHANGED[name]), (name, moved)
    for key in moved:
        assert key in changed["deviations"] and key not in base["deviations"], (name, key)
        assert "(recipe: " in str(changed[key]), (name, key, changed[key])
    assert set(changed["deviations"]) - moved == set(base["deviations"])


def test_each_reference_number_is_stated_once_in_the_recipes():
    import ast
    from pathlib import Path

    import promptrobust.attacks.recipes as recipes_module

    def numbers(path: Path) -> list[float]:
        return [n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant)
                and isinstance(n.value, (int, float)) and not isinstance(n.value, bool)]

    here = Path(recipes_module.__file__)
    in_recipes = numbers(here)
    assert in_recipes.count(0.840845057) == 1 and in_recipes.count(0.6) == 1 and in_recipes.count(48) == 1
    for other in ("attack.py", "base.py", "components.py", "constraints.py", "deviations.py", "registry.py"):
        assert not {0.840845057, 0.6, 48, 50} & set(numbers(here.parent / other)), other
