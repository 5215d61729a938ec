"""The envs CLI: build writes a source's folders, validate ends with the summary line and fails on a broken
task (listing it), stats counts by facet, and Harbor import/export round-trips a task and marks image-only
Harbor tasks as needing a container."""

from __future__ import annotations

import json
import tomllib

from harness_rl.envs import read_task_dir, write_task_dir
from harness_rl.envs.__main__ import main
from harness_rl.envs.harbor import export_harbor, import_harbor
from harness_rl.envs.sources.smoke import smoke_spec
from harness_rl.envs.stats import task_stats
from harness_rl.envs.validate import validate_dir


def test_build_validate_stats_on_smoke_subset(tmp_path, capsys):
    out = tmp_path / "smoke"
    assert main(["build", "smoke", "--out", str(out), "--n", "3", "--seed", "1", "--split", "heldout"]) == 0
    assert len(list(out.iterdir())) == 3
    assert main(["validate", str(out), "--workers", "2"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "tasks=3 oracle_pass=1.0000 empty_pass=0.0000"
    assert main(["stats", str(out), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["tasks"] == 3 and stats["split"] == {"heldout": 3} and stats["difficulty"] == {"easy": 3}


def test_validate_lists_invalid_tasks_and_fails(tmp_path, capsys):
    root = tmp_path / "tasks"
    write_task_dir(smoke_spec("good", "a.txt", "apple", "train"), root)
    broken_oracle = smoke_spec("bad-oracle", "b.txt", "pear", "train")
    write_task_dir(broken_oracle, root)
    (root / "bad-oracle" / "solution" / "solve.sh").write_text("echo wrong > b.txt\n")
    always_passes = smoke_spec("free-pass", "c.txt", "plum", "train")
    write_task_dir(always_passes, root)
    (root / "free-pass" / "tests" / "test.sh").write_text('echo \'{"reward": 1}\' > "$HRL_LOGS_DIR/reward.json"\n')
    write_task_dir(smoke_spec("bad-format", "d.txt", "fig", "train"), root)
    (root / "bad-format" / "task.toml").write_text("version = 1\n")
    report = validate_dir(root, workers=2)
    assert {c.task_id for c in report.invalid} == {"bad-oracle", "free-pass", "bad-format"}
    assert main(["validate", str(root)]) == 1
    captured = capsys.readouterr()
    # a folder that does not even read counts as a task that failed both checks
    assert captured.out.strip().splitlines()[-1] == "tasks=4 oracle_pass=0.5000 empty_pass=0.2500"
    assert report.summary_line() == "tasks=4 oracle_pass=0.5000 empty_pass=0.2500"
    assert captured.err.count("INVALID") == 3
    for name in ("bad-oracle", "free-pass", "bad-format"):
        assert name in captured.err


def test_summary_counts_checked_tasks(tmp_path):
    root = tmp_path / "tasks"
    write_task_dir(smoke_spec("good", "a.txt", "apple", "train"), root)
    write_task_dir(smoke_spec("bad-oracle", "b.txt", "pear", "train"), root)
    (root / "bad-oracle" / "solution" / "solve.sh").write_text("true\n")
    report = validate_dir(root, workers=1)
    assert report.summary_line() == "tasks=2 oracle_pass=0.5000 empty_pass=0.0000"


def test_harbor_round_trip_and_image_only_import(tmp_path):
    ours = tmp_path / "ours"
    write_task_dir(smoke_spec("smoke-rt", "a.txt", "apple", "heldout"), ours)
    exported = export_harbor(ours, tmp_path / "harbor")
    folder = exported[0]
    assert (folder / "environment" / "Dockerfile").is_file()
    assert (folder / "environment" / "workspace").is_dir() and (folder / "tests" / "test.sh").is_file()
    back = import_harbor(tmp_path / "harbor", tmp_path / "back")
    task = read_task_dir(back[0])
    assert (task.id, task.split, task.source, task.needs_container) == ("smoke-rt", "heldout", "smoke", False)
    assert validate_dir(tmp_path / "back").summary_line() == "tasks=1 oracle_pass=1.0000 empty_pass=0.0000"

    foreign = tmp_path / "foreign" / "Fix The_Bug"
    (foreign / "environment").mkdir(parents=True)
    (foreign / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\n")
    (foreign / "tests").mkdir()
    (foreign / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    (foreign / "instruction.md").write_text("Fix it.\n")
    (foreign / "task.toml").write_text(
        'version = "1.0"\n[metadata]\ndifficulty = "unknown"\ncategory = "debugging"\n'
        "[verifier]\ntimeout_sec = 90.0\n[environment]\ncpus = 2\n"
    )
    (imported,) = import_harbor(foreign, tmp_path / "imported", split="train")
    task = read_task_dir(imported)
    assert task.id == "fix-the_bug" and task.needs_container and task.difficulty == "medium"
    assert task.metadata["harbor_difficulty"] == "unknown" and task.verifier_timeout_s == 90.0
    assert (imported / "environment" / "Dockerfile").read_text() == "FROM ubuntu:24.04\n"
    assert list((imported / "environment" / "workspace").iterdir()) == []
    assert tomllib.loads((imported / "task.toml").read_text())["environment"] == {"cpus": 2}
    report = validate_dir(tmp_path / "imported")
    assert report.skipped == ["fix-the_bug"] and report.checks == []  # never run under bwrap
    assert task_stats(tmp_path / "imported")["needs_container"] == 1
