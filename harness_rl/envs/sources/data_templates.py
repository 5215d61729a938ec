"""Question templates for the data-analysis tasks, at three difficulties.

A template picks columns (and levels, thresholds) of one dataset with a seeded ``random.Random`` and returns a
``Draft``: the question in words, naming each column by its meaning from the help page, and the pandas program
that answers it. The builder runs that program on the table to get the answer and stores the same program as the
task's reference solution, so the answer and the reference can never drift apart.

- easy: one aggregate over one column (mean, median, standard deviation, range, a count above a threshold,
  missing values, distinct levels, the most common level).
- medium: filter, group, aggregate, rank (a filtered mean or count, the group with the highest mean, the top
  three groups by median, the spread of group means, a conditional percentage).
- hard: several steps, derived columns, joins or reshapes, a statistical test (Welch's t statistic, a
  chi-square statistic, a correlation within a subset, a least-squares slope, the group with the highest mean
  ratio of two columns, within-group z-score outliers, a pivot comparison, a group mean joined back to rows).

A program reads ``df`` and sets ``answer`` (a number, a label, or a list of labels); it may set ``scores`` (a
Series) for the builder's tie check. Every question states how to round, which rows count and how ties or
missing values are treated, so one answer is right.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from harness_rl.envs.sources.data_catalog import Dataset
from harness_rl.envs.sources.data_question import (
    Draft,
    Template,
    filter_level,
    group_pair,
    num,
    pick_categorical,
    pick_numeric,
    quoted,
    threshold,
)
from harness_rl.envs.sources.data_templates_hard import HARD_TEMPLATES

# ----------------------------------------------------------------------------------------------- easy


def _easy_aggregate(stat: str, words: str, call: str) -> Callable[[Dataset, random.Random], Draft | None]:
    def make(ds: Dataset, rng: random.Random) -> Draft | None:
        (x,) = pick_numeric(ds, rng) or (None,)
        if x is None:
            return None
        question = f"What is the {words} of {x.phrase()} over all rows, ignoring missing values?"
        return Draft(question, f"answer = df[{x.name!r}].{call}", "number", {"column": x.name, "stat": stat})

    return make


def _easy_range(ds: Dataset, rng: random.Random) -> Draft | None:
    (x,) = pick_numeric(ds, rng) or (None,)
    if x is None:
        return None
    question = f"What is the range (largest value minus smallest value) of {x.phrase()}, ignoring missing values?"
    code = f"answer = df[{x.name!r}].max() - df[{x.name!r}].min()"
    return Draft(question, code, "number", {"column": x.name})


def _easy_count_above(ds: Dataset, rng: random.Random) -> Draft | None:
    (x,) = pick_numeric(ds, rng) or (None,)
    if x is None:
        return None
    t = threshold(ds.frame, x, rng)
    question = f"How many rows have {x.phrase()} strictly greater than {num(t)}?"
    code = f"answer = int((df[{x.name!r}] > {num(t)}).sum())"
    return Draft(question, code, "integer", {"column": x.name, "threshold": t})


def _easy_count_missing(ds: Dataset, rng: random.Random) -> Draft | None:
    missing = [c for c in ds.columns if ds.frame[c.name].isna().any()]
    if not missing:
        return None
    x = rng.choice(missing)
    question = f"How many rows have no value recorded (a missing value) for {x.phrase()}?"
    return Draft(question, f"answer = int(df[{x.name!r}].isna().sum())", "integer", {"column": x.name})


def _easy_distinct(ds: Dataset, rng: random.Random) -> Draft | None:
    c = pick_categorical(ds, rng)
    if c is None:
        return None
    question = f"How many distinct values does {c.phrase()} take, not counting missing values?"
    return Draft(question, f"answer = int(df[{c.name!r}].nunique())", "integer", {"column": c.name})


def _easy_mode(ds: Dataset, rng: random.Random) -> Draft | None:
    c = pick_categorical(ds, rng)
    if c is None:
        return None
    question = f"Which value of {c.phrase()} occurs in the most rows?"
    code = f"scores = df[{c.name!r}].value_counts()\nanswer = scores.idxmax()"
    return Draft(question, code, "text", {"column": c.name}, ranked=1)


# --------------------------------------------------------------------------------------------- medium


def _medium_filter_mean(ds: Dataset, rng: random.Random) -> Draft | None:
    (x,) = pick_numeric(ds, rng) or (None,)
    picked = x and filter_level(ds, rng, x)
    if not picked:
        return None
    c, level = picked
    question = (
        f"Considering only the rows where {c.phrase()} equals {quoted(level)}, what is the mean of {x.phrase()}, "
        "ignoring missing values?"
    )
    code = f"answer = df.loc[df[{c.name!r}] == {level!r}, {x.name!r}].mean()"
    return Draft(question, code, "number", {"column": x.name, "filter": c.name, "level": level})


def _medium_filter_count(ds: Dataset, rng: random.Random) -> Draft | None:
    (x,) = pick_numeric(ds, rng) or (None,)
    picked = x and filter_level(ds, rng, x)
    if not picked:
        return None
    c, level = picked
    t = threshold(ds.frame, x, rng)
    question = (
        f"How many rows have {c.phrase()} equal to {quoted(level)} and {x.phrase()} strictly greater than {num(t)}?"
    )
    code = f"answer = int(((df[{c.name!r}] == {level!r}) & (df[{x.name!r}] > {num(t)})).sum())"
    return Draft(question, code, "integer", {"column": x.name, "filter": c.name, "level": level, "threshold": t})


def _medium_group_extreme(ds: Dataset, rng: random.Random) -> Draft | None:
    pair = group_pair(ds, rng)
    if pair is None:
        return None
    x, c = pair
    highest = rng.random() < 0.5
    word = "highest" if highest else "lowest"
    question = (
        f"Group the rows by {c.phrase()}. Which group has the {word} mean of {x.phrase()} "
        "(ignoring missing values)? Answer with the group's value."
    )
    sign = "" if highest else "-"
    code = f"scores = {sign}df.groupby({c.name!r})[{x.name!r}].mean().dropna()\nanswer = scores.idxmax()"
    return Draft(question, code, "text", {"column": x.name, "group": c.name, "order": word}, ranked=1)


def _medium_top3(ds: Dataset, rng: random.Random) -> Draft | None:
    pair = group_pair(ds, rng, min_levels=4)
    if pair is None:
        return None
    x, c = pair
    question = (
        f"Group the rows by {c.phrase()} and compute the median of {x.phrase()} in each group (ignoring missing "
        "values). List the three groups with the largest medians, largest first, as their values separated by commas."
    )
    code = (
        f"scores = df.groupby({c.name!r})[{x.name!r}].median().dropna().sort_values(ascending=False)\n"
        "answer = list(scores.index[:3])"
    )
    return Draft(question, code, "list", {"column": x.name, "group": c.name}, ranked=3)


def _medium_group_spread(ds: Dataset, rng: random.Random) -> Draft | None:
    pair = group_pair(ds, rng)
    if pair is None:
        return None
    x, c = pair
    question = (
        f"For each value of {c.phrase()}, compute the mean of {x.phrase()} (ignoring missing values). What is the "
        "largest of these group means minus the smallest?"
    )
    code = f"means = df.groupby({c.name!r})[{x.name!r}].mean().dropna()\nanswer = means.max() - means.min()"
    return Draft(question, code, "number", {"column": x.name, "group": c.name})


def _medium_share(ds: Dataset, rng: random.Random) -> Draft | None:
    (x,) = pick_numeric(ds, rng) or (None,)
    picked = x and filter_level(ds, rng, x)
    if not picked:
        return None
    c, level = picked
    t = threshold(ds.frame, x, rng)
    question = (
        f"Among the rows where {c.phrase()} equals {quoted(level)} and {x.phrase()} is not missing, what percentage "
        f"have {x.name} strictly greater than {num(t)}? Give the percentage as a number between 0 and 100."
    )
    code = (
        f"rows = df[(df[{c.name!r}] == {level!r}) & df[{x.name!r}].notna()]\n"
        f"answer = 100 * (rows[{x.name!r}] > {num(t)}).mean()"
    )
    return Draft(question, code, "number", {"column": x.name, "filter": c.name, "level": level, "threshold": t})


TEMPLATES: tuple[Template, ...] = (
    Template("mean", "easy", _easy_aggregate("mean", "mean (average)", "mean()")),
    Template("median", "easy", _easy_aggregate("median", "median", "median()")),
    Template("std", "easy", _easy_aggregate("std", "sample standard deviation (n - 1 in the denominator)", "std()")),
    Template("range", "easy", _easy_range),
    Template("count_above", "easy", _easy_count_above),
    Template("count_missing", "easy", _easy_count_missing),
    Template("distinct", "easy", _easy_distinct, needs_categorical=True),
    Template("mode", "easy", _easy_mode, needs_categorical=True),
    Template("filter_mean", "medium", _medium_filter_mean, needs_categorical=True),
    Template("filter_count", "medium", _medium_filter_count, needs_categorical=True),
    Template("group_extreme", "medium", _medium_group_extreme, needs_categorical=True),
    Template("group_top3", "medium", _medium_top3, needs_categorical=True),
    Template("group_spread", "medium", _medium_group_spread, needs_categorical=True),
    Template("conditional_share", "medium", _medium_share, needs_categorical=True),
    *HARD_TEMPLATES,
)

TEMPLATES_BY_NAME = {t.name: t for t in TEMPLATES}
