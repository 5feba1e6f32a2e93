"""The paper's seven attacks, each one recipe value.

Every number is the reference value, stated once, beside the setting or
sentence that fixes it: the TextAttack recipes as promptbench builds them
(``promptbench/prompt_attack/attack.py`` with its ``attack_config``;
promptbench fcda538). What a run does differently (an option, an offline
substitute, a fact of this implementation) is never written here: it is
derived by comparing the configured recipe with this one
(``attacks.deviations.compare``), recorded in every record's ``settings`` and
explained in docs/fidelity.md.

This is the one module where attack names are written: everything else asks a
recipe what it is (``attacks.base.Recipe``) or looks it up by the name a user
or a record gives (``attacks.registry``); ``tests/test_attack_names.py`` keeps it so.
"""

from __future__ import annotations

from promptrobust.attacks.base import Recipe
from promptrobust.attacks.chars import DEEPWORDBUG_EDITS, TEXTBUGGER_BUGS
from promptrobust.attacks.components import (
    BruteForce,
    CharacterBugs,
    Composite,
    EmbeddingSwap,
    GivenPrompts,
    GreedyWordSwapWIR,
    MeaningGuard,
    PromptSetSearch,
    RandomSuffix,
    TautologySuffix,
    WordSwapMaskedLM,
)
from promptrobust.attacks.constraints import MaxLevenshtein, PartOfSpeechMatch, SentenceSimilarity
from promptrobust.attacks.sentence import TEXTATTACK_USE_URL
from promptrobust.attacks.suffix import STRESS_SUFFIXES

#: The sentence encoder TextAttack's USE constraint loads (TF Hub).
TEXTATTACK_USE = f"tfhub:{TEXTATTACK_USE_URL}"

#: TextAttack's ``StopwordModification()`` default: NLTK's English list.
NLTK_STOPWORDS = "NLTK English stop words"

TEXTBUGGER = Recipe(
    name="textbugger",
    source="TextAttack TextBuggerLi2018 as promptbench configures it",
    transformation=Composite((
        # TextBugger (Li et al. 2018) bugs 1-4: insert a space, delete an inner
        # character, swap two inner neighbours, a visually similar character.
        # Each word's random draws are seeded by "textbugger_chars" (kept: a seed gives what it gave).
        CharacterBugs(TEXTBUGGER_BUGS, stream="textbugger_chars",
                      homoglyphs="TextAttack's table (a-z, 0-9, - '), one candidate per position"),
        # Bug 5, Sub-W: "topk = 5" nearest neighbours; promptbench attack_config
        # textbugger max_candidates=5 over TextAttack's counter-fitted paragram vectors.
        EmbeddingSwap(neighbours=5, min_cos=None),
    )),
    constraints=(
        # promptbench attack_config textbugger min_sentence_cos_sim=0.8, passed to
        # TextAttack's UniversalSentenceEncoder (angular by default), whole text, against the original.
        SentenceSimilarity(threshold=0.8, metric="angular", window=None, skip_shorter_than_window=False,
                           reference="clean", sentence_encoder=TEXTATTACK_USE),
        # No guard: counter-fitting pushes antonyms apart.
        MeaningGuard(rule="none (counter-fitted vectors repel antonyms)"),
    ),
    # GreedyWordSwapWIR with word deletion as importance; StopwordModification's default list.
    search=GreedyWordSwapWIR(importance="delete", stopwords=NLTK_STOPWORDS),
    requirements=(
        "runs offline; word part as TextFooler's (paragram vectors when they can be had, else GloVe neighbours "
        "restricted to WordNet synonyms, recorded)"
    ),
)

DEEPWORDBUG = Recipe(
    name="deepwordbug",
    source="TextAttack DeepWordBugGao2018 as promptbench configures it",
    # DeepWordBug (Gao et al. 2018): swap, substitute, delete or insert one
    # character, any letter of either case (TextAttack's random_one edits).
    # Each word's random draws are seeded by "deepwordbug" (kept: a seed gives what it gave).
    transformation=CharacterBugs(DEEPWORDBUG_EDITS, stream="deepwordbug"),
    # promptbench attack_config deepwordbug levenshtein_edit_distance=30, against the original.
    constraints=(MaxLevenshtein(max_distance=30),),
    # DeepWordBug scores a word by replacing it with [UNK] (TextAttack: GreedyWordSwapWIR("unk")).
    search=GreedyWordSwapWIR(importance="unk", stopwords=NLTK_STOPWORDS),
)

