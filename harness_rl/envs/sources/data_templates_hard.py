"""The hard data-analysis question templates: several steps, derived columns, joins or reshapes, statistical tests.

Welch's t statistic between two groups, a chi-square statistic of independence, a correlation within a subset, a
least-squares slope, the group with the highest mean ratio of two columns, within-group z-score outliers, a pivot
table comparison, and a group mean joined back onto the rows. See ``data_question`` for the parts they share.
"""

from __future__ import annotations

import random

from harness_rl.envs.sources.data_catalog import Dataset
from harness_rl.envs.sources.data_question import (
    Draft,
    Template,
    filter_level,
    group_pair,
    levels,
    pick_categorical,
    pick_numeric,
    quoted,
)


def _hard_welch(ds: Dataset, rng: random.Random) -> Draft | None:
    pair = group_pair(ds, rng)
    if pair is None:
        return None
    x, c = pair
    choices = levels(ds.frame, c, x, min_rows=5)
    if len(choices) < 2:
        return None
    a, b = rng.sample(choices, 2)
    question = (
        f"Compare {x.phrase()} between the rows where {c.phrase()} equals {quoted(a)} (group A) and the rows where it "
        f"equals {quoted(b)} (group B), dropping missing values, with Welch's two-sample t-test (unequal variances). "
        "What is the t statistic of A minus B?"
    )
    code = (
        f"group_a = df.loc[df[{c.name!r}] == {a!r}, {x.name!r}].dropna()\n"
        f"group_b = df.loc[df[{c.name!r}] == {b!r}, {x.name!r}].dropna()\n"
        "answer = stats.ttest_ind(group_a, group_b, equal_var=False).statistic"
    )
    return Draft(question, code, "number", {"column": x.name, "group": c.name, "a": a, "b": b})


def _hard_chi2(ds: Dataset, rng: random.Random) -> Draft | None:
    if len(ds.categorical) < 2:
        return None
    c1, c2 = rng.sample(ds.categorical, 2)
    question = (
        f"Cross-tabulate {c1.phrase()} against {c2.phrase()} (rows with either value missing left out) and run "
        "Pearson's chi-square test of independence on the table of counts, without continuity correction. "
        "What is the chi-square statistic?"
    )
    code = (
        f"table = pd.crosstab(df[{c1.name!r}], df[{c2.name!r}])\n"
        "answer = stats.chi2_contingency(table, correction=False).statistic"
    )
    return Draft(question, code, "number", {"columns": [c1.name, c2.name]})


def _hard_subset_corr(ds: Dataset, rng: random.Random) -> Draft | None:
    picked = pick_numeric(ds, rng, 2)
    if not picked:
        return None
    x, y = picked
    level_pick = filter_level(ds, rng, x)
    if not level_pick:
        return None
    c, level = level_pick
    question = (
        f"Considering only the rows where {c.phrase()} equals {quoted(level)} and neither {x.name} nor {y.name} is "
        f"missing, what is the Pearson correlation coefficient between {x.phrase()} and {y.phrase()}?"
    )
    code = (
        f"rows = df.loc[df[{c.name!r}] == {level!r}, [{x.name!r}, {y.name!r}]].dropna()\n"
        f"answer = rows[{x.name!r}].corr(rows[{y.name!r}])"
    )
    return Draft(question, code, "number", {"columns": [x.name, y.name], "filter": c.name, "level": level})


def _hard_slope(ds: Dataset, rng: random.Random) -> Draft | None:
    picked = pick_numeric(ds, rng, 2)
    if not picked:
        return None
    x, y = picked
    question = (
        f"Fit an ordinary least-squares straight line predicting {y.phrase()} from {x.phrase()}, using the rows "
        "where both are present. What is the slope of the line?"
    )
    code = (
        f"rows = df[[{x.name!r}, {y.name!r}]].dropna()\n"
        f"answer = stats.linregress(rows[{x.name!r}], rows[{y.name!r}]).slope"
    )
    return Draft(question, code, "number", {"x": x.name, "y": y.name})


