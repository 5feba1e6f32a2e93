"""Search behaviour against synthetic PromptScorers with known answers."""

import asyncio
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from promptrobust.attacks import (
    AttackOptionError,
    UnknownAttackError,
    get_attack,
    list_attacks,
    performance_drop_rate,
)
from promptrobust.attacks.base import CandidateScore
from promptrobust.attacks.errors import ScorerContractError
from promptrobust.attacks.attack import Attack
from promptrobust.attacks.components import ConstraintOf, GreedyWordSwapWIR, WordSwapOf
from promptrobust.attacks.base import Recipe
from promptrobust.attacks.suffix import STRESS_SUFFIXES, random_strings
from promptrobust.attacks.search import TrackedScorer, rank_words
from promptrobust.testing.synthetic import SyntheticScorer, contract_violations
from promptrobust.attacks.words import tokenize


class TableSwap:
    """Proposes fixed replacements per word."""

    name = "table"

    def __init__(self, table):
        self.table = table

    def replacements(self, site):
        return list(self.table.get(site.word, []))


def TableAttack(table, constraints=(), swap=TableSwap):
    """A greedy word attack whose candidates come from a fixed table: a recipe of the caller's own parts."""
    recipe = Recipe(
        name="table", source="a table of replacements (test)", transformation=WordSwapOf(swap(table)),
        constraints=tuple(ConstraintOf(c) for c in constraints),
        search=GreedyWordSwapWIR(importance="delete", stopwords="none"),
    )
    return Attack(recipe)


def CheckList():
    return get_attack("checklist")


def StressTest():
    return get_attack("stresstest")


def Semantic():
    return get_attack("semantic")


# Replacement word -> the samples it breaks. Sets of different positions are
# disjoint, so the objective is additive and greedy finds the optimum.
KILLS = {
    "a1": {0},
    "a2": {0, 1, 2},
    "b1": {3, 4},
    "d1": {5},
    "d2": {5, 6},
    "d3": {5, 6},
}
TABLE = {
    "alpha": ["a1", "a2"],
    "bravo": ["b1"],
    "charlie": ["c1"],
    "delta": ["d2", "d1", "d3"],
}
CLEAN = "alpha bravo, charlie delta: 'positive'"


def killer(prompt, i):
    words = set(tokenize(prompt)[1::2])
    return 0.0 if any(i in KILLS.get(w, ()) for w in words) else 1.0


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("prune", [False, True])
def test_greedy_finds_the_known_optimum(prune):
    scorer = SyntheticScorer(killer, 20, prune=prune)
    out = run(
        TableAttack(TABLE).run(
            CLEAN, scorer, protected=frozenset({"positive"}), seed=0, budget=None
        )
    )
    assert out.adversarial_prompt == "a2 b1, charlie d2: 'positive'"
    assert out.adversarial_score == pytest.approx(13 / 20)
    assert out.clean_score == 1.0 and out.pdr == pytest.approx(7 / 20)
    assert out.perturbed_words == 3
    # 4 importance variants + 2 + 1 + 1 + 3 candidates
    assert out.queries == 11
    if not prune:
        assert out.pruned == 0


def test_clean_score_is_computed_first_and_exactly():
    scorer = SyntheticScorer(killer, 20)
    out = run(TableAttack(TABLE).run(CLEAN, scorer, seed=0, budget=None))
    assert scorer.calls[0] == ([CLEAN], None)
    assert out.clean_score == scorer.exact(CLEAN)
    # every later call uses that clean score (or better) as the bar
    bars = [b for _, b in scorer.calls[1:] if b is not None]
    assert bars and max(bars) == out.clean_score


def test_importance_ranking_order_and_rescoring_of_pruned_variants():
    # deleting word k costs k+1 samples: the most important word is the last one
    words = ["w0", "w1", "w2", "w3"]

    def fn(prompt, i):
        present = set(tokenize(prompt)[1::2])
        missing = [k for k, w in enumerate(words) if w not in present]
        return 0.0 if missing and i <= missing[0] else 1.0

    text = " ".join(words)
    tokens = tokenize(text)
    for prune in (False, True):
        tracker = TrackedScorer(SyntheticScorer(fn, 10, prune=prune), None)
        order = run(rank_words(tokens, [1, 3, 5, 7], tracker, mode="delete"))
        assert order == [7, 5, 3, 1]
        assert tracker.queries == 4, "re-scoring pruned variants is not a new query"


