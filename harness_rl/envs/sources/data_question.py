"""The parts every data-analysis question template uses: the ``Draft`` a template returns, the ``Template``
record, and seeded choices of columns, levels and thresholds (see ``data_templates`` for the templates).

A template picks columns (and levels, thresholds) of one dataset with a seeded ``random.Random`` and returns a
``Draft``: the question in words, naming each column by its meaning from the help page, and the pandas program
that answers it. A program reads ``df`` and sets ``answer`` (a number, a label, or a list of labels); it may set
``scores`` (a Series) for the builder's tie check.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from harness_rl.envs.sources.data_catalog import Column, Dataset

#: Kinds of answer: a rounded number, a whole number, one label, an ordered list of labels.
KINDS = ("number", "integer", "text", "list")


@dataclass(frozen=True)
class Draft:
    """One question before its answer is computed.

    Attributes:
        question: The question in words (the builder adds how to write the answer).
        code: The pandas program: reads ``df``, sets ``answer`` (and ``scores`` for ranked answers).
        kind: One of KINDS.
        params: The columns, levels and thresholds chosen (recorded in task metadata).
        ranked: How many leading entries of ``scores`` (sorted, highest first) must each be strictly above the
            next one (the builder drops the question on a tie).
    """

    question: str
    code: str
    kind: str
    params: dict = field(default_factory=dict)
    ranked: int = 0


@dataclass(frozen=True)
class Template:
    """A question template: its name, difficulty and draft maker (None where the dataset lacks what it needs)."""

    name: str
    difficulty: str
    make: Callable[[Dataset, random.Random], Draft | None]
    needs_categorical: bool = False


def levels(frame: pd.DataFrame, column: Column, value_column: Column | None = None, min_rows: int = 3) -> list:
    """A categorical column's levels (sorted by their text), each with at least ``min_rows`` usable rows."""
    rows = frame if value_column is None else frame[frame[value_column.name].notna()]
    counts = rows[column.name].value_counts()
    levels = [lvl.item() if hasattr(lvl, "item") else lvl for lvl in counts.index if counts[lvl] >= min_rows]
    return sorted(levels, key=str)


def threshold(frame: pd.DataFrame, column: Column, rng: random.Random) -> float:
    """A round number between the column's 30th and 70th percentiles (two significant digits)."""
    value = float(frame[column.name].quantile(rng.uniform(0.3, 0.7)))
    if value == 0:
        return 0.0
    digits = 1 - math.floor(math.log10(abs(value)))
    return float(round(value, digits))


def num(value: float) -> str:
    """A threshold as the question and the program both write it."""
    return repr(int(value)) if float(value).is_integer() else repr(value)


def quoted(value: object) -> str:
    """A data value as a question quotes it (in backticks)."""
    return f"`{value}`"


def pick_numeric(ds: Dataset, rng: random.Random, k: int = 1) -> list[Column] | None:
    columns = ds.numeric
    return rng.sample(columns, k) if len(columns) >= k else None


def pick_categorical(ds: Dataset, rng: random.Random, exclude: Column | None = None) -> Column | None:
    columns = [c for c in ds.categorical if exclude is None or c.name != exclude.name]
    return rng.choice(columns) if columns else None


def filter_level(ds: Dataset, rng: random.Random, x: Column, exclude: Column | None = None):
    c = pick_categorical(ds, rng, exclude=exclude)
    if c is None or c.name == x.name:
        return None
    choices = levels(ds.frame, c, x)
    return (c, rng.choice(choices)) if choices else None


def group_pair(ds: Dataset, rng: random.Random, min_levels: int = 2):
    (x,) = pick_numeric(ds, rng) or (None,)
    c = x and pick_categorical(ds, rng, exclude=x)
    if not c or len(levels(ds.frame, c, x)) < min_levels:
        return None
    return x, c