def _hard_ratio_group(ds: Dataset, rng: random.Random) -> Draft | None:
    picked = pick_numeric(ds, rng, 2)
    c = picked and pick_categorical(ds, rng, exclude=picked[0])
    if not c or c.name == picked[1].name:
        return None
    x, y = picked
    question = (
        f"Add a derived column equal to {x.phrase()} divided by {y.phrase()}, for the rows where both are present "
        f"and {y.name} is not zero (other rows are left out). Then group by {c.phrase()}: which group has the "
        "highest mean of the derived column? Answer with the group's value."
    )
    code = (
        f"rows = df[df[{x.name!r}].notna() & df[{y.name!r}].notna() & (df[{y.name!r}] != 0)].copy()\n"
        f"rows['ratio'] = rows[{x.name!r}] / rows[{y.name!r}]\n"
        f"scores = rows.groupby({c.name!r})['ratio'].mean().dropna()\n"
        "answer = scores.idxmax()"
    )
    return Draft(question, code, "text", {"columns": [x.name, y.name], "group": c.name}, ranked=1)


def _hard_zscore(ds: Dataset, rng: random.Random) -> Draft | None:
    pair = group_pair(ds, rng)
    if pair is None:
        return None
    x, c = pair
    question = (
        f"Within each group of {c.phrase()}, standardise {x.phrase()}: subtract the group's mean and divide by the "
        "group's sample standard deviation (n - 1 in the denominator), ignoring missing values. How many rows "
        "have a standardised value whose absolute value is strictly greater than 2?"
    )
    code = (
        f"groups = df.groupby({c.name!r})[{x.name!r}]\n"
        f"z = (df[{x.name!r}] - groups.transform('mean')) / groups.transform('std')\n"
        "answer = int((z.abs() > 2).sum())"
    )
    return Draft(question, code, "integer", {"column": x.name, "group": c.name})


def _hard_pivot(ds: Dataset, rng: random.Random) -> Draft | None:
    if len(ds.categorical) < 2:
        return None
    c1, c2 = rng.sample(ds.categorical, 2)
    (x,) = pick_numeric(ds, rng) or (None,)
    choices = levels(ds.frame, c2, x) if x is not None else []
    if x is None or x.name in (c1.name, c2.name) or len(choices) < 2:
        return None
    a, b = rng.sample(choices, 2)
    question = (
        f"Make a pivot table of the mean of {x.phrase()} (ignoring missing values) with one row per value of "
        f"{c1.phrase()} and one column per value of {c2.phrase()}. Counting only the rows of the pivot table "
        f"that have a mean in both the {quoted(a)} and the {quoted(b)} columns, in how many is the {quoted(a)} "
        f"mean strictly greater than the {quoted(b)} mean?"
    )
    code = (
        f"pivot = df.pivot_table(index={c1.name!r}, columns={c2.name!r}, values={x.name!r}, aggfunc='mean')\n"
        f"both = pivot[[{a!r}, {b!r}]].dropna()\n"
        f"answer = int((both[{a!r}] > both[{b!r}]).sum())"
    )
    return Draft(question, code, "integer", {"column": x.name, "rows": c1.name, "columns": c2.name, "a": a, "b": b})


def _hard_join_group_mean(ds: Dataset, rng: random.Random) -> Draft | None:
    picked = pick_numeric(ds, rng, 2)
    c = picked and pick_categorical(ds, rng, exclude=picked[0])
    if not c or c.name == picked[1].name:
        return None
    x, y = picked
    question = (
        f"Compute the mean of {x.phrase()} for each group of {c.phrase()} (ignoring missing values) and join it "
        f"back onto the rows of its group. Among the rows whose {x.name} is strictly above their own group's mean, "
        f"what is the mean of {y.phrase()}, ignoring missing values?"
    )
    code = (
        f"group_means = df.groupby({c.name!r})[{x.name!r}].mean().rename('group_mean').reset_index()\n"
        f"rows = df.merge(group_means, on={c.name!r}, how='inner')\n"
        f"answer = rows.loc[rows[{x.name!r}] > rows['group_mean'], {y.name!r}].mean()"
    )
    return Draft(question, code, "number", {"columns": [x.name, y.name], "group": c.name})


HARD_TEMPLATES: tuple[Template, ...] = (
    Template("welch_t", "hard", _hard_welch, needs_categorical=True),
    Template("chi_square", "hard", _hard_chi2, needs_categorical=True),
    Template("subset_correlation", "hard", _hard_subset_corr, needs_categorical=True),
    Template("ols_slope", "hard", _hard_slope),
    Template("ratio_group", "hard", _hard_ratio_group, needs_categorical=True),
    Template("group_zscore", "hard", _hard_zscore, needs_categorical=True),
    Template("pivot_compare", "hard", _hard_pivot, needs_categorical=True),
    Template("join_group_mean", "hard", _hard_join_group_mean, needs_categorical=True),
)