def test_budget_is_respected_and_reported():
    for budget in range(13):
        scorer = SyntheticScorer(killer, 20)
        out = run(
            TableAttack(TABLE).run(
                CLEAN, scorer, protected=frozenset({"positive"}), seed=0, budget=budget
            )
        )
        sent = sum(len(p) for p, _ in scorer.calls[1:])
        assert (
            out.queries <= budget
            and len({p for ps, _ in scorer.calls[1:] for p in ps}) <= budget
        )
        assert sent >= out.queries
        assert out.budget_exhausted == (budget < 11)
    assert out.adversarial_prompt == "a2 b1, charlie d2: 'positive'"


def test_constraints_filter_candidates():
    class NoD2:
        name = "no_d2"

        def allowed(self, original, candidates):
            return ["d2" not in c for c in candidates]

    out = run(
        TableAttack(TABLE, [NoD2()]).run(
            CLEAN, SyntheticScorer(killer, 20), seed=0, budget=None
        )
    )
    assert out.adversarial_prompt == "a2 b1, charlie d3: 'positive'"


def hashed(salt):
    def fn(prompt, i):
        return 1.0 if zlib.crc32(f"{salt}|{prompt}|{i}".encode()) % 100 < 70 else 0.0

    return fn


class LooseBounds:
    """Reports 0.0 for every abandoned candidate: a valid (if useless) lower bound."""

    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, prompts, *, to_beat=None, incumbent=None):
        res = await self.inner(prompts, to_beat=to_beat)
        return [
            r
            if r.complete
            else CandidateScore(r.prompt, 0.0, False, r.samples_evaluated)
            for r in res
        ]


@given(
    salt=st.integers(0, 10_000),
    n=st.integers(1, 25),
    budget=st.one_of(st.none(), st.integers(0, 15)),
)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_pruning_scorer_gives_the_exhaustive_result(salt, n, budget):
    table = {
        w: [w + s for s in ("x", "y", "z", "q")]
        for w in ("alpha", "bravo", "charlie", "delta", "echo")
    }
    clean = "alpha bravo charlie delta echo"
    results = []
    for scorer in (
        SyntheticScorer(hashed(salt), n, prune=False),
        SyntheticScorer(hashed(salt), n, prune=True),
        LooseBounds(SyntheticScorer(hashed(salt), n, prune=True)),
    ):
        results.append(
            run(TableAttack(table).run(clean, scorer, seed=salt, budget=budget))
        )
    full, pruned, loose = results
    assert (pruned.adversarial_prompt, pruned.adversarial_score) == (
        full.adversarial_prompt,
        full.adversarial_score,
    )
    assert (loose.adversarial_prompt, loose.adversarial_score) == (
        full.adversarial_prompt,
        full.adversarial_score,
    )
    assert pruned.queries == full.queries
    assert pruned.samples_evaluated <= full.samples_evaluated + n * pruned.pruned


@given(
    salt=st.integers(0, 10_000),
    k=st.integers(1, 8),
    bar=st.one_of(st.none(), st.floats(0, 1)),
)
@settings(max_examples=100, deadline=None)
def test_synthetic_scorer_keeps_the_contract(salt, k, bar):
    scorer = SyntheticScorer(hashed(salt), 9)
    prompts = [f"p{j}" for j in range(k)]
    res = run(scorer(prompts, to_beat=bar))
    assert (
        contract_violations(res, prompts, [scorer.exact(p) for p in prompts], bar) == []
    )


def test_contract_checker_catches_a_bad_scorer():
    res = [CandidateScore("a", 0.5, True), CandidateScore("b", 0.1, False)]
    assert contract_violations(res, ["a", "b"], [0.5, 0.2], None)


def test_same_seed_same_result_with_random_edits():
    scorer = lambda: SyntheticScorer(hashed(5), 12)
    prompt = "Determine whether the movie review expresses happiness or sadness overall"
    a = run(get_attack("deepwordbug").run(prompt, scorer(), seed=42, budget=60))
    b = run(get_attack("deepwordbug").run(prompt, scorer(), seed=42, budget=60))
    c = run(get_attack("deepwordbug").run(prompt, scorer(), seed=43, budget=60))
    assert a.adversarial_prompt == b.adversarial_prompt and a.queries == b.queries
    assert a.adversarial_prompt != prompt, "the attack found something"
    assert c.adversarial_prompt != a.adversarial_prompt