TEXTFOOLER = Recipe(
    name="textfooler",
    source="TextAttack TextFoolerJin2019 as promptbench configures it",
    # "Swap words with their 50 closest embedding nearest-neighbors" (TextAttack's
    # recipe; promptbench attack_config textfooler max_candidates=50), counter-fitted
    # PARAGRAM-SL999; word cosine >= 0.6 (promptbench min_word_cos_sim=0.6; TextAttack's recipe 0.5).
    transformation=EmbeddingSwap(neighbours=50, min_cos=0.6),
    constraints=(
        # PartOfSpeech(allow_verb_noun_swap=True), NLTK's universal tagger on the original text.
        PartOfSpeechMatch(tagging="NLTK universal tagger, tagged in the original prompt", allow_noun_verb_swap=True),
        # promptbench min_sentence_cos_sim=0.840845057 (an angle of 0.5 radians: 1 - 0.5/pi),
        # angular, over a 15-word window, texts shorter than it skipped, against the previous step.
        SentenceSimilarity(threshold=0.840845057, metric="angular", window=15, skip_shorter_than_window=True,
                           reference="current", sentence_encoder=TEXTATTACK_USE),
        MeaningGuard(rule="none (counter-fitted vectors repel antonyms)"),
    ),
    # GreedyWordSwapWIR (deletion importance) and the TextFooler release's own stop words.
    search=GreedyWordSwapWIR(importance="delete", stopwords="TextFooler's own stop-word list"),
    requirements=(
        "runs offline; the recipe's counter-fitted paragram vectors are used when TextAttack's cache has them "
        "or they can be downloaded (`--attack-option embedding=PATH` for a local copy), else GloVe neighbours "
        "restricted to WordNet synonyms (recorded)"
    ),
)

BERTATTACK = Recipe(
    name="bertattack",
    source="TextAttack BERTAttackLi2020 as promptbench configures it",
    # BERT-Attack (Li et al. 2020) on bert-base-uncased: promptbench attack_config
    # bertattack max_candidates=48 (TextAttack's recipe now 8); TextAttack cuts the
    # sub-word combinations unsorted; max_word_perturbed_percent=1 (TextAttack 0.4).
    transformation=WordSwapMaskedLM(model="bert-base-uncased", candidates=48, subword_ranking="product order",
                                    max_words_perturbed=1.0),
    constraints=(
        # promptbench min_sentence_cos_sim=0.8 (TextAttack 0.2), cosine, whole text, against the original.
        SentenceSimilarity(threshold=0.8, metric="cosine", window=None, skip_shorter_than_window=False,
                           reference="clean", sentence_encoder=TEXTATTACK_USE),
        MeaningGuard(rule="none"),
    ),
    # [UNK] importance (TextAttack: GreedyWordSwapWIR(wir_method="unk")).
    search=GreedyWordSwapWIR(importance="unk", stopwords=NLTK_STOPWORDS),
    requirements=(
        "needs a masked language model (the recipe's bert-base-uncased), which no PyPI package ships: "
        "online, `pre run --attack bertattack` downloads it once into the Hugging Face cache (later runs "
        "read it from there, offline too); for a machine without internet, first run "
        "`huggingface-cli download bert-base-uncased --local-dir ~/models/bert-base-uncased` where there is "
        "internet, copy the folder, then `pre run --attack bertattack --attack-option mlm=~/models/bert-base-uncased`"
    ),
)

CHECKLIST = Recipe(
    name="checklist",
    source="promptbench CheckListTransformation + BruteForceSearch",
    # promptbench: one of 50 fixed random strings of 10 characters from [A-Za-z0-9],
    # inserted after the last word.
    transformation=RandomSuffix(count=50, length=10),
    constraints=(),
    search=BruteForce(),
)

STRESSTEST = Recipe(
    name="stresstest",
    source="promptbench StressTestTransformation + BruteForceSearch",
    # promptbench's three texts: "and true is true", "and false is not true", the first five times.
    transformation=TautologySuffix(STRESS_SUFFIXES),
    constraints=(),
    search=BruteForce(),
)

SEMANTIC = Recipe(
    name="semantic",
    source="promptbench semantic attack (SEMANTIC_ADV_PROMPT_SET)",
    # The paper scores 10 prompts per language written by speakers of six languages
    # (the task's "semantic" prompts: 60 per dataset) and reports every one's score.
    transformation=GivenPrompts(prompt_type="semantic", paper_set_size=60),
    constraints=(),
    search=PromptSetSearch(every_score=True),
)

#: The paper's seven attacks, in its order.
RECIPES: tuple[Recipe, ...] = (TEXTBUGGER, DEEPWORDBUG, TEXTFOOLER, BERTATTACK, CHECKLIST, STRESSTEST, SEMANTIC)

#: The attack the Python API runs when none is named, and the one `pre run` suggests
#: first: StressTest, the cheapest (3 candidates).
DEFAULT_ATTACK = STRESSTEST.name
#: What `pre run` suggests after an attack, in this order (those not yet run that run here).
SUGGESTED_NEXT: tuple[str, ...] = (DEEPWORDBUG.name, TEXTFOOLER.name, CHECKLIST.name)