def test_deepwordbug_ranks_with_unk_and_keeps_edit_distance():
    scorer = SyntheticScorer(hashed(9), 12)
    prompt = "Determine whether the movie review expresses happiness or sadness overall"
    out = run(
        get_attack("deepwordbug", max_edit_distance=2).run(
            prompt, scorer, seed=1, budget=None
        )
    )
    assert any("[UNK]" in p for ps, _ in scorer.calls for p in ps)
    from promptrobust.attacks.constraints import levenshtein

    assert levenshtein(prompt, out.adversarial_prompt) <= 2
    assert out.settings["max_edit_distance"] == "2 (recipe: 30)"
    assert "max_edit_distance" in out.settings["deviations"]
    assert out.settings["importance"] == "replace the word by [UNK]"


def test_checklist_and_stresstest_brute_force_in_one_call():
    prompt = "Judge the review."
    target = "Judge the review " + STRESS_SUFFIXES[1] + "."
    scorer = SyntheticScorer(lambda p, i: 0.0 if p == target and i < 3 else 1.0, 10)
    out = run(StressTest().run(prompt, scorer, seed=0, budget=None))
    assert out.adversarial_prompt == target and out.adversarial_score == pytest.approx(
        0.7
    )
    assert (
        len(scorer.calls) == 2
        and len(scorer.calls[1][0]) == 3
        and scorer.calls[1][1] == float("inf")
    )
    assert STRESS_SUFFIXES[2] == " and true is true " * 5

    strings = random_strings(50, 10, 2306)
    assert len(set(strings)) == 50 and all(
        len(s) == 10 and s.isalnum() for s in strings
    )
    assert strings == random_strings(50, 10, 2306)
    scorer = SyntheticScorer(lambda p, i: 0.5 if strings[17] in p else 1.0, 4)
    out = run(CheckList().run(prompt, scorer, seed=0, budget=None))
    assert out.adversarial_prompt == f"Judge the review {strings[17]}." and out.queries == 50
    out = run(
        CheckList().run(
            prompt, SyntheticScorer(lambda p, i: 1.0, 4), seed=0, budget=None
        )
    )
    assert out.adversarial_prompt == f"Judge the review {min(strings)}.", (
        "all tie with the clean prompt: the alphabetically first candidate is the result"
    )
    assert out.pdr == 0.0


def test_semantic_reports_the_worst_prompt():
    sem = ["Tell me the feeling.", "What emotion is here?", "Sentiment please."]
    scores = {sem[0]: 0.8, sem[1]: 0.3, sem[2]: 0.9, "Clean.": 0.6}
    scorer = SyntheticScorer(lambda p, i: 1.0 if i < scores[p] * 10 else 0.0, 10)
    out = run(
        Semantic().run("Clean.", scorer, seed=0, budget=None, semantic_prompts=sem)
    )
    assert out.adversarial_prompt == sem[1] and out.adversarial_score == pytest.approx(
        0.3
    )
    assert out.pdr == pytest.approx(0.5)
    with pytest.raises(ValueError, match="semantic prompts"):
        run(Semantic().run("Clean.", scorer, seed=0, budget=None))


def test_registry_names_options_and_errors():
    names = [n for n, _ in list_attacks()]
    assert names == [
        "textbugger",
        "deepwordbug",
        "textfooler",
        "bertattack",
        "checklist",
        "stresstest",
        "semantic",
    ]
    with pytest.raises(UnknownAttackError, match="textbugger, deepwordbug"):
        get_attack("textbuger")
    with pytest.raises(ValueError):  # a ValueError subclass, mapped to exit 2
        get_attack("nope")
    with pytest.raises(AttackOptionError, match="valid options"):
        get_attack("checklist", colour="red")
    with pytest.raises(AttackOptionError, match="should be a int"):
        get_attack("checklist", count="many")
    for name, bad in [
        ("textfooler", {"similarity": "2"}),
        ("bertattack", {"candidates": 0}),
        ("deepwordbug", {"max_edit_distance": -1}),
    ]:
        with pytest.raises(AttackOptionError, match=name):
            get_attack(name, **bad)
    with pytest.raises(ValueError, match="budget"):
        run(StressTest().run("x y", SyntheticScorer(lambda p, i: 1.0, 2), budget=-1))
    assert get_attack("checklist", count="5").configured.transformation.count == 5
    assert get_attack("TextFooler", similarity="0.9").settings()["use_threshold"] == "0.9 (recipe: 0.840845057)"


def test_pdr_definition():
    assert performance_drop_rate(0.8, 0.2) == pytest.approx(0.75)
    assert performance_drop_rate(0.0, 0.0) == 0.0
    assert performance_drop_rate(0.5, 0.6) == pytest.approx(-0.2)


def test_a_scorer_breaking_the_contract_is_reported():
    class Broken:
        async def __call__(self, prompts, *, to_beat=None, incumbent=None):
            return [CandidateScore(p, 0.5, False) for p in prompts]

    with pytest.raises(ScorerContractError, match="lone prompt"):
        run(StressTest().run("x y", Broken(), seed=0))

    class Short:
        async def __call__(self, prompts, *, to_beat=None, incumbent=None):
            return []

    with pytest.raises(ScorerContractError, match="0 scores for 1"):
        run(StressTest().run("x y", Short(), seed=0))


def test_empty_prompt_rejected():
    with pytest.raises(ValueError, match="empty"):
        run(StressTest().run("  ", SyntheticScorer(lambda p, i: 1.0, 2), seed=0))


def test_candidate_generation_does_not_block_the_event_loop():
    import time

    class SlowSwap(TableSwap):
        def replacements(self, site):
            time.sleep(0.2)  # stands in for encoder / tagger / masked-LM work
            return super().replacements(site)

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.create_task(ticker())
        out = await TableAttack(TABLE, swap=SlowSwap).run(
            CLEAN,
            SyntheticScorer(killer, 20),
            protected=frozenset({"positive"}),
            budget=None,
        )
        task.cancel()
        return out, ticks

    out, ticks = run(main())
    assert out.adversarial_prompt == "a2 b1, charlie d2: 'positive'"
    assert ticks >= 20, "the loop kept running while candidates were computed"


# -- an attack with nothing to change (issue 42 item 2) ----------------------------------------


def test_a_prompt_whose_every_word_is_protected_says_there_was_nothing_to_change():
    scorer = SyntheticScorer(killer, 20)
    out = run(TableAttack(TABLE).run(CLEAN, scorer, protected=frozenset({"alpha", "bravo", "charlie", "delta", "positive"}),
                                     seed=0, budget=None))
    assert out.adversarial_prompt == CLEAN and out.queries == 0
    assert out.nothing_to_change.startswith("every word of the prompt is kept as it is; protected: alpha, bravo, charlie, delta")


def test_words_without_any_allowed_replacement_say_there_was_nothing_to_change():
    class Nothing:
        name = "nothing"

        def allowed(self, original, candidates):
            return [False for _ in candidates]

    out = run(TableAttack(TABLE, [Nothing()]).run(CLEAN, SyntheticScorer(killer, 20), protected=frozenset({"positive"}),
                                                  seed=0, budget=None))
    assert out.adversarial_prompt == CLEAN and out.queries == 4  # the words were ranked, no change was allowed
    assert "no allowed replacement for any of the 4 words it may change (alpha, bravo, charlie, delta)" in out.nothing_to_change


def test_a_search_that_tried_changes_and_kept_none_is_a_measurement_not_nothing_to_change():
    never = SyntheticScorer(lambda prompt, i: 1.0, 20)  # no change lowers the score: PDR 0, measured
    out = run(TableAttack(TABLE).run(CLEAN, never, protected=frozenset({"positive"}), seed=0, budget=None))
    assert out.adversarial_prompt == CLEAN and out.pdr == 0.0 and out.nothing_to_change == ""
    budget_out = run(TableAttack(TABLE).run(CLEAN, SyntheticScorer(killer, 20), seed=0, budget=0))
    assert budget_out.nothing_to_change == ""  # a budget of 0 is the user's limit, said as such
